//! Requests through the layer: every patch type renamed, excludes, bodies it refuses, the body
//! limit, pass-through and the inner service's errors.

use super::*;

#[tokio::test]
async fn every_patch_type_is_renamed_before_the_inner_service() {
    let cases = [
        (
            "application/json-patch+json",
            r#"[{"op":"add","path":"/metadata/labels/kubevirt.io~1flag","value":"on"}]"#,
            "kubevirt.internal.virtualization.deckhouse.io~1flag",
        ),
        (
            "application/merge-patch+json",
            r#"{"metadata":{"labels":{"kubevirt.io/flag":"on"}}}"#,
            "kubevirt.internal.virtualization.deckhouse.io/flag",
        ),
        (
            "application/strategic-merge-patch+json",
            r#"{"metadata":{"finalizers":["kubevirt.io/virtualMachineControllerFinalize"]}}"#,
            "kubevirt.internal.virtualization.deckhouse.io/virtualMachineControllerFinalize",
        ),
        (
            "application/apply-patch+yaml",
            "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: vm1\n  labels:\n    kubevirt.io/flag: \"on\"\n",
            "InternalVirtualizationVirtualMachine",
        ),
    ];
    for (ct, patch, want) in cases {
        let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
        let pending = call(
            &mut svc,
            with_body(
                Method::PATCH,
                "/apis/kubevirt.io/v1/namespaces/demo/virtualmachines/vm1",
                ct,
                patch,
            ),
        );
        let (req, send) = handle.next_request().await.expect("request");
        assert_eq!(req.uri().path(), format!("{VMS_UP}/vm1"), "{ct}");
        let declared: usize = req.headers()[header::CONTENT_LENGTH]
            .to_str()
            .expect("ascii")
            .parse()
            .expect("length");
        let up = body_of(req).await;
        assert_eq!(
            declared,
            up.len(),
            "{ct}: Content-Length matches the rewritten body"
        );
        let up = String::from_utf8(up.to_vec()).expect("utf-8");
        assert!(up.contains(want), "{ct}: {up}");
        assert!(!up.contains("kubevirt.io/"), "{ct}: original name left: {up}");
        send.send_response(json_response(200, capture("vm-patch-merge.json")));
        let (status, v) = read_all(pending.await.expect("task").expect("response")).await;
        assert_eq!(status, 200, "{ct}");
        no_internal_names(&v);
    }
}

fn cdi_rules() -> Rules {
    let doc: Value =
        serde_json::from_slice(&testdata("rules/kubevirt-rules-intree-with-cdi.json")).expect("json");
    let text = serde_json::to_string(&doc["rewriteRules_json"]).expect("rules");
    Rules::parse(&[Source {
        name: "kubevirt-rules-intree-with-cdi.json",
        text: &text,
    }])
    .expect("rules load")
}

fn pvc(name: &str, managed_by: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": name, "namespace": "demo", "labels": {"app.kubernetes.io/managed-by": managed_by}},
           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
}

#[tokio::test]
async fn excluded_objects_are_hidden_from_lists_and_single_gets() {
    let layer = RewriteLayer::new(Arc::new(cdi_rules()));
    let (mut svc, mut handle) = layer_with(layer.clone());
    let pending = call(&mut svc, get("/api/v1/namespaces/demo/persistentvolumeclaims"));
    let (_, send) = handle.next_request().await.expect("request");
    let list = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaimList", "metadata": {"resourceVersion": "7"},
                      "items": [pvc("mine", "helm"), pvc("cdi-scratch", "cdi-controller"), pvc("other", "kubectl")]});
    send.send_response(json_response(200, serde_json::to_vec(&list).expect("json")));
    let (status, v) = read_all(pending.await.expect("task").expect("response")).await;
    assert_eq!(status, 200);
    let names: Vec<&str> = v["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["mine", "other"]);

    let (mut svc, mut handle) = layer_with(layer);
    let pending = call(
        &mut svc,
        get("/api/v1/namespaces/demo/persistentvolumeclaims/cdi-scratch"),
    );
    let (_, send) = handle.next_request().await.expect("request");
    send.send_response(json_response(
        200,
        serde_json::to_vec(&pvc("cdi-scratch", "cdi-controller")).expect("json"),
    ));
    let (status, v) = read_all(pending.await.expect("task").expect("response")).await;
    assert_eq!(status, 404);
    assert_eq!(
        (v["kind"].as_str(), v["code"].as_u64()),
        (Some("Status"), Some(404))
    );
}

/// A request the layer answers itself: the inner service never sees it.
async fn refused(layer: RewriteLayer, req: Request<Full<Bytes>>) -> (StatusCode, Value) {
    let (mut svc, mut handle) = layer_with(layer);
    let resp = tokio::time::timeout(std::time::Duration::from_secs(10), svc.call(req))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the layer forwarded it: {:?}",
                futures::FutureExt::now_or_never(handle.next_request())
                    .flatten()
                    .map(|(r, _)| r)
            )
        })
        .expect("answered, not failed");
    assert!(
        futures::poll!(Box::pin(handle.next_request())).is_pending(),
        "nothing reached the inner service"
    );
    let (status, v) = read_all(resp).await;
    assert_eq!(v["kind"], "Status", "{v}");
    assert_eq!(v["code"].as_u64(), Some(u64::from(status.as_u16())), "{v}");
    (status, v)
}

#[tokio::test]
async fn bodies_the_rules_cannot_rewrite_get_a_status() {
    let vms = "/apis/kubevirt.io/v1/namespaces/demo/virtualmachines";
    let (status, v) = refused(
        RewriteLayer::kubevirt(),
        with_body(
            Method::POST,
            vms,
            "application/json",
            r#"{"apiVersion":"kubevirt.io/v1","kind":"#,
        ),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        v["message"]
            .as_str()
            .expect("message")
            .contains("cannot be rewritten"),
        "{v}"
    );

    let proto = with_body(Method::POST, vms, "application/cbor", "\u{a0}");
    let (status, v) = refused(RewriteLayer::kubevirt(), proto).await;
    assert_eq!(status, 415, "{v}");
    assert_eq!(v["reason"], "UnsupportedMediaType");

    let mut gz = with_body(Method::POST, vms, "application/json", "\x1f\u{8b}");
    gz.headers_mut()
        .insert(header::CONTENT_ENCODING, http::HeaderValue::from_static("gzip"));
    let (status, _) = refused(RewriteLayer::kubevirt(), gz).await;
    assert_eq!(status, 415);
}

#[tokio::test]
async fn the_body_limit_holds_declared_or_not() {
    let small = RewriteLayer::kubevirt().with_limits(Limits::default().with_max_request_body(64));
    let vm = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                    "metadata": {"name": "big", "annotations": {"a": "x".repeat(200)}}})
    .to_string();
    let vms = "/apis/kubevirt.io/v1/namespaces/demo/virtualmachines";
    let (status, v) = refused(
        small.clone(),
        with_body(Method::POST, vms, "application/json", &vm),
    )
    .await;
    assert_eq!(status, 413);
    assert_eq!(v["reason"], "RequestEntityTooLarge");

    // No Content-Length: the limit applies while reading.
    let mut req = with_body(Method::POST, vms, "application/json", &vm);
    req.headers_mut().remove(header::CONTENT_LENGTH);
    let (status, _) = refused(small.clone(), req).await;
    assert_eq!(status, 413);

    // Under the limit, the same layer forwards.
    let (mut svc, mut handle) = layer_with(small);
    let pending = call(
        &mut svc,
        with_body(
            Method::POST,
            vms,
            "application/json",
            r#"{"kind":"VirtualMachine"}"#,
        ),
    );
    let (req, send) = handle.next_request().await.expect("forwarded");
    assert_eq!(req.uri().path(), VMS_UP);
    send.send_response(json_response(201, capture("vm-create-201.json")));
    let (status, v) = read_all(pending.await.expect("task").expect("response")).await;
    assert_eq!(status, 201);
    no_internal_names(&v);
}

#[tokio::test]
async fn a_streamed_body_over_the_limit_gets_413_on_pass_through_routes_too() {
    // Leases are not rewritten: the body is streamed on under the limit, not read first.
    let small = RewriteLayer::kubevirt().with_limits(Limits::default().with_max_request_body(64));
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": "l", "annotations": {"a": "x".repeat(200)}}})
    .to_string();
    let mut req = with_body(
        Method::POST,
        "/apis/coordination.k8s.io/v1/namespaces/demo/leases",
        "application/json",
        &lease,
    );
    req.headers_mut().remove(header::CONTENT_LENGTH);
    let (status, v) = refused(small, req).await;
    assert_eq!(status, 413, "{v}");
    assert_eq!(v["reason"], "RequestEntityTooLarge");
}

#[tokio::test]
async fn untouched_resources_pass_through_unchanged() {
    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let lease = "/apis/coordination.k8s.io/v1/namespaces/demo/leases/l?resourceVersion=0";
    let pending = call(&mut svc, get(lease));
    let (req, send) = handle.next_request().await.expect("request");
    assert_eq!(req.uri().to_string(), lease);
    let cm = br#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l","labels":{"kubevirt.io/x":"1"}},"spec":{}}"#;
    send.send_response(json_response(200, cm.to_vec()));
    let resp = pending.await.expect("task").expect("response");
    let b = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&b[..], &cm[..], "byte for byte");
}

#[tokio::test]
async fn inner_service_errors_are_passed_on() {
    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let pending = call(&mut svc, get("/apis/kubevirt.io/v1/virtualmachines"));
    let (_, send) = handle.next_request().await.expect("request");
    send.send_error(std::io::Error::other("connection refused"));
    let err = pending.await.expect("task").expect_err("the inner error");
    assert!(err.to_string().contains("connection refused"), "{err}");
}
