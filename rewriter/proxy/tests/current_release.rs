//! What only a current kube-apiserver shows, through the proxy, with the release's own kubectl,
//! curl and kube-rs: aggregated discovery, OpenAPI v3, streaming lists, CBOR, a
//! ValidatingAdmissionPolicy, `kubectl events` and a server-side apply conflict.
//!
//! Every case runs twice on one control plane: through a proxy with KubeVirt's rules, where it
//! must pass, and through a proxy with an empty rule set, where it must fail, so that no case
//! passes without the rewriting it checks. The control plane (CBOR serving turned on) and both
//! proxies are shared by the cases that run at once; `cargo test --test current_release NAME`
//! runs one alone.

use std::collections::BTreeMap;
use std::process::Output;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::watcher;
use kube_api_rewriter_testkit::*;
use serde_json::{Value, json};

#[path = "current_release/support.rs"]
mod support;
#[path = "common/tls_double.rs"]
mod tls_double;
use support::*;

const INTERNAL: &str = "internal.virtualization.deckhouse.io";
const UP_VM: &str = "internalvirtualizationvirtualmachines.internal.virtualization.deckhouse.io";
/// What may never reach a client of the KubeVirt proxy.
const RENAMED: [&str; 3] = [INTERNAL, "InternalVirtualization", "intvirt"];
/// Where the three VMs every case reads live; cases that write make namespaces of their own.
const NS: &str = "current";
/// The kube-rs watchers' namespace.
const WATCH_NS: &str = "current-watch";
const AGGREGATED: &str = "subresources.virtualization.deckhouse.io";
/// An object of a group the rules neither rename nor rewrite (kube-apiserver makes it).
const UNTOUCHED: &str = "/apis/scheduling.k8s.io/v1/priorityclasses/system-node-critical";

/// `Err(message)` unless `cond`.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

type Check = Result<(), String>;

struct Env {
    cp: ControlPlane,
    /// The proxy with KubeVirt's rules.
    kv: ProxyProc,
    /// The same proxy with an empty rule set.
    empty: ProxyProc,
    /// The aggregated API's discovery double (kept alive with the environment).
    _aggregated: u16,
}

fn env() -> Arc<Env> {
    static SLOT: Mutex<Weak<Env>> = Mutex::new(Weak::new());
    shared(&SLOT, || {
        let gates = gates_known(&["CBORServingAndStorage", "WatchList"]);
        let cp = ControlPlane::up_with_apiserver_args(|_| format!("--feature-gates={}", gates.join(",")));
        let dir = cp.dir.clone();
        let kv = ProxyProc::start(&dir, &[("KUBECONFIG", cp.kubeconfig())]);
        let rules = dir.join("empty-rules.yaml");
        std::fs::write(&rules, "rules: {}\n").expect("write rules");
        let empty = ProxyProc::start(
            &dir,
            &[
                ("KUBECONFIG", cp.kubeconfig()),
                ("RULES_PATH", rules.to_str().expect("utf-8")),
            ],
        );
        for f in ["virtualmachines", "virtualmachineinstances", "kubevirt"] {
            ok(&kv.kubectl(&[
                "apply",
                "-f",
                &format!("{}/original/{f}.yaml", crd_fixtures().display()),
            ]));
        }
        for crd in [
            "virtualmachines.kubevirt.io",
            "virtualmachineinstances.kubevirt.io",
        ] {
            if let Some(e) = wait_crd_established(&kv, crd) {
                panic!("{crd} not established: {e}");
            }
        }
        for ns in [NS, WATCH_NS] {
            ok(&cp.kubectl(&["create", "namespace", ns]));
        }
        for i in 1..=3 {
            let kc = kv.kubeconfig.to_str().expect("utf-8");
            ok(&kubectl_in(
                kc,
                &["apply", "-f", "-"],
                &vm_yaml(NS, &format!("vm{i}"), ""),
            ));
            ok(&kubectl_in(
                kc,
                &["apply", "-f", "-"],
                &vm_yaml(WATCH_NS, &format!("vm{i}"), ""),
            ));
        }
        let aggregated = aggregated_api(&cp);
        Env {
            cp,
            kv,
            empty,
            _aggregated: aggregated,
        }
    })
}

/// `GATE=true` for each of `gates` this release's kube-apiserver knows (CBOR serving came in
/// 1.32; streaming lists are on by default from 1.34, behind their gate before).
fn gates_known(gates: &[&str]) -> Vec<String> {
    let help = std::process::Command::new(kube_bin_dir().join("kube-apiserver"))
        .arg("--help")
        .output()
        .expect("kube-apiserver --help");
    let help = String::from_utf8_lossy(&help.stdout);
    gates
        .iter()
        .filter(|g| help.contains(&format!("{g}=true|false")))
        .map(|g| format!("{g}=true"))
        .collect()
}

/// Runs `check` through both proxies: it must pass with KubeVirt's rules and fail without.
fn both(check: impl Fn(&Env, &ProxyProc, &str) -> Check) {
    let env = env();
    if let Err(e) = check(&env, &env.kv, "kubevirt") {
        panic!(
            "through the KubeVirt proxy: {e}\nproxy log:\n{}",
            tail(&env.kv.logs())
        );
    }
    match check(&env, &env.empty, "empty") {
        Ok(()) => panic!("the case passed through the proxy with an empty rule set: it checks no rewriting"),
        Err(e) => eprintln!("with an empty rule set the case fails, as it must: {e}"),
    }
}

fn tail(log: &str) -> &str {
    let start = log.len().saturating_sub(4000);
    let start = (start..log.len()).find(|&i| log.is_char_boundary(i)).unwrap_or(0);
    &log[start..]
}

/// A halted VM in `ns`, labelled `kubevirt.io/created-by: current-release`; `extra_spec` adds
/// lines to its spec.
fn vm_yaml(ns: &str, name: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels:\n    kubevirt.io/created-by: current-release\nspec:\n  runStrategy: Halted\n{extra_spec}  template:\n    spec:\n      domain:\n        devices: {{}}\n        resources: {{requests: {{memory: 64Mi}}}}\n"
    )
}

fn stdout(o: &Output) -> Result<String, String> {
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        Err(format!(
            "command failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

fn json_of(s: &str) -> Result<Value, String> {
    serde_json::from_str(s).map_err(|e| format!("not JSON ({e}): {}", &s[..s.len().min(300)]))
}

fn no_renamed(what: &str, text: &str) -> Check {
    for r in RENAMED {
        ensure!(
            !text.contains(r),
            "{what} holds the renamed {r:?}: {}",
            &text[..text.len().min(2000)]
        );
    }
    Ok(())
}

// ---------------------------------------------------------------- aggregated discovery

const DISCOVERY_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
const DISCOVERY_V2BETA1: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

/// `kubectl api-resources`, `get` and `explain` on a fresh discovery cache see KubeVirt's own
/// groups, kinds and short names; `/api` and `/apis` as `APIGroupDiscoveryList` hold no renamed
/// name, and list the aggregated group.
#[test]
fn aggregated_discovery() {
    both(|env, p, tag| {
        let cache = env.cp.dir.join(format!("cache-discovery-{tag}"));
        let cache_arg = format!("--cache-dir={}", cache.display());
        let out = stdout(&kubectl_p(p, &["api-resources", "-o", "wide", &cache_arg]))?;
        no_renamed("kubectl api-resources", &out)?;
        let vm_line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some("virtualmachines") && l.contains("kubevirt.io/v1"))
            .ok_or_else(|| format!("no virtualmachines of kubevirt.io/v1 in api-resources:\n{out}"))?;
        let cols: Vec<&str> = vm_line.split_whitespace().collect();
        ensure!(
            cols.get(1) == Some(&"vm,vms") && cols.contains(&"VirtualMachine") && cols.contains(&"true"),
            "virtualmachines line: {vm_line}"
        );
        ensure!(
            out.lines().any(|l| l.contains(&format!("{AGGREGATED}/v1alpha2"))),
            "the aggregated group is missing from api-resources:\n{out}"
        );
        let got = stdout(&kubectl_p(p, &["get", "vm", "-n", NS, "-o", "name", &cache_arg]))?;
        ensure!(
            got.lines().any(|l| l == "virtualmachine.kubevirt.io/vm1"),
            "kubectl get vm: {got}"
        );
        let explain = stdout(&kubectl_p(p, &["explain", "vm", &cache_arg]))?;
        no_renamed("kubectl explain vm", &explain)?;
        ensure!(
            explain.contains("GROUP:      kubevirt.io") && explain.contains("KIND:       VirtualMachine"),
            "kubectl explain vm:\n{explain}"
        );
        // kubectl asked for the aggregated form: its cache holds no per-group fetch it would
        // have made without it, and the documents themselves are checked below.
        for (path, accept) in [("/api", DISCOVERY_V2), ("/apis", DISCOVERY_V2)] {
            let (code, ct, body) = get(p, path, accept);
            ensure!(code == "200", "{path}: {code}");
            ensure!(
                ct.contains("as=APIGroupDiscoveryList") && ct.contains("v=v2"),
                "{path}: content type {ct}"
            );
            let text = String::from_utf8_lossy(&body);
            no_renamed(path, &text)?;
            let doc = json_of(&text)?;
            ensure!(doc["kind"] == "APIGroupDiscoveryList", "{path}: {}", doc["kind"]);
            if path == "/apis" {
                discovery_v2_has_kubevirt(&doc, "apidiscovery.k8s.io/v2")?;
            }
        }
        // v2beta1, where the release still serves it.
        let (_, direct_ct, _) = get_direct(&env.cp, "/apis", DISCOVERY_V2BETA1);
        if direct_ct.contains("v=v2beta1") {
            let (code, ct, body) = get(p, "/apis", DISCOVERY_V2BETA1);
            ensure!(
                code == "200" && ct.contains("v=v2beta1"),
                "/apis v2beta1: {code} {ct}"
            );
            let text = String::from_utf8_lossy(&body);
            no_renamed("/apis v2beta1", &text)?;
            discovery_v2_has_kubevirt(&json_of(&text)?, "apidiscovery.k8s.io/v2beta1")?;
        } else {
            eprintln!("this release serves no v2beta1 aggregated discovery ({direct_ct})");
        }
        Ok(())
    });
}

fn discovery_v2_has_kubevirt(doc: &Value, api_version: &str) -> Check {
    ensure!(
        doc["apiVersion"] == api_version,
        "apiVersion {}",
        doc["apiVersion"]
    );
    let items = doc["items"].as_array().ok_or("no items")?;
    let group = |name: &str| items.iter().find(|g| g["metadata"]["name"] == name);
    let kv = group("kubevirt.io").ok_or("no kubevirt.io group")?;
    let v1 = kv["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["version"] == "v1"))
        .ok_or("kubevirt.io has no v1")?;
    let vm = v1["resources"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["resource"] == "virtualmachines"))
        .ok_or("kubevirt.io/v1 has no virtualmachines")?;
    ensure!(
        vm["responseKind"]["kind"] == "VirtualMachine"
            && vm["responseKind"]["group"] == "kubevirt.io"
            && vm["shortNames"] == json!(["vm", "vms"])
            && vm["singularResource"] == "virtualmachine",
        "virtualmachines: {vm}"
    );
    ensure!(group(AGGREGATED).is_some(), "no {AGGREGATED} group");
    Ok(())
}

// ---------------------------------------------------------------- OpenAPI v3

/// `kubectl explain` of a nested field reads OpenAPI v3 through the proxy, and
/// `kubectl apply --validate=strict` rejects an unknown field of a renamed kind by its schema.
#[test]
fn openapi_v3() {
    both(|env, p, tag| {
        let cache_arg = format!(
            "--cache-dir={}",
            env.cp.dir.join(format!("cache-openapi-{tag}")).display()
        );
        let out = stdout(&kubectl_p(
            p,
            &[
                "explain",
                "virtualmachines.spec.template.spec",
                "--api-version=kubevirt.io/v1",
                &cache_arg,
            ],
        ))?;
        no_renamed("kubectl explain", &out)?;
        ensure!(
            out.contains("KIND:       VirtualMachine")
                && out.contains("FIELD: spec")
                && out.contains("FIELDS:")
                && out.contains("domain"),
            "kubectl explain virtualmachines.spec.template.spec:\n{out}"
        );
        let (code, _, body) = get(p, "/openapi/v3", "application/json");
        ensure!(code == "200", "/openapi/v3: {code}");
        let text = String::from_utf8_lossy(&body);
        no_renamed("/openapi/v3", &text)?;
        ensure!(
            text.contains("\"apis/kubevirt.io/v1\""),
            "/openapi/v3 lists no apis/kubevirt.io/v1"
        );

        let strict = |yaml: &str| {
            let args = [
                "apply",
                "--validate=strict",
                "--dry-run=server",
                "-f",
                "-",
                &cache_arg,
            ];
            kubectl_in(p.kubeconfig.to_str().expect("utf-8"), &args, yaml)
        };
        let o = strict(&vm_yaml(NS, &format!("strict-{tag}"), "  bogusField: 1\n"));
        ensure!(!o.status.success(), "an unknown field passed strict validation");
        let err = String::from_utf8_lossy(&o.stderr);
        no_renamed("the strict-validation error", &err)?;
        ensure!(
            err.contains("unknown field \"spec.bogusField\""),
            "strict validation said: {err}"
        );
        let o = strict(&vm_yaml(NS, &format!("strict-{tag}"), ""));
        stdout(&o).map_err(|e| format!("a valid VM failed strict validation: {e}"))?;
        Ok(())
    });
}

// ---------------------------------------------------------------- streaming lists

/// A watch with `sendInitialEvents=true` delivers every VM restored, then the bookmark that ends
/// the initial events, restored too.
#[test]
fn streaming_list_watch() {
    both(|env, p, _| {
        let path = format!(
            "/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=3"
        );
        let (code, _, body) = get(p, &path, "application/json");
        ensure!(
            code == "200",
            "streaming list: {code}: {}",
            String::from_utf8_lossy(&body)
        );
        let text = String::from_utf8_lossy(&body);
        no_renamed("the streaming list", &text)?;
        let events: Vec<Value> = text
            .lines()
            .filter(|l| !l.is_empty())
            .map(json_of)
            .collect::<Result<_, _>>()?;
        let end = events
            .iter()
            .position(|e| {
                e["type"] == "BOOKMARK"
                    && e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"
            })
            .ok_or_else(|| format!("no initial-events-end bookmark in {} events", events.len()))?;
        let bookmark = &events[end]["object"];
        ensure!(
            bookmark["kind"] == "VirtualMachine" && bookmark["apiVersion"] == "kubevirt.io/v1",
            "bookmark: {bookmark}"
        );
        let initial: Vec<&Value> = events[..end].iter().collect();
        ensure!(
            initial.iter().all(|e| e["type"] == "ADDED"),
            "initial events: {initial:?}"
        );
        let names: Vec<&str> = initial
            .iter()
            .filter_map(|e| e["object"]["metadata"]["name"].as_str())
            .collect();
        let want = direct_names(&env.cp);
        ensure!(
            names
                .iter()
                .map(|s| s.to_string())
                .collect::<std::collections::BTreeSet<_>>()
                == want,
            "initial events {names:?}, stored {want:?}"
        );
        for e in &initial {
            let o = &e["object"];
            ensure!(
                o["kind"] == "VirtualMachine" && o["apiVersion"] == "kubevirt.io/v1",
                "{o}"
            );
            ensure!(
                o["metadata"]["labels"]["kubevirt.io/created-by"] == "current-release",
                "{o}"
            );
        }
        Ok(())
    });
}

fn direct_names(cp: &ControlPlane) -> std::collections::BTreeSet<String> {
    let list = parse_json(&ok(&cp.kubectl(&["get", UP_VM, "-n", NS, "-o", "json"])));
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// What a watcher saw: each object's name and resourceVersion at the end of the initial list,
/// then the first object applied after it.
type Seen = (BTreeMap<String, String>, Option<String>);

async fn watch_streaming(
    api: Api<DynamicObject>,
    created: tokio::sync::oneshot::Receiver<()>,
) -> Result<Seen, String> {
    let cfg = watcher::Config::default().streaming_lists();
    let mut stream = watcher::watcher(api, cfg).boxed();
    let mut initial = BTreeMap::new();
    let mut created = Some(created);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next())
            .await
            .map_err(|_| format!("watcher: nothing more within 20 s; initial {initial:?}"))?;
        match next {
            None => return Err("watcher ended".into()),
            Some(Err(e)) => return Err(format!("watcher: {e}")),
            Some(Ok(watcher::Event::Init)) => {}
            Some(Ok(watcher::Event::InitApply(o))) => {
                let t = o.types.clone().unwrap_or_default();
                if t.kind != "VirtualMachine" && t.kind != "InternalVirtualizationVirtualMachine" {
                    return Err(format!("initial object of kind {}", t.kind));
                }
                initial.insert(
                    o.metadata.name.clone().unwrap_or_default(),
                    o.metadata.resource_version.clone().unwrap_or_default(),
                );
            }
            Some(Ok(watcher::Event::InitDone)) => {
                if let Some(c) = created.take() {
                    c.await.map_err(|_| "no VM was created")?;
                }
            }
            Some(Ok(watcher::Event::Apply(o))) => return Ok((initial, o.metadata.name)),
            Some(Ok(watcher::Event::Delete(_))) => {}
        }
    }
}

/// A kube-rs watcher using streaming lists sees through the proxy what it sees straight from
/// kube-apiserver on the renamed resource: the same objects at the same resourceVersions, then
/// the same new object.
#[test]
fn streaming_list_kube_rs() {
    both(|env, p, tag| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("rt");
        rt.block_on(async {
            let through = client_for(p.kubeconfig.to_str().expect("utf-8")).await?;
            let direct = client_for(env.cp.kubeconfig()).await?;
            let vm = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine"),
                "virtualmachines",
            );
            let up = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(INTERNAL, "v1", "InternalVirtualizationVirtualMachine"),
                "internalvirtualizationvirtualmachines",
            );
            let (tx1, rx1) = tokio::sync::oneshot::channel();
            let (tx2, rx2) = tokio::sync::oneshot::channel();
            let a = tokio::spawn(watch_streaming(
                Api::namespaced_with(through.clone(), WATCH_NS, &vm),
                rx1,
            ));
            let b = tokio::spawn(watch_streaming(
                Api::namespaced_with(direct.clone(), WATCH_NS, &up),
                rx2,
            ));
            // Both have listed when the VM is made; a watcher that failed has its error.
            tokio::time::sleep(Duration::from_secs(2)).await;
            if a.is_finished() {
                return a
                    .await
                    .map_err(|e| e.to_string())?
                    .map(|_| ())
                    .and(Err("the watcher ended early".into()));
            }
            let name = format!("watched-{tag}");
            let obj: DynamicObject = serde_json::from_value(
                serde_saphyr::from_str::<Value>(&vm_yaml(WATCH_NS, &name, "")).map_err(|e| e.to_string())?,
            )
            .map_err(|e| e.to_string())?;
            Api::<DynamicObject>::namespaced_with(through, WATCH_NS, &vm)
                .create(&PostParams::default(), &obj)
                .await
                .map_err(|e| format!("create through the proxy: {e}"))?;
            let _ = tx1.send(());
            let _ = tx2.send(());
            let seen_proxy = a.await.map_err(|e| e.to_string())??;
            let seen_direct = b.await.map_err(|e| e.to_string())??;
            ensure!(
                seen_proxy.0 == seen_direct.0,
                "initial lists differ: proxy {:?}, direct {:?}",
                seen_proxy.0,
                seen_direct.0
            );
            ensure!(
                seen_proxy.1.as_deref() == Some(name.as_str()) && seen_direct.1 == seen_proxy.1,
                "then: proxy {:?}, direct {:?}",
                seen_proxy.1,
                seen_direct.1
            );
            Ok(())
        })
    });
}

// ---------------------------------------------------------------- CBOR

/// With the server's CBOR serving on: a client that also accepts JSON gets a correct JSON answer
/// on a renamed resource; one that accepts only CBOR there gets a 406 `Status`; CBOR on a route
/// the rules do not touch passes byte for byte.
#[test]
fn cbor() {
    if gates_known(&["CBORServingAndStorage"]).is_empty() {
        // Before 1.32 no kube-apiserver speaks CBOR: the case is about one that does.
        eprintln!("this release's kube-apiserver serves no CBOR: the case does not apply");
        return;
    }
    both(|env, p, _| {
        let direct = get_direct(&env.cp, UNTOUCHED, "application/cbor");
        ensure!(
            direct.0 == "200" && direct.1.starts_with("application/cbor"),
            "the server serves no CBOR: {} {}",
            direct.0,
            direct.1
        );

        let path = format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines/vm1");
        let (code, ct, body) = get(p, &path, "application/cbor, application/json;q=0.9");
        ensure!(
            code == "200" && ct.starts_with("application/json"),
            "CBOR or JSON: {code} {ct}"
        );
        let text = String::from_utf8_lossy(&body);
        no_renamed("the JSON answer", &text)?;
        let vm = json_of(&text)?;
        ensure!(
            vm["kind"] == "VirtualMachine"
                && vm["metadata"]["labels"]["kubevirt.io/created-by"] == "current-release",
            "{vm}"
        );

        let (code, ct, body) = get(p, &path, "application/cbor");
        let text = String::from_utf8_lossy(&body);
        ensure!(
            code == "406" && ct.starts_with("application/json"),
            "CBOR only: {code} {ct} {text}"
        );
        let status = json_of(&text)?;
        ensure!(
            status["kind"] == "Status" && status["code"] == 406 && status["reason"] == "NotAcceptable",
            "{status}"
        );

        // kube-apiserver writes CBOR maps in no fixed order, so two answers are compared decoded
        // (and by length): the proxy must pass the document as the server wrote it.
        let through = get(p, UNTOUCHED, "application/cbor");
        ensure!(
            (&through.0, &through.1, through.2.len()) == (&direct.0, &direct.1, direct.2.len()),
            "CBOR on an untouched route changed: {} {} ({} bytes, direct {})",
            through.0,
            through.1,
            through.2.len(),
            direct.2.len()
        );
        ensure!(
            decode_cbor(&through.2)? == decode_cbor(&direct.2)?,
            "CBOR on an untouched route decodes differently"
        );
        Ok(())
    });
}

// ---------------------------------------------------------------- ValidatingAdmissionPolicy

/// A ValidatingAdmissionPolicy and binding for `kubevirt.io` VMs, created through the proxy, are
/// stored renamed, enforced on the renamed objects, and read back with the original names.
#[test]
fn validating_admission_policy() {
    both(|env, p, tag| {
        let name = format!("no-always-{tag}");
        let ns = format!("vap-{tag}");
        let _ = env.cp.kubectl(&["create", "namespace", &ns]);
        ok(&env.cp.kubectl(&[
            "label",
            "--overwrite",
            "namespace",
            &ns,
            &format!("vap-test={tag}"),
        ]));
        let objects = format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {{name: {name}}}\nspec:\n  failurePolicy: Fail\n  matchConstraints:\n    resourceRules:\n    - apiGroups: [kubevirt.io]\n      apiVersions: [v1]\n      operations: [CREATE, UPDATE]\n      resources: [virtualmachines]\n  validations:\n  - expression: \"!has(object.spec.runStrategy) || object.spec.runStrategy != 'Always'\"\n    message: runStrategy Always is not allowed here\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {{name: {name}}}\nspec:\n  policyName: {name}\n  validationActions: [Deny]\n  matchResources:\n    namespaceSelector:\n      matchLabels: {{vap-test: {tag}}}\n    resourceRules:\n    - apiGroups: [kubevirt.io]\n      apiVersions: ['*']\n      operations: ['*']\n      resources: ['virtualmachines']\n"
        );
        stdout(&kubectl_in(
            p.kubeconfig.to_str().expect("utf-8"),
            &["apply", "-f", "-"],
            &objects,
        ))?;
        let stored = parse_json(&ok(&env.cp.kubectl(&[
            "get",
            "validatingadmissionpolicy",
            &name,
            "-o",
            "json",
        ])));
        let rule = &stored["spec"]["matchConstraints"]["resourceRules"][0];
        ensure!(
            rule["apiGroups"] == json!([INTERNAL])
                && rule["resources"] == json!(["internalvirtualizationvirtualmachines"]),
            "the policy is stored with {rule}"
        );
        let stored = parse_json(&ok(&env.cp.kubectl(&[
            "get",
            "validatingadmissionpolicybinding",
            &name,
            "-o",
            "json",
        ])));
        let rule = &stored["spec"]["matchResources"]["resourceRules"][0];
        ensure!(
            rule["apiGroups"] == json!([INTERNAL]),
            "the binding is stored with {rule}"
        );
        let back = json_of(&stdout(&kubectl_p(
            p,
            &["get", "validatingadmissionpolicy", &name, "-o", "json"],
        ))?)?;
        ensure!(
            back["spec"]["matchConstraints"]["resourceRules"][0]["apiGroups"] == json!(["kubevirt.io"])
                && back["spec"]["matchConstraints"]["resourceRules"][0]["resources"]
                    == json!(["virtualmachines"]),
            "read back: {}",
            back["spec"]["matchConstraints"]
        );

        // Enforced: the policy takes a moment to be active.
        let vm = |n: &str, strategy: &str| {
            vm_yaml(&ns, n, "").replace("runStrategy: Halted", &format!("runStrategy: {strategy}"))
        };
        let kc = p.kubeconfig.to_str().expect("utf-8").to_owned();
        let t = Instant::now();
        let denial = loop {
            let o = kubectl_in(
                &kc,
                &["create", "--dry-run=server", "-f", "-"],
                &vm("always", "Always"),
            );
            if !o.status.success() {
                break String::from_utf8_lossy(&o.stderr).into_owned();
            }
            ensure!(
                t.elapsed() < Duration::from_secs(30),
                "the policy denied nothing within 30 s"
            );
            std::thread::sleep(Duration::from_millis(500));
        };
        ensure!(
            denial.contains("runStrategy Always is not allowed here"),
            "denied with: {denial}"
        );
        no_renamed("the denial", &denial)?;
        stdout(&kubectl_in(
            &kc,
            &["create", "--dry-run=server", "-f", "-"],
            &vm("halted", "Halted"),
        ))
        .map_err(|e| format!("a VM the policy allows was denied: {e}"))?;
        Ok(())
    });
}

// ---------------------------------------------------------------- events, apply conflicts

/// `kubectl events --for virtualmachine/NAME` (its field selector names the kind) lists the
/// VM's events.
#[test]
fn kubectl_events_for_vm() {
    both(|env, p, tag| {
        let uid = parse_json(&ok(&env
            .cp
            .kubectl(&["get", UP_VM, "vm1", "-n", NS, "-o", "json"])))["metadata"]["uid"]
            .as_str()
            .expect("uid")
            .to_owned();
        let reason = format!("Checked{tag}");
        let event = format!(
            "apiVersion: v1\nkind: Event\nmetadata: {{name: vm1-{tag}, namespace: {NS}}}\ninvolvedObject: {{apiVersion: kubevirt.io/v1, kind: VirtualMachine, name: vm1, namespace: {NS}, uid: {uid}}}\nreason: {reason}\nmessage: checked by the current-release suite\ntype: Normal\nsource: {{component: current-release}}\nfirstTimestamp: '2026-01-01T00:00:00Z'\nlastTimestamp: '2026-01-01T00:00:00Z'\ncount: 1\n"
        );
        // Written through the KubeVirt proxy in both runs: what differs is how it is read.
        ok(&kubectl_in(
            env.kv.kubeconfig.to_str().expect("utf-8"),
            &["apply", "-f", "-"],
            &event,
        ));
        let out = stdout(&kubectl_p(
            p,
            &["events", "-n", NS, "--for", "virtualmachine/vm1"],
        ))?;
        no_renamed("kubectl events", &out)?;
        ensure!(
            out.contains(&reason) && out.contains("VirtualMachine/vm1"),
            "kubectl events --for virtualmachine/vm1:\n{out}"
        );
        Ok(())
    });
}

/// A server-side apply conflict on a label: its message names the label key as the client sent
/// it.
#[test]
fn apply_conflict_names_original_label() {
    both(|env, p, tag| {
        let kc = p.kubeconfig.to_str().expect("utf-8").to_owned();
        let ns = format!("apply-{tag}");
        let _ = env.cp.kubectl(&["create", "namespace", &ns]);
        let name = format!("conflict-{tag}");
        let with_owner = |owner: &str| {
            vm_yaml(&ns, &name, "").replace(
                "kubevirt.io/created-by: current-release",
                &format!("kubevirt.io/owner: {owner}"),
            )
        };
        stdout(&kubectl_in(
            &kc,
            &["apply", "--server-side", "--field-manager=first", "-f", "-"],
            &with_owner("first"),
        ))?;
        let o = kubectl_in(
            &kc,
            &["apply", "--server-side", "--field-manager=second", "-f", "-"],
            &with_owner("second"),
        );
        ensure!(
            !o.status.success(),
            "the second manager took the label without a conflict"
        );
        let err = String::from_utf8_lossy(&o.stderr);
        no_renamed("the conflict", &err)?;
        ensure!(
            err.contains("conflict with \"first\"") && err.contains(".metadata.labels.kubevirt.io/owner"),
            "the conflict said: {err}"
        );
        Ok(())
    });
}
