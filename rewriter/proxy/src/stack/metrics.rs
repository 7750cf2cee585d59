//! Request metrics and the request log line: `client_requests_total` when a request arrives;
//! `requests_handled_total`, `target_responses_total` (not for the proxy's own answers) and
//! `request_handling_duration_seconds` (to the response head) when it is answered. What the
//! rewriting path measures inside bodies (bytes, rewrites, invalid JSON) it reports itself,
//! through [`crate::metrics::ProxyMetrics`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use http::Response;
use http::header;
use kube_api_rewriter_layer::Body;
use tower::{Layer, Service};

use super::{ProxyAnswered, Routed};
use crate::metrics::{Common, DurationLabels, Metrics, RequestLabels, ResultLabels};

/// Counts and times the requests of one proxy.
#[derive(Debug, Clone)]
pub struct MetricsLayer {
    name: &'static str,
    metrics: Arc<Metrics>,
}

impl MetricsLayer {
    /// For proxy `name` (`kube-api` or `webhook`, the `name` label).
    pub fn new(name: &'static str, metrics: Arc<Metrics>) -> Self {
        Self { name, metrics }
    }
}

impl<S> Layer<S> for MetricsLayer {
    type Service = MetricsService<S>;

    fn layer(&self, inner: S) -> MetricsService<S> {
        MetricsService {
            layer: self.clone(),
            inner,
        }
    }
}

/// The service [`MetricsLayer`] makes.
#[derive(Debug, Clone)]
pub struct MetricsService<S> {
    layer: MetricsLayer,
    inner: S,
}

impl<S> Service<Routed> for MetricsService<S>
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

    fn call(&mut self, r: Routed) -> Self::Future {
        let start = Instant::now();
        let exchange = r.exchange.clone();
        let MetricsLayer { name, metrics } = self.layer.clone();
        metrics
            .client_requests
            .get_or_create(&RequestLabels {
                common: Common::of(name, exchange.route()),
                decision: "",
            })
            .inc();
        let call = self.inner.call(r);
        Box::pin(async move {
            let resp = call.await?;
            let route = exchange.route();
            let code = resp.status().as_u16();
            let ct = resp
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok());
            let by_proxy = resp.extensions().get::<ProxyAnswered>().is_some();
            let decision = exchange.decision(code, ct).as_str();
            let labels = ResultLabels {
                common: Common::of(name, route),
                decision,
                status: code.to_string(),
                error: if by_proxy { "1" } else { "0" },
            };
            if !by_proxy {
                metrics.target_responses.get_or_create(&labels).inc();
            }
            metrics.requests_handled.get_or_create(&labels).inc();
            metrics
                .request_duration
                .get_or_create(&DurationLabels {
                    common: labels.common,
                    decision,
                    status: labels.status,
                })
                .observe(start.elapsed().as_secs_f64());
            if route.rewrite_bodies() || by_proxy {
                tracing::info!(proxy = name, method = %route.method(), path = %route.path(), upstream = %route.upstream_path(), status = code, "request");
            } else {
                tracing::debug!(proxy = name, method = %route.method(), path = %route.path(), status = code, "request");
            }
            Ok(resp)
        })
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;
    use kube_api_rewriter_layer::{Error, body};
    use tower::ServiceExt;

    use super::super::answer;
    use super::super::test_support::{mock, routed};
    use super::*;

    const VMS: &str = "/apis/kubevirt.io/v1/namespaces/d/virtualmachines";

    fn text(m: &Metrics) -> String {
        m.encode()
    }

    /// The value of the one sample of `family` whose labels contain all of `labels`.
    fn sample(text: &str, family: &str, labels: &[&str]) -> Option<f64> {
        text.lines()
            .filter(|l| l.starts_with(family) && labels.iter().all(|x| l.contains(x)))
            .map(|l| l.rsplit(' ').next().expect("value").parse().expect("number"))
            .next()
    }

    #[tokio::test]
    async fn a_request_counts_once_on_arrival_and_once_when_answered() {
        let metrics = Metrics::new();
        let (svc, mut handle) = mock();
        let svc = MetricsLayer::new("kube-api", Arc::clone(&metrics)).layer(svc);
        let call = tokio::spawn(svc.oneshot(routed(VMS)));
        let (_, send) = handle.next_request().await.expect("forwarded");
        let t = text(&metrics);
        let arrived = ["name=\"kube-api\"", "resource=\"virtualmachines\""];
        assert_eq!(
            sample(&t, "kube_api_rewriter_client_requests_total", &arrived),
            Some(1.0)
        );
        assert_eq!(
            sample(&t, "kube_api_rewriter_requests_handled_total", &arrived),
            None
        );
        send.send_response(Response::new(body::empty()));
        call.await.expect("task").expect("answered");
        let t = text(&metrics);
        let ok = ["resource=\"virtualmachines\"", "status=\"200\"", "error=\"0\""];
        assert_eq!(
            sample(&t, "kube_api_rewriter_client_requests_total", &arrived),
            Some(1.0)
        );
        assert_eq!(
            sample(&t, "kube_api_rewriter_requests_handled_total", &ok),
            Some(1.0)
        );
        assert_eq!(
            sample(&t, "kube_api_rewriter_target_responses_total", &ok),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &t,
                "kube_api_rewriter_request_handling_duration_seconds_count",
                &ok[..2]
            ),
            Some(1.0)
        );
    }

    #[tokio::test]
    async fn the_proxys_own_answer_is_not_a_target_response() {
        let metrics = Metrics::new();
        let (svc, mut handle) = mock();
        let svc = MetricsLayer::new("kube-api", Arc::clone(&metrics)).layer(svc);
        let call = tokio::spawn(svc.oneshot(routed(VMS)));
        let (_, send) = handle.next_request().await.expect("forwarded");
        send.send_response(answer(Error::UpgradeTimeout));
        let resp = call.await.expect("task").expect("answered");
        assert_eq!(resp.status(), StatusCode::GATEWAY_TIMEOUT);
        let t = text(&metrics);
        let failed = ["status=\"504\"", "error=\"1\""];
        assert_eq!(
            sample(&t, "kube_api_rewriter_requests_handled_total", &failed),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &t,
                "kube_api_rewriter_target_responses_total",
                &["status=\"504\""]
            ),
            None
        );
    }

    /// The layers below answer some requests themselves (a webhook path the rules do not name,
    /// a body over the limit): those are counted too, as the proxy's answers.
    #[tokio::test]
    async fn a_request_refused_below_is_counted_as_the_proxys_answer() {
        use kube_api_rewriter::{ProxyMode, Rules};
        use kube_api_rewriter_layer::{Exchange, Limits, NoMetrics, ShutdownSignal};

        let metrics = Metrics::new();
        let (svc, _handle) = mock();
        let svc = MetricsLayer::new("webhook", Arc::clone(&metrics)).layer(
            super::super::limits::LimitLayer::new(1 << 20)
                .rule_paths_only(true)
                .layer(svc),
        );
        let req = http::Request::post("/not-a-webhook")
            .body(body::empty())
            .expect("request");
        let exchange = Exchange::new(
            Arc::new(Rules::builtin_kubevirt()),
            ProxyMode::Webhook,
            &req,
            Limits::default(),
            ShutdownSignal::never(),
            Arc::new(NoMetrics),
        );
        let routed = Routed {
            exchange,
            req,
            splice: false,
            body_stall: None,
        };
        let resp = svc.oneshot(routed).await.expect("answered");
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        let t = text(&metrics);
        let refused = ["name=\"webhook\"", "status=\"404\"", "error=\"1\""];
        assert_eq!(
            sample(&t, "kube_api_rewriter_client_requests_total", &refused[..1]),
            Some(1.0)
        );
        assert_eq!(
            sample(&t, "kube_api_rewriter_requests_handled_total", &refused),
            Some(1.0)
        );
        assert_eq!(
            sample(&t, "kube_api_rewriter_target_responses_total", &refused[..2]),
            None
        );
    }
}
