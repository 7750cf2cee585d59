//! Label selectors with original keys (equality, set-based, existence), through the proxy and,
//! renamed, straight to kube-apiserver.

use kube_api_rewriter_testkit::*;

use crate::assertions::{assert_original, assert_upstream_renamed, names, set};
use crate::manifests::vm;
use crate::{RENAMED_PREFIX, UP_VM, env};

#[test]
fn label_selectors() {
    let e = env();
    let ns = "kc-sel";
    e.namespace(ns);
    for (name, labels) in [
        (
            "vm-a",
            &[("kubevirt.io/created-by", "x"), ("kubevirt.io/x", "a")][..],
        ),
        ("vm-b", &[("kubevirt.io/created-by", "x"), ("kubevirt.io/x", "b")]),
        ("vm-c", &[("kubevirt.io/created-by", "y")]),
        ("vm-ssa", &[("kubevirt.io/created-by", "ssa")]),
    ] {
        e.apply(&vm(ns, name, labels, ""));
    }
    for (sel, want) in [
        ("kubevirt.io/created-by=x", set(&["vm-a", "vm-b"])),
        ("kubevirt.io/x in (a,b)", set(&["vm-a", "vm-b"])),
        ("kubevirt.io/x notin (a)", set(&["vm-b", "vm-c", "vm-ssa"])),
        ("kubevirt.io/x!=a", set(&["vm-b", "vm-c", "vm-ssa"])),
        ("kubevirt.io/x", set(&["vm-a", "vm-b"])),
        ("!kubevirt.io/x", set(&["vm-c", "vm-ssa"])),
        ("kubevirt.io/created-by=x,kubevirt.io/x!=a", set(&["vm-b"])),
    ] {
        let list = parse_json(&ok(&e
            .p
            .kubectl(&["get", "vm", "-n", ns, "-l", sel, "-o", "json"])));
        assert_eq!(names(&list), want, "-l {sel}");
        assert_original(&list);
    }
    // The same selector in renamed form, directly, agrees.
    let up = parse_json(&ok(&e.cp.kubectl(&[
        "get",
        UP_VM,
        "-n",
        ns,
        "-l",
        &format!("{RENAMED_PREFIX}x in (a,b)"),
        "-o",
        "json",
    ])));
    assert_eq!(names(&up), set(&["vm-a", "vm-b"]));
    for item in up["items"].as_array().into_iter().flatten() {
        assert_upstream_renamed(item);
    }
    // Table output with a selector (kubectl's default Accept).
    let t = ok(&e
        .p
        .kubectl(&["get", "vms", "-n", ns, "-l", "kubevirt.io/created-by=y"]));
    assert!(
        t.starts_with("NAME") && t.contains("vm-c") && !t.contains("vm-a"),
        "{t}"
    );
}
