//! The idle timeout of client connections: HTTP/1 keep-alive and HTTP/2 connections alike end
//! after a time with no request in flight ([`Requests`]). A request is in flight from its head
//! until its response body has been sent (or dropped), so a watch never counts as idle.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

/// The requests in flight on one connection and when the last one ended.
#[derive(Debug, Clone)]
pub struct Requests {
    start: Instant,
    in_flight: Arc<AtomicU64>,
    /// Milliseconds since `start` when the connection last became idle.
    last: Arc<AtomicU64>,
}

impl Default for Requests {
    fn default() -> Self {
        Self::new()
    }
}

/// One request in flight; it ends when dropped.
#[derive(Debug)]
pub struct InFlight(Requests);

impl Drop for InFlight {
    fn drop(&mut self) {
        let ms = u64::try_from(self.0.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.0.last.store(ms, Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Requests {
    /// A new connection: idle since now.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            in_flight: Arc::new(AtomicU64::new(0)),
            last: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A request begins; hold the guard until its response body is done.
    pub fn begin(&self) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Completes once no request has been in flight for `idle`.
    pub async fn idle_for(&self, idle: Duration) {
        loop {
            if self.in_flight() == 0 {
                let deadline = self.start + Duration::from_millis(self.last.load(Ordering::Relaxed)) + idle;
                if Instant::now() < deadline {
                    tokio::time::sleep_until(deadline).await;
                    continue;
                }
                if self.in_flight() == 0 {
                    return;
                }
                // A request began meanwhile: wait a whole idle time before looking again.
            } else {
                tokio::time::sleep(idle).await;
            }
        }
    }
}

/// A response body that keeps its request in flight until it is done or dropped.
pub struct TrackedBody {
    inner: kube_api_rewriter_layer::Body,
    _flight: InFlight,
}

impl TrackedBody {
    /// Wraps `inner`.
    pub fn new(inner: kube_api_rewriter_layer::Body, flight: InFlight) -> Self {
        Self {
            inner,
            _flight: flight,
        }
    }
}

impl http_body::Body for TrackedBody {
    type Data = bytes::Bytes;
    type Error = kube_api_rewriter_layer::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_with_a_request_in_flight_is_not_idle() {
        let r = Requests::new();
        let flight = r.begin();
        assert_eq!(r.in_flight(), 1);
        let idle = r.idle_for(Duration::ZERO);
        tokio::pin!(idle);
        assert!(futures_now(idle.as_mut()).is_none(), "busy");
        drop(flight);
        assert_eq!(r.in_flight(), 0);
        r.idle_for(Duration::ZERO).await;
    }

    fn futures_now<F: std::future::Future>(f: Pin<&mut F>) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        match f.poll(&mut Context::from_waker(waker)) {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        }
    }
}
