//! Graceful drain: each request carries the shutdown signal, so that its response, a watch
//! above all, ends cleanly at an event boundary once shutdown starts, and the client
//! re-watches instead of seeing a cut event. (The server stops accepting connections and waits
//! for open requests up to the shutdown deadline.)

use std::task::{Context, Poll};

use kube_api_rewriter_layer::ShutdownSignal;
use tower::{Layer, Service};

use super::Routed;

/// Hands each request the shutdown signal.
#[derive(Debug, Clone)]
pub struct DrainLayer {
    shutdown: ShutdownSignal,
}

impl DrainLayer {
    /// Watches `shutdown`.
    pub fn new(shutdown: ShutdownSignal) -> Self {
        Self { shutdown }
    }
}

impl<S> Layer<S> for DrainLayer {
    type Service = DrainService<S>;

    fn layer(&self, inner: S) -> DrainService<S> {
        DrainService {
            shutdown: self.shutdown.clone(),
            inner,
        }
    }
}

/// The service [`DrainLayer`] makes.
#[derive(Debug, Clone)]
pub struct DrainService<S> {
    shutdown: ShutdownSignal,
    inner: S,
}

impl<S: Service<Routed>> Service<Routed> for DrainService<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut r: Routed) -> S::Future {
        r.exchange = r.exchange.with_shutdown(self.shutdown.clone());
        self.inner.call(r)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::Response;
    use http_body_util::BodyExt;
    use kube_api_rewriter_layer::{Shutdown, body};
    use tower::ServiceExt;

    use super::super::test_support::{mock, routed};
    use super::*;

    const WATCH: &str = "/apis/kubevirt.io/v1/namespaces/d/virtualmachines?watch=1";
    const EVENT: &str = r#"{"type":"ADDED","object":{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachine","metadata":{"name":"a"}}}"#;

    /// A watch through the layer whose upstream sends one event and then never ends: once
    /// shutdown fires, the client's stream ends cleanly after the event.
    #[tokio::test]
    async fn a_watch_ends_at_an_event_boundary_once_shutdown_starts() {
        let shutdown = Shutdown::new();
        let (svc, mut handle) = mock();
        let svc = DrainLayer::new(shutdown.signal()).layer(svc);
        let call = tokio::spawn(svc.oneshot(routed(WATCH)));
        let (r, send) = handle.next_request().await.expect("forwarded");
        let (tx, rx) = tokio::sync::mpsc::channel::<
            Result<http_body::Frame<Bytes>, kube_api_rewriter_layer::BoxError>,
        >(4);
        tx.send(Ok(http_body::Frame::data(Bytes::from(format!("{EVENT}\n")))))
            .await
            .expect("event");
        let upstream = Response::builder()
            .header("content-type", "application/json")
            .body(body::boxed(http_body_util::StreamBody::new(stream_of(rx))))
            .expect("response");
        let restored = r.exchange.response(upstream).await;
        send.send_response(restored);
        let mut resp = call.await.expect("task").expect("answered").into_body();
        let first = resp.frame().await.expect("a frame").expect("data");
        let first = first.into_data().expect("data");
        assert!(String::from_utf8_lossy(&first).contains("\"kind\":\"VirtualMachine\""));
        shutdown.trigger();
        let rest = tokio::time::timeout(std::time::Duration::from_secs(5), resp.collect())
            .await
            .expect("the watch ended at shutdown")
            .expect("cleanly");
        assert!(rest.to_bytes().is_empty(), "nothing after the boundary");
        drop(tx);
    }

    fn stream_of<T: Send + 'static>(
        mut rx: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures::Stream<Item = T> {
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}
