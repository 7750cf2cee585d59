//! The proxy's rewriting as a `tower` layer, for a Rust client (`kube::Client`) that rewrites
//! in-process instead of through a sidecar (the Go project's RoundTripper does this for
//! client-go).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use kube_api_rewriter_proxy::layer::RewriteLayer;
//! let config = kube::Config::infer().await?;
//! let client = kube::client::ClientBuilder::try_from(config)?
//!     .with_layer(&RewriteLayer::kubevirt())
//!     .build();
//! # let _ = client; Ok(()) }
//! ```
//!
//! Requests are renamed (path, query, body), `Accept` asks for JSON where bodies are rewritten,
//! and responses, lists and watches are restored as they stream, exactly as in the proxy. A body
//! the rules cannot rewrite (protobuf for a renamed resource) fails the call with an error.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header;
use http::{Request, Response, Uri};
use http_body_util::BodyExt;
use kube_api_rewriter::Rules;
use kube_api_rewriter::exchange::{ProxyMode, Route};
use tower::{Layer, Service, ServiceExt};

use crate::body::{Body, BoxError};
use crate::http_util::{accepts_gzip, json_accept};
use crate::response::{self, Ctx};
use crate::shutdown::Watch;

/// Wraps a service so that requests are renamed and responses restored.
#[derive(Debug, Clone)]
pub struct RewriteLayer {
    rules: Arc<Rules>,
}

impl RewriteLayer {
    /// A layer with these rules.
    pub fn new(rules: Arc<Rules>) -> Self {
        Self { rules }
    }

    /// A layer with the built-in KubeVirt rules.
    pub fn kubevirt() -> Self {
        Self::new(Arc::new(Rules::builtin_kubevirt()))
    }
}

impl<S> Layer<S> for RewriteLayer {
    type Service = RewriteService<S>;

    fn layer(&self, inner: S) -> RewriteService<S> {
        RewriteService {
            inner: Arc::new(tokio::sync::Mutex::new(inner)),
            rules: Arc::clone(&self.rules),
        }
    }
}

/// The service [`RewriteLayer`] makes.
///
/// A request body is rewritten before the inner service sees the request, so the inner
/// service (which need not be `Clone`, e.g. kube's boxed stack) is made ready under a lock
/// when the request is complete; only `poll_ready` + `call` are serialized, not responses.
#[derive(Debug)]
pub struct RewriteService<S> {
    inner: Arc<tokio::sync::Mutex<S>>,
    rules: Arc<Rules>,
}

impl<S> Clone for RewriteService<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            rules: Arc::clone(&self.rules),
        }
    }
}

/// A request body that cannot be rewritten.
#[derive(Debug, thiserror::Error)]
#[error("kube-api-rewriter: {0}")]
pub struct RewriteError(String);

impl<S, ReqB, ResB> Service<Request<ReqB>> for RewriteService<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    ReqB: http_body::Body<Data = Bytes> + From<Bytes> + Send + 'static,
    ReqB::Error: Into<BoxError>,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // The inner service is made ready in `call`, once the request body is rewritten.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let inner = Arc::clone(&self.inner);
        let rules = Arc::clone(&self.rules);
        Box::pin(async move {
            let pq = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned();
            let route = Arc::new(Route::new(&rules, ProxyMode::Api, req.method().as_str(), &pq));
            let (mut parts, body) = req.into_parts();
            let body = if route.rewrite && !body.is_end_stream() {
                let bytes = body.collect().await.map_err(Into::into)?.to_bytes();
                let ct = parts
                    .headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let rb = route
                    .request_body(&rules, ct.as_deref(), &bytes)
                    .map_err(|e| RewriteError(e.to_string()))?;
                if let Some(ct) = rb.content_type {
                    parts
                        .headers
                        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(ct));
                }
                let out = match rb.body {
                    std::borrow::Cow::Borrowed(_) => bytes.clone(),
                    std::borrow::Cow::Owned(v) => Bytes::from(v),
                };
                parts
                    .headers
                    .insert(header::CONTENT_LENGTH, header::HeaderValue::from(out.len()));
                ReqB::from(out)
            } else {
                body
            };
            if route.path_rewritten {
                let mut up = parts.uri.clone().into_parts();
                up.path_and_query = Some(
                    route
                        .upstream_path
                        .parse()
                        .map_err(|e: http::uri::InvalidUri| RewriteError(e.to_string()))?,
                );
                parts.uri = Uri::from_parts(up).map_err(|e| RewriteError(e.to_string()))?;
            }
            if route.wants_json() {
                let accept = json_accept(&parts.headers);
                parts.headers.insert(header::ACCEPT, accept);
            }
            let client_gzip = accepts_gzip(&parts.headers);
            let call = {
                let mut svc = inner.lock().await;
                svc.ready().await.map_err(Into::into)?;
                svc.call(Request::from_parts(parts, body))
            };
            let resp = call.await.map_err(Into::into)?;
            let ctx = Ctx {
                rules,
                route,
                client_gzip,
                shutdown: Watch::never(),
                metrics: None,
                name: "layer",
            };
            Ok(response::rewrite(ctx, resp).await)
        })
    }
}
