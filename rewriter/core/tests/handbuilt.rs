//! Hand-built fixtures in `testdata/` (written from the API reference) for shapes the captures
//! lack: admission responses, ValidatingAdmissionPolicy and its binding (the proxy's
//! `current_release` tests also run them on the real server), SelfSubjectRulesReview.

use base64::Engine as _;
use kube_api_rewriter::object::{self, Context, Outcome};
use kube_api_rewriter::{Direction, Rules};
use kube_api_rewriter::{ProxyMode, ResponseBody, Route};
use serde_json::{Value, json};

fn rw(rules: &Rules, dir: Direction, body: &str) -> Value {
    match object::rewrite(rules, dir, body.as_bytes(), &Context::default()).unwrap() {
        Outcome::Object(b) => serde_json::from_slice(&b).unwrap(),
        Outcome::Excluded => panic!("excluded"),
    }
}

#[test]
fn admission_response_patch_is_renamed_op_by_op() {
    let rules = Rules::builtin_kubevirt();
    let route = Route::new(
        &rules,
        ProxyMode::Webhook,
        "POST",
        "/virtualmachines-mutate?timeout=10s",
    );
    let body = include_str!("../testdata/admission-review-response.hand-built.json");
    let ResponseBody::Body(out) = route.response_body(&rules, body.as_bytes()).unwrap() else {
        panic!()
    };
    let v: Value = serde_json::from_slice(&out).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let patch: Value =
        serde_json::from_slice(&b64.decode(v["response"]["patch"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(
        patch[0]["path"],
        "/metadata/labels/kubevirt.internal.virtualization.deckhouse.io~1schedulable"
    );
    assert_eq!(
        patch[1]["value"],
        "kubevirt.internal.virtualization.deckhouse.io/foregroundDeleteVirtualMachine"
    );
    assert_eq!(
        patch[2]["value"],
        json!({"kubevirt.internal.virtualization.deckhouse.io/latest-observed-api-version": "v1"})
    );
    assert_eq!(
        patch[3]["path"], "/spec/template/metadata/labels/kubevirt.io~1domain",
        "spec is not a rule location"
    );
    assert_eq!(v["response"]["allowed"], true);
    assert_eq!(v["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    // A broken base64 patch is an error, not a silent pass.
    let original: Value = serde_json::from_str(body).unwrap();
    let bad = body.replace(original["response"]["patch"].as_str().unwrap(), "!!!");
    assert!(route.response_body(&rules, bad.as_bytes()).is_err());
}

#[test]
fn validating_admission_policies_and_bindings() {
    let rules = Rules::builtin_kubevirt();
    let v = rw(
        &rules,
        Direction::Restore,
        include_str!("../testdata/validating-admission-policy.hand-built.json"),
    );
    let mc = &v["spec"]["matchConstraints"];
    assert_eq!(mc["resourceRules"][0]["apiGroups"], json!(["kubevirt.io"]));
    assert_eq!(
        mc["resourceRules"][0]["resources"],
        json!(["virtualmachines", "virtualmachines/status"])
    );
    assert_eq!(mc["excludeResourceRules"][0]["resources"], json!(["kubevirts"]));
    assert_eq!(
        v["spec"]["validations"][0]["expression"], "object.metadata.name != 'kubevirt.io'",
        "CEL untouched"
    );
    assert_eq!(v["metadata"]["labels"]["kubevirt.io/component"], "x");
    let v = rw(
        &rules,
        Direction::Restore,
        include_str!("../testdata/validating-admission-policy-binding.hand-built.json"),
    );
    let mr = &v["spec"]["matchResources"];
    assert_eq!(mr["resourceRules"][0]["resources"], json!(["virtualmachines"]));
    assert_eq!(
        mr["excludeResourceRules"][0]["resources"],
        json!(["virtualmachineinstances"])
    );
    assert_eq!(
        mr["objectSelector"]["matchExpressions"][0]["key"],
        "kubevirt.io/created-by"
    );
    // And back: what a client sends is renamed to what the server holds.
    let back = rw(&rules, Direction::Rename, &v.to_string());
    assert_eq!(
        back,
        serde_json::from_str::<Value>(include_str!(
            "../testdata/validating-admission-policy-binding.hand-built.json"
        ))
        .unwrap()
    );
}

#[test]
fn self_subject_rules_review_lists_original_names() {
    let rules = Rules::builtin_kubevirt();
    let v = rw(
        &rules,
        Direction::Restore,
        include_str!("../testdata/selfsubjectrulesreview.hand-built.json"),
    );
    let r = &v["status"]["resourceRules"];
    assert_eq!(r[0]["apiGroups"], json!(["kubevirt.io"]));
    assert_eq!(
        r[0]["resources"],
        json!(["virtualmachines", "virtualmachines/status"])
    );
    assert_eq!(
        r[1],
        json!({"verbs":["get"],"apiGroups":[""],"resources":["pods"]})
    );
    assert_eq!(r[2], json!({"verbs":["*"],"apiGroups":["*"],"resources":["*"]}));
}

#[test]
fn admission_request_round_trips() {
    let rules = Rules::builtin_kubevirt();
    let body = include_str!("../testdata/admission-review-request.hand-built.json");
    let restored = rw(&rules, Direction::Restore, body);
    let back = rw(&rules, Direction::Rename, &restored.to_string());
    assert_eq!(back, serde_json::from_str::<Value>(body).unwrap());
}
