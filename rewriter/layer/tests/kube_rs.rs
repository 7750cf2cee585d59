//! kube-rs with the Layer, straight to the real local kube-apiserver (no sidecar): a
//! `kube::runtime::watcher` and `Api` calls on `kubevirt.io/v1` VirtualMachines that the server
//! holds as `internal.virtualization.deckhouse.io`, and requests the rules cannot rewrite
//! reaching the caller as `kube::Error::Api` with the layer's `Status`.

use std::time::Duration;

use futures::StreamExt as _;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::watcher;
use kube_api_rewriter_layer::{Limits, RewriteLayer};
use kube_api_rewriter_testkit::*;
use serde_json::json;
use tokio::sync::mpsc;

const NS: &str = "layer";
const UP_VM: &str = "internalvirtualizationvirtualmachines.internal.virtualization.deckhouse.io";

fn vm(name: &str, step: &str, pad: usize) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": NS,
                     "labels": {"kubevirt.io/created-by": "layer", "kubevirt.io/step": step},
                     "annotations": {"pad": "x".repeat(pad)}},
        "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}},
    }))
    .expect("VirtualMachine")
}

async fn client(kubeconfig: &str, layer: &RewriteLayer) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    kube::client::ClientBuilder::try_from(config)
        .expect("client builder")
        .with_layer(layer)
        .build()
}

/// (event, name, `kubevirt.io/step` label, apiVersion, kind) of what the watcher reported.
type Seen = (&'static str, String, String, String, String);

fn seen(tag: &'static str, o: DynamicObject) -> Seen {
    let t = o.types.unwrap_or_default();
    let labels = o.metadata.labels.unwrap_or_default();
    (
        tag,
        o.metadata.name.unwrap_or_default(),
        labels.get("kubevirt.io/step").cloned().unwrap_or_default(),
        t.api_version,
        t.kind,
    )
}

async fn expect(rx: &mut mpsc::UnboundedReceiver<Seen>, what: &str, f: impl Fn(&Seen) -> bool) -> Seen {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut other = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(s)) if f(&s) => return s,
            Ok(Some(s)) => other.push(s),
            Ok(None) => panic!("watcher ended waiting for {what}; seen {other:?}"),
            Err(_) => panic!("no {what} within 20 s; seen {other:?}"),
        }
    }
}

#[test]
fn kube_rs_watcher_and_api_through_the_layer() {
    let cp = ControlPlane::up();
    let dir = temp_dir("layer");
    let proxy = ProxyProc::start(&dir, &[("KUBECONFIG", cp.kubeconfig())]);
    proxy.apply_vm_crd();
    assert_eq!(wait_crd_established(&proxy, "virtualmachines.kubevirt.io"), None);
    drop(proxy);
    ok(&cp.kubectl(&["create", "namespace", NS]));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(scenario(&cp));
    let _ = std::fs::remove_dir_all(dir);
}

async fn scenario(cp: &ControlPlane) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let layer = RewriteLayer::kubevirt().with_limits(Limits::default().with_max_request_body(64 << 10));
    let client = client(cp.kubeconfig(), &layer).await;
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine"));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &ar);

    // A watcher with a label selector in KubeVirt's names, as KubeVirt's informers use them.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let cfg = watcher::Config::default().labels("kubevirt.io/created-by=layer");
    let mut stream = watcher(api.clone(), cfg).boxed();
    let task = tokio::spawn(async move {
        while let Some(ev) = stream.next().await {
            let s = match ev {
                Ok(watcher::Event::InitDone) => (
                    "InitDone",
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                ),
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => seen("Apply", o),
                Ok(watcher::Event::Delete(o)) => seen("Delete", o),
                Ok(watcher::Event::Init) => continue,
                Err(e) => (
                    "Error",
                    e.to_string(),
                    String::new(),
                    String::new(),
                    String::new(),
                ),
            };
            if tx.send(s).is_err() {
                break;
            }
        }
    });
    expect(&mut rx, "InitDone", |s| s.0 == "InitDone").await;

    let created = api
        .create(&PostParams::default(), &vm("w1", "created", 0))
        .await
        .expect("create");
    assert_eq!(
        created.types.as_ref().map(|t| t.kind.as_str()),
        Some("VirtualMachine")
    );
    let s = expect(&mut rx, "Apply(w1, created)", |s| {
        s.0 == "Apply" && s.2 == "created"
    })
    .await;
    assert_eq!(
        (s.3.as_str(), s.4.as_str()),
        ("kubevirt.io/v1", "VirtualMachine"),
        "{s:?}"
    );

    // Upstream holds it under the renamed group, kind and label keys.
    let stored = parse_json(&ok(&cp.kubectl(&["get", UP_VM, "-n", NS, "w1", "-o", "json"])));
    assert_eq!(stored["kind"], "InternalVirtualizationVirtualMachine");
    assert_eq!(
        stored["metadata"]["labels"]["kubevirt.internal.virtualization.deckhouse.io/step"],
        "created"
    );

    api.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"kubevirt.io/step": "merged"}}})),
    )
    .await
    .expect("merge patch");
    expect(&mut rx, "Apply(w1, merged)", |s| {
        s.0 == "Apply" && s.2 == "merged"
    })
    .await;
    api.patch(
        "w1",
        &PatchParams::apply("layer-test").force(),
        &Patch::Apply(vm("w1", "applied", 0)),
    )
    .await
    .expect("server-side apply");
    expect(&mut rx, "Apply(w1, applied)", |s| {
        s.0 == "Apply" && s.2 == "applied"
    })
    .await;
    api.delete("w1", &DeleteParams::default()).await.expect("delete");
    expect(&mut rx, "Delete(w1)", |s| s.0 == "Delete" && s.1 == "w1").await;

    // A body over the layer's limit: the layer's 413 Status, as kube::Error::Api.
    match api
        .create(&PostParams::default(), &vm("big", "x", 100 << 10))
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(
                (s.code, s.reason.as_str()),
                (413, "RequestEntityTooLarge"),
                "{s:?}"
            );
        }
        other => panic!("expected the layer's 413, got {other:?}"),
    }
    // A body the rules cannot rewrite (not JSON): the layer's 400 Status.
    let req = http::Request::post(format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(br#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":"#.to_vec())
        .expect("request");
    match client.request::<DynamicObject>(req).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"), "{s:?}");
            assert!(s.message.contains("cannot be rewritten"), "{s:?}");
        }
        other => panic!("expected the layer's 400, got {other:?}"),
    }
    // kube-apiserver's own errors pass through restored: a 404 names the original resource.
    match api.get("missing").await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 404, "{s:?}");
            assert!(
                s.message.contains("virtualmachines.kubevirt.io") && !s.message.contains("internal"),
                "{s:?}"
            );
        }
        other => panic!("expected 404, got {other:?}"),
    }
    task.abort();
}
