//! Answers of KubeVirt's own virt-api (v1.6.0), captured in `testdata/virt-api-1.6/`, through the
//! webhook proxy's rewrite.

use base64::Engine as _;
use kube_api_rewriter::Rules;
use kube_api_rewriter::{BodyMode, ProxyMode, ResponseBody, Route};
use serde_json::{Value, json};

const KV: &str = "kubevirt.internal.virtualization.deckhouse.io";

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/../../testdata/virt-api-1.6/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// virt-api's VM mutator answers with `replace /spec` and `replace /metadata` (the whole object
/// meta, as virt-api saw it: original names), `patch` before `patchType`, no `request`, and
/// `Content-Type: text/plain; charset=utf-8` (net/http's sniffing: virt-api sets none).
#[test]
fn vm_mutator_metadata_is_renamed() {
    let rules = Rules::builtin_kubevirt();
    let route = Route::new(
        &rules,
        ProxyMode::Webhook,
        "POST",
        "/virtualmachines-mutate?timeout=10s",
    );
    assert_eq!(
        route.response_mode(200, Some("text/plain; charset=utf-8")),
        BodyMode::Object
    );
    let body = fixture("vm-mutate-response.json");
    let ResponseBody::Body(out) = route.response_body(&rules, &body).unwrap() else {
        panic!("not a body")
    };
    let v: Value = serde_json::from_slice(&out).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let patch: Value =
        serde_json::from_slice(&b64.decode(v["response"]["patch"].as_str().unwrap()).unwrap()).unwrap();
    let meta = &patch[1];
    assert_eq!(meta["path"], "/metadata", "{patch}");
    assert_eq!(
        meta["value"]["annotations"],
        json!({format!("{KV}/latest-observed-api-version"): "v1"}),
        "{patch}"
    );
    assert_eq!(
        meta["value"]["labels"],
        json!({format!("{KV}/vm"): "x"}),
        "{patch}"
    );
    assert_eq!(
        meta["value"]["finalizers"],
        json!([format!("{KV}/virtualMachineControllerFinalize")]),
        "{patch}"
    );
    assert_eq!(patch[0]["path"], "/spec");
    assert_eq!(
        patch[0]["value"]["template"]["spec"]["domain"]["machine"]["type"],
        "q35"
    );
}
