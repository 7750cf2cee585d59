//! The layer against `tower-test` mock services, as kube-rs tests its own middleware: what the
//! inner service receives and what the caller gets back, for LIST and WATCH streaming, every
//! patch type, excludes, errors and the body limit. Bodies are real kube-apiserver captures
//! from `testdata/`. One module per concern: `streams.rs` (LIST and WATCH bodies, the offload
//! to the blocking pool), `requests.rs` (patches, excludes, refusals, limits, pass-through),
//! `openapi.rs`.

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

mod openapi;
mod requests;
mod streams;

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
