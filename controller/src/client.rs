//! The controller's `kube::Client`, and [`RequestContextLayer`], its outermost layer: an error
//! names the request it answers.
//!
//! kube-apiserver answers a path it does not serve (a CRD not installed) with a plain
//! `404 page not found`, and kube-rs turns that into a `Status` that names nothing, so a
//! controller's log said "404 page not found" and not which of its many lists failed. Errors
//! from the transport (a refused connection) name nothing either. This layer keeps the answers
//! kube-apiserver gives as a `Status` (they name what they concern, and callers match some by
//! their message), turns the others, and a 404 `Status` that names nothing, into a `Status`
//! whose message names the verb, the resource with its group and version, and the namespace and
//! name, and wraps transport errors the same way. How kube-rs classifies an
//! answer does not change: the `Status` keeps the code and carries no reason.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt as _, Either, Full, Limited};
use serde_json::json;
use tower::{Layer, Service};

use crate::{Result, RewriterMode};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The largest error body read to rewrite it; a larger one is passed on as it is.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// The controller's client for `config`: plain for [`RewriterMode::Sidecar`], with
/// [`kube_api_rewriter_layer::RewriteLayer::kubevirt`] around its HTTP service for
/// [`RewriterMode::Embedded`]; [`RequestContextLayer`] outermost in both. Call inside a tokio
/// runtime.
pub fn client(config: kube::Config, mode: RewriterMode) -> Result<kube::Client> {
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(match mode {
        RewriterMode::Sidecar => builder.with_layer(&RequestContextLayer).build(),
        RewriterMode::Embedded => builder
            .with_layer(&kube_api_rewriter_layer::RewriteLayer::kubevirt())
            .with_layer(&RequestContextLayer)
            .build(),
    })
}

/// What a request is about, as a log reads it: `list volumesnapshots.snapshot.storage.k8s.io/v1
/// in all namespaces`, `get virtualdisks.virtualization.deckhouse.io/v1alpha2 ns/root`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target(String);

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Target {
    /// The target of a request with `method` to `uri`.
    pub fn of(method: &Method, uri: &Uri) -> Target {
        let path = uri.path();
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, rest) = match segs.as_slice() {
            ["api", version, rest @ ..] => ((String::new(), *version), rest),
            ["apis", group, version, rest @ ..] => (((*group).to_owned(), *version), rest),
            _ => return Target(format!("{method} {path}")),
        };
        let (ns, rest) = match rest {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(*ns), rest),
            _ => (None, rest),
        };
        let (resource, name, sub) = match rest {
            [] => {
                let gv = if group.0.is_empty() {
                    group.1.to_owned()
                } else {
                    format!("{}/{}", group.0, group.1)
                };
                return Target(format!("discovery of {gv}"));
            }
            [resource] => (*resource, None, None),
            [resource, name] => (*resource, Some(*name), None),
            [resource, name, sub @ ..] => (*resource, Some(*name), Some(sub.join("/"))),
        };
        let watch = uri
            .query()
            .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
        let verb = match (method, name) {
            (&Method::GET, _) if watch => "watch",
            (&Method::GET, Some(_)) => "get",
            (&Method::GET, None) => "list",
            (&Method::POST, _) => "create",
            (&Method::PUT, _) => "update",
            (&Method::PATCH, _) => "patch",
            (&Method::DELETE, Some(_)) => "delete",
            (&Method::DELETE, None) => "deletecollection",
            (m, _) => m.as_str(),
        };
        let what = if group.0.is_empty() {
            format!("{resource}/{}", group.1)
        } else {
            format!("{resource}.{}/{}", group.0, group.1)
        };
        let mut s = format!("{verb} {what}");
        match (ns, name) {
            (Some(ns), Some(name)) => s.push_str(&format!(" {ns}/{name}")),
            (None, Some(name)) => s.push_str(&format!(" {name}")),
            (Some(ns), None) => s.push_str(&format!(" in namespace {ns}")),
            (None, None) => s.push_str(" in all namespaces"),
        }
        if let Some(sub) = sub {
            s.push_str(&format!(" ({sub})"));
        }
        Target(s)
    }
}

/// A request that failed before an answer came: what it was, and why.
#[derive(Debug, thiserror::Error)]
#[error("{target}: {source}")]
pub struct RequestFailed {
    /// What the request was about.
    pub target: Target,
    /// Why it failed.
    #[source]
    pub source: BoxError,
}

/// Names the request in every error answer and transport error (see the module's doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestContextLayer;

impl<S> Layer<S> for RequestContextLayer {
    type Service = RequestContext<S>;

    fn layer(&self, inner: S) -> RequestContext<S> {
        RequestContext { inner }
    }
}

/// The service of [`RequestContextLayer`].
#[derive(Debug, Clone)]
pub struct RequestContext<S> {
    inner: S,
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for RequestContext<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<Either<ResB, Full<Bytes>>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let target = Target::of(req.method(), req.uri());
        let answer = self.inner.call(req);
        Box::pin(async move {
            let resp = match answer.await {
                Ok(resp) => resp,
                Err(e) => {
                    return Err(Box::new(RequestFailed {
                        target,
                        source: e.into(),
                    }) as BoxError);
                }
            };
            let status = resp.status();
            if !(status.is_client_error() || status.is_server_error()) {
                return Ok(resp.map(Either::Left));
            }
            let (mut parts, body) = resp.into_parts();
            let bytes = match Limited::new(body, MAX_ERROR_BODY).collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => return Err(Box::new(RequestFailed { target, source: e }) as BoxError),
            };
            let named = named_status(&target, status, &bytes);
            if named.is_some() {
                parts.headers.remove(http::header::CONTENT_LENGTH);
                parts.headers.remove(http::header::CONTENT_ENCODING);
                parts.headers.insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
            }
            Ok(Response::from_parts(
                parts,
                Either::Right(Full::new(named.unwrap_or(bytes))),
            ))
        })
    }
}

/// The `Status` that replaces an error answer `body` of `status` to a request about `target`:
/// `None` when the body is a `Status` that names what it concerns.
fn named_status(target: &Target, status: StatusCode, body: &[u8]) -> Option<Bytes> {
    if let Ok(mut s) = serde_json::from_slice::<serde_json::Value>(body)
        && s["kind"] == "Status"
    {
        // kube-apiserver's 404 for a resource its group does not have names nothing ("the
        // server could not find the requested resource"). Other answers are passed on as they
        // are: callers match some by their message (a JSON patch that no longer applies is a
        // 422 whose message is all it says).
        let names = s["details"]["kind"].is_string() || s["details"]["name"].is_string();
        if names || status != StatusCode::NOT_FOUND {
            return None;
        }
        let message = s["message"].as_str().unwrap_or_default().to_owned();
        s["message"] = json!(format!("{target}: {message}"));
        return serde_json::to_vec(&s).ok().map(Bytes::from);
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let text = if text.is_empty() {
        format!(
            "{} {}",
            status.as_u16(),
            status.canonical_reason().unwrap_or("error")
        )
    } else {
        text.to_owned()
    };
    let s = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("{target}: {text}"),
        // No reason: kube-rs then classifies by the code, as it did the bare answer.
        "reason": "",
        "code": status.as_u16(),
    });
    serde_json::to_vec(&s).ok().map(Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_test::mock;

    fn target(method: Method, uri: &str) -> String {
        Target::of(&method, &uri.parse().expect("uri")).0
    }

    #[test]
    fn a_target_names_verb_resource_group_namespace_and_name() {
        let cases = [
            (
                Method::GET,
                "/apis/snapshot.storage.k8s.io/v1/volumesnapshots?limit=500",
                "list volumesnapshots.snapshot.storage.k8s.io/v1 in all namespaces",
            ),
            (
                Method::GET,
                "/apis/snapshot.storage.k8s.io/v1/namespaces/ns/volumesnapshots/snap",
                "get volumesnapshots.snapshot.storage.k8s.io/v1 ns/snap",
            ),
            (
                Method::GET,
                "/apis/kubevirt.io/v1/virtualmachineinstances?labelSelector=a&watch=true",
                "watch virtualmachineinstances.kubevirt.io/v1 in all namespaces",
            ),
            (
                Method::PATCH,
                "/apis/virtualization.deckhouse.io/v1alpha2/namespaces/ns/virtualmachines/vm/status",
                "patch virtualmachines.virtualization.deckhouse.io/v1alpha2 ns/vm (status)",
            ),
            (
                Method::POST,
                "/api/v1/namespaces/ns/pods",
                "create pods/v1 in namespace ns",
            ),
            (Method::GET, "/api/v1/namespaces/ns", "get namespaces/v1 ns"),
            (
                Method::DELETE,
                "/apis/virtualization.deckhouse.io/v1alpha2/virtualmachineclasses/generic",
                "delete virtualmachineclasses.virtualization.deckhouse.io/v1alpha2 generic",
            ),
            (
                Method::GET,
                "/apis/snapshot.storage.k8s.io/v1",
                "discovery of snapshot.storage.k8s.io/v1",
            ),
            (Method::GET, "/version", "GET /version"),
        ];
        for (m, uri, want) in cases {
            assert_eq!(target(m, uri), want, "{uri}");
        }
    }

    proptest::proptest! {
        /// Any path and query a client can send names a target, without a panic.
        #[test]
        fn any_request_names_a_target(
            segs in proptest::collection::vec("[a-z0-9.-]{0,12}", 0..8),
            lead in proptest::sample::select(vec!["", "api", "apis"]),
            query in "[a-z=&1]{0,16}",
            method in proptest::sample::select(vec![Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE, Method::OPTIONS]),
        ) {
            let mut path = String::from("/");
            path.push_str(lead);
            for s in &segs {
                path.push('/');
                path.push_str(s);
            }
            let uri: Uri = format!("{path}?{query}").parse().expect("a valid URI");
            let t = Target::of(&method, &uri);
            proptest::prop_assert!(!t.0.is_empty());
        }
    }

    /// Sends `req` through the layer to a mock that answers `answer`; kube-rs's view of it.
    async fn through(uri: &str, answer: Response<Full<Bytes>>) -> kube::Error {
        exchange(uri, |r| r.send_response(answer))
            .await
            .expect_err("an error")
    }

    /// Sends a GET of `uri` through the layer to a mock that `reply` answers; the body kube-rs
    /// reads, or its error.
    async fn exchange(
        uri: &str,
        reply: impl FnOnce(mock::SendResponse<Response<Full<Bytes>>>),
    ) -> Result<String, kube::Error> {
        let (svc, mut handle) = mock::pair::<Request<kube::client::Body>, Response<Full<Bytes>>>();
        let client = kube::Client::new(RequestContextLayer.layer(svc), "default");
        let req = Request::get(uri).body(Vec::new()).expect("request");
        let sent = tokio::spawn(async move { client.request_text(req).await });
        let (_, respond) = handle.next_request().await.expect("a request");
        reply(respond);
        sent.await.expect("joined")
    }

    #[tokio::test]
    async fn a_bare_404_names_what_was_asked_for_and_keeps_its_code() {
        let answer = Response::builder()
            .status(404)
            .header("content-type", "text/plain; charset=utf-8")
            .body(Full::new(Bytes::from_static(b"404 page not found\n")))
            .expect("response");
        let err = through(
            "/apis/snapshot.storage.k8s.io/v1/namespaces/ns/volumesnapshots/snap",
            answer,
        )
        .await;
        let kube::Error::Api(s) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(
            s.message,
            "get volumesnapshots.snapshot.storage.k8s.io/v1 ns/snap: 404 page not found"
        );
        // As kube-rs read the bare answer: not a `NotFound` of an object, since nothing says so.
        assert!(!s.is_not_found(), "{s:?}");
        assert_eq!(s.code, 404);
    }

    #[tokio::test]
    async fn a_status_that_names_its_object_is_passed_on_and_one_that_does_not_is_named() {
        let conflict = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "Operation cannot be fulfilled on virtualmachines.virtualization.deckhouse.io \"vm\": the object has been modified",
            "reason": "Conflict", "details": {"name": "vm", "group": "virtualization.deckhouse.io", "kind": "virtualmachines"}, "code": 409});
        let answer = Response::builder()
            .status(409)
            .body(Full::new(Bytes::from(conflict.to_string())))
            .expect("response");
        let err = through(
            "/apis/virtualization.deckhouse.io/v1alpha2/namespaces/ns/virtualmachines/vm",
            answer,
        )
        .await;
        let kube::Error::Api(s) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(s.message, conflict["message"]);
        assert!(s.is_conflict());

        let unnamed = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "the server could not find the requested resource", "reason": "NotFound",
            "details": {}, "code": 404});
        let answer = Response::builder()
            .status(404)
            .body(Full::new(Bytes::from(unnamed.to_string())))
            .expect("response");
        let err = through("/apis/virtualization.deckhouse.io/v1alpha2/virtualdisks", answer).await;
        let kube::Error::Api(s) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(
            s.message,
            "list virtualdisks.virtualization.deckhouse.io/v1alpha2 in all namespaces: the server could not find the requested resource"
        );
        assert!(s.is_not_found());
    }

    #[tokio::test]
    async fn an_unnamed_status_other_than_404_is_passed_on_as_it_is() {
        let invalid = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "the server rejected our request due to an error in our request",
            "reason": "Invalid", "code": 422});
        let answer = Response::builder()
            .status(422)
            .body(Full::new(Bytes::from(invalid.to_string())))
            .expect("response");
        let err = through(
            "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/vm/status",
            answer,
        )
        .await;
        let kube::Error::Api(s) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(s.message, invalid["message"]);
        assert!(crate::reconcile::is_patch_conflict(&crate::Error::Kube(err)));
    }

    #[tokio::test]
    async fn a_transport_error_names_the_request() {
        let err = exchange("/apis/kubevirt.io/v1/virtualmachines", |r| {
            r.send_error(std::io::Error::other("connection refused"))
        })
        .await
        .expect_err("an error");
        assert!(
            err.to_string()
                .contains("list virtualmachines.kubevirt.io/v1 in all namespaces: connection refused"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_success_passes_untouched() {
        let body = exchange("/api/v1/namespaces/ns", |r| {
            r.send_response(Response::new(Full::new(Bytes::from_static(
                b"{\"kind\":\"Namespace\"}",
            ))))
        })
        .await;
        assert_eq!(body.expect("ok"), "{\"kind\":\"Namespace\"}");
    }
}
