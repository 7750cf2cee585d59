//! Upstream connections that scale with the streams in flight.
//!
//! hyper's pooled client keeps one HTTP/2 connection per host and, once the server's
//! `SETTINGS_MAX_CONCURRENT_STREAMS` is reached (Go's default, 250, on kube-apiserver),
//! queues further requests until a stream frees. Watches do not free their stream for minutes,
//! so the 251st watch (and every GET behind it) would hang. Go's HTTP/2 transport opens another
//! connection instead; this does the same: requests go to *lanes*, each a pooled client with its
//! own connection, and a lane takes at most [`STREAMS_PER_CONNECTION`] requests in flight (a
//! request is in flight until its response body ends or is dropped). When every lane is full a
//! new one opens; empty lanes close when the others have room to spare.
//!
//! A lane's connection opens once: hyper-util's client cannot know a TLS connection will speak
//! HTTP/2 before ALPN says so, so requests arriving together on a lane without a connection
//! would each open one (a burst of N requests, N TLS handshakes, all but one dropped). The
//! first request on such a lane opens it alone ([`Slot::opening`]); the others wait until its
//! connection is in the pool (or failed), then share it. A lane knows its open connections by
//! its connector ([`LaneConnector`]), so a lane whose connection closed (idle, GOAWAY) opens
//! the next one the same way.
//!
//! Hand-written: hyper-util's pool has no per-connection stream budget, and hyper does not
//! expose the peer's stream limit, so the budget is fixed below any server's (RFC 9113
//! recommends servers allow at least 100).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use http_body_util::combinators::UnsyncBoxBody;
use hyper_util::client::legacy::connect::{Connected, Connection};
use kube_api_rewriter_layer::BoxError;

/// Requests in flight on one upstream connection at most (RFC 9113's recommended minimum for
/// `SETTINGS_MAX_CONCURRENT_STREAMS`; kube-apiserver allows 250).
pub const STREAMS_PER_CONNECTION: usize = 100;

/// The lanes of one kind of client.
pub(crate) struct Lanes<C> {
    make: Box<dyn Fn(Live) -> C + Send + Sync>,
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
    /// Connections open on this lane (counted by its connector).
    live: Live,
    /// Held by the request that opens the lane's connection.
    opening: Arc<tokio::sync::Mutex<()>>,
}

/// The open connections of one lane: [`LaneConnector`] counts them up, [`LaneIo`] down when
/// dropped.
#[derive(Debug, Clone, Default)]
pub(crate) struct Live(Arc<AtomicUsize>);

impl Live {
    fn get(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

/// The request that opens a lane's connection; the lane's other requests wait until it is
/// dropped (once the connection is in the pool, or failed).
pub(crate) struct Opening(#[allow(dead_code)] tokio::sync::OwnedMutexGuard<()>);

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

    /// `None` when the lane has a connection (the request goes ahead and shares it); else
    /// waits while another request opens one, and is `Some` when this request must open it
    /// (the first, or the next after a failed try).
    pub(crate) async fn opening(&self) -> Option<Opening> {
        // A connection counts as open once its TLS handshake is done, before its HTTP/2
        // handshake puts it in the pool: while its opener holds the lock, wait all the same.
        if self.0.live.get() > 0 && Arc::clone(&self.0.opening).try_lock_owned().is_ok() {
            return None;
        }
        let guard = Arc::clone(&self.0.opening).lock_owned().await;
        (self.0.live.get() == 0).then_some(Opening(guard))
    }
}

impl<C> Lanes<C> {
    /// Lanes of clients made by `make`, `per` requests in flight each.
    /// `make` gets the lane's connection count, for its [`LaneConnector`].
    pub(crate) fn new(per: usize, make: impl Fn(Live) -> C + Send + Sync + 'static) -> Self {
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
        let live = Live::default();
        let lane = Arc::new(Lane {
            client: (self.make)(live.clone()),
            streams: AtomicUsize::new(1),
            live,
            opening: Arc::new(tokio::sync::Mutex::new(())),
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
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lanes.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// A connector that counts the connections it opened and are still open in a [`Live`].
#[derive(Debug, Clone)]
pub(crate) struct LaneConnector<S> {
    inner: S,
    live: Live,
}

impl<S> LaneConnector<S> {
    pub(crate) fn new(inner: S, live: Live) -> Self {
        Self { inner, live }
    }
}

impl<S> tower::Service<http::Uri> for LaneConnector<S>
where
    S: tower::Service<http::Uri>,
    S::Future: Send + 'static,
{
    type Response = LaneIo<S::Response>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, dst: http::Uri) -> Self::Future {
        let connecting = self.inner.call(dst);
        let live = self.live.clone();
        Box::pin(async move {
            let io = connecting.await?;
            live.0.fetch_add(1, Ordering::AcqRel);
            Ok(LaneIo { io, live })
        })
    }
}

/// One connection of a lane; counted open until dropped.
#[derive(Debug)]
pub(crate) struct LaneIo<T> {
    io: T,
    live: Live,
}

impl<T> Drop for LaneIo<T> {
    fn drop(&mut self) {
        self.live.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<T: Connection> Connection for LaneIo<T> {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

impl<T: hyper::rt::Read + Unpin> hyper::rt::Read for LaneIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: hyper::rt::Write + Unpin> hyper::rt::Write for LaneIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}

/// A response body from upstream: holds its lane slot until it ends or is dropped, and (for
/// non-watch responses) fails when upstream sends nothing for the stall timeout while the proxy
/// waits for it. The timer runs only while the proxy waits on upstream, never while a slow
/// client keeps the proxy from reading.
pub struct UpstreamBody {
    /// hyper's body, or a watch's that drives its own connection (`watch_conn.rs`).
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
        let lanes = Lanes::new(2, move |_| m.fetch_add(1, Ordering::SeqCst));
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

    /// The first request on a lane without a connection opens it; the others wait, and go
    /// ahead without opening one once it is open. A failed try hands the opening on.
    #[tokio::test]
    async fn one_request_opens_a_lanes_connection() {
        let live = Arc::new(Mutex::new(None::<Live>));
        let l = Arc::clone(&live);
        let lanes = Lanes::new(10, move |c: Live| *l.lock().expect("lock") = Some(c));
        let first = lanes.take();
        let second = lanes.take();
        let opening = first
            .opening()
            .await
            .expect("the first request opens the connection");
        let mut waiting = Box::pin(second.opening());
        assert!(
            futures_poll(&mut waiting).is_none(),
            "the second waits while the first opens"
        );
        // The first try fails: the second opens.
        drop(opening);
        let again = futures_poll(&mut waiting).expect("ready");
        assert!(again.is_some(), "after a failed try the next request opens");
        drop(again);
        drop(waiting);
        // A connection opens (counted, not in the pool yet): the others still wait for its
        // opener, then go ahead without opening one.
        let opening = first.opening().await.expect("opens");
        let c = live.lock().expect("lock").clone().expect("made");
        c.0.fetch_add(1, Ordering::AcqRel);
        let mut waiting = Box::pin(second.opening());
        assert!(futures_poll(&mut waiting).is_none(), "waits for the opener");
        drop(opening);
        assert!(futures_poll(&mut waiting).expect("ready").is_none());
        drop(waiting);
        assert!(first.opening().await.is_none());
        assert!(lanes.take().opening().await.is_none());
    }

    /// Polls a future once.
    fn futures_poll<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        match Pin::new(f).poll(&mut Context::from_waker(waker)) {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        }
    }
}
