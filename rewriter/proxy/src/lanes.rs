//! Upstream connections that scale with the streams in flight.
//!
//! hyper's pooled client keeps one HTTP/2 connection per host and, once the server's
//! `SETTINGS_MAX_CONCURRENT_STREAMS` is reached (250 on kube-apiserver 1.20, Go's default),
//! queues further requests until a stream frees. Watches do not free their stream for minutes,
//! so the 251st watch (and every GET behind it) would hang. Go's HTTP/2 transport opens another
//! connection instead; this does the same: requests go to *lanes*, each a pooled client with its
//! own connection, and a lane takes at most [`STREAMS_PER_CONNECTION`] requests in flight (a
//! request is in flight until its response body ends or is dropped). When every lane is full a
//! new one opens; empty lanes close when the others have room to spare.
//!
//! Hand-written: hyper-util's pool has no per-connection stream budget, and hyper does not
//! expose the peer's stream limit, so the budget is fixed below any server's (RFC 9113
//! recommends servers allow at least 100).

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use http_body_util::combinators::UnsyncBoxBody;
use kube_api_rewriter_layer::BoxError;

/// Requests in flight on one upstream connection at most (RFC 9113's recommended minimum for
/// `SETTINGS_MAX_CONCURRENT_STREAMS`; kube-apiserver allows 250).
pub const STREAMS_PER_CONNECTION: usize = 100;

/// The lanes of one kind of client.
pub(crate) struct Lanes<C> {
    make: Box<dyn Fn() -> C + Send + Sync>,
    per: usize,
    lanes: Mutex<Vec<Arc<Lane<C>>>>,
}

impl<C> std::fmt::Debug for Lanes<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lanes")
            .field("per", &self.per)
            .field("streams", &self.streams())
            .finish()
    }
}

pub(crate) struct Lane<C> {
    pub(crate) client: C,
    streams: AtomicUsize,
}

/// One request in flight on a lane; the slot frees when dropped.
pub struct Slot<C>(Arc<Lane<C>>);

impl<C> Drop for Slot<C> {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<C> Slot<C> {
    pub(crate) fn client(&self) -> &C {
        &self.0.client
    }
}

impl<C> Lanes<C> {
    /// Lanes of clients made by `make`, `per` requests in flight each.
    pub(crate) fn new(per: usize, make: impl Fn() -> C + Send + Sync + 'static) -> Self {
        Self {
            make: Box::new(make),
            per: per.max(1),
            lanes: Mutex::new(Vec::new()),
        }
    }

    /// A slot on the first lane with room, opening a lane when all are full.
    pub(crate) fn take(&self) -> Slot<C> {
        let mut lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        // Close empty lanes while the others keep a whole lane of room.
        let room: usize = lanes
            .iter()
            .map(|l| self.per.saturating_sub(l.streams.load(Ordering::Acquire)))
            .sum();
        if lanes.len() > 1 && room >= 2 * self.per {
            // The newest lanes go first: the oldest connections stay warm.
            let mut spare = room - self.per;
            let mut i = lanes.len();
            while i > 1 && spare >= self.per {
                i -= 1;
                if lanes[i].streams.load(Ordering::Acquire) == 0 {
                    lanes.remove(i);
                    spare -= self.per;
                }
            }
        }
        for l in lanes.iter() {
            let n = l.streams.load(Ordering::Acquire);
            if n < self.per
                && l.streams
                    .compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                return Slot(Arc::clone(l));
            }
        }
        let lane = Arc::new(Lane {
            client: (self.make)(),
            streams: AtomicUsize::new(1),
        });
        lanes.push(Arc::clone(&lane));
        if lanes.len() > 1 {
            tracing::debug!(
                lanes = lanes.len(),
                "every upstream connection is at its stream budget; opening another"
            );
        }
        Slot(lane)
    }

    /// Requests in flight over all lanes.
    pub(crate) fn streams(&self) -> usize {
        let lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        lanes.iter().map(|l| l.streams.load(Ordering::Acquire)).sum()
    }

    /// Lanes open.
    pub(crate) fn len(&self) -> usize {
        self.lanes.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// A response body from upstream: holds its lane slot until it ends or is dropped, and (for
/// non-watch responses) fails when upstream sends nothing for the stall timeout while the proxy
/// waits for it. The timer runs only while the proxy waits on upstream, never while a slow
/// client keeps the proxy from reading.
pub struct UpstreamBody {
    /// hyper's body, or a watch's that drives its own connection (`driven.rs`).
    inner: UnsyncBoxBody<Bytes, hyper::Error>,
    slot: Option<Box<dyn Send + Sync>>,
    stall: Option<Duration>,
    waiting: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("stall", &self.stall)
            .finish()
    }
}

/// Upstream sent nothing for the stall timeout in the middle of a response body.
#[derive(Debug, thiserror::Error)]
#[error("upstream sent nothing for {0:?} in the middle of the response body")]
pub struct Stalled(pub Duration);

impl UpstreamBody {
    pub(crate) fn new<B>(inner: B, slot: Box<dyn Send + Sync>, stall: Option<Duration>) -> Self
    where
        B: http_body::Body<Data = Bytes, Error = hyper::Error> + Send + 'static,
    {
        Self {
            inner: inner.boxed_unsync(),
            slot: Some(slot),
            stall,
            waiting: None,
        }
    }
}

impl http_body::Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(r) => {
                this.waiting = None;
                if r.is_none() || matches!(r, Some(Err(_))) {
                    this.slot = None;
                }
                Poll::Ready(r.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let Some(limit) = this.stall else {
                    return Poll::Pending;
                };
                let sleep = this
                    .waiting
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.waiting = None;
                        this.slot = None;
                        Poll::Ready(Some(Err(Box::new(Stalled(limit)))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
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

    #[test]
    fn a_full_lane_opens_another_and_empty_ones_close() {
        let made = Arc::new(AtomicUsize::new(0));
        let m = Arc::clone(&made);
        let lanes = Lanes::new(2, move || m.fetch_add(1, Ordering::SeqCst));
        let a = lanes.take();
        let b = lanes.take();
        assert_eq!((*a.client(), *b.client()), (0, 0), "the first lane takes two");
        let c = lanes.take();
        assert_eq!(*c.client(), 1, "the third request opens a second lane");
        assert_eq!((lanes.len(), lanes.streams()), (2, 3));
        drop(a);
        let d = lanes.take();
        assert_eq!(*d.client(), 0, "a freed slot on the first lane is reused");
        drop((b, c, d));
        assert_eq!(lanes.streams(), 0);
        let e = lanes.take();
        assert_eq!(lanes.len(), 1, "an empty lane closes when the others have room");
        assert_eq!(made.load(Ordering::SeqCst), 2);
        drop(e);
    }
}
