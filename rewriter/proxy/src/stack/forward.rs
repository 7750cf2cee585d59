//! The bottom of the stack: the request goes to the upstream connection that suits it (a
//! pooled HTTP/2 stream, a watch's connection of its own, an upgrade's HTTP/1.1 connection;
//! [`crate::upstream`]) and its response comes back; a `101 Switching Protocols` starts the
//! splice ([`super::splice`]). A connection that fails is answered with a `Status`: 503, or
//! 413 when it was the request body that ran over the limit.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube_api_rewriter_layer::{Body, Error, Exchange, body};
use tower::Service;

use super::{Routed, answer, splice};
use crate::server::conns::Place;
use crate::upstream::Upstream;

/// Forwards requests to one upstream: the innermost service of the stack.
#[derive(Debug, Clone)]
pub struct Forward {
    name: &'static str,
    upstream: Arc<Upstream>,
    stream_idle: Duration,
}

impl Forward {
    /// Sends to `upstream` for proxy `name`; a spliced connection ends after `stream_idle`
    /// without a byte either way.
    pub fn new(name: &'static str, upstream: Arc<Upstream>, stream_idle: Duration) -> Self {
        Self {
            name,
            upstream,
            stream_idle,
        }
    }

    async fn ordinary(self, r: Routed) -> Response<Body> {
        let Routed {
            exchange,
            req,
            body_stall,
            ..
        } = r;
        let (mut parts, b) = req.into_parts();
        // The client's HTTP version says nothing about the upstream connection: kube-apiserver
        // calls webhooks over HTTP/2, and a webhook server may speak only HTTP/1.1. The pool
        // picks the version per connection (ALPN); a request marked HTTP/2 would be refused on
        // an HTTP/1.1 connection.
        parts.version = http::Version::HTTP_11;
        parts.uri = match self.upstream.uri(exchange.route().upstream_path()) {
            Ok(u) => u,
            Err(e) => return answer(Error::InvalidPath(e.to_string())),
        };
        let up = Request::from_parts(parts, b);
        let sent = if exchange.route().watch() {
            self.upstream.send_watch(up).await
        } else {
            self.upstream.send(up, body_stall).await
        };
        match sent {
            Ok(resp) => resp.map(body::boxed),
            Err(e) => self.failed(&exchange, &e),
        }
    }

    /// Forwards an upgrade request and, on `101 Switching Protocols`, splices the two
    /// connections; any other answer goes back to be restored like any response.
    async fn upgrade(self, r: Routed) -> Response<Body> {
        let Routed {
            exchange, mut req, ..
        } = r;
        let on_client = hyper::upgrade::on(&mut req);
        let (mut parts, b) = req.into_parts();
        // The client connection's place under the listener's cap, kept by the splice.
        let place = parts.extensions.remove::<Place>();
        let route = exchange.route();
        let uri = match self.upstream.uri(route.upstream_path()) {
            Ok(u) => u,
            Err(e) => return answer(Error::InvalidPath(e.to_string())),
        };
        let mut up = Request::new(b);
        *up.method_mut() = parts.method;
        *up.uri_mut() = uri;
        *up.headers_mut() = parts.headers;
        let mut resp = match self.upstream.send_upgrade(up).await {
            Ok(r) => r,
            Err(e) => return self.failed(&exchange, &e),
        };
        if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
            // A refusal (401, 403, 404, 400...): its `Status` names the renamed group and
            // resource, restored on the way back.
            return resp.map(body::boxed);
        }
        let on_upstream = hyper::upgrade::on(&mut resp);
        splice::spawn(
            splice::Ends {
                proxy: self.name,
                path: route.path().to_owned(),
                client: on_client,
                upstream: on_upstream,
                place,
            },
            self.stream_idle,
        );
        let (p, _) = resp.into_parts();
        Response::from_parts(p, body::empty())
    }

    /// The answer to a request whose upstream connection failed.
    fn failed(&self, exchange: &Exchange, e: &hyper_util::client::legacy::Error) -> Response<Body> {
        use std::error::Error as _;
        let mut msg = e.to_string();
        let mut src = e.source();
        while let Some(s) = src {
            msg.push_str(": ");
            msg.push_str(&s.to_string());
            src = s.source();
        }
        if exchange.body_over_limit() {
            return answer(exchange.send_failed(msg));
        }
        tracing::warn!(proxy = self.name, error = %msg, "upstream request failed");
        answer(Error::Unavailable(msg))
    }
}

impl Service<Routed> for Forward {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The pool queues or opens connections itself.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, r: Routed) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            Ok(if r.splice {
                this.upgrade(r).await
            } else {
                this.ordinary(r).await
            })
        })
    }
}
