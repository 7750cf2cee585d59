//! The example operator against the real local kube-apiserver: the cluster holds KubeVirt's
//! CRDs only under their renamed groups, the operator speaks `kubevirt.io` through the Layer.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube_api_rewriter_testkit::*;

const VM_UP: &str = "internalvirtualizationvirtualmachines.internal.virtualization.deckhouse.io";
const RENAMED_LABEL: &str = "kubevirt.internal.virtualization.deckhouse.io/example-reconciled";

#[test]
fn operator_watches_and_patches_renamed_virtual_machines_through_the_layer() {
    let cp = ControlPlane::up();
    let dir = temp_dir("operator");
    // The CRD goes in through the sidecar, so kube-apiserver stores it renamed, as in Deckhouse.
    let proxy = ProxyProc::start(&dir, &[("KUBECONFIG", cp.kubeconfig())]);
    proxy.apply_vm_crd();
    assert_eq!(wait_crd_established(&proxy, "virtualmachines.kubevirt.io"), None);
    ok(&cp.kubectl(&["create", "namespace", "op"]));

    let mut op = Command::new(env!("CARGO_BIN_EXE_kubevirt-operator"))
        .env("KUBECONFIG", cp.kubeconfig())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("operator starts");
    let lines = line_channel(op.stdout.take().expect("stdout"));

    // A VM created straight at kube-apiserver under the renamed names, as the cluster holds it.
    let vm = r#"{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachine",
      "metadata":{"name":"vm1","namespace":"op","labels":{"kubevirt.internal.virtualization.deckhouse.io/created-by":"test"}},
      "spec":{"runStrategy":"Halted","template":{"spec":{"domain":{"devices":{}}}}}}"#;
    ok(&kubectl_in(cp.kubeconfig(), &["create", "-f", "-"], vm));

    let mut seen = Vec::new();
    let t = Instant::now();
    while !seen.iter().any(|l: &String| l.contains("op/vm1")) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "operator reconciled nothing: {seen:?}"
        );
        if let Ok(l) = lines.recv_timeout(Duration::from_millis(200)) {
            seen.push(l);
        }
    }
    let line = seen.iter().find(|l| l.contains("op/vm1")).expect("line");
    assert_eq!(
        line, "reconciled kubevirt.io/v1 VirtualMachine op/vm1",
        "the operator saw original names"
    );

    // Upstream, the patch landed under the renamed label key.
    let stored = parse_json(&ok(&cp.kubectl(&["get", VM_UP, "-n", "op", "vm1", "-o", "json"])));
    assert_eq!(stored["metadata"]["labels"][RENAMED_LABEL], "true", "{stored}");
    assert_eq!(
        stored["metadata"]["annotations"]["example.kubevirt.io/run-strategy"],
        "Halted"
    );
    assert!(
        stored["metadata"]["labels"]
            .get("kubevirt.io/example-reconciled")
            .is_none()
    );

    // A change seen through the Layer's restored watch is reconciled again.
    ok(&cp.kubectl(&[
        "patch",
        VM_UP,
        "-n",
        "op",
        "vm1",
        "--type=merge",
        "-p",
        r#"{"spec":{"runStrategy":"Always"}}"#,
    ]));
    let t = Instant::now();
    loop {
        let s = parse_json(&ok(&cp.kubectl(&["get", VM_UP, "-n", "op", "vm1", "-o", "json"])));
        if s["metadata"]["annotations"]["example.kubevirt.io/run-strategy"] == "Always" {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "change not reconciled: {s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let _ = op.kill();
    let _ = op.wait();
    let mut err = String::new();
    let _ = op.stderr.take().expect("stderr").read_to_string(&mut err);
    assert!(!err.contains("reconcile failed"), "{err}");
}
