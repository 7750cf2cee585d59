//! What a request may be: on a webhook listener that serves the rules' paths only, a path no
//! webhook rule names is answered 404; a request that declares a body over the limit is
//! answered 413 at once, and a spliced upgrade's body is read through the cap. (The rewriting
//! path caps every other body, read whole or streamed, and tells a send that failed on the
//! cap, 413, from an unavailable upstream.)

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Response, header};
use http_body_util::Limited;
use kube_api_rewriter::ProxyMode;
use kube_api_rewriter_layer::{Body, Error, body};
use tower::{Layer, Service};

use super::{Routed, answer};

/// Caps request bodies at `max_request_body` bytes, and webhook paths to the rules' ones.
#[derive(Debug, Clone, Copy)]
pub struct LimitLayer {
    max_request_body: usize,
    rule_paths_only: bool,
}

impl LimitLayer {
    /// Bodies of at most `max_request_body` bytes.
    pub fn new(max_request_body: usize) -> Self {
        Self {
            max_request_body,
            rule_paths_only: false,
        }
    }

    /// A webhook proxy answers 404 for a path no webhook rule names instead of forwarding it
    /// (`WEBHOOK_RULE_PATHS_ONLY`).
    #[must_use]
    pub fn rule_paths_only(mut self, only: bool) -> Self {
        self.rule_paths_only = only;
        self
    }
}

impl<S> Layer<S> for LimitLayer {
    type Service = LimitService<S>;

    fn layer(&self, inner: S) -> LimitService<S> {
        LimitService { layer: *self, inner }
    }
}

/// The service [`LimitLayer`] makes.
#[derive(Debug, Clone)]
pub struct LimitService<S> {
    layer: LimitLayer,
    inner: S,
}

impl<S> Service<Routed> for LimitService<S>
where
    S: Service<Routed, Response = Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut r: Routed) -> Self::Future {
        let route = r.exchange.route();
        if self.layer.rule_paths_only && route.mode() == ProxyMode::Webhook && route.webhook().is_none() {
            let path = route.path().to_owned();
            return Box::pin(async move { Ok(answer(Error::NotFound(path))) });
        }
        let max = self.layer.max_request_body;
        let declared = r
            .req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max as u64) {
            let limit = max;
            return Box::pin(async move { Ok(answer(Error::BodyTooLarge { limit })) });
        }
        // The rewriting path caps every other body itself (and tells a send that failed on the
        // cap from an unavailable upstream); a spliced upgrade's goes up untouched, so it is
        // capped here.
        if r.splice && !http_body::Body::is_end_stream(r.req.body()) {
            let b = std::mem::replace(r.req.body_mut(), body::empty());
            *r.req.body_mut() = body::boxed(Limited::new(b, max));
        }
        Box::pin(self.inner.call(r))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::super::test_support::{futures_now, mock, routed_req};
    use super::*;

    const VMS: &str = "/apis/kubevirt.io/v1/namespaces/d/virtualmachines";

    #[tokio::test]
    async fn a_declared_body_over_the_limit_is_answered_413_and_never_forwarded() {
        let (svc, mut handle) = mock();
        let req = Request::post(VMS)
            .header("content-length", "11")
            .body(body::full("0123456789a"))
            .expect("request");
        let resp = LimitLayer::new(10)
            .layer(svc)
            .oneshot(routed_req(req))
            .await
            .expect("answered");
        assert_eq!(resp.status(), 413);
        assert!(!matches!(futures_now(handle.next_request()), Some(Some(_))));
    }

    #[tokio::test]
    async fn a_webhook_proxy_serving_rule_paths_only_answers_404_for_others() {
        let req = Request::post("/not-a-webhook")
            .body(body::empty())
            .expect("request");
        let exchange = kube_api_rewriter_layer::Exchange::new(
            std::sync::Arc::new(kube_api_rewriter::Rules::builtin_kubevirt()),
            ProxyMode::Webhook,
            &req,
            kube_api_rewriter_layer::Limits::default(),
            kube_api_rewriter_layer::ShutdownSignal::never(),
            std::sync::Arc::new(kube_api_rewriter_layer::NoMetrics),
        );
        let routed = Routed {
            exchange,
            req,
            splice: false,
            body_stall: None,
        };
        let (svc, mut handle) = mock();
        let resp = LimitLayer::new(10)
            .rule_paths_only(true)
            .layer(svc)
            .oneshot(routed)
            .await
            .expect("answered");
        assert_eq!(resp.status(), 404);
        assert!(resp.extensions().get::<super::super::ProxyAnswered>().is_some());
        assert!(!matches!(futures_now(handle.next_request()), Some(Some(_))));
    }

    #[tokio::test]
    async fn a_streamed_upgrade_body_fails_at_the_limit() {
        let (svc, mut handle) = mock();
        let chunks = futures::stream::iter(
            ["01234", "56789", "a"]
                .map(|c| Ok::<_, kube_api_rewriter_layer::BoxError>(http_body::Frame::data(Bytes::from(c)))),
        );
        let req = Request::post(VMS)
            .body(body::boxed(http_body_util::StreamBody::new(chunks)))
            .expect("request");
        let mut routed = routed_req(req);
        routed.splice = true;
        let call = tokio::spawn(LimitLayer::new(10).layer(svc).oneshot(routed));
        let (r, send) = handle.next_request().await.expect("forwarded");
        let read = r.req.into_body().collect().await;
        let e = read.expect_err("over the limit");
        assert!(
            e.downcast_ref::<http_body_util::LengthLimitError>().is_some(),
            "{e}"
        );
        send.send_response(Response::new(body::empty()));
        call.await.expect("task").expect("answered");
    }

    #[tokio::test]
    async fn a_body_at_the_limit_passes_whole() {
        let (svc, mut handle) = mock();
        let req = Request::post(VMS)
            .header("content-length", "10")
            .body(body::full("0123456789"))
            .expect("request");
        let call = tokio::spawn(LimitLayer::new(10).layer(svc).oneshot(routed_req(req)));
        let (r, send) = handle.next_request().await.expect("forwarded");
        let got = r.req.into_body().collect().await.expect("whole").to_bytes();
        assert_eq!(&got[..], b"0123456789");
        send.send_response(Response::new(body::empty()));
        call.await.expect("task").expect("answered");
    }
}
