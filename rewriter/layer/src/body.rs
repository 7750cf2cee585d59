//! Bodies: the one boxed type every rewritten request and response has, and its constructors.
//! Internally also a channel-fed streaming body and wrappers that count bytes or end a
//! pass-through watch at shutdown.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use tokio::sync::mpsc;

use crate::metrics::ByteCounter;
use crate::shutdown::ShutdownSignal;

/// A boxed error that crosses task and crate boundaries.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body type of every request and response the rewriting path produces.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

/// A whole body.
pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|never| match never {}).boxed_unsync()
}

/// An empty body.
pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// Boxes any body.
pub fn boxed<B>(b: B) -> Body
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    b.map_err(Into::into).boxed_unsync()
}

/// The error a streamed body ends with when it cannot be completed: the connection (HTTP/1) or
/// stream (HTTP/2) is then reset, so the client never takes a cut body as complete.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Aborted(pub(crate) String);

/// The sending half of a [`ChannelBody`].
pub(crate) type Sender = mpsc::Sender<Result<Bytes, BoxError>>;

/// A body fed by a task through a bounded channel (backpressure: the task waits while the
/// client reads slowly). The body ends cleanly when the sender is dropped; an `Err` sent through
/// the channel aborts it.
#[derive(Debug)]
pub(crate) struct ChannelBody {
    rx: mpsc::Receiver<Result<Bytes, BoxError>>,
}

/// A streaming body and its sender; `depth` chunks may wait in between.
pub(crate) fn channel(depth: usize) -> (Sender, ChannelBody) {
    let (tx, rx) = mpsc::channel(depth.max(1));
    (tx, ChannelBody { rx })
}

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match ready!(self.rx.poll_recv(cx)) {
            Some(Ok(b)) => Poll::Ready(Some(Ok(Frame::data(b)))),
            Some(Err(e)) => Poll::Ready(Some(Err(e))),
            None => Poll::Ready(None),
        }
    }
}

/// Counts the data bytes that pass through a body.
pub(crate) struct Counted<B> {
    inner: B,
    counter: Option<ByteCounter>,
}

impl<B> Counted<B> {
    /// Wraps `inner`; every data frame adds its length to `counter`.
    pub(crate) fn new(inner: B, counter: Option<ByteCounter>) -> Self {
        Self { inner, counter }
    }
}

impl<B> http_body::Body for Counted<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let f = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(count) = &self.counter
            && let Some(Ok(frame)) = &f
            && let Some(d) = frame.data_ref()
        {
            count(d.len() as u64);
        }
        Poll::Ready(f)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A pass-through watch body that ends cleanly at shutdown, at the first point where the bytes
/// sent so far end with a newline (JSON watch events are newline-terminated). Other watch
/// streams (protobuf) have no such point and are cut by the shutdown deadline instead.
pub(crate) struct EndOnShutdown<B> {
    inner: B,
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    stopping: bool,
    newline_framed: bool,
    at_boundary: bool,
}

impl<B> EndOnShutdown<B> {
    /// Wraps a watch body.
    pub(crate) fn new(inner: B, watch: ShutdownSignal, newline_framed: bool) -> Self {
        Self {
            inner,
            stop: Box::pin(watch.cancelled()),
            stopping: false,
            newline_framed,
            at_boundary: true,
        }
    }
}

impl<B> std::fmt::Debug for EndOnShutdown<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndOnShutdown")
            .field("stopping", &self.stopping)
            .finish_non_exhaustive()
    }
}

impl<B> http_body::Body for EndOnShutdown<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        if !this.stopping && this.newline_framed && this.stop.as_mut().poll(cx).is_ready() {
            this.stopping = true;
        }
        if this.stopping && this.at_boundary {
            return Poll::Ready(None);
        }
        let f = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if let Some(Ok(frame)) = &f
            && let Some(d) = frame.data_ref()
            && let Some(&last) = d.last()
        {
            this.at_boundary = last == b'\n';
        }
        Poll::Ready(f)
    }

    fn is_end_stream(&self) -> bool {
        (self.stopping && self.at_boundary) || self.inner.is_end_stream()
    }
}

/// Reads `inner` ahead on its own task, up to `depth` frames, so the side that writes to the
/// client finds several frames ready at once and sends them in one vectored write.
///
/// hyper hands a client response body over one frame at a time (its body channel holds a
/// single frame): passed straight on, every upstream chunk (32 KiB from kube-apiserver) costs
/// the client connection its own write and wake-up. Reading ahead batches them without copying.
/// The exact length (a `Content-Length` upstream) is kept. Dropping the body (the client went
/// away) ends the task and with it the upstream request.
pub(crate) fn prefetched(inner: Body, depth: usize) -> Body {
    let hint = http_body::Body::size_hint(&inner);
    let (tx, rx) = channel(depth);
    tokio::spawn(read_ahead(inner, tx));
    Prefetched { rx, hint }.boxed_unsync()
}

async fn read_ahead(mut inner: Body, tx: Sender) {
    loop {
        let frame = tokio::select! {
            biased;
            () = tx.closed() => return,
            f = inner.frame() => f,
        };
        let item = match frame {
            None => return,
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => Ok(d),
                Err(_) => continue, // trailers: not used by the Kubernetes API
            },
            Some(Err(e)) => Err(e),
        };
        let last = item.is_err();
        if tx.send(item).await.is_err() || last {
            return;
        }
    }
}

/// A [`ChannelBody`] that keeps the length of the body it was read from.
struct Prefetched {
    rx: ChannelBody,
    hint: SizeHint,
}

impl http_body::Body for Prefetched {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let f = ready!(Pin::new(&mut self.rx).poll_frame(cx));
        if let Some(n) = f
            .as_ref()
            .and_then(|r| r.as_ref().ok())
            .and_then(Frame::data_ref)
            .map(|d| d.len() as u64)
        {
            let (lower, upper) = (self.hint.lower(), self.hint.upper());
            self.hint = SizeHint::default();
            self.hint.set_lower(lower.saturating_sub(n));
            if let Some(u) = upper {
                self.hint.set_upper(u.saturating_sub(n));
            }
        }
        Poll::Ready(f)
    }

    fn size_hint(&self) -> SizeHint {
        self.hint
    }
}
