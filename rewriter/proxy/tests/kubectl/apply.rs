//! `kubectl apply`, client side (create, then a 3-way merge patch) and server side (managed
//! fields, a conflict with another field manager), read back as table, YAML and JSON.

use kube_api_rewriter_testkit::*;
use serde_json::json;

use crate::assertions::{assert_original, assert_upstream_renamed};
use crate::manifests::{FINALIZED_META, vm};
use crate::{INTERNAL, RENAMED_PREFIX, env};

/// Client-side apply of three VMs (one with a finalizer, an annotation and an ownerReference),
/// read through the proxy as table, YAML and JSON, held renamed upstream; applied again with a
/// change.
#[test]
fn apply_get_table_yaml() {
    let e = env();
    let ns = "kc";
    e.namespace(ns);
    for (name, by, x, meta) in [
        ("vm-a", "x", "a", FINALIZED_META),
        ("vm-b", "x", "b", ""),
        ("vm-c", "y", "c", ""),
    ] {
        e.apply(&vm(
            ns,
            name,
            &[("kubevirt.io/created-by", by), ("kubevirt.io/x", x)],
            meta,
        ));
    }
    // Table
    let table = ok(&e.p.kubectl(&["get", "vm", "-n", ns]));
    let head: Vec<&str> = table.lines().next().unwrap_or("").split_whitespace().collect();
    assert_eq!(head, ["NAME", "AGE", "STATUS", "READY"], "{table}");
    let rows: Vec<&str> = table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(rows, ["vm-a", "vm-b", "vm-c"], "{table}");
    // -o yaml
    let y = ok(&e.p.kubectl(&["get", "vm", "vm-a", "-n", ns, "-o", "yaml"]));
    for want in [
        "apiVersion: kubevirt.io/v1",
        "kind: VirtualMachine",
        "kubevirt.io/created-by: x",
        "kubevirt.io/note: hello",
        "- kubevirt.io/virtualMachineControllerFinalize",
        "kind: VirtualMachineInstance",
    ] {
        assert!(y.contains(want), "missing {want:?}:\n{y}");
    }
    assert!(
        !y.contains("nternalVirtualization") && !y.contains("internal.virtualization.deckhouse.io/"),
        "{y}"
    );
    let through = e.proxy_vm(ns, "vm-a");
    assert_original(&through);
    assert_eq!(
        through["metadata"]["ownerReferences"][0]["apiVersion"],
        "kubevirt.io/v1"
    );
    // Upstream: renamed only.
    let up = e.upstream_vm(ns, "vm-a");
    assert_upstream_renamed(&up);
    let m = &up["metadata"];
    assert_eq!(m["labels"][format!("{RENAMED_PREFIX}created-by")], "x", "{m}");
    assert_eq!(m["annotations"][format!("{RENAMED_PREFIX}note")], "hello", "{m}");
    assert_eq!(
        m["finalizers"],
        json!([format!("{RENAMED_PREFIX}virtualMachineControllerFinalize")]),
        "{m}"
    );
    assert_eq!(
        m["ownerReferences"][0]["apiVersion"],
        format!("{INTERNAL}/v1"),
        "{m}"
    );
    assert_eq!(
        m["ownerReferences"][0]["kind"], "InternalVirtualizationVirtualMachineInstance",
        "{m}"
    );
    // Client-side apply again with a change: kubectl's 3-way merge patch.
    let y = vm(
        ns,
        "vm-b",
        &[
            ("kubevirt.io/created-by", "x"),
            ("kubevirt.io/x", "b"),
            ("kubevirt.io/applied", "twice"),
        ],
        "",
    );
    let out = e.apply(&y);
    assert!(
        out.contains("virtualmachine.kubevirt.io/vm-b configured"),
        "{out}"
    );
    let up = e.upstream_vm(ns, "vm-b");
    assert_upstream_renamed(&up);
    assert_eq!(
        up["metadata"]["labels"][format!("{RENAMED_PREFIX}applied")],
        "twice"
    );
}

/// Server-side apply: managed fields with original names through the proxy and renamed
/// upstream; a conflict with another manager, through kubectl and as raw HTTP, names the
/// original label.
#[test]
fn apply_server_side() {
    let e = env();
    let ns = "kc-ssa";
    e.namespace(ns);
    let ssa = ["apply", "--server-side", "--field-manager=e2e", "-f", "-"];
    let y = vm(ns, "vm-ssa", &[("kubevirt.io/created-by", "ssa")], "");
    let out = ok(&e.kubectl_in(&ssa, &y));
    assert!(
        out.contains("virtualmachine.kubevirt.io/vm-ssa serverside-applied"),
        "{out}"
    );
    let y = vm(
        ns,
        "vm-ssa",
        &[("kubevirt.io/created-by", "ssa"), ("kubevirt.io/second", "yes")],
        "",
    );
    ok(&e.kubectl_in(&ssa, &y));
    let through = parse_json(&ok(&e.p.kubectl(&[
        "get",
        "vm",
        "vm-ssa",
        "-n",
        ns,
        "-o",
        "json",
        "--show-managed-fields",
    ])));
    assert_original(&through);
    let mf = through["metadata"]["managedFields"].to_string();
    assert!(
        mf.contains("f:kubevirt.io/second") && mf.contains("\"e2e\""),
        "{mf}"
    );
    let up = e.upstream_vm(ns, "vm-ssa");
    assert_upstream_renamed(&up);
    let mf = up["metadata"]["managedFields"].to_string();
    assert!(mf.contains(&format!("f:{RENAMED_PREFIX}second")), "{mf}");
    // A conflict with another manager comes back as a Status naming original names.
    let y = vm(ns, "vm-ssa", &[("kubevirt.io/created-by", "other")], "");
    let err = fails(&e.kubectl_in(
        &["apply", "--server-side", "--field-manager=other", "-f", "-"],
        &y,
    ));
    assert!(
        err.contains("Apply failed with 1 conflict") && err.contains("created-by"),
        "{err}"
    );
    // The same conflict as raw HTTP: a 409 Status for the original resource.
    let body = format!(
        r#"{{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{{"name":"vm-ssa","namespace":"{ns}","labels":{{"kubevirt.io/created-by":"other"}}}}}}"#
    );
    let s = ok(&curl(&[
        "-sS",
        "-w",
        "\n%{http_code}",
        "-X",
        "PATCH",
        "-H",
        "Content-Type: application/apply-patch+yaml",
        "--data-binary",
        &body,
        &e.p.url(&format!(
            "/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachines/vm-ssa?fieldManager=other"
        )),
    ]));
    let (st, code) = s.rsplit_once('\n').expect("code");
    let st = parse_json(st);
    assert_eq!(code, "409", "{st}");
    assert_eq!(st["reason"], "Conflict", "{st}");
    let field = st["details"]["causes"][0]["field"].as_str().unwrap_or("");
    assert!(!err.contains(INTERNAL), "{err}");
    assert_eq!(field, ".metadata.labels.kubevirt.io/created-by", "{st}");
}
