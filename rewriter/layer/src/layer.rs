//! [`RewriteLayer`]: the rewriting path as a `tower` layer around a client's HTTP service
//! (what the Go project's RoundTripper does for client-go).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use kube_api_rewriter::ProxyMode;
use kube_api_rewriter::Rules;
use tower::{Layer, Service, ServiceExt};

use crate::body::{Body, BoxError};
use crate::ctx::Limits;
use crate::exchange::Exchange;
use crate::metrics::{NoMetrics, Observe};
use crate::shutdown::ShutdownSignal;

/// Wraps a client's service so that requests are renamed and responses restored.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use kube_api_rewriter::rules::Source;
/// use kube_api_rewriter_layer::{Limits, RewriteLayer, Rules};
///
/// let text = std::fs::read_to_string("rules/kubevirt.yaml")?;
/// let rules = Rules::parse(&[Source { name: "rules/kubevirt.yaml", text: &text }])?;
/// let layer = RewriteLayer::new(Arc::new(rules)).with_limits(Limits::default().with_max_request_body(1 << 20));
/// let client = kube::client::ClientBuilder::try_from(kube::Config::infer().await?)?
///     .with_layer(&layer)
///     .build();
/// # let _ = client; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RewriteLayer {
    rules: Arc<Rules>,
    limits: Limits,
    shutdown: ShutdownSignal,
    observe: Arc<dyn Observe>,
}

impl RewriteLayer {
    /// A layer with these rules.
    pub fn new(rules: Arc<Rules>) -> Self {
        Self {
            rules,
            limits: Limits::default(),
            shutdown: ShutdownSignal::never(),
            observe: Arc::new(NoMetrics),
        }
    }

    /// A layer with the built-in KubeVirt rules.
    pub fn kubevirt() -> Self {
        Self::new(Arc::new(Rules::builtin_kubevirt()))
    }

    /// Sets the limits (request body, LIST item and WATCH event, whole response).
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Reports measurements to `observe`.
    #[must_use]
    pub fn with_metrics(mut self, observe: Arc<dyn Observe>) -> Self {
        self.observe = observe;
        self
    }

    /// Ends rewritten watch streams cleanly, at an event boundary, once `shutdown` fires.
    #[must_use]
    pub fn with_shutdown(mut self, shutdown: ShutdownSignal) -> Self {
        self.shutdown = shutdown;
        self
    }
}

impl<S> Layer<S> for RewriteLayer {
    type Service = RewriteService<S>;

    fn layer(&self, inner: S) -> RewriteService<S> {
        RewriteService {
            inner: Arc::new(tokio::sync::Mutex::new(inner)),
            layer: self.clone(),
        }
    }
}

/// The service [`RewriteLayer`] makes.
///
/// A request body is rewritten before the inner service sees the request, so the inner
/// service (which need not be `Clone`, e.g. kube's boxed stack) is made ready under a lock
/// when the request is complete; only `poll_ready` + `call` are serialized, not responses.
///
/// A request that cannot be rewritten never reaches the inner service: it is answered with
/// a Kubernetes `Status` (413, 415 or 400), which kube-rs reports as `kube::Error::Api`.
/// Errors of the inner service are passed on as they are.
#[derive(Debug)]
pub struct RewriteService<S> {
    inner: Arc<tokio::sync::Mutex<S>>,
    layer: RewriteLayer,
}

impl<S> Clone for RewriteService<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            layer: self.layer.clone(),
        }
    }
}

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
        let l = &self.layer;
        let exchange = Exchange::new(
            Arc::clone(&l.rules),
            ProxyMode::Api,
            &req,
            l.limits,
            l.shutdown.clone(),
            Arc::clone(&l.observe),
        );
        Box::pin(async move {
            let req = match exchange.request(req).await {
                Ok(r) => r,
                Err(e) => return Ok(e.into_response()),
            };
            let req = match into_client_body::<ReqB>(req).await {
                Ok(r) => r,
                // A streamed body over the limit is the client's error: 413, as a rewritten one.
                Err(e) if exchange.body_over_limit() => {
                    return Ok(exchange.send_failed(e.to_string()).into_response());
                }
                Err(e) => return Err(e),
            };
            let call = {
                let mut svc = inner.lock().await;
                svc.ready().await.map_err(Into::into)?;
                svc.call(req)
            };
            let resp = call.await.map_err(Into::into)?;
            Ok(exchange.response(resp).await)
        })
    }
}

/// The inner service takes its own body type: a rewritten body is whole, a passed-on one is
/// read whole too (bounded by the limit the exchange applied), as kube-rs bodies are.
async fn into_client_body<ReqB>(req: Request<Body>) -> Result<Request<ReqB>, BoxError>
where
    ReqB: From<Bytes>,
{
    use http_body_util::BodyExt;
    let (parts, body) = req.into_parts();
    let bytes = body.collect().await?.to_bytes();
    Ok(Request::from_parts(parts, ReqB::from(bytes)))
}
