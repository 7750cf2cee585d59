//! The layer against `tower-test` mock services, as kube-rs tests its own middleware: what the
//! inner service receives and what the caller gets back, for LIST and WATCH streaming, every
//! patch type, excludes, errors and the body limit. Bodies are real kube-apiserver captures
//! from `testdata/`.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures::SinkExt as _;
use futures::channel::mpsc;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody};
use kube_api_rewriter::rules::Source;
use kube_api_rewriter_layer::{Body, BoxError, Limits, RewriteLayer, Rules, body};
use serde_json::{Value, json};
use tower::{Layer as _, Service as _};
use tower_test::mock;

type Mock = mock::Mock<Request<Full<Bytes>>, Response<Body>>;
type Handle = mock::Handle<Request<Full<Bytes>>, Response<Body>>;

const INTERNAL: &str = "internal.virtualization.deckhouse.io";
const VMS_UP: &str =
    "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines";

fn testdata(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn capture(name: &str) -> Vec<u8> {
    testdata(&format!("kube-apiserver-1.36/{name}"))
}

fn layer_with(layer: RewriteLayer) -> (kube_api_rewriter_layer::RewriteService<Mock>, Handle) {
    let (svc, handle) = mock::pair::<Request<Full<Bytes>>, Response<Body>>();
    (layer.layer(svc), handle)
}

fn json_response(status: u16, body: Vec<u8>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body::full(body))
        .expect("response")
}

/// A response whose body is fed chunk by chunk through the returned sender.
fn streamed_response() -> (
    mpsc::Sender<Result<http_body::Frame<Bytes>, Infallible>>,
    Response<Body>,
) {
    let (tx, rx) = mpsc::channel(16);
    let resp = Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body::boxed(StreamBody::new(rx)))
        .expect("response");
    (tx, resp)
}

async fn read_all(resp: Response<Body>) -> (StatusCode, Value) {
    let status = resp.status();
    let b = resp.into_body().collect().await.expect("body").to_bytes();
    let v = serde_json::from_slice(&b)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&b)));
    (status, v)
}

/// The names a client reads (apiVersion, kind, labels, annotations, finalizers, owners) carry
/// no renamed group, kind or prefix. (Spec and its managedFields are the server's: the
/// captures' template labels keep the renamed prefix, as kube-apiserver stored them.)
fn no_internal_names(v: &Value) {
    let m = &v["metadata"];
    for part in [
        &v["apiVersion"],
        &v["kind"],
        &m["labels"],
        &m["annotations"],
        &m["finalizers"],
        &m["ownerReferences"],
    ] {
        let s = part.to_string();
        assert!(
            !s.contains(INTERNAL) && !s.contains("InternalVirtualization"),
            "renamed names reached the caller: {s}"
        );
    }
}

/// The next frame, within a deadline (a hang fails the test instead of stalling it).
async fn next_frame(body: &mut Body) -> Option<Bytes> {
    let f = tokio::time::timeout(std::time::Duration::from_secs(10), body.frame())
        .await
        .expect("a frame within 10 s")?;
    Some(f.expect("data").into_data().expect("a data frame"))
}

/// Calls the layer on a task; the inner service's side is driven by the test.
fn call(
    svc: &mut kube_api_rewriter_layer::RewriteService<Mock>,
    req: Request<Full<Bytes>>,
) -> tokio::task::JoinHandle<Result<Response<Body>, BoxError>> {
    tokio::spawn(svc.call(req))
}

fn get(uri: &str) -> Request<Full<Bytes>> {
    Request::get(uri).body(Full::default()).expect("request")
}

fn with_body(method: Method, uri: &str, content_type: &str, b: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CONTENT_LENGTH, b.len())
        .body(Full::new(Bytes::from(b.to_owned())))
        .expect("request")
}

async fn body_of(req: Request<Full<Bytes>>) -> Bytes {
    req.into_body().collect().await.expect("body").to_bytes()
}

#[tokio::test]
async fn a_list_streams_restored_before_upstream_ends() {
    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let pending = call(
        &mut svc,
        get("/apis/kubevirt.io/v1/namespaces/demo/virtualmachines?limit=500"),
    );
    let (req, send) = handle
        .next_request()
        .await
        .expect("request reaches the inner service");
    assert_eq!(req.uri().path(), VMS_UP);
    assert_eq!(req.uri().query(), Some("limit=500"));
    assert_eq!(req.headers()[header::ACCEPT], "application/json");

    // The 300-VM capture, cut before item 100: the first items reach the caller before the
    // rest of the list exists (output leaves in pieces of about 64 KiB).
    let list = capture("vm-list-bulk-plain.json");
    let v: Value = serde_json::from_slice(&list).expect("capture");
    let first_name = v["items"][0]["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    let second = item_offset(&list, 100);
    let (mut tx, resp) = streamed_response();
    send.send_response(resp);
    tx.send(Ok(http_body::Frame::data(Bytes::copy_from_slice(
        &list[..second],
    ))))
    .await
    .expect("send");
    // The head is answered once the layer has seen that the body is a list.
    let resp = pending.await.expect("task").expect("response");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains(&first_name) {
        let f = next_frame(&mut body).await.expect("a frame before the list ends");
        got.extend_from_slice(&f);
    }
    let head = String::from_utf8_lossy(&got);
    assert!(
        head.contains(r#""kind":"VirtualMachine""#) && !head.contains("InternalVirtualization"),
        "{head}"
    );

    tx.send(Ok(http_body::Frame::data(Bytes::copy_from_slice(
        &list[second..],
    ))))
    .await
    .expect("send");
    drop(tx);
    got.extend_from_slice(&body.collect().await.expect("rest").to_bytes());
    let out: Value = serde_json::from_slice(&got).expect("a whole JSON list");
    no_internal_names(&out);
    assert_eq!(out["kind"], "VirtualMachineList");
    assert_eq!(out["apiVersion"], "kubevirt.io/v1");
    assert_eq!(
        out["items"].as_array().map(Vec::len),
        v["items"].as_array().map(Vec::len)
    );
    assert_eq!(out["items"][0]["kind"], "VirtualMachine");
}

/// Where item `i` of a LIST body starts.
fn item_offset(list: &[u8], i: usize) -> usize {
    #[derive(serde::Deserialize)]
    struct Items<'a> {
        #[serde(borrow)]
        items: Vec<&'a serde_json::value::RawValue>,
    }
    let parsed: Items<'_> = serde_json::from_slice(list).expect("list");
    parsed.items[i].get().as_ptr() as usize - list.as_ptr() as usize
}

#[tokio::test]
async fn watch_events_leave_one_by_one_as_they_arrive() {
    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let pending = call(
        &mut svc,
        get(
            "/apis/kubevirt.io/v1/namespaces/demo/virtualmachines?watch=true&labelSelector=kubevirt.io%2Fcreated-by%3Dx",
        ),
    );
    let (req, send) = handle.next_request().await.expect("request");
    assert_eq!(req.uri().path(), VMS_UP);
    let q = req.uri().query().expect("query");
    assert!(
        q.contains("labelSelector=kubevirt.internal.virtualization.deckhouse.io%2Fcreated-by%3Dx"),
        "selector renamed: {q}"
    );
    let (mut tx, resp) = streamed_response();
    send.send_response(resp);
    let mut body = pending.await.expect("task").expect("response").into_body();

    let events = capture("watch-vm-events.json");
    let lines: Vec<&[u8]> = events.split_inclusive(|&b| b == b'\n').collect();
    assert!(lines.len() >= 5, "capture has events");
    for line in lines {
        let upstream: Value = serde_json::from_slice(line).expect("event");
        tx.send(Ok(http_body::Frame::data(Bytes::copy_from_slice(line))))
            .await
            .expect("send");
        // The restored event arrives before the next one is sent.
        let f = next_frame(&mut body).await.expect("event frame");
        let ev: Value = serde_json::from_slice(&f).expect("one whole event");
        assert_eq!(ev["type"], upstream["type"]);
        no_internal_names(&ev["object"]);
        if ev["type"] != "BOOKMARK" {
            assert_eq!(ev["object"]["kind"], "VirtualMachine");
        }
    }
    drop(tx);
    assert!(
        next_frame(&mut body).await.is_none(),
        "the watch ends when upstream ends"
    );
}

/// Upstream's watch body as hyper's client hands it over: one frame held at a time, the next
/// one given by the connection's own task when it next runs (`tokio::sync::mpsc` of depth 1
/// fed by a task). Events that have already arrived leave the layer as one body frame; a lone
/// event later leaves by itself, without waiting for more.
#[tokio::test]
async fn watch_events_at_hand_leave_together_and_a_lone_one_without_waiting() {
    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let pending = call(
        &mut svc,
        get("/apis/kubevirt.io/v1/namespaces/demo/virtualmachines?watch=true"),
    );
    let (_req, send) = handle.next_request().await.expect("request");
    let events = capture("watch-vm-events.json");
    let lines: Vec<Bytes> = events
        .split_inclusive(|&b| b == b'\n')
        .map(Bytes::copy_from_slice)
        .collect();
    assert!(lines.len() >= 5, "capture has events");
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<http_body::Frame<Bytes>, Infallible>>(1);
    let (lone_tx, lone_rx) = tokio::sync::oneshot::channel::<()>();
    let (end_tx, end_rx) = tokio::sync::oneshot::channel::<()>();
    let burst = lines.clone();
    let lone = lines[0].clone();
    tokio::spawn(async move {
        for l in burst {
            tx.send(Ok(http_body::Frame::data(l))).await.expect("send");
        }
        lone_rx.await.expect("lone signal");
        tx.send(Ok(http_body::Frame::data(lone))).await.expect("send");
        let _ = end_rx.await;
    });
    let resp = Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body::boxed(StreamBody::new(futures::stream::poll_fn(
            move |cx| rx.poll_recv(cx),
        ))))
        .expect("response");
    send.send_response(resp);
    let mut body = pending.await.expect("task").expect("response").into_body();

    let f = next_frame(&mut body).await.expect("the burst");
    let got: Vec<&[u8]> = f.split_inclusive(|&b| b == b'\n').collect();
    assert_eq!(got.len(), lines.len(), "every event at hand in one body frame");
    for ev in got {
        let ev: Value = serde_json::from_slice(ev).expect("a whole event");
        no_internal_names(&ev["object"]);
    }
    lone_tx.send(()).expect("producer waits");
    // The watch stays open (upstream sends no more): the lone event is not held for company.
    let f = next_frame(&mut body).await.expect("the lone event");
    let ev: Value = serde_json::from_slice(&f).expect("exactly one whole event");
    no_internal_names(&ev["object"]);
    end_tx.send(()).expect("producer waits");
    assert!(
        next_frame(&mut body).await.is_none(),
        "the watch ends when upstream ends"
    );
}

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

/// `/openapi/v3` on documents built for the test (the captured ones: the core's `tests/openapi.rs`):
/// the group document is asked for under the renamed group with the client's query, both documents
/// come back restored with the rules version in their ETag, a 304 keeps it, and a 404 passes as is.
#[tokio::test]
async fn openapi_v3_index_and_group_documents() {
    let rules = Rules::builtin_kubevirt();
    let version = format!("{:016x}", rules.version());
    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let doc_response = |status: u16, etag: &str, body: Value| {
        Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ETAG, etag)
            .body(body::full(body.to_string()))
            .expect("response")
    };

    // The index.
    let pending = call(&mut svc, get("/openapi/v3"));
    let (req, send) = handle.next_request().await.expect("request");
    assert_eq!(req.uri().path(), "/openapi/v3");
    let up_url = format!("/openapi/v3/apis/{INTERNAL}/v1?hash=ABC");
    send.send_response(doc_response(
        200,
        "\"I1\"",
        json!({"paths": {
            "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=P"},
            format!("apis/{INTERNAL}/v1"): {"serverRelativeURL": up_url},
        }}),
    ));
    let resp = pending.await.expect("task").expect("response");
    assert_eq!(
        resp.headers()[header::ETAG],
        format!("\"I1-r{version}\"").as_str()
    );
    let (status, index) = read_all(resp).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        index,
        json!({"paths": {
            "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=P"},
            "apis/kubevirt.io/v1": {"serverRelativeURL": "/openapi/v3/apis/kubevirt.io/v1?hash=ABC"},
        }})
    );

    // The group document, by the URL the index gave.
    let kind = "InternalVirtualizationVirtualMachine";
    let schema = format!("io.deckhouse.virtualization.internal.v1.{kind}");
    let pending = call(&mut svc, get("/openapi/v3/apis/kubevirt.io/v1?hash=ABC"));
    let (req, send) = handle.next_request().await.expect("request");
    assert_eq!(req.uri().to_string(), up_url);
    send.send_response(doc_response(
        200,
        "\"G1\"",
        json!({
            "openapi": "3.0.0",
            "paths": {format!("/apis/{INTERNAL}/v1/namespaces/{{namespace}}/internalvirtualizationvirtualmachines/{{name}}"): {
                "get": {
                    "responses": {"200": {"content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}}},
                    "x-kubernetes-group-version-kind": {"group": INTERNAL, "version": "v1", "kind": kind},
                }
            }},
            "components": {"schemas": {
                schema.clone(): {
                    "type": "object",
                    "properties": {"metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]}},
                    "x-kubernetes-group-version-kind": [{"group": INTERNAL, "version": "v1", "kind": kind}],
                },
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object"},
            }},
        }),
    ));
    let (status, doc) = read_all(pending.await.expect("task").expect("response")).await;
    assert_eq!(status, StatusCode::OK);
    let path = &doc["paths"]["/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}"]["get"];
    assert_eq!(
        path["x-kubernetes-group-version-kind"],
        json!({"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachine"})
    );
    assert_eq!(
        path["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/io.kubevirt.v1.VirtualMachine"
    );
    let vm = &doc["components"]["schemas"]["io.kubevirt.v1.VirtualMachine"];
    assert_eq!(vm["x-kubernetes-group-version-kind"][0]["group"], "kubevirt.io");
    assert!(!doc.to_string().contains(INTERNAL) && !doc.to_string().contains("InternalVirtualization"));

    // The client's copy under these rules is still good: upstream is asked with its own ETag.
    let mut req = get("/openapi/v3/apis/kubevirt.io/v1?hash=ABC");
    req.headers_mut().insert(
        header::IF_NONE_MATCH,
        format!("\"G1-r{version}\"").parse().expect("header"),
    );
    let pending = call(&mut svc, req);
    let (req, send) = handle.next_request().await.expect("request");
    assert_eq!(req.headers()[header::IF_NONE_MATCH], "\"G1\"");
    send.send_response(doc_response(304, "\"G1\"", Value::Null));
    let resp = pending.await.expect("task").expect("response");
    assert_eq!(resp.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(
        resp.headers()[header::ETAG],
        format!("\"G1-r{version}\"").as_str()
    );

    // A copy made under other rules is not offered upstream.
    let mut req = get("/openapi/v3/apis/kubevirt.io/v1?hash=ABC");
    req.headers_mut().insert(
        header::IF_NONE_MATCH,
        "\"G1-r0000000000000000\"".parse().expect("header"),
    );
    let pending = call(&mut svc, req);
    let (req, send) = handle.next_request().await.expect("request");
    assert!(req.headers().get(header::IF_NONE_MATCH).is_none());
    send.send_response(json_response(404, b"404 page not found".to_vec()));
    // An upstream 404 passes unchanged.
    let resp = pending.await.expect("task").expect("response");
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    let b = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&b[..], b"404 page not found");
}

/// The 300-VM capture with its items repeated `times` over (4 times: 3.4 MB, past the point
/// where a LIST is rewritten on the blocking pool when the machine has cores to spare).
fn large_list(times: usize) -> Vec<u8> {
    #[derive(serde::Deserialize)]
    struct Items<'a> {
        #[serde(borrow)]
        items: Vec<&'a serde_json::value::RawValue>,
    }
    let list = capture("vm-list-bulk-plain.json");
    let parsed: Items<'_> = serde_json::from_slice(&list).expect("list");
    let items: Vec<&str> = (0..times)
        .flat_map(|_| parsed.items.iter().map(|i| i.get()))
        .collect();
    format!(
        r#"{{"apiVersion":"{INTERNAL}/v1","items":[{}],"kind":"InternalVirtualizationVirtualMachineList","metadata":{{"resourceVersion":"1"}}}}"#,
        items.join(",")
    )
    .into_bytes()
}

/// Starts a LIST of VMs through the layer; returns the call (answered once the body shows a
/// list) and the sender that feeds the body from upstream.
async fn list_through_layer(
    svc: &mut kube_api_rewriter_layer::RewriteService<Mock>,
    handle: &mut Handle,
) -> (
    tokio::task::JoinHandle<Result<Response<Body>, BoxError>>,
    mpsc::Sender<Result<http_body::Frame<Bytes>, BoxError>>,
) {
    list_through_layer_as(svc, handle, false).await
}

/// [`list_through_layer`]; with `gzip`, the client accepts gzip and upstream sends it.
async fn list_through_layer_as(
    svc: &mut kube_api_rewriter_layer::RewriteService<Mock>,
    handle: &mut Handle,
    gzip: bool,
) -> (
    tokio::task::JoinHandle<Result<Response<Body>, BoxError>>,
    mpsc::Sender<Result<http_body::Frame<Bytes>, BoxError>>,
) {
    let mut req = get("/apis/kubevirt.io/v1/namespaces/demo/virtualmachines");
    if gzip {
        req.headers_mut()
            .insert(header::ACCEPT_ENCODING, http::HeaderValue::from_static("gzip"));
    }
    let pending = call(svc, req);
    let (_, send) = handle.next_request().await.expect("request");
    let (tx, rx) = mpsc::channel(16);
    let mut resp = Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json");
    if gzip {
        resp = resp.header(header::CONTENT_ENCODING, "gzip");
    }
    send.send_response(resp.body(body::boxed(StreamBody::new(rx))).expect("response"));
    (pending, tx)
}

/// `list` restored whole by the core, as the layer's output must be.
fn core_restore(list: &[u8]) -> Vec<u8> {
    let rules = Rules::builtin_kubevirt();
    let mut out = Vec::new();
    let mut lr = kube_api_rewriter::ListRewriter::new(
        &rules,
        kube_api_rewriter::Direction::Restore,
        kube_api_rewriter::Context::default(),
    );
    lr.feed(list, &mut out).expect("core");
    lr.finish(&mut out).expect("core");
    out
}

async fn answered(pending: tokio::task::JoinHandle<Result<Response<Body>, BoxError>>) -> Body {
    let resp = pending.await.expect("task").expect("response");
    assert_eq!(resp.status(), 200);
    resp.into_body()
}

// Multi-threaded, as the proxy runs: a large LIST moves to the blocking pool part-way (on a
// machine with more than one core) and must come out exactly as the core rewrites it whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_list_comes_out_as_the_core_rewrites_it_whole() {
    let list = large_list(4);
    let want = core_restore(&list);

    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let (pending, mut tx) = list_through_layer(&mut svc, &mut handle).await;
    let feed = {
        let list = list.clone();
        tokio::spawn(async move {
            // Pieces of uneven sizes, as a socket delivers them.
            let (mut at, mut i) = (0, 0);
            while at < list.len() {
                let n = [7 << 10, 300 << 10, 1, 64 << 10, 433][i % 5].min(list.len() - at);
                let piece = Bytes::copy_from_slice(&list[at..at + n]);
                tx.send(Ok(http_body::Frame::data(piece))).await.expect("send");
                (at, i) = (at + n, i + 1);
            }
        })
    };
    let body = answered(pending).await;
    let got = tokio::time::timeout(std::time::Duration::from_secs(30), body.collect())
        .await
        .expect("the list within 30 s")
        .expect("body")
        .to_bytes();
    feed.await.expect("feeder");
    assert!(got[..] == want[..], "the layer's output differs from the core's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_gzip_list_comes_out_gzipped_as_the_core_rewrites_it_whole() {
    use std::io::{Read as _, Write as _};
    let list = large_list(4);
    let want = core_restore(&list);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&list).expect("gzip");
    let zipped = gz.finish().expect("gzip");

    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let (pending, mut tx) = list_through_layer_as(&mut svc, &mut handle, true).await;
    let feed = tokio::spawn(async move {
        for p in zipped.chunks(16 << 10) {
            let piece = Bytes::copy_from_slice(p);
            tx.send(Ok(http_body::Frame::data(piece))).await.expect("send");
        }
    });
    let resp = pending.await.expect("task").expect("response");
    assert_eq!(resp.headers()[header::CONTENT_ENCODING], "gzip");
    let got = tokio::time::timeout(std::time::Duration::from_secs(30), resp.into_body().collect())
        .await
        .expect("the list within 30 s")
        .expect("body")
        .to_bytes();
    feed.await.expect("feeder");
    let mut plain = Vec::new();
    flate2::read::MultiGzDecoder::new(&got[..])
        .read_to_end(&mut plain)
        .expect("gzip from the layer");
    assert!(plain == want, "the layer's output differs from the core's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_a_large_list_ends_the_upstream_body() {
    // 6.8 MB: far more than the channels in between hold once the client stops reading.
    let list = large_list(8);
    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let (pending, mut tx) = list_through_layer(&mut svc, &mut handle).await;
    let feed = tokio::spawn(async move {
        for p in list.chunks(64 << 10) {
            let piece = Bytes::copy_from_slice(p);
            if tx.send(Ok(http_body::Frame::data(piece))).await.is_err() {
                return true; // Let go.
            }
        }
        false
    });
    let mut body = answered(pending).await;
    let mut read = 0;
    while read < 2 << 20 {
        read += next_frame(&mut body)
            .await
            .expect("output before the list ends")
            .len();
    }
    drop(body);
    let let_go = tokio::time::timeout(std::time::Duration::from_secs(10), feed)
        .await
        .expect("the feeder ends within 10 s")
        .expect("feeder");
    assert!(let_go, "the whole upstream body was read after the client left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_error_in_a_large_list_resets_the_response() {
    let list = large_list(4);
    let (mut svc, mut handle) = layer_with(RewriteLayer::kubevirt());
    let (pending, mut tx) = list_through_layer(&mut svc, &mut handle).await;
    tokio::spawn(async move {
        for p in list[..list.len() * 3 / 4].chunks(64 << 10) {
            let _ = tx
                .send(Ok(http_body::Frame::data(Bytes::copy_from_slice(p))))
                .await;
        }
        let _ = tx.send(Err("connection reset by peer".into())).await;
    });
    let body = answered(pending).await;
    let res = tokio::time::timeout(std::time::Duration::from_secs(30), body.collect())
        .await
        .expect("the end within 30 s");
    let err = res.expect_err("a cut list must not end cleanly");
    assert!(err.to_string().contains("connection reset by peer"), "{err}");
}
