//! Patches that carry whole maps, whole objects or whole CRD specs: request PATCH bodies and
//! AdmissionReview response patches are renamed alike.

use base64::Engine;
use kube_api_rewriter::object::{self, Outcome};
use kube_api_rewriter::{Direction, Rules};
use kube_api_rewriter::{ProxyMode, Route};
use serde_json::{Value, json};

const KV: &str = "kubevirt.internal.virtualization.deckhouse.io";
const G: &str = "internal.virtualization.deckhouse.io";
const VM_PATH: &str = "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/vm";
const CRD_PATH: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/virtualmachines.kubevirt.io";

fn rules() -> Rules {
    Rules::builtin_kubevirt()
}

/// A PATCH body as the API proxy sends it upstream.
fn patch(rules: &Rules, path: &str, ct: &str, body: &Value) -> Value {
    let r = Route::new(rules, ProxyMode::Api, "PATCH", path);
    let b = serde_json::to_vec(body).unwrap();
    let out = r.request_body(rules, Some(ct), &b).unwrap();
    serde_json::from_slice(&out.body).unwrap()
}

/// The same JSON Patch as a mutating webhook's AdmissionReview response for a VM, renamed by
/// the webhook proxy on its way back to kube-apiserver.
fn admission(rules: &Rules, ops: &Value) -> Value {
    let b64 = base64::engine::general_purpose::STANDARD;
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u", "kind": {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachine"},
            "resource": {"group": "kubevirt.io", "version": "v1", "resource": "virtualmachines"}},
        "response": {"uid": "u", "allowed": true, "patchType": "JSONPatch",
            "patch": b64.encode(serde_json::to_vec(ops).unwrap())},
    });
    let r = Route::new(rules, ProxyMode::Webhook, "POST", "/virtualmachines-mutate");
    let out = match object::rewrite(
        rules,
        Direction::Rename,
        &serde_json::to_vec(&review).unwrap(),
        r.context(),
    )
    .unwrap()
    {
        Outcome::Object(b) => b.into_owned(),
        Outcome::Excluded => panic!("excluded"),
    };
    let v: Value = serde_json::from_slice(&out).unwrap();
    let p = b64.decode(v["response"]["patch"].as_str().unwrap()).unwrap();
    serde_json::from_slice(&p).unwrap()
}

#[test]
fn whole_label_maps_and_objects_in_json_patches() {
    let rules = rules();
    let labels = json!({
        "kubevirt.io/created-by": "x",                  // a prefix rule
        "app.kubernetes.io/managed-by": "virt-operator", // an exact name=value rule
        "tier": "db",
    });
    let renamed_labels = json!({
        format!("{KV}/created-by"): "x",
        "app.kubernetes.io/managed-by": "virt-operator-internal-virtualization",
        "tier": "db",
    });
    let ops = json!([
        {"op": "replace", "path": "/metadata/labels", "value": labels},
        {"op": "test", "path": "/metadata/annotations", "value": {"kubevirt.io/latest-observed-api-version": "v1"}},
        {"op": "add", "path": "/metadata", "value": {"name": "vm", "labels": labels, "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"]}},
        {"op": "add", "path": "/metadata/ownerReferences/-", "value": {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "o", "uid": "1"}},
    ]);
    let want = json!([
        {"op": "replace", "path": "/metadata/labels", "value": renamed_labels},
        {"op": "test", "path": "/metadata/annotations", "value": {format!("{KV}/latest-observed-api-version"): "v1"}},
        {"op": "add", "path": "/metadata", "value": {"name": "vm", "labels": renamed_labels, "finalizers": [format!("{KV}/virtualMachineControllerFinalize")]}},
        {"op": "add", "path": "/metadata/ownerReferences/-", "value": {"apiVersion": format!("{G}/v1"), "kind": "InternalVirtualizationVirtualMachine", "name": "o", "uid": "1"}},
    ]);
    assert_eq!(patch(&rules, VM_PATH, "application/json-patch+json", &ops), want);
    assert_eq!(admission(&rules, &ops), want);
    // A whole object at the root.
    let whole = json!([{"op": "replace", "path": "", "value": {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "vm", "labels": labels}}}]);
    let want = json!([{"op": "replace", "path": "", "value": {
        "apiVersion": format!("{G}/v1"), "kind": "InternalVirtualizationVirtualMachine", "metadata": {"name": "vm", "labels": renamed_labels}}}]);
    assert_eq!(
        patch(&rules, VM_PATH, "application/json-patch+json", &whole),
        want
    );
    assert_eq!(admission(&rules, &whole), want);
}

/// The CRD names as the API proxy renames a whole CRD body.
fn renamed_spec(rules: &Rules) -> Value {
    let crd = std::fs::read_to_string(format!(
        "{}/../../testdata/kubevirt-crds/original/virtualmachines.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let json = kube_api_rewriter::patch::yaml_to_json(crd.as_bytes()).unwrap();
    let r = Route::new(rules, ProxyMode::Api, "PUT", CRD_PATH);
    let out = r.request_body(rules, Some("application/json"), &json).unwrap();
    let v: Value = serde_json::from_slice(&out.body).unwrap();
    v["spec"].clone()
}

#[test]
fn crd_patches_of_spec_names_and_group() {
    let rules = rules();
    let spec = renamed_spec(&rules);
    assert_eq!(spec["group"], G);
    assert_eq!(spec["names"]["kind"], "InternalVirtualizationVirtualMachine");
    let original_names = json!({"kind": "VirtualMachine", "listKind": "VirtualMachineList", "plural": "virtualmachines",
        "singular": "virtualmachine", "shortNames": ["vm", "vms"], "categories": ["all"]});
    let original_spec = json!({"group": "kubevirt.io", "names": original_names, "scope": "Namespaced"});
    let ct = "application/json-patch+json";
    let ops = json!([
        {"op": "replace", "path": "/spec", "value": original_spec},
        {"op": "replace", "path": "/spec/names", "value": original_names},
        {"op": "replace", "path": "/spec/group", "value": "kubevirt.io"},
    ]);
    let out = patch(&rules, CRD_PATH, ct, &ops);
    assert_eq!(out[0]["value"]["group"], G, "{out}");
    assert_eq!(out[0]["value"]["names"], spec["names"], "{out}");
    assert_eq!(out[0]["value"]["scope"], "Namespaced");
    assert_eq!(out[1]["value"], spec["names"], "{out}");
    assert_eq!(out[2]["value"], G, "{out}");
    for ct in [
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
    ] {
        let out = patch(&rules, CRD_PATH, ct, &json!({"spec": original_spec}));
        assert_eq!(out["spec"]["group"], G, "{ct}: {out}");
        assert_eq!(out["spec"]["names"], spec["names"], "{ct}: {out}");
    }
    // A CRD the rules do not name is left alone.
    let other = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/foos.example.com";
    let o = json!([{"op": "replace", "path": "/spec/group", "value": "example.com"}]);
    assert_eq!(patch(&rules, other, ct, &o), o);
}
