//! KubeVirt's own components behind the rewriter (`scripts/kubevirt.sh`): virt-api (v1.6.0)
//! behind a sidecar in webhook mode, with its own webhook configurations applied through the
//! rewriter, and virt-controller behind a sidecar of its own, on kwok's Nodes. What KubeVirt
//! sends and answers, not what this project believes it does: KubeVirt's CRDs and webhook
//! configurations stored renamed, virt-api's admission (a denial with its message; its defaults
//! and mutations stored under the renamed names), its `start`/`stop` subresources driving
//! virt-controller, and KubeVirt speaking only original names to its sidecars.
//!
//! The cases share one control plane and one KubeVirt, and run one after the other
//! (`kube_api_rewriter_testkit::Suite`); any one runs alone by name
//! (`cargo test -p kube-api-rewriter-proxy --test kubevirt -- NAME`).

use std::time::{Duration, Instant};

use kube_api_rewriter_testkit::*;
use serde_json::{Value, json};

const INTERNAL: &str = "internal.virtualization.deckhouse.io";
const KV: &str = "kubevirt.internal.virtualization.deckhouse.io";
const UP_VM: &str = "internalvirtualizationvirtualmachines";
const NS: &str = "kv-e2e";

fn main() -> std::process::ExitCode {
    Suite::new(setup)
        .case("crds", crds)
        .case("webhook_configurations", webhook_configurations)
        .case("invalid_vm_denied", invalid_vm_denied)
        .case("defaults_stored_renamed", defaults_stored_renamed)
        .case("start_and_stop", start_and_stop)
        .case("migration_admission", migration_admission)
        .case("original_names_only", original_names_only)
        .on_failure(|e: &Env| {
            e.kv.print_log_tails(&[
                "VIRT_API_LOG",
                "VIRT_API_SIDECAR_LOG",
                "VIRT_CONTROLLER_SIDECAR_LOG",
            ])
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
    let kv = KubeVirt::up(&cp, &[]);
    let through = kv.get("KV_KUBECONFIG").to_owned();
    ok(&cp.kubectl(&["create", "namespace", NS]));
    Env { kv, cp, through }
}

impl Env {
    /// kubectl through the admin sidecar.
    fn kubectl(&self, args: &[&str]) -> std::process::Output {
        kubectl(&self.through, args)
    }

    fn apply(&self, yaml: &str) -> std::process::Output {
        kubectl_in(&self.through, &["apply", "-f", "-"], yaml)
    }

    /// The stored object, straight from kube-apiserver.
    fn stored(&self, resource: &str, name: &str) -> Value {
        parse_json(&ok(&self
            .cp
            .kubectl(&["get", "-n", NS, resource, name, "-o", "json"])))
    }

    /// The object through the admin sidecar.
    fn through(&self, resource: &str, name: &str) -> Value {
        parse_json(&ok(
            &self.kubectl(&["get", "-n", NS, resource, name, "-o", "json"])
        ))
    }
}

/// A VirtualMachine with `runStrategy: Halted`; `disks` under `devices`.
fn vm(name: &str, disks: &str) -> String {
    format!(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: {name}\n  namespace: {NS}\n  labels: {{kubevirt.io/e2e: \"{name}\"}}\nspec:\n  runStrategy: Halted\n  template:\n    spec:\n      domain:\n        devices: {{{disks}}}\n        resources: {{requests: {{memory: 64Mi}}}}\n"
    )
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> Option<String>) -> String {
    let t = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Every CRD KubeVirt's code makes, applied through the admin sidecar, is stored renamed and
/// served back under KubeVirt's names.
fn crds(e: &Env) {
    let stored = ok(&e.cp.kubectl(&["get", "crd", "-o", "name"]));
    let renamed: Vec<&str> = stored
        .lines()
        .filter(|l| l.ends_with(&format!(".{INTERNAL}")))
        .collect();
    assert!(renamed.len() >= 10, "KubeVirt's CRDs stored renamed:\n{stored}");
    for l in stored.lines() {
        assert!(
            !l.ends_with(".kubevirt.io"),
            "a CRD stored with its original group: {l}\n{stored}"
        );
    }
    assert!(stored.contains(&format!("{UP_VM}.{INTERNAL}")), "{stored}");
    let through = ok(&e.kubectl(&["get", "crd", "-o", "name"]));
    assert!(
        through.contains("virtualmachines.kubevirt.io") && !through.contains(INTERNAL),
        "{through}"
    );
    let resources = ok(&e.kubectl(&["api-resources", "--api-group=kubevirt.io", "-o", "name"]));
    for r in [
        "virtualmachines.kubevirt.io",
        "virtualmachineinstances.kubevirt.io",
        "kubevirts.kubevirt.io",
    ] {
        assert!(
            resources.lines().any(|l| l == r),
            "{r} in discovery:\n{resources}"
        );
    }
}

/// virt-api's own webhook configurations, applied through the rewriter, select the renamed
/// resources upstream and read back with KubeVirt's names.
fn webhook_configurations(e: &Env) {
    let up = parse_json(&ok(&e.cp.kubectl(&[
        "get",
        "validatingwebhookconfiguration",
        "virt-api-validator",
        "-o",
        "json",
    ])));
    let vm = up["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .find(|w| w["name"] == "virtualmachine-validator.kubevirt.io")
        .unwrap_or_else(|| panic!("the VM validator:\n{up}"));
    assert_eq!(vm["rules"][0]["apiGroups"], json!([INTERNAL]), "{vm}");
    assert_eq!(vm["rules"][0]["resources"], json!([UP_VM]), "{vm}");
    let through = parse_json(&ok(&e.kubectl(&[
        "get",
        "mutatingwebhookconfiguration",
        "virt-api-mutator",
        "-o",
        "json",
    ])));
    assert_eq!(
        through["webhooks"][0]["rules"][0]["apiGroups"],
        json!(["kubevirt.io"]),
        "{through}"
    );
    assert_eq!(
        through["webhooks"][0]["rules"][0]["resources"],
        json!(["virtualmachines"]),
        "{through}"
    );
}

/// A VM naming a disk it lacks is refused by virt-api's validating webhook, reached through the
/// sidecar's webhook proxy, with virt-api's message; nothing is stored.
fn invalid_vm_denied(e: &Env) {
    let err = fails(&e.apply(&vm("bad-disk", "disks: [{name: nosuch, disk: {}}]")));
    assert!(
        err.contains("spec.template.spec.domain.devices.disks[0].Name 'nosuch' not found"),
        "virt-api's denial: {err}"
    );
    assert!(
        !err.contains(INTERNAL),
        "the denial names renamed resources: {err}"
    );
    let o = e.cp.kubectl(&["get", "-n", NS, UP_VM, "bad-disk"]);
    assert!(!o.status.success(), "a denied VM was stored");
}

/// What virt-api's mutating webhook adds (defaults computed on original names) and what
/// virt-controller then writes (its annotations) are stored under the renamed names, and read
/// back under the original ones: no key of KubeVirt's is stored with its original prefix, none
/// comes back marked as preserved.
fn defaults_stored_renamed(e: &Env) {
    ok(&e.apply(&vm("defaults", "")));
    // virt-controller records the API version it observed once it has seen the VM.
    let key = format!("{KV}/latest-observed-api-version");
    wait_for(
        "virt-controller's annotations on the VM",
        Duration::from_secs(30),
        || {
            let s = e.stored(UP_VM, "defaults");
            s["metadata"]["annotations"].get(&key).map(|_| String::new())
        },
    );
    let s = e.stored(UP_VM, "defaults");
    let spec = &s["spec"]["template"]["spec"];
    assert_eq!(
        spec["domain"]["machine"]["type"], "q35",
        "virt-api's default machine type: {s}"
    );
    assert!(
        spec["domain"]["firmware"]["uuid"].is_string(),
        "virt-api's firmware UUID: {s}"
    );
    assert!(
        spec["architecture"].is_string(),
        "virt-api's default architecture: {s}"
    );
    let meta = s["metadata"].to_string();
    for k in keys(&s["metadata"]) {
        assert!(
            !k.starts_with("kubevirt.io/"),
            "stored with an original prefix: {k}\n{meta}"
        );
        assert!(
            !k.starts_with("preserved-original-"),
            "stored preserved: {k}\n{meta}"
        );
    }
    assert_eq!(s["metadata"]["labels"][format!("{KV}/e2e")], "defaults", "{meta}");
    let t = e.through("vm", "defaults");
    let meta = t["metadata"].to_string();
    assert_eq!(
        t["metadata"]["annotations"]["kubevirt.io/latest-observed-api-version"], "v1",
        "{meta}"
    );
    for k in keys(&t["metadata"]) {
        assert!(
            !k.starts_with("preserved-original-") && !k.contains(INTERNAL),
            "{k}\n{meta}"
        );
    }
    // Settles: after its first writes (annotations, then status) virt-controller leaves the VM
    // alone for 2 s, rather than rewriting it over and over.
    wait_for("the VM to settle", Duration::from_secs(20), || {
        let rv = e.stored(UP_VM, "defaults")["metadata"]["resourceVersion"].clone();
        std::thread::sleep(Duration::from_secs(2));
        (e.stored(UP_VM, "defaults")["metadata"]["resourceVersion"] == rv).then(String::new)
    });
}

/// The label and annotation keys and the finalizers of an object's `metadata`.
fn keys(meta: &Value) -> Vec<String> {
    let mut out: Vec<String> = ["labels", "annotations"]
        .iter()
        .filter_map(|m| meta[m].as_object())
        .flat_map(|m| m.keys().cloned())
        .collect();
    out.extend(
        meta["finalizers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f.as_str().map(str::to_owned)),
    );
    out
}

/// virt-api's `start` subresource (called as an aggregating front proxy would) patches the VM
/// through its sidecar; virt-controller creates the VMI and the virt-launcher Pod, which the
/// scheduler places on a kwok Node by the renamed node labels; `stop` halts it again.
fn start_and_stop(e: &Env) {
    ok(&e.apply(&vm("starter", "")));
    let path = |sub: &str| {
        format!("/apis/subresources.kubevirt.io/v1/namespaces/{NS}/virtualmachines/starter/{sub}")
    };
    let (code, body) =
        e.kv.virt_api_put(&path("start"), "{}", "admin", &["system:masters"]);
    assert_eq!(code, "202", "start: {body}");
    assert_eq!(e.stored(UP_VM, "starter")["spec"]["runStrategy"], "Always");
    let node = wait_for(
        "the virt-launcher Pod on a kwok Node",
        Duration::from_secs(60),
        || {
            let pods = parse_json(&ok(&e.cp.kubectl(&[
                "get",
                "pods",
                "-n",
                NS,
                "-l",
                &format!("{KV}/created-by"),
                "-o",
                "json",
            ])));
            pods["items"].as_array()?.iter().find_map(|p| {
                let n = p["spec"]["nodeName"].as_str()?;
                (p["metadata"]["generateName"] == "virt-launcher-starter-").then(|| n.to_owned())
            })
        },
    );
    assert!(e.kv.nodes().contains(&node), "{node} is not a kwok Node");
    let vmi = e.through("vmi", "starter");
    assert_eq!(vmi["apiVersion"], "kubevirt.io/v1", "{vmi}");
    assert_eq!(
        vmi["metadata"]["ownerReferences"][0]["kind"], "VirtualMachine",
        "{vmi}"
    );
    wait_for("the VMI Scheduled", Duration::from_secs(60), || {
        let v = e.through("vmi", "starter");
        (v["status"]["phase"] == "Scheduled" && v["status"]["nodeName"] == node.as_str()).then(String::new)
    });
    // Refused for a user without RBAC (virt-api's own SubjectAccessReview, sent through its
    // sidecar: the sidecar's credentials do not widen what the caller may do); virt-api answers
    // every refusal with 401.
    let (code, body) = e.kv.virt_api_put(&path("stop"), "{}", "user1", &["demo-users"]);
    assert_eq!(code, "401", "stop by user1: {body}");
    assert_eq!(e.stored(UP_VM, "starter")["spec"]["runStrategy"], "Always");
    let (code, body) =
        e.kv.virt_api_put(&path("stop"), "{}", "admin", &["system:masters"]);
    assert_eq!(code, "202", "stop: {body}");
    assert_eq!(e.stored(UP_VM, "starter")["spec"]["runStrategy"], "Halted");
}

/// VirtualMachineInstanceMigrations pass virt-api's migration webhooks through the rewriter: one
/// for a VMI that does not exist is refused with virt-api's message, one for the VMI of
/// `start_and_stop`'s sibling is admitted with the mutator's label and finalizer stored renamed.
fn migration_admission(e: &Env) {
    let mig = |name: &str, vmi: &str| {
        format!(
            "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstanceMigration\nmetadata: {{name: {name}, namespace: {NS}}}\nspec: {{vmiName: {vmi}}}\n"
        )
    };
    let err = fails(&kubectl_in(
        &e.through,
        &["create", "-f", "-"],
        &mig("to-nowhere", "nosuch"),
    ));
    assert!(
        err.contains(&format!("the VMI \"{NS}/nosuch\" does not exist")),
        "{err}"
    );
    ok(&e.apply(&vm("migrant", "")));
    let (code, body) = e.kv.virt_api_put(
        &format!("/apis/subresources.kubevirt.io/v1/namespaces/{NS}/virtualmachines/migrant/start"),
        "{}",
        "admin",
        &["system:masters"],
    );
    assert_eq!(code, "202", "start: {body}");
    wait_for("the VMI", Duration::from_secs(30), || {
        e.kubectl(&["get", "-n", NS, "vmi", "migrant"])
            .status
            .success()
            .then(String::new)
    });
    ok(&kubectl_in(
        &e.through,
        &["create", "-f", "-"],
        &mig("move-it", "migrant"),
    ));
    let s = e.stored(
        "internalvirtualizationvirtualmachineinstancemigrations",
        "move-it",
    );
    assert_eq!(
        s["metadata"]["labels"][format!("{KV}/vmi-name")],
        "migrant",
        "{s}"
    );
    let fin = s["metadata"]["finalizers"].to_string();
    assert!(fin.contains(&format!("{KV}/migrationJobFinalize")), "{fin}");
    assert!(!fin.contains("\"kubevirt.io/"), "{fin}");
    let t = e.through("vmim", "move-it");
    assert_eq!(t["metadata"]["labels"]["kubevirt.io/vmi-name"], "migrant", "{t}");
}

/// KubeVirt's components spoke only original names to their sidecars, which sent renamed ones
/// upstream; the webhook proxy got the renamed webhook paths' reviews.
fn original_names_only(e: &Env) {
    for (key, min) in [("VIRT_CONTROLLER_SIDECAR_LOG", 10), ("VIRT_API_SIDECAR_LOG", 3)] {
        let log = e.kv.log(key);
        let mut renamed = 0;
        for l in log.lines().filter(|l| l.contains("proxy=\"kube-api\"")) {
            let path = l
                .split(" path=")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .unwrap_or("");
            let up = l
                .split(" upstream=")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .unwrap_or("");
            assert!(
                !path.contains(INTERNAL) && !path.contains("internalvirtualization"),
                "{key}: {l}"
            );
            if path.starts_with("/apis/kubevirt.io/") {
                assert!(up.starts_with(&format!("/apis/{INTERNAL}/")), "{key}: {l}");
                renamed += 1;
            }
        }
        assert!(
            renamed >= min,
            "{key}: {renamed} kubevirt.io requests renamed:\n{log}"
        );
    }
    let log = e.kv.log("VIRT_API_SIDECAR_LOG");
    for hook in [
        "/virtualmachines-mutate",
        "/virtualmachines-validate",
        "/migration-validate-create",
    ] {
        assert!(
            log.lines().any(|l| l.contains("proxy=\"webhook\"")
                && l.contains(&format!("path={hook}"))
                && l.contains("status=200")),
            "no review on {hook}:\n{log}"
        );
    }
}
