//! The request handler of the API proxy and the webhook proxy.
//!
//! Per request: route it with the core ([`Route`]), rename (API) or restore (webhook) the path
//! and body, forward it with the right headers and credentials, and hand the response to the
//! response rewriter. Upgrades (exec, attach, port-forward, proxy; WebSocket and SPDY) are
//! forwarded over their own HTTP/1.1 connection and spliced both ways as raw bytes. Every error
//! the proxy itself answers is a Kubernetes `Status`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper_util::rt::TokioIo;
use kube_api_rewriter::Rules;
use kube_api_rewriter::exchange::{ProxyMode, Route};

use crate::body::{self, Body, BoxError, Counted};
use crate::http_util::{accepts_gzip, is_upgrade, json_accept, status, strip_hop_by_hop};
use crate::metrics::{
    Common, DurationLabels, Metrics, RequestLabels, ResultLabels, RewriteDurationLabels, RewriteLabels,
};
use crate::response::{self, Ctx};
use crate::shutdown::Watch;
use crate::upstream::Upstream;

/// Marks a response the proxy made itself (an error), for the `error` metric label.
#[derive(Debug, Clone, Copy)]
struct ProxyAnswered;

/// One proxy: the API proxy or the webhook proxy.
#[derive(Debug)]
pub struct Proxy {
    /// `kube-api` or `webhook` (the `name` metric label).
    pub name: &'static str,
    /// Which way names go.
    pub mode: ProxyMode,
    /// The rules.
    pub rules: Arc<Rules>,
    /// Where requests go.
    pub upstream: Arc<Upstream>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Largest request body.
    pub max_request_body: usize,
    /// Time upstream has to answer with headers.
    pub upstream_timeout: Duration,
    /// Shutdown, to end watches cleanly.
    pub shutdown: Watch,
}

fn answered(mut r: Response<Body>) -> Response<Body> {
    r.extensions_mut().insert(ProxyAnswered);
    r
}

fn fail(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    answered(status(code, reason, message))
}

impl Proxy {
    /// Handles one request.
    pub async fn handle<B>(self: Arc<Self>, req: Request<B>) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let start = Instant::now();
        let pq = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned();
        let route = Arc::new(Route::new(&self.rules, self.mode, req.method().as_str(), &pq));
        self.metrics
            .client_requests
            .get_or_create(&RequestLabels {
                common: Common::of(self.name, &route),
                decision: "",
            })
            .inc();
        let resp = self.forward(Arc::clone(&route), req).await;

        let code = resp.status().as_u16();
        let ct = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        let by_proxy = resp.extensions().get::<ProxyAnswered>().is_some();
        let decision = if route.rewrite {
            response::decision(&route, code, ct)
        } else {
            "pass"
        };
        let labels = ResultLabels {
            common: Common::of(self.name, &route),
            decision,
            status: code.to_string(),
            error: if by_proxy { "1" } else { "0" },
        };
        if !by_proxy {
            self.metrics.target_responses.get_or_create(&labels).inc();
        }
        self.metrics.requests_handled.get_or_create(&labels).inc();
        self.metrics
            .request_duration
            .get_or_create(&DurationLabels {
                common: Common::of(self.name, &route),
                decision,
                status: code.to_string(),
            })
            .observe(start.elapsed().as_secs_f64());
        if route.rewrite || by_proxy {
            tracing::info!(proxy = self.name, method = %route.method, path = %route.path, upstream = %route.upstream_path, status = code, "request");
        } else {
            tracing::debug!(proxy = self.name, method = %route.method, path = %route.path, status = code, "request");
        }
        resp
    }

    /// Adds the proxy's credentials (unless the client brought its own) and builds the
    /// upstream URI; a path that makes no URI is answered with a 400 Status.
    fn prepare_upstream(
        &self,
        route: &Route,
        headers: &mut http::HeaderMap,
    ) -> Result<http::Uri, Box<Response<Body>>> {
        self.upstream.authorize(headers);
        self.upstream.uri(&route.upstream_path).map_err(|e| {
            let message = format!("invalid path: {e}");
            Box::new(fail(StatusCode::BAD_REQUEST, "BadRequest", &message))
        })
    }

    fn labels(&self, route: &Route, decision: &'static str) -> RequestLabels {
        RequestLabels {
            common: Common::of(self.name, route),
            decision,
        }
    }

    async fn forward<B>(self: &Arc<Self>, route: Arc<Route>, mut req: Request<B>) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        if is_upgrade(req.headers()) {
            let on_client = hyper::upgrade::on(&mut req);
            return self.upgrade(&route, req, on_client).await;
        }
        let (parts, body) = req.into_parts();
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.max_request_body as u64) {
            return self.too_large();
        }
        let client_gzip = accepts_gzip(&parts.headers);
        let mut headers = parts.headers;
        strip_hop_by_hop(&mut headers);
        headers.remove(header::HOST);
        let has_body = declared.is_some_and(|n| n > 0) || (declared.is_none() && !body.is_end_stream());
        let rewrite_body = route.rewrite && has_body;
        let decision = if route.rewrite { "rewrite" } else { "pass" };

        let upstream_body = if rewrite_body {
            let collected = match Limited::new(body, self.max_request_body).collect().await {
                Ok(c) => c.to_bytes(),
                Err(e) => {
                    return if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                        self.too_large()
                    } else {
                        fail(
                            StatusCode::BAD_REQUEST,
                            "BadRequest",
                            &format!("reading the request body: {e}"),
                        )
                    };
                }
            };
            self.metrics
                .from_client_bytes
                .get_or_create(&self.labels(&route, decision))
                .inc_by(collected.len() as u64);
            if headers
                .get(header::CONTENT_ENCODING)
                .is_some_and(|v| v.as_bytes() != b"identity")
            {
                return fail(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    "encoded request bodies are not supported for resources the rules rewrite",
                );
            }
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let t0 = Instant::now();
            let res = route.request_body(&self.rules, ct.as_deref(), &collected);
            self.request_rewritten(&route, res.is_ok(), t0.elapsed());
            let out = match res {
                Ok(rb) => {
                    if let Some(ct) = rb.content_type {
                        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
                    }
                    match rb.body {
                        std::borrow::Cow::Borrowed(_) => collected.clone(),
                        std::borrow::Cow::Owned(v) => Bytes::from(v),
                    }
                }
                Err(kube_api_rewriter::Error::UnsupportedMediaType(m)) => {
                    return fail(
                        StatusCode::UNSUPPORTED_MEDIA_TYPE,
                        "UnsupportedMediaType",
                        &format!("the media type {m:?} is not supported for {}", route.resource),
                    );
                }
                Err(e) => {
                    return fail(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        &format!("the request body cannot be rewritten: {e}"),
                    );
                }
            };
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(out.len()));
            self.metrics
                .to_target_bytes
                .get_or_create(&self.labels(&route, decision))
                .inc_by(out.len() as u64);
            body::full(out)
        } else if has_body {
            let labels = self.labels(&route, decision);
            let counted = Counted::new(
                body::boxed(Limited::new(body, self.max_request_body)),
                self.metrics.from_client_bytes.get_or_create(&labels).clone(),
            );
            body::boxed(Counted::new(
                counted,
                self.metrics.to_target_bytes.get_or_create(&labels).clone(),
            ))
        } else {
            body::empty()
        };

        if route.wants_json() {
            headers.insert(header::ACCEPT, json_accept(&headers));
        }
        if route.rewrite && !client_gzip {
            headers.remove(header::ACCEPT_ENCODING);
        }
        let uri = match self.prepare_upstream(&route, &mut headers) {
            Ok(u) => u,
            Err(resp) => return *resp,
        };
        let mut up = Request::new(upstream_body);
        *up.method_mut() = parts.method;
        *up.uri_mut() = uri;
        *up.headers_mut() = headers;

        let resp = match tokio::time::timeout(self.upstream_timeout, self.upstream.send(up)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return self.upstream_error(&e),
            Err(_) => {
                return fail(
                    StatusCode::GATEWAY_TIMEOUT,
                    "Timeout",
                    &format!("upstream did not answer within {:?}", self.upstream_timeout),
                );
            }
        };
        let ctx = Ctx {
            rules: Arc::clone(&self.rules),
            route,
            client_gzip,
            shutdown: self.shutdown.clone(),
            metrics: Some(Arc::clone(&self.metrics)),
            name: self.name,
        };
        response::rewrite(ctx, resp).await
    }

    fn too_large(&self) -> Response<Body> {
        fail(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            &format!("the request body is larger than {} bytes", self.max_request_body),
        )
    }

    fn upstream_error(&self, e: &hyper_util::client::legacy::Error) -> Response<Body> {
        use std::error::Error as _;
        let mut msg = e.to_string();
        let mut src = e.source();
        while let Some(s) = src {
            msg.push_str(": ");
            msg.push_str(&s.to_string());
            src = s.source();
        }
        tracing::warn!(proxy = self.name, error = %msg, "upstream request failed");
        fail(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            &format!("upstream is unavailable: {msg}"),
        )
    }

    fn request_rewritten(&self, route: &Route, ok: bool, took: Duration) {
        let op = match route.request_direction() {
            kube_api_rewriter::Direction::Rename => "rename",
            kube_api_rewriter::Direction::Restore => "restore",
        };
        self.metrics
            .rewrites
            .get_or_create(&RewriteLabels {
                common: Common::of(self.name, route),
                side: "client",
                operation: op,
                error: if ok { "0" } else { "1" },
            })
            .inc();
        self.metrics
            .rewrite_duration
            .get_or_create(&RewriteDurationLabels {
                common: Common::of(self.name, route),
                side: "client",
                operation: op,
            })
            .observe(took.as_secs_f64());
    }

    /// Forwards an upgrade request and, on `101 Switching Protocols`, splices the two
    /// connections.
    async fn upgrade<B>(
        &self,
        route: &Route,
        req: Request<B>,
        on_client: hyper::upgrade::OnUpgrade,
    ) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let (parts, body) = req.into_parts();
        let mut headers = parts.headers.clone();
        let upgrade = headers.get(header::UPGRADE).cloned();
        strip_hop_by_hop(&mut headers);
        headers.remove(header::HOST);
        if let Some(u) = upgrade {
            headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
            headers.insert(header::UPGRADE, u);
        }
        let uri = match self.prepare_upstream(route, &mut headers) {
            Ok(u) => u,
            Err(resp) => return *resp,
        };
        let b = if body.is_end_stream() {
            body::empty()
        } else {
            body::boxed(Limited::new(body, self.max_request_body))
        };
        let mut up = Request::new(b);
        *up.method_mut() = parts.method;
        *up.uri_mut() = uri;
        *up.headers_mut() = headers;
        let mut resp = match tokio::time::timeout(self.upstream_timeout, self.upstream.send_upgrade(up)).await
        {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return self.upstream_error(&e),
            Err(_) => {
                return fail(
                    StatusCode::GATEWAY_TIMEOUT,
                    "Timeout",
                    "upstream did not answer the upgrade in time",
                );
            }
        };
        if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
            // A refusal (401, 403, 404, 400...): an ordinary response, passed through.
            let (mut p, b) = resp.into_parts();
            strip_hop_by_hop(&mut p.headers);
            return Response::from_parts(p, body::boxed(b));
        }
        let on_upstream = hyper::upgrade::on(&mut resp);
        let name = self.name;
        let path = route.path.clone();
        tokio::spawn(async move {
            let (client, upstream) = match tokio::try_join!(on_client, on_upstream) {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(proxy = name, %path, error = %e, "upgrade failed");
                    return;
                }
            };
            let mut client = TokioIo::new(client);
            let mut upstream = TokioIo::new(upstream);
            match tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
                Ok((up, down)) => {
                    tracing::debug!(proxy = name, %path, up, down, "upgraded connection closed")
                }
                Err(e) => tracing::debug!(proxy = name, %path, error = %e, "upgraded connection ended"),
            }
        });
        let (p, _) = resp.into_parts();
        Response::from_parts(p, body::empty())
    }
}
