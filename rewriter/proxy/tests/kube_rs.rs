//! kube-rs through the proxy against the real local kube-apiserver: `Api<DynamicObject>` for
//! `kubevirt.io/v1 VirtualMachine`, `kube::runtime::watcher`, and kube-apiserver killed and
//! restarted under an open watch without restarting the proxy.
//!
//! One control plane and one proxy for the whole file; the phases run in order in one test so
//! that everything is stopped at the end whatever happens.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use kube_api_rewriter_testkit::*;
use serde_json::json;
use tokio::sync::mpsc;

const INTERNAL: &str = "internal.virtualization.deckhouse.io";
const UP_VM: &str = "internalvirtualizationvirtualmachines.internal.virtualization.deckhouse.io";
const NS: &str = "kr";

/// What the watcher reported, reduced to what the test looks at.
#[derive(Debug, Clone)]
enum Ev {
    Init,
    InitApply(Vm),
    InitDone,
    Apply(Vm),
    Delete(Vm),
    Error(String),
}

#[derive(Debug, Clone)]
struct Vm {
    name: String,
    api_version: String,
    kind: String,
    labels: BTreeMap<String, String>,
}

impl From<DynamicObject> for Vm {
    fn from(o: DynamicObject) -> Vm {
        let t = o.types.unwrap_or_default();
        Vm {
            name: o.metadata.name.unwrap_or_default(),
            api_version: t.api_version,
            kind: t.kind,
            labels: o.metadata.labels.unwrap_or_default(),
        }
    }
}

fn assert_original(vm: &Vm) {
    assert_eq!(
        (vm.api_version.as_str(), vm.kind.as_str()),
        ("kubevirt.io/v1", "VirtualMachine"),
        "{vm:?}"
    );
    for k in vm.labels.keys() {
        assert!(!k.contains(INTERNAL), "renamed label through the proxy: {vm:?}");
    }
}

fn vm_object(name: &str, step: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": NS, "labels": {"kubevirt.io/created-by": "kube-rs", "kubevirt.io/step": step}},
        "spec": {"running": false, "template": {"spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}}}},
    }))
    .expect("VirtualMachine")
}

/// Waits for the first event matching `f`; panics with everything seen meanwhile.
async fn expect(
    rx: &mut mpsc::UnboundedReceiver<Ev>,
    limit: Duration,
    what: &str,
    f: impl Fn(&Ev) -> bool,
) -> Ev {
    let deadline = tokio::time::Instant::now() + limit;
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(ev)) if f(&ev) => return ev,
            Ok(Some(ev)) => seen.push(ev),
            Ok(None) => panic!("watcher task ended waiting for {what}; seen {seen:#?}"),
            Err(_) => panic!("no {what} within {limit:?}; seen {seen:#?}"),
        }
    }
}

fn readyz(p: &ProxyProc) -> String {
    tokio::task::block_in_place(|| p.readyz())
}

async fn wait_readyz(p: &ProxyProc, want: &str, limit: Duration) -> Duration {
    let t = Instant::now();
    while readyz(p) != want {
        assert!(
            t.elapsed() < limit,
            "/readyz not {want} within {limit:?}; log:\n{}",
            p.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    t.elapsed()
}

#[test]
fn kube_rs_through_proxy() {
    let cp = ControlPlane::up();
    let p = ProxyProc::start(&cp.dir, &[("KUBECONFIG", cp.kubeconfig())]);
    p.apply_vm_crd();
    if let Some(err) = wait_crd_established(&p, "virtualmachines.kubevirt.io") {
        panic!("kubectl wait --for condition=established through the proxy: {err}");
    }
    ok(&cp.kubectl(&["create", "namespace", NS]));
    p.wait_until(Duration::from_secs(30), |p| {
        p.kubectl(&["get", "vm", "-n", NS]).status.success()
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(scenario(&cp, &p));
    rt.shutdown_timeout(Duration::from_secs(1));
}

async fn scenario(cp: &ControlPlane, p: &ProxyProc) {
    kube_api_rewriter_proxy::tls::install_default_provider();
    let url = format!("http://127.0.0.1:{}", p.port).parse().expect("url");
    let mut config = kube::Config::new(url);
    // kube retries 503s itself (up to 15 times, backing off); the proxy answers 503 while
    // kube-apiserver is down, and this test wants to see the watcher's error, not the retries.
    config.default_retry = false;
    let client = kube::Client::try_from(config).expect("client");
    let gvk = GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "virtualmachines");
    let api: Api<DynamicObject> = Api::namespaced_with(client, NS, &ar);

    // The watcher, drained into a channel by a task; after an error it waits a little before
    // polling again (the retry pace), as a controller's backoff would.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut stream = watcher(api.clone(), watcher::Config::default()).boxed();
    let watcher_task = tokio::spawn(async move {
        while let Some(ev) = stream.next().await {
            let (ev, pause) = match ev {
                Ok(watcher::Event::Init) => (Ev::Init, false),
                Ok(watcher::Event::InitApply(o)) => (Ev::InitApply(o.into()), false),
                Ok(watcher::Event::InitDone) => (Ev::InitDone, false),
                Ok(watcher::Event::Apply(o)) => (Ev::Apply(o.into()), false),
                Ok(watcher::Event::Delete(o)) => (Ev::Delete(o.into()), false),
                Err(e) => (Ev::Error(e.to_string()), true),
            };
            if tx.send(ev).is_err() {
                break;
            }
            if pause {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    });

    eprintln!("--- phase watcher: ADDED / MODIFIED / DELETED");
    expect(&mut rx, Duration::from_secs(20), "InitDone", |e| {
        matches!(e, Ev::InitDone)
    })
    .await;
    let created = api
        .create(&PostParams::default(), &vm_object("w1", "created"))
        .await
        .expect("create");
    assert_original(&Vm::from(created));
    let is = |name: &'static str, step: &'static str| move |e: &Ev| matches!(e, Ev::Apply(vm) if vm.name == name && vm.labels.get("kubevirt.io/step").map(String::as_str) == Some(step));
    let Ev::Apply(vm) = expect(
        &mut rx,
        Duration::from_secs(10),
        "Apply(w1 created)",
        is("w1", "created"),
    )
    .await
    else {
        unreachable!()
    };
    assert_original(&vm);
    assert_eq!(
        vm.labels.get("kubevirt.io/created-by").map(String::as_str),
        Some("kube-rs")
    );
    let patched = api
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"kubevirt.io/step": "merged"}}})),
        )
        .await
        .expect("merge patch");
    assert_original(&Vm::from(patched));
    let Ev::Apply(vm) = expect(
        &mut rx,
        Duration::from_secs(10),
        "Apply(w1 merged)",
        is("w1", "merged"),
    )
    .await
    else {
        unreachable!()
    };
    assert_original(&vm);
    let mut applied = vm_object("w1", "applied");
    applied
        .metadata
        .labels
        .get_or_insert_default()
        .remove("kubevirt.io/created-by");
    api.patch(
        "w1",
        &PatchParams::apply("kube-rs-e2e").force(),
        &Patch::Apply(&applied),
    )
    .await
    .expect("server-side apply");
    let Ev::Apply(vm) = expect(
        &mut rx,
        Duration::from_secs(10),
        "Apply(w1 applied)",
        is("w1", "applied"),
    )
    .await
    else {
        unreachable!()
    };
    assert_original(&vm);
    // Upstream holds renamed names only.
    let up = tokio::task::block_in_place(|| ok(&cp.kubectl(&["get", UP_VM, "w1", "-n", NS, "-o", "json"])));
    let up = parse_json(&up);
    assert_eq!(up["kind"], "InternalVirtualizationVirtualMachine", "{up}");
    assert_eq!(
        up["metadata"]["labels"]["kubevirt.internal.virtualization.deckhouse.io/step"], "applied",
        "{up}"
    );
    assert!(up["metadata"]["labels"].get("kubevirt.io/step").is_none(), "{up}");
    // List with a label selector on an original key.
    let list = api
        .list(&ListParams::default().labels("kubevirt.io/step in (applied,other)"))
        .await
        .expect("list");
    let names: Vec<String> = list
        .items
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    assert_eq!(names, ["w1"]);
    api.delete("w1", &DeleteParams::default()).await.expect("delete");
    let Ev::Delete(vm) = expect(
        &mut rx,
        Duration::from_secs(10),
        "Delete(w1)",
        |e| matches!(e, Ev::Delete(vm) if vm.name == "w1"),
    )
    .await
    else {
        unreachable!()
    };
    assert_original(&vm);
    let err = api.get("w1").await.expect_err("gone");
    assert!(
        err.to_string()
            .contains("virtualmachines.kubevirt.io \"w1\" not found"),
        "{err}"
    );

    eprintln!("--- phase kube-apiserver killed under open watches");
    api.create(&PostParams::default(), &vm_object("keep", "created"))
        .await
        .expect("create keep");
    expect(
        &mut rx,
        Duration::from_secs(10),
        "Apply(keep)",
        is("keep", "created"),
    )
    .await;
    let mut raw = api
        .watch(&WatchParams::default().timeout(280), "0")
        .await
        .expect("raw watch")
        .boxed();
    match tokio::time::timeout(Duration::from_secs(10), raw.next()).await {
        Ok(Some(Ok(WatchEvent::Added(o)))) => assert_original(&Vm::from(o)),
        other => panic!("first raw watch event: {other:?}"),
    }
    let (end_tx, end_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut last = String::from("ended");
        while let Some(ev) = raw.next().await {
            match ev {
                Err(e) => {
                    last = format!("error: {e}");
                    break;
                }
                Ok(WatchEvent::Error(e)) => {
                    last = format!("ERROR event: {e:?}");
                    break;
                }
                Ok(_) => {}
            }
        }
        let _ = end_tx.send((Instant::now(), last));
    });
    assert_eq!(readyz(p), "200");
    let t0 = Instant::now();
    let o = tokio::task::block_in_place(|| cp.script_env("stop-apiserver", &[("KAR_STOP_TIMEOUT", "1")]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stopped = Instant::now();
    eprintln!("kube-apiserver stopped in {:?}", stopped - t0);
    let (ended, how) = tokio::time::timeout(Duration::from_secs(5), end_rx)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the raw watch through the proxy did not end within 5 s; log:\n{}",
                p.logs()
            )
        })
        .expect("raw watch task");
    eprintln!(
        "raw Api::watch {how} {:?} after kube-apiserver was gone ({:?} after the stop began)",
        ended.saturating_duration_since(stopped),
        ended - t0
    );
    let Ev::Error(e) = expect(&mut rx, Duration::from_secs(20), "a watcher error", |e| {
        matches!(e, Ev::Error(_))
    })
    .await
    else {
        unreachable!()
    };
    eprintln!("watcher error while kube-apiserver is down: {e}");
    let d = wait_readyz(p, "503", Duration::from_secs(10)).await;
    eprintln!("/readyz 503 {d:?} after the stop");
    let down_err = api.get("keep").await.expect_err("kube-apiserver is down");
    eprintln!("a get while down: {down_err}");

    let o = tokio::task::block_in_place(|| cp.script("start-apiserver"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let d = wait_readyz(p, "200", Duration::from_secs(30)).await;
    eprintln!("/readyz 200 {d:?} after start-apiserver returned");
    // The resource may take a moment to be served again.
    let t = Instant::now();
    loop {
        match api
            .create(&PostParams::default(), &vm_object("after", "created"))
            .await
        {
            Ok(o) => {
                assert_original(&Vm::from(o));
                break;
            }
            Err(e) => {
                assert!(t.elapsed() < Duration::from_secs(30), "create after restart: {e}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
    // The watcher re-lists (Init.. InitApply(after) .. InitDone) or sees it live (Apply).
    expect(
        &mut rx,
        Duration::from_secs(60),
        "the watcher resumed with `after`",
        |e| matches!(e, Ev::Apply(vm) | Ev::InitApply(vm) if vm.name == "after"),
    )
    .await;
    // And it keeps watching live.
    api.patch(
        "after",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"kubevirt.io/step": "resumed"}}})),
    )
    .await
    .expect("patch after restart");
    let Ev::Apply(vm) = expect(
        &mut rx,
        Duration::from_secs(60),
        "Apply(after resumed)",
        is("after", "resumed"),
    )
    .await
    else {
        unreachable!()
    };
    assert_original(&vm);
    // The same proxy process all along.
    assert!(
        std::path::Path::new(&format!("/proc/{}", p.child.id())).exists(),
        "proxy exited"
    );
    assert_eq!(
        tokio::task::block_in_place(|| http_status(&[&p.mon("/healthz")])),
        "200"
    );
    watcher_task.abort();
}
