//! The request path of the API proxy and the webhook proxy: one tower stack per listener,
//! each layer owning one concern, around the service that sends a request upstream.
//!
//! In order, from the client to kube-apiserver (or the webhook server):
//!
//! 1. [`route`]: routes the request with the rules in force ([`Routed`], one [`Exchange`] per
//!    request), drops hop-by-hop headers, and tells upgrades that are spliced from the rest.
//! 2. [`metrics`]: counts requests and answers, times them to the response head, logs one line.
//! 3. [`drain`]: hands the request the shutdown signal, so that watches end at an event
//!    boundary once shutdown starts.
//! 4. [`limits`]: caps the request body (413 for a declared or streamed one over the limit); a
//!    webhook proxy serving rule paths only answers 404 for the others.
//! 5. [`identity`]: the proxy's credentials and the kubeconfig's impersonation, front-proxy
//!    `X-Remote-*` headers; what a client sends can neither replace nor widen them.
//! 6. [`rewrite`]: renames the request and restores the response (the Layer crate's
//!    [`Exchange`], as the embedded [`kube_api_rewriter_layer::RewriteLayer`] uses it); spliced
//!    upgrades pass untouched.
//! 7. [`deadline`]: upstream's time to answer with headers, and a non-watch body's longest
//!    stall; watches and upgraded streams are exempt.
//! 8. [`forward`]: the upstream connection (pooled HTTP/2, a watch's own connection, or an
//!    upgrade's), and the splice of an upgraded connection ([`splice`]).
//!
//! Every layer turns what it refuses into a Kubernetes `Status` with [`answer`], the one place
//! where the proxy's own errors become responses. Accepting connections (the connection cap,
//! the header-read and idle deadlines, TLS) is the server's ([`crate::server`]).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use kube_api_rewriter::ProxyMode;
use kube_api_rewriter_layer::{Body, Error, Exchange, Limits};
use tower::ServiceBuilder;
use tower::util::BoxCloneService;

use crate::deadlines::Deadlines;
use crate::metrics::Metrics;
use crate::reload::RulesHandle;
use crate::shutdown::ShutdownSignal;
use crate::upstream::Upstream;
use crate::upstream::identity::RemoteIdentity;

pub mod deadline;
pub mod drain;
pub mod forward;
pub mod identity;
pub mod limits;
pub mod metrics;
pub mod rewrite;
pub mod route;
pub mod splice;

/// A request on its way through the stack: the client's request and the rewriting path's
/// decisions about it.
#[derive(Debug)]
pub struct Routed {
    /// The rules' decisions and the rewriting of this request and its response.
    pub exchange: Exchange,
    /// The request (its body boxed; renamed once past [`rewrite`]).
    pub req: Request<Body>,
    /// An upgrade (exec, attach, port-forward, proxy, or a route the rules leave alone) that
    /// is spliced as raw bytes, not rewritten.
    pub splice: bool,
    /// The longest a response body may stall, set by [`deadline`] (`None`: no limit).
    pub body_stall: Option<Duration>,
}

/// Marks a response the proxy made itself (an error), for the `error` metric label.
#[derive(Debug, Clone, Copy)]
pub struct ProxyAnswered;

/// The proxy's own answer to a request it could not forward: a Kubernetes `Status`, marked
/// as the proxy's.
pub fn answer(e: Error) -> Response<Body> {
    let mut r = e.into_response();
    r.extensions_mut().insert(ProxyAnswered);
    r
}

/// What one proxy (the API proxy or the webhook proxy) is made of.
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// `kube-api` or `webhook` (the `name` metric label).
    pub name: &'static str,
    /// Which way names go.
    pub mode: ProxyMode,
    /// The rules (reloaded in place; each request keeps the ones it started with).
    pub rules: Arc<RulesHandle>,
    /// Where requests go.
    pub upstream: Arc<Upstream>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Request body, item and response limits.
    pub limits: Limits,
    /// Deadlines (upstream response, stream idle).
    pub deadlines: Deadlines,
    /// Shutdown, to end watches cleanly.
    pub shutdown: ShutdownSignal,
    /// Webhook proxy: answer 404 for paths no webhook rule names instead of forwarding them.
    pub rule_paths_only: bool,
    /// API proxy: the `X-Remote-*` identity sent upstream (client ones are dropped); `None`
    /// for the webhook proxy.
    pub remote_identity: Option<RemoteIdentity>,
}

/// The stack of one proxy, as a service of the server's connections.
pub type ProxyService = BoxCloneService<Request<hyper::body::Incoming>, Response<Body>, Infallible>;

/// Builds the stack of one proxy, in the order the module documentation gives.
pub fn proxy(s: ProxySettings) -> ProxyService {
    let stack = ServiceBuilder::new()
        .layer(route::RouteLayer::new(
            Arc::clone(&s.rules),
            s.mode,
            s.limits,
            Arc::new(crate::metrics::ProxyMetrics::new(s.name, Arc::clone(&s.metrics))),
        ))
        .layer(metrics::MetricsLayer::new(s.name, Arc::clone(&s.metrics)))
        .layer(drain::DrainLayer::new(s.shutdown.clone()))
        .layer(limits::LimitLayer::new(s.limits.max_request_body).rule_paths_only(s.rule_paths_only))
        .layer(identity::IdentityLayer::new(
            Arc::clone(&s.upstream),
            s.remote_identity.clone(),
        ))
        .layer(rewrite::RewriteLayer::new())
        .layer(deadline::DeadlineLayer::new(s.deadlines.upstream_response))
        .service(forward::Forward::new(
            s.name,
            Arc::clone(&s.upstream),
            s.deadlines.stream_idle,
        ));
    BoxCloneService::new(stack)
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Requests and responses for the layers' tests.

    use std::convert::Infallible;
    use std::future::Future;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use http::{Request, Response};
    use kube_api_rewriter::{ProxyMode, Rules};
    use kube_api_rewriter_layer::{Body, BoxError, Exchange, Limits, NoMetrics, ShutdownSignal, body};
    use tower::ServiceExt;
    use tower_test::mock::{self, Handle, Mock};

    use super::Routed;

    /// A mock inner service that never fails.
    pub(crate) type MockService =
        tower::util::MapErr<Mock<Routed, Response<Body>>, fn(BoxError) -> Infallible>;

    fn never(e: BoxError) -> Infallible {
        panic!("the mock service failed: {e}")
    }

    /// A mock inner service and its handle.
    pub(crate) fn mock() -> (MockService, Handle<Routed, Response<Body>>) {
        let (svc, handle) = mock::pair::<Routed, Response<Body>>();
        (svc.map_err(never as fn(BoxError) -> Infallible), handle)
    }

    /// Polls a future once: `None` when it is pending.
    pub(crate) fn futures_now<F: Future>(f: F) -> Option<F::Output> {
        let mut f = std::pin::pin!(f);
        match f
            .as_mut()
            .poll(&mut Context::from_waker(std::task::Waker::noop()))
        {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        }
    }

    /// A routed GET of `path` with the built-in KubeVirt rules.
    pub(crate) fn routed(path: &str) -> Routed {
        routed_req(Request::get(path).body(body::empty()).expect("request"))
    }

    /// `req` routed with the built-in KubeVirt rules.
    pub(crate) fn routed_req(req: Request<Body>) -> Routed {
        let exchange = Exchange::new(
            Arc::new(Rules::builtin_kubevirt()),
            ProxyMode::Api,
            &req,
            Limits::default(),
            ShutdownSignal::never(),
            Arc::new(NoMetrics),
        );
        Routed {
            exchange,
            req,
            splice: false,
            body_stall: None,
        }
    }
}
