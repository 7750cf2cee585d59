//! `kubectl delete` through the proxy: a VM held by an original-named finalizer, a plain
//! delete, and one of a VM that does not exist.

use kube_api_rewriter_testkit::*;
use serde_json::json;

use crate::assertions::{assert_upstream_renamed, names, set};
use crate::manifests::{FINALIZED_META, vm};
use crate::{UP_VM, env};

#[test]
fn delete_with_finalizer() {
    let e = env();
    let (cp, p) = (&e.cp, &e.p);
    let ns = "kc-del";
    e.namespace(ns);
    for (name, by, meta) in [
        ("vm-a", "x", FINALIZED_META),
        ("vm-b", "x", ""),
        ("vm-c", "y", ""),
        ("vm-ssa", "ssa", ""),
    ] {
        e.apply(&vm(ns, name, &[("kubevirt.io/created-by", by)], meta));
    }
    // vm-a has a finalizer: delete marks it, upstream keeps the renamed finalizer.
    let out = ok(&p.kubectl(&["delete", "vm", "vm-a", "-n", ns, "--wait=false"]));
    assert!(
        out.contains("virtualmachine.kubevirt.io \"vm-a\" deleted"),
        "{out}"
    );
    let up = e.upstream_vm(ns, "vm-a");
    assert_upstream_renamed(&up);
    assert!(up["metadata"]["deletionTimestamp"].is_string(), "{up}");
    let through = e.proxy_vm(ns, "vm-a");
    assert_eq!(
        through["metadata"]["finalizers"],
        json!(["kubevirt.io/virtualMachineControllerFinalize"])
    );
    ok(&p.kubectl(&[
        "patch",
        "vm",
        "vm-a",
        "-n",
        ns,
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/metadata/finalizers/0","value":"kubevirt.io/virtualMachineControllerFinalize"},{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]));
    let err = fails(&p.kubectl(&["get", "vm", "vm-a", "-n", ns]));
    assert!(
        err.contains("NotFound") && err.contains("virtualmachines.kubevirt.io \"vm-a\" not found"),
        "{err}"
    );
    assert!(!cp.kubectl(&["get", UP_VM, "vm-a", "-n", ns]).status.success());
    // A plain delete (waits until gone).
    ok(&p.kubectl(&["delete", "vm", "vm-ssa", "-n", ns, "--timeout=30s"]));
    let up = parse_json(&ok(&cp.kubectl(&["get", UP_VM, "-n", ns, "-o", "json"])));
    assert_eq!(names(&up), set(&["vm-b", "vm-c"]));
    let err = fails(&p.kubectl(&["delete", "vm", "nope", "-n", ns]));
    assert!(
        err.contains("virtualmachines.kubevirt.io \"nope\" not found"),
        "{err}"
    );
}
