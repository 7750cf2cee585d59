//! One request and its response through the rewriting path: the part the sidecar and the
//! layer share.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, Uri};
use http_body_util::{BodyExt, Limited};
use kube_api_rewriter::Rules;
use kube_api_rewriter::{ProxyMode, Route};

use crate::body::{self, Body, BoxError, Counted};
use crate::ctx::{Ctx, Limits};
use crate::error::Error;
use crate::headers::{accepts_gzip, cbor_only, json_accept};
use crate::metrics::{Decision, Flow, Observe, Side};
use crate::response;
use crate::shutdown::ShutdownSignal;

/// One request on its way up and its response on the way back.
///
/// [`Exchange::request`] renames the path, query and body (or restores them, for the webhook
/// direction) and asks upstream for JSON where bodies are rewritten; [`Exchange::response`]
/// restores the response, streaming lists and watches.
///
/// ```
/// # async fn demo() -> Result<(), kube_api_rewriter_layer::Error> {
/// use std::sync::Arc;
/// use kube_api_rewriter::ProxyMode;
/// use kube_api_rewriter_layer::{Exchange, Limits, NoMetrics, Rules, ShutdownSignal, body};
///
/// let rules = Arc::new(Rules::builtin_kubevirt());
/// let req = http::Request::get("/apis/kubevirt.io/v1/namespaces/ns/virtualmachines")
///     .body(body::empty())
///     .unwrap();
/// let exchange = Exchange::new(rules, ProxyMode::Api, &req, Limits::default(), ShutdownSignal::never(),
///     Arc::new(NoMetrics));
/// let up = exchange.request(req).await?;
/// assert_eq!(
///     up.uri().path(),
///     "/apis/internal.virtualization.deckhouse.io/v1/namespaces/ns/internalvirtualizationvirtualmachines"
/// );
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Exchange {
    rules: Arc<Rules>,
    route: Arc<Route>,
    limits: Limits,
    shutdown: ShutdownSignal,
    observe: Arc<dyn Observe>,
    client_gzip: bool,
    /// The client asked for YAML: upstream is asked for JSON, the response converted.
    yaml: bool,
    /// Set when a streamed (pass-through) request body ran over the limit.
    over_limit: Arc<AtomicBool>,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("route", &self.route)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Exchange {
    /// Routes `req` (its method, path and query) with `rules` in `mode`.
    pub fn new<B>(
        rules: Arc<Rules>,
        mode: ProxyMode,
        req: &Request<B>,
        limits: Limits,
        shutdown: ShutdownSignal,
        observe: Arc<dyn Observe>,
    ) -> Self {
        let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let route = Arc::new(Route::new(&rules, mode, req.method().as_str(), pq));
        let yaml = crate::yaml::wants_yaml(&route, req.headers());
        Self {
            rules,
            route,
            limits,
            shutdown,
            observe,
            // A body converted to YAML is read plain.
            client_gzip: accepts_gzip(req.headers()) && !yaml,
            yaml,
            over_limit: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Ends the response's watch stream (or pass-through watch) cleanly, at an event boundary,
    /// once `shutdown` fires, in place of the signal given to [`Exchange::new`].
    #[must_use]
    pub fn with_shutdown(mut self, shutdown: ShutdownSignal) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// True when the request body, streamed on to upstream, ran over the limit: a failed send
    /// is then the client's doing, answered with [`Error::BodyTooLarge`] (413) rather than as
    /// an unavailable upstream.
    pub fn body_over_limit(&self) -> bool {
        self.over_limit.load(Ordering::Relaxed)
    }

    /// The error for a request upstream could not complete: [`Error::BodyTooLarge`] when the
    /// streamed request body ran over the limit, else [`Error::Unavailable`] with `why`.
    pub fn send_failed(&self, why: impl Into<String>) -> Error {
        if self.body_over_limit() {
            Error::BodyTooLarge {
                limit: self.limits.max_request_body,
            }
        } else {
            Error::Unavailable(why.into())
        }
    }

    /// The core's decisions for this request: names, paths, whether bodies are rewritten.
    pub fn route(&self) -> &Route {
        &self.route
    }

    /// Whether a response with this status and content type is rewritten or passed through.
    pub fn decision(&self, status: u16, content_type: Option<&str>) -> Decision {
        response::decision(&self.route, status, content_type)
    }

    /// The request for upstream: the path and query renamed (scheme and authority kept), the
    /// body rewritten (read whole, up to the limit) or passed on under the limit, `Accept` set
    /// to JSON where bodies are rewritten, `Accept-Encoding` dropped where the client cannot
    /// take gzip back. Headers are otherwise the client's.
    pub async fn request<B>(&self, req: Request<B>) -> Result<Request<Body>, Error>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let route = &self.route;
        let max = self.limits.max_request_body;
        let (mut parts, body) = req.into_parts();
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max as u64) {
            return Err(Error::BodyTooLarge { limit: max });
        }
        let has_body = declared.is_some_and(|n| n > 0) || (declared.is_none() && !body.is_end_stream());
        let decision = if route.rewrite_bodies() {
            Decision::Rewrite
        } else {
            Decision::Pass
        };
        let from_client = self.observe.byte_counter(route, Flow::FromClient, decision);
        let to_target = self.observe.byte_counter(route, Flow::ToTarget, decision);

        let body = if route.rewrite_bodies() && has_body {
            let collected = Limited::new(body, max).collect().await.map_err(|e| {
                if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                    Error::BodyTooLarge { limit: max }
                } else {
                    Error::ReadBody(e)
                }
            })?;
            let collected = collected.to_bytes();
            if let Some(count) = &from_client {
                count(collected.len() as u64);
            }
            if parts
                .headers
                .get(header::CONTENT_ENCODING)
                .is_some_and(|v| v.as_bytes() != b"identity")
            {
                return Err(Error::EncodedBody);
            }
            let ct = parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let t0 = Instant::now();
            let res = route.request_body(&self.rules, ct.as_deref(), &collected);
            self.observe
                .rewritten(route, Side::Client, res.is_ok(), t0.elapsed());
            let rb = res.map_err(|e| match e {
                kube_api_rewriter::Error::UnsupportedMediaType(m) => Error::UnsupportedMediaType {
                    media_type: m,
                    resource: route.resource().to_owned(),
                },
                e => Error::Body(e),
            })?;
            if let Some(ct) = rb.content_type {
                parts
                    .headers
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
            }
            let out = match rb.body {
                std::borrow::Cow::Borrowed(_) => collected,
                std::borrow::Cow::Owned(v) => Bytes::from(v),
            };
            parts
                .headers
                .insert(header::CONTENT_LENGTH, HeaderValue::from(out.len()));
            if let Some(count) = &to_target {
                count(out.len() as u64);
            }
            body::full(out)
        } else if has_body {
            let flag = Arc::clone(&self.over_limit);
            let limited = Limited::new(body, max).map_err(move |e| {
                if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                    flag.store(true, Ordering::Relaxed);
                }
                e
            });
            let counted = Counted::new(body::boxed(limited), from_client);
            body::boxed(Counted::new(counted, to_target))
        } else {
            body::boxed(body)
        };

        if route.path_rewritten() {
            let mut up = parts.uri.clone().into_parts();
            up.path_and_query = Some(
                route
                    .upstream_path()
                    .parse()
                    .map_err(|e: http::uri::InvalidUri| Error::InvalidPath(e.to_string()))?,
            );
            parts.uri = Uri::from_parts(up).map_err(|e| Error::InvalidPath(e.to_string()))?;
        }
        if route.wants_json() {
            if let Some(accept) = cbor_only(&parts.headers) {
                return Err(Error::NotAcceptable {
                    accept,
                    resource: route.resource().to_owned(),
                });
            }
            let mut accept = json_accept(&parts.headers);
            if self.yaml {
                accept = crate::yaml::upstream_accept(&accept);
            }
            parts.headers.insert(header::ACCEPT, accept);
        }
        if route.openapi().is_some() {
            crate::openapi::request_headers(&mut parts.headers, &self.rules);
        }
        if route.rewrite_bodies() && !self.client_gzip {
            parts.headers.remove(header::ACCEPT_ENCODING);
        }
        Ok(Request::from_parts(parts, body))
    }

    /// The response for the client: restored (or renamed, for the webhook direction) as it
    /// streams; untouched where nothing needs rewriting. Gzip from upstream is decoded for
    /// rewriting and encoded again when the client accepts it.
    pub async fn response<B>(self, resp: Response<B>) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let (yaml, limit) = (self.yaml, self.limits.max_response);
        let ctx = Ctx {
            rules: self.rules,
            route: self.route,
            client_gzip: self.client_gzip,
            limits: self.limits,
            shutdown: self.shutdown,
            observe: self.observe,
        };
        let resp = response::rewrite(ctx, resp).await;
        if yaml {
            return crate::yaml::respond(resp, limit).await;
        }
        resp
    }
}
