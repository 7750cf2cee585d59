//! Upstream's deadline: the time it has to answer with headers, and the longest a non-watch
//! response body may stall once it flows. A watch has neither (it ends when the server ends
//! it, and may be quiet for minutes); an upgrade's head has the same deadline, its spliced
//! stream none (it has an idle timeout of its own, [`super::splice`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Response;
use kube_api_rewriter_layer::{Body, Error};
use tower::{Layer, Service};

use super::{Routed, answer};

/// Gives upstream `upstream_response` to answer.
#[derive(Debug, Clone, Copy)]
pub struct DeadlineLayer {
    upstream_response: Duration,
}

impl DeadlineLayer {
    /// `UPSTREAM_RESPONSE_TIMEOUT`.
    pub fn new(upstream_response: Duration) -> Self {
        Self { upstream_response }
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = DeadlineService<S>;

    fn layer(&self, inner: S) -> DeadlineService<S> {
        DeadlineService {
            deadline: self.upstream_response,
            inner,
        }
    }
}

/// The service [`DeadlineLayer`] makes.
#[derive(Debug, Clone)]
pub struct DeadlineService<S> {
    deadline: Duration,
    inner: S,
}

impl<S> Service<Routed> for DeadlineService<S>
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
        let d = self.deadline;
        if !r.splice && r.exchange.route().watch() {
            return Box::pin(self.inner.call(r));
        }
        let expired = if r.splice {
            Error::UpgradeTimeout
        } else {
            r.body_stall = Some(d);
            Error::Timeout(d)
        };
        let call = self.inner.call(r);
        Box::pin(async move {
            match tokio::time::timeout(d, call).await {
                Ok(r) => r,
                Err(_) => Ok(answer(expired)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use kube_api_rewriter_layer::body;
    use tower::ServiceExt;

    use super::super::test_support::{mock, routed};
    use super::*;

    const D: Duration = Duration::from_secs(90);

    /// Calls through the layer with an inner service that answers after `after`; the status
    /// and when the answer came.
    async fn answered_after(
        mut r: Routed,
        splice: bool,
        after: Duration,
    ) -> (u16, Duration, Option<Duration>) {
        r.splice = splice;
        let (svc, mut handle) = mock();
        let start = tokio::time::Instant::now();
        let call = tokio::spawn(DeadlineLayer::new(D).layer(svc).oneshot(r));
        let (seen, send) = handle.next_request().await.expect("forwarded");
        let stall = seen.body_stall;
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            send.send_response(Response::new(body::empty()));
        });
        let resp = call.await.expect("task").expect("answered");
        (resp.status().as_u16(), start.elapsed(), stall)
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_answer_is_a_504_at_the_deadline() {
        let (code, took, stall) = answered_after(routed("/api/v1/namespaces"), false, D * 2).await;
        assert_eq!(code, 504);
        assert_eq!(took, D, "fired on time");
        assert_eq!(stall, Some(D), "the body's stall limit is the same deadline");
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_within_the_deadline_passes() {
        let (code, took, _) = answered_after(routed("/api/v1/namespaces"), false, D / 2).await;
        assert_eq!(code, 200);
        assert_eq!(took, D / 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_is_never_cut() {
        let (code, took, stall) = answered_after(routed("/api/v1/namespaces?watch=1"), false, D * 10).await;
        assert_eq!(code, 200);
        assert_eq!(took, D * 10);
        assert_eq!(stall, None, "a watch body may be quiet");
    }

    #[tokio::test(start_paused = true)]
    async fn an_upgrade_head_has_the_deadline_too() {
        let (code, took, stall) =
            answered_after(routed("/api/v1/namespaces/d/pods/p/exec"), true, D * 2).await;
        assert_eq!(code, 504);
        assert_eq!(took, D);
        assert_eq!(stall, None);
    }
}
