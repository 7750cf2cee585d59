//! The request handler of the API proxy and the webhook proxy.
//!
//! Per request: route it with the core ([`Route`]), rename (API) or restore (webhook) the path
//! and body, forward it with the right headers and credentials, and hand the response to the
//! response rewriter. Upgrades (exec, attach, port-forward, proxy; WebSocket and SPDY) are
//! forwarded over their own HTTP/1.1 connection and spliced both ways as raw bytes; a refused
//! upgrade is an ordinary response, restored like the others. Every error
//! the proxy itself answers is a Kubernetes `Status`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::Limited;
use hyper_util::rt::TokioIo;
use kube_api_rewriter::{ProxyMode, Route};
use kube_api_rewriter_layer::headers::{is_upgrade, strip_hop_by_hop};
use kube_api_rewriter_layer::{Body, BoxError, Error, Exchange, Limits, body};

use crate::idle::Activity;
use crate::metrics::{Common, DurationLabels, Metrics, ProxyMetrics, RequestLabels, ResultLabels};
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
    /// The rules (reloaded in place; each request keeps the ones it started with).
    pub rules: Arc<crate::reload::RulesHandle>,
    /// Where requests go.
    pub upstream: Arc<Upstream>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Request body, item and response limits.
    pub limits: Limits,
    /// Time upstream has to answer with headers (not for watches).
    pub upstream_timeout: Duration,
    /// Shutdown, to end watches cleanly.
    pub shutdown: Watch,
    /// Upgraded (spliced) connections end after this long without a byte either way.
    pub stream_idle_timeout: Duration,
    /// Webhook proxy: answer 404 for paths no webhook rule names instead of forwarding them.
    pub rule_paths_only: bool,
    /// API proxy: the `X-Remote-*` identity sent upstream (client ones are dropped); `None`
    /// for the webhook proxy.
    pub remote_identity: Option<crate::upstream::identity::RemoteIdentity>,
}

/// The proxy's own answer to a request it could not forward.
fn fail(e: Error) -> Response<Body> {
    let mut r = e.into_response();
    r.extensions_mut().insert(ProxyAnswered);
    r
}

/// Subresources that stream over an upgraded connection (SPDY or WebSocket).
const UPGRADE_SUBRESOURCES: &[&str] = &["exec", "attach", "portforward", "proxy"];

/// Whether a request with `Connection: Upgrade` takes the splice path: only where nothing is
/// lost by not rewriting, that is for the streaming subresources and for routes the rules do
/// not rewrite anyway (KubeVirt's `console`, `vnc`, ... of `subresources.kubevirt.io`). Anywhere
/// else the header does not skip rewriting, excludes or JSON negotiation: the request is
/// rewritten as usual (hop-by-hop headers, `Upgrade` included, are not forwarded).
fn splices(route: &Route) -> bool {
    let sub = kube_api_rewriter::path::ApiPath::parse(&route.path)
        .subresource()
        .map(str::to_owned);
    !route.rewrite_bodies || sub.is_some_and(|s| UPGRADE_SUBRESOURCES.contains(&s.as_str()))
}

impl Proxy {
    /// Handles one request.
    pub async fn handle<B>(self: Arc<Self>, req: Request<B>) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let start = Instant::now();
        let exchange = Exchange::new(
            self.rules.current(),
            self.mode,
            &req,
            self.limits,
            self.shutdown.clone(),
            Arc::new(ProxyMetrics::new(self.name, Arc::clone(&self.metrics))),
        );
        let route = exchange.route();
        self.metrics
            .client_requests
            .get_or_create(&RequestLabels {
                common: Common::of(self.name, route),
                decision: "",
            })
            .inc();
        let resp = self.forward(exchange.clone(), req).await;

        let code = resp.status().as_u16();
        let ct = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        let by_proxy = resp.extensions().get::<ProxyAnswered>().is_some();
        let decision = exchange.decision(code, ct).as_str();
        let labels = ResultLabels {
            common: Common::of(self.name, route),
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
                common: Common::of(self.name, route),
                decision,
                status: code.to_string(),
            })
            .observe(start.elapsed().as_secs_f64());
        if route.rewrite_bodies || by_proxy {
            tracing::info!(proxy = self.name, method = %route.method, path = %route.path, upstream = %route.upstream_path, status = code, "request");
        } else {
            tracing::debug!(proxy = self.name, method = %route.method, path = %route.path, status = code, "request");
        }
        resp
    }

    /// Adds the proxy's credentials (unless the client brought its own) and builds the
    /// upstream URI.
    fn prepare_upstream(&self, route: &Route, headers: &mut http::HeaderMap) -> Result<http::Uri, Error> {
        self.upstream.authorize(headers);
        if let Some(id) = &self.remote_identity {
            id.apply(headers);
        }
        self.upstream
            .uri(&route.upstream_path)
            .map_err(|e| Error::InvalidPath(e.to_string()))
    }

    async fn forward<B>(self: &Arc<Self>, exchange: Exchange, mut req: Request<B>) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let route = exchange.route();
        if self.rule_paths_only && route.mode == ProxyMode::Webhook && route.webhook.is_none() {
            return fail(Error::NotFound(route.path.clone()));
        }
        if is_upgrade(req.headers()) && splices(exchange.route()) {
            let on_client = hyper::upgrade::on(&mut req);
            return self.upgrade(&exchange, req, on_client).await;
        }
        let headers = req.headers_mut();
        strip_hop_by_hop(headers);
        headers.remove(header::HOST);
        let up = match exchange.request(req).await {
            Ok(up) => up,
            Err(e) => return fail(e),
        };
        let (mut parts, body) = up.into_parts();
        // The client's HTTP version says nothing about the upstream connection: kube-apiserver
        // calls webhooks over HTTP/2, and a webhook server may speak only HTTP/1.1. The pool
        // picks the version per connection (ALPN); a request marked HTTP/2 would be refused on
        // an HTTP/1.1 connection.
        parts.version = http::Version::HTTP_11;
        parts.uri = match self.prepare_upstream(exchange.route(), &mut parts.headers) {
            Ok(u) => u,
            Err(e) => return fail(e),
        };
        let up = Request::from_parts(parts, body);
        // A watch ends when the server ends it: no deadline, not even for its head.
        // A non-watch body that stalls for the same time fails (the client sees an error, the
        // upstream stream is released).
        let sent = if exchange.route().watch {
            Ok(self.upstream.send_watch(up).await)
        } else {
            let stall = Some(self.upstream_timeout);
            tokio::time::timeout(self.upstream_timeout, self.upstream.send(up, stall)).await
        };
        let resp = match sent {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return self.upstream_error(&exchange, &e),
            Err(_) => return fail(Error::Timeout(self.upstream_timeout)),
        };
        exchange.response(resp).await
    }

    fn upstream_error(&self, exchange: &Exchange, e: &hyper_util::client::legacy::Error) -> Response<Body> {
        use std::error::Error as _;
        let mut msg = e.to_string();
        let mut src = e.source();
        while let Some(s) = src {
            msg.push_str(": ");
            msg.push_str(&s.to_string());
            src = s.source();
        }
        if exchange.body_over_limit() {
            return fail(exchange.send_failed(msg));
        }
        tracing::warn!(proxy = self.name, error = %msg, "upstream request failed");
        fail(Error::Unavailable(msg))
    }

    /// Forwards an upgrade request and, on `101 Switching Protocols`, splices the two
    /// connections; any other answer goes back through the response path.
    async fn upgrade<B>(
        &self,
        exchange: &Exchange,
        req: Request<B>,
        on_client: hyper::upgrade::OnUpgrade,
    ) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let route = exchange.route();
        let (mut parts, body) = req.into_parts();
        // The client connection's place under the listener's cap, kept by the splice.
        let place = parts.extensions.remove::<crate::conns::Hold>();
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
            Err(e) => return fail(e),
        };
        let b = if body.is_end_stream() {
            body::empty()
        } else {
            body::boxed(Limited::new(body, self.limits.max_request_body))
        };
        let mut up = Request::new(b);
        *up.method_mut() = parts.method;
        *up.uri_mut() = uri;
        *up.headers_mut() = headers;
        let mut resp = match tokio::time::timeout(self.upstream_timeout, self.upstream.send_upgrade(up)).await
        {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return self.upstream_error(exchange, &e),
            Err(_) => return fail(Error::UpgradeTimeout),
        };
        if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
            // A refusal (401, 403, 404, 400...): an ordinary response, restored like any other
            // (its `Status` names the renamed group and resource).
            return exchange.clone().response(resp).await;
        }
        let on_upstream = hyper::upgrade::on(&mut resp);
        let name = self.name;
        let path = route.path.clone();
        let idle = self.stream_idle_timeout;
        tokio::spawn(async move {
            let _place = place;
            let (client, upstream) = match tokio::try_join!(on_client, on_upstream) {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(proxy = name, %path, error = %e, "upgrade failed");
                    return;
                }
            };
            let activity = Activity::new();
            let mut client = activity.wrap(TokioIo::new(client));
            let mut upstream = activity.wrap(TokioIo::new(upstream));
            tokio::select! {
                r = tokio::io::copy_bidirectional(&mut client, &mut upstream) => match r {
                    Ok((up, down)) => {
                        tracing::debug!(proxy = name, %path, up, down, "upgraded connection closed")
                    }
                    Err(e) => tracing::debug!(proxy = name, %path, error = %e, "upgraded connection ended"),
                },
                () = activity.idle_for(idle) => {
                    tracing::debug!(proxy = name, %path, ?idle, "upgraded connection idle; closed");
                }
            }
        });
        let (p, _) = resp.into_parts();
        Response::from_parts(p, body::empty())
    }
}

#[cfg(test)]
mod tests {
    use kube_api_rewriter::Rules;

    use super::*;

    fn route(path: &str) -> Route {
        static RULES: std::sync::OnceLock<Rules> = std::sync::OnceLock::new();
        Route::new(
            RULES.get_or_init(Rules::builtin_kubevirt),
            ProxyMode::Api,
            "GET",
            path,
        )
    }

    #[test]
    fn only_streaming_subresources_and_untouched_routes_splice() {
        for p in [
            "/api/v1/namespaces/d/pods/p/exec?command=sh",
            "/api/v1/namespaces/d/pods/p/attach",
            "/api/v1/namespaces/d/pods/p/portforward",
            "/api/v1/namespaces/d/services/s:80/proxy/x",
            "/apis/subresources.kubevirt.io/v1/namespaces/d/virtualmachineinstances/v/console",
        ] {
            assert!(splices(&route(p)), "{p}");
        }
        for p in [
            "/apis/kubevirt.io/v1/namespaces/d/virtualmachines",
            "/apis/kubevirt.io/v1/namespaces/d/virtualmachines?watch=1",
            "/api/v1/namespaces/d/persistentvolumeclaims",
            "/apis",
        ] {
            assert!(!splices(&route(p)), "{p}");
        }
    }
}
