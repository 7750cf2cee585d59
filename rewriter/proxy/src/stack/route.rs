//! The top of the stack: each request is routed with the rules in force (it keeps them to its
//! end, so a reload never changes a stream in flight), its hop-by-hop headers are dropped, and
//! an upgrade the rules let through untouched is marked to be spliced. Nothing is refused here,
//! so that the metrics below count every request.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response};
use kube_api_rewriter::{ProxyMode, Route};
use kube_api_rewriter_layer::headers::{is_upgrade, strip_hop_by_hop};
use kube_api_rewriter_layer::{Body, BoxError, Exchange, Limits, Observe, ShutdownSignal, body};
use tower::{Layer, Service};

use super::Routed;
use crate::reload::RulesHandle;

/// Subresources that stream over an upgraded connection (SPDY or WebSocket).
const UPGRADE_SUBRESOURCES: &[&str] = &["exec", "attach", "portforward", "proxy"];

/// Whether a request with `Connection: Upgrade` takes the splice path: only where nothing is
/// lost by not rewriting, that is for the streaming subresources and for routes the rules do
/// not rewrite anyway (KubeVirt's `console`, `vnc`, ... of `subresources.kubevirt.io`). Anywhere
/// else the header does not skip rewriting, excludes or JSON negotiation: the request is
/// rewritten as usual (hop-by-hop headers, `Upgrade` included, are not forwarded).
fn splices(route: &Route) -> bool {
    let sub = kube_api_rewriter::path::ApiPath::parse(route.path())
        .subresource()
        .map(str::to_owned);
    !route.rewrite_bodies() || sub.is_some_and(|s| UPGRADE_SUBRESOURCES.contains(&s.as_str()))
}

/// Routes requests into [`Routed`] ones.
#[derive(Debug, Clone)]
pub struct RouteLayer {
    rules: Arc<RulesHandle>,
    mode: ProxyMode,
    limits: Limits,
    observe: Arc<dyn Observe>,
}

impl RouteLayer {
    /// Routes with `rules` in `mode`; `limits` and `observe` go with each request's
    /// [`Exchange`].
    pub fn new(rules: Arc<RulesHandle>, mode: ProxyMode, limits: Limits, observe: Arc<dyn Observe>) -> Self {
        Self {
            rules,
            mode,
            limits,
            observe,
        }
    }
}

impl<S> Layer<S> for RouteLayer {
    type Service = RouteService<S>;

    fn layer(&self, inner: S) -> RouteService<S> {
        RouteService {
            layer: self.clone(),
            inner,
        }
    }
}

/// The service [`RouteLayer`] makes.
#[derive(Debug, Clone)]
pub struct RouteService<S> {
    layer: RouteLayer,
    inner: S,
}

impl<S, B> Service<Request<B>> for RouteService<S>
where
    S: Service<Routed, Response = Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let l = &self.layer;
        let exchange = Exchange::new(
            l.rules.current(),
            l.mode,
            &req,
            l.limits,
            ShutdownSignal::never(),
            Arc::clone(&l.observe),
        );
        let splice = is_upgrade(req.headers()) && splices(exchange.route());
        let (mut parts, b) = req.into_parts();
        let upgrade = splice
            .then(|| parts.headers.get(header::UPGRADE).cloned())
            .flatten();
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.remove(header::HOST);
        if let Some(u) = upgrade {
            parts
                .headers
                .insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
            parts.headers.insert(header::UPGRADE, u);
        }
        let routed = Routed {
            exchange,
            req: Request::from_parts(parts, body::boxed(b)),
            splice,
            body_stall: None,
        };
        Box::pin(self.inner.call(routed))
    }
}

#[cfg(test)]
mod tests {
    use kube_api_rewriter::Rules;
    use tower::ServiceExt;

    use super::super::test_support::mock;
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

    /// What the inner service saw of a request, and the answer's status.
    async fn seen(layer: RouteLayer, req: Request<Body>) -> (bool, http::HeaderMap, u16) {
        let (svc, mut handle) = mock();
        let call = tokio::spawn(layer.layer(svc).oneshot(req));
        let (routed, send) = handle.next_request().await.expect("forwarded");
        send.send_response(Response::new(body::empty()));
        let resp = call.await.expect("task").expect("infallible");
        (
            routed.splice,
            routed.req.headers().clone(),
            resp.status().as_u16(),
        )
    }

    fn layer() -> RouteLayer {
        RouteLayer::new(
            RulesHandle::fixed(Rules::builtin_kubevirt()),
            ProxyMode::Api,
            Limits::default(),
            Arc::new(kube_api_rewriter_layer::NoMetrics),
        )
    }

    #[tokio::test]
    async fn hop_by_hop_headers_never_reach_the_inner_service() {
        let req = Request::get("/apis/kubevirt.io/v1/virtualmachines")
            .header("connection", "x-custom, keep-alive")
            .header("x-custom", "1")
            .header("host", "proxy")
            .header("keep-alive", "timeout=5")
            .header("accept", "application/json")
            .body(body::empty())
            .expect("request");
        let (splice, headers, code) = seen(layer(), req).await;
        assert_eq!(code, 200);
        assert!(!splice);
        for h in ["connection", "x-custom", "host", "keep-alive"] {
            assert!(!headers.contains_key(h), "{h} forwarded");
        }
        assert_eq!(headers["accept"], "application/json");
    }

    #[tokio::test]
    async fn an_exec_upgrade_is_spliced_with_its_upgrade_headers() {
        let req = Request::get("/api/v1/namespaces/d/pods/p/exec?command=sh")
            .header("connection", "Upgrade")
            .header("upgrade", "SPDY/3.1")
            .body(body::empty())
            .expect("request");
        let (splice, headers, _) = seen(layer(), req).await;
        assert!(splice);
        assert_eq!(headers["connection"], "Upgrade");
        assert_eq!(headers["upgrade"], "SPDY/3.1");
    }
}
