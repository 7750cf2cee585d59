//! virt-operator (KubeVirt v1.6.0) behind its own sidecar, in webhook mode as Deckhouse runs it
//! (`scripts/kubevirt.sh install`): from a KubeVirt CR it installs KubeVirt (CRDs, RBAC,
//! certificates, webhook configurations, the APIService, the Deployments and the DaemonSet
//! whose Pods kwok runs) and reports it `Deployed`. Everything it created is stored renamed and
//! reads back with KubeVirt's names; virt-operator itself speaks only original names.
//!
//! The cases share one control plane and one installation, and run one after the other
//! (`kube_api_rewriter_testkit::Suite`); any one runs alone by name
//! (`cargo test -p kube-api-rewriter-proxy --test kubevirt_operator -- NAME`).

use kube_api_rewriter_testkit::*;
use serde_json::{Value, json};

const INTERNAL: &str = "internal.virtualization.deckhouse.io";
const KV: &str = "kubevirt.internal.virtualization.deckhouse.io";

fn main() -> std::process::ExitCode {
    Suite::new(setup)
        .case("deployed", deployed)
        .case("crds_stored_renamed", crds_stored_renamed)
        .case("workloads_stored_renamed", workloads_stored_renamed)
        .case("webhooks_and_api_service", webhooks_and_api_service)
        .case("original_names_only", original_names_only)
        .on_failure(|e: &Env| {
            e.kv.print_log_tails(&["VIRT_OPERATOR_LOG", "VIRT_OPERATOR_SIDECAR_LOG"])
        })
        .run()
}

/// What every case shares.
struct Env {
    /// KubeVirt; declared first so it stops before the control plane.
    kv: KubeVirt,
    cp: ControlPlane,
    /// Admin through the admin sidecar (original names).
    through: String,
}

fn setup() -> Env {
    let cp = ControlPlane::up();
    let kv = KubeVirt::install(&cp);
    let through = kv.get("KV_KUBECONFIG").to_owned();
    Env { kv, cp, through }
}

impl Env {
    /// `kubectl get ARGS -o json` through the admin sidecar.
    fn through(&self, args: &[&str]) -> Value {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend(["-o", "json"]);
        parse_json(&ok(&kubectl(&self.through, &a)))
    }

    /// `kubectl get ARGS -o json` straight from kube-apiserver (stored names).
    fn stored(&self, args: &[&str]) -> Value {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend(["-o", "json"]);
        parse_json(&ok(&self.cp.kubectl(&a)))
    }
}

/// The keys of an object's labels and annotations.
fn keys(meta: &Value) -> Vec<String> {
    ["labels", "annotations"]
        .iter()
        .filter_map(|f| meta[f].as_object())
        .flat_map(|m| m.keys().cloned())
        .collect()
}

/// No key of KubeVirt's stored with its original prefix.
fn assert_renamed_keys(what: &str, meta: &Value) {
    for k in keys(meta) {
        assert!(
            !k.starts_with("kubevirt.io/") && k != "kubevirt.io",
            "{what} stored with an original key {k}: {meta}"
        );
    }
}

/// virt-operator reports the KubeVirt CR Deployed and Available, for the version it runs.
fn deployed(e: &Env) {
    let kv = e.through(&["-n", "kubevirt", "kubevirt", "kubevirt"]);
    let status = &kv["status"];
    assert_eq!(status["phase"], "Deployed", "{status}");
    assert_eq!(
        status["observedKubeVirtVersion"],
        e.kv.get("KUBEVIRT_VERSION"),
        "{status}"
    );
    let available = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Available")
        .unwrap_or_else(|| panic!("an Available condition: {status}"));
    assert_eq!(available["status"], "True", "{available}");
    // Stored as the renamed kind.
    let stored = e.stored(&[
        "-n",
        "kubevirt",
        &format!("internalvirtualizationkubevirts.{INTERNAL}"),
        "kubevirt",
    ]);
    assert_eq!(stored["kind"], "InternalVirtualizationKubeVirt", "{stored}");
    assert_eq!(stored["status"]["phase"], "Deployed");
}

/// Every CRD virt-operator created is stored renamed and served back under KubeVirt's names.
fn crds_stored_renamed(e: &Env) {
    let stored = ok(&e.cp.kubectl(&["get", "crd", "-o", "name"]));
    let renamed = stored
        .lines()
        .filter(|l| l.ends_with(&format!(".{INTERNAL}")))
        .count();
    assert!(renamed >= 15, "virt-operator's CRDs stored renamed:\n{stored}");
    assert!(
        !stored.lines().any(|l| l.ends_with(".kubevirt.io")),
        "a CRD stored with its original group:\n{stored}"
    );
    let crd = e.stored(&[
        "crd",
        &format!("internalvirtualizationvirtualmachines.{INTERNAL}"),
    ]);
    assert_renamed_keys("the VirtualMachine CRD", &crd["metadata"]);
    assert_eq!(crd["metadata"]["labels"][KV], "", "{}", crd["metadata"]);
    let through = ok(&kubectl(&e.through, &["get", "crd", "-o", "name"]));
    for name in [
        "virtualmachines.kubevirt.io",
        "virtualmachineinstancemigrations.kubevirt.io",
        "virtualmachinepools.pool.kubevirt.io",
    ] {
        assert!(
            through
                .lines()
                .any(|l| l == format!("customresourcedefinition.apiextensions.k8s.io/{name}")),
            "{name} through the sidecar:\n{through}"
        );
    }
    assert!(!through.contains(INTERNAL), "{through}");
}

/// virt-api's and virt-controller's Deployments and virt-handler's DaemonSet: stored with
/// renamed labels and selectors, their Pods Running on kwok's Nodes and selected by them; read
/// back with `kubevirt.io` labels.
fn workloads_stored_renamed(e: &Env) {
    for (kind, name) in [
        ("deployment", "virt-api"),
        ("deployment", "virt-controller"),
        ("daemonset", "virt-handler"),
    ] {
        let s = e.stored(&["-n", "kubevirt", kind, name]);
        assert_renamed_keys(name, &s["metadata"]);
        assert_renamed_keys(name, &s["spec"]["template"]["metadata"]);
        assert_eq!(
            s["spec"]["selector"]["matchLabels"],
            json!({ KV: name }),
            "{name}: {}",
            s["spec"]["selector"]
        );
        let t = e.through(&["-n", "kubevirt", kind, name]);
        assert_eq!(
            t["metadata"]["labels"]["kubevirt.io"], name,
            "{name}: {}",
            t["metadata"]
        );
        assert_eq!(t["spec"]["selector"]["matchLabels"], json!({"kubevirt.io": name}));
        // Selecting by the original label through the sidecar finds the Pods the renamed
        // selector made upstream.
        let pods = e.through(&["-n", "kubevirt", "pods", "-l", &format!("kubevirt.io={name}")]);
        let items = pods["items"].as_array().expect("items");
        assert!(!items.is_empty(), "{name}: no Pods");
        for p in items {
            assert_eq!(p["status"]["phase"], "Running", "{name}: {}", p["status"]);
            assert!(p["spec"]["nodeName"].is_string(), "{name}: {}", p["spec"]);
        }
    }
}

/// The webhook configurations virt-operator made select the renamed resources upstream, and
/// its APIService, which it sends as protobuf, is stored with its labels renamed.
fn webhooks_and_api_service(e: &Env) {
    let up = e.stored(&["validatingwebhookconfiguration", "virt-api-validator"]);
    let vm = up["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .find(|w| w["name"] == "virtualmachine-validator.kubevirt.io")
        .unwrap_or_else(|| panic!("the VM validator:\n{up}"));
    assert_eq!(vm["rules"][0]["apiGroups"], json!([INTERNAL]), "{vm}");
    assert_eq!(
        vm["rules"][0]["resources"],
        json!(["internalvirtualizationvirtualmachines"]),
        "{vm}"
    );
    let op = e.stored(&["validatingwebhookconfiguration", "virt-operator-validator"]);
    assert_eq!(
        op["webhooks"][0]["rules"][0]["resources"],
        json!(["internalvirtualizationkubevirts"]),
        "{op}"
    );
    let through = e.through(&["validatingwebhookconfiguration", "virt-operator-validator"]);
    assert_eq!(
        through["webhooks"][0]["rules"][0]["apiGroups"],
        json!(["kubevirt.io"]),
        "{through}"
    );
    assert_eq!(
        through["webhooks"][0]["rules"][0]["resources"],
        json!(["kubevirts"]),
        "{through}"
    );

    let api = e.stored(&["apiservice", "v1.subresources.kubevirt.io"]);
    assert_renamed_keys("the APIService", &api["metadata"]);
    assert_eq!(
        api["metadata"]["labels"][KV], "virt-api-aggregator",
        "{}",
        api["metadata"]
    );
    let t = e.through(&["apiservice", "v1.subresources.kubevirt.io"]);
    assert_eq!(
        t["metadata"]["labels"]["kubevirt.io"], "virt-api-aggregator",
        "{}",
        t["metadata"]
    );
    assert_eq!(t["spec"]["group"], "subresources.kubevirt.io");
}

/// virt-operator's requests name only KubeVirt's groups, renamed upstream by its sidecar, and
/// kube-apiserver's reviews of the KubeVirt CR reached it through the sidecar's webhook proxy.
fn original_names_only(e: &Env) {
    let log = e.kv.log("VIRT_OPERATOR_SIDECAR_LOG");
    let mut renamed = 0;
    for l in log.lines().filter(|l| l.contains("proxy=\"kube-api\"")) {
        let field = |k: &str| l.split(k).nth(1).and_then(|r| r.split(' ').next()).unwrap_or("");
        let (path, up) = (field(" path="), field(" upstream="));
        assert!(
            !path.contains(INTERNAL) && !path.contains("internalvirtualization"),
            "virt-operator named a renamed resource: {l}"
        );
        if path.starts_with("/apis/kubevirt.io/") {
            assert!(up.starts_with(&format!("/apis/{INTERNAL}/")), "{l}");
            renamed += 1;
        }
    }
    assert!(renamed >= 5, "{renamed} kubevirt.io requests renamed:\n{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("/kubevirt-validate-update") && !l.contains("proxy=\"kube-api\"")),
        "no review of the KubeVirt CR through the webhook proxy:\n{log}"
    );
}
