//! Built-in objects through the proxy: kubectl's protobuf create and the JSON apply of a
//! Namespace with an original-named label.

use kube_api_rewriter_testkit::*;

use crate::env;

/// kubectl sends protobuf bodies when it creates built-in objects with its typed client.
#[test]
fn protobuf_create_core() {
    let e = env();
    let (cp, p) = (&e.cp, &e.p);
    ok(&p.kubectl(&["create", "namespace", "pb"]));
    ok(&cp.kubectl(&["get", "namespace", "pb"]));
    // The JSON path for the same object works.
    let out = e.apply(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: pb-json, labels: {kubevirt.io/ns: \"yes\"}}\n",
    );
    assert!(out.contains("namespace/pb-json created"), "{out}");
    let up = parse_json(&ok(&cp.kubectl(&["get", "namespace", "pb-json", "-o", "json"])));
    assert!(up["metadata"]["labels"].get("kubevirt.io/ns").is_none(), "{up}");
    let through = parse_json(&ok(&p.kubectl(&["get", "namespace", "pb-json", "-o", "json"])));
    assert_eq!(
        through["metadata"]["labels"]["kubevirt.io/ns"], "yes",
        "{through}"
    );
}
