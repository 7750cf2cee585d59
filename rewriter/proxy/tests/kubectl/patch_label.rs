//! Changing a VM in place through the proxy: `kubectl patch` (JSON, merge, strategic) and
//! `kubectl label` / `annotate`.

use kube_api_rewriter_testkit::*;
use serde_json::json;

use crate::assertions::{assert_original, assert_upstream_renamed};
use crate::manifests::vm;
use crate::{INTERNAL, RENAMED_PREFIX, env};

/// JSON and merge patches with original label, annotation and finalizer names land renamed;
/// a strategic merge patch gets the server's Status.
#[test]
fn patch_json_merge_strategic() {
    let e = env();
    let ns = "kc-patch";
    e.namespace(ns);
    e.apply(&vm(
        ns,
        "vm-c",
        &[("kubevirt.io/created-by", "y"), ("kubevirt.io/x", "c")],
        "",
    ));
    ok(&e.p.kubectl(&[
        "patch",
        "vm",
        "vm-c",
        "-n",
        ns,
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/metadata/labels/kubevirt.io~1json","value":"yes"},{"op":"add","path":"/metadata/finalizers","value":["kubevirt.io/json-finalizer"]}]"#,
    ]));
    ok(&e.p.kubectl(&[
        "patch",
        "vm",
        "vm-c",
        "-n",
        ns,
        "--type=merge",
        "-p",
        r#"{"metadata":{"annotations":{"kubevirt.io/merged":"yes"},"labels":{"kubevirt.io/x":null}}}"#,
    ]));
    let through = e.proxy_vm(ns, "vm-c");
    assert_original(&through);
    let l = &through["metadata"]["labels"];
    assert_eq!(l["kubevirt.io/json"], "yes", "{l}");
    assert!(l.get("kubevirt.io/x").is_none(), "{l}");
    assert_eq!(through["metadata"]["annotations"]["kubevirt.io/merged"], "yes");
    assert_eq!(
        through["metadata"]["finalizers"],
        json!(["kubevirt.io/json-finalizer"])
    );
    let up = e.upstream_vm(ns, "vm-c");
    assert_upstream_renamed(&up);
    let m = &up["metadata"];
    assert_eq!(m["labels"][format!("{RENAMED_PREFIX}json")], "yes", "{m}");
    assert!(m["labels"].get(format!("{RENAMED_PREFIX}x")).is_none(), "{m}");
    assert_eq!(m["annotations"][format!("{RENAMED_PREFIX}merged")], "yes", "{m}");
    assert_eq!(
        m["finalizers"],
        json!([format!("{RENAMED_PREFIX}json-finalizer")]),
        "{m}"
    );
    // Strategic merge: custom resources do not take it; kubectl gets the server's Status.
    let err = fails(&e.p.kubectl(&[
        "patch",
        "vm",
        "vm-c",
        "-n",
        ns,
        "--type=strategic",
        "-p",
        r#"{"metadata":{"labels":{"kubevirt.io/smp":"no"}}}"#,
    ]));
    assert!(
        err.contains("UnsupportedMediaType") || err.contains("unknown format"),
        "not a Status from the server: {err}"
    );
    assert!(!err.contains(INTERNAL), "{err}");
}

/// `kubectl label` (add and remove) and `kubectl annotate` with original keys.
#[test]
fn label_annotate() {
    let e = env();
    let ns = "kc-label";
    e.namespace(ns);
    e.apply(&vm(
        ns,
        "vm-b",
        &[
            ("kubevirt.io/created-by", "x"),
            ("kubevirt.io/x", "b"),
            ("kubevirt.io/applied", "twice"),
        ],
        "",
    ));
    let out = ok(&e
        .p
        .kubectl(&["label", "vm", "vm-b", "-n", ns, "kubevirt.io/labeled=yes"]));
    assert!(out.contains("virtualmachine.kubevirt.io/vm-b labeled"), "{out}");
    let out = ok(&e
        .p
        .kubectl(&["annotate", "vm", "vm-b", "-n", ns, "kubevirt.io/annotated=yes"]));
    assert!(out.contains("virtualmachine.kubevirt.io/vm-b annotated"), "{out}");
    ok(&e
        .p
        .kubectl(&["label", "vm", "vm-b", "-n", ns, "kubevirt.io/applied-"]));
    let through = e.proxy_vm(ns, "vm-b");
    assert_original(&through);
    assert_eq!(through["metadata"]["labels"]["kubevirt.io/labeled"], "yes");
    assert!(through["metadata"]["labels"].get("kubevirt.io/applied").is_none());
    assert_eq!(through["metadata"]["annotations"]["kubevirt.io/annotated"], "yes");
    let up = e.upstream_vm(ns, "vm-b");
    assert_upstream_renamed(&up);
    let m = &up["metadata"];
    assert_eq!(m["labels"][format!("{RENAMED_PREFIX}labeled")], "yes", "{m}");
    assert!(
        m["labels"].get(format!("{RENAMED_PREFIX}applied")).is_none(),
        "{m}"
    );
    assert_eq!(
        m["annotations"][format!("{RENAMED_PREFIX}annotated")],
        "yes",
        "{m}"
    );
}
