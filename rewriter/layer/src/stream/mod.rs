//! Streamed responses: LIST and WATCH bodies pumped through the core's push rewriters in a
//! task, with optional gzip on both sides, bounded items, and clean ends at shutdown; a large
//! LIST moves to the blocking pool part-way ([`offload`]).

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use http::Response;
use http::header::{self, HeaderValue};
use http_body_util::BodyExt;
use kube_api_rewriter::stream::{ListRewriter, WatchRewriter};

use crate::body::{self, Aborted, Body, Counted};
use crate::ctx::Ctx;
use crate::error::Error;
use crate::gzip::{GZ_SLICE, Gunzip};
use crate::metrics::ByteCounter;
use crate::recycle::Recycler;

mod offload;

/// Chunks that may wait between the rewriting task and the client.
const CHANNEL_DEPTH: usize = 4;
/// LIST output is sent once this much is ready (watch events go as soon as upstream has no
/// more at hand).
const LIST_CHUNK: usize = 64 << 10;
/// Output that has already arrived is gathered and sent together up to this much (so with
/// [`CHANNEL_DEPTH`] a stream holds about 1 MiB at most between upstream and the client).
const BATCH: usize = 256 << 10;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    List,
    Watch,
}

enum Rewriter<'r> {
    List(ListRewriter<'r>),
    Watch(WatchRewriter<'r>),
}

impl Rewriter<'_> {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> kube_api_rewriter::Result<()> {
        match self {
            Rewriter::List(r) => r.feed(chunk, out),
            Rewriter::Watch(r) => r.feed(chunk, out),
        }
    }

    fn finish(self, out: &mut Vec<u8>) -> kube_api_rewriter::Result<()> {
        match self {
            Rewriter::List(r) => r.finish(out),
            Rewriter::Watch(r) => r.finish(out),
        }
    }

    /// Ends the body: the rest of the gzip stream (when `dec`), then the rewriter's end.
    fn end(mut self, dec: Option<Gunzip>, plain: &mut Vec<u8>, out: &mut Vec<u8>) -> Result<(), String> {
        let rewrite = |e: kube_api_rewriter::Error| format!("rewriting the response: {e}");
        if let Some(g) = dec {
            plain.clear();
            g.finish(plain).map_err(|e| format!("decoding gzip: {e}"))?;
            self.feed(plain, out).map_err(rewrite)?;
        }
        self.finish(out).map_err(rewrite)
    }

    /// Input held for the item or event not yet complete.
    fn held(&self) -> usize {
        match self {
            Rewriter::List(r) => r.held(),
            Rewriter::Watch(r) => r.held(),
        }
    }

    /// Feeds `data` (gzip-decoded first, a slice at a time, when `dec`), failing once the
    /// unfinished item or event is over `max_item`; returns the bytes the rewriter took.
    fn feed_checked(
        &mut self,
        dec: Option<&mut Gunzip>,
        data: &[u8],
        plain: &mut Vec<u8>,
        out: &mut Vec<u8>,
        max_item: usize,
    ) -> Result<usize, Fail> {
        let rewrite = |e: kube_api_rewriter::Error| Fail::Abort(format!("rewriting the response: {e}"));
        match dec {
            Some(g) => {
                let mut fed = 0;
                for piece in data.chunks(GZ_SLICE) {
                    plain.clear();
                    g.push(piece, plain)
                        .map_err(|e| Fail::Abort(format!("decoding gzip: {e}")))?;
                    self.feed(plain, out).map_err(rewrite)?;
                    self.check(max_item)?;
                    fed += plain.len();
                }
                Ok(fed)
            }
            None => {
                self.feed(data, out).map_err(rewrite)?;
                self.check(max_item)?;
                Ok(data.len())
            }
        }
    }

    fn check(&self, max_item: usize) -> Result<(), Fail> {
        if self.held() > max_item {
            return Err(Fail::TooLarge(Error::ItemTooLarge { limit: max_item }));
        }
        Ok(())
    }
}

/// Why a stream ends early.
enum Fail {
    /// Reset the response.
    Abort(String),
    /// An item or event over the limit: an `ERROR` event for a watch, a reset for a list.
    TooLarge(Error),
}

/// Streams `upstream` through a rewriter in a task; `initial` is decoded input already read.
pub(crate) fn stream(
    ctx: Ctx,
    mut parts: http::response::Parts,
    upstream: Counted<Body>,
    dec: Option<Gunzip>,
    initial: Vec<u8>,
    kind: Kind,
    to_client: Option<ByteCounter>,
) -> Response<Body> {
    let encode = dec.is_some() && ctx.client_gzip;
    parts.headers.remove(header::CONTENT_LENGTH);
    if encode {
        parts
            .headers
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    } else {
        parts.headers.remove(header::CONTENT_ENCODING);
    }
    let (tx, rx) = body::channel(CHANNEL_DEPTH);
    tokio::spawn(pump(ctx, upstream, dec, initial, kind, encode, tx));
    Response::from_parts(parts, body::boxed(Counted::new(rx, to_client)))
}

/// Output side of a stream: optional gzip, then the channel.
struct Out {
    tx: body::Sender,
    enc: Option<GzEncoder<Vec<u8>>>,
    /// Buffers the client connection has written come back here.
    spare: Recycler,
}

impl Out {
    /// Sends `data` (flushed through gzip when `flush`); false when the client is gone.
    async fn send(&mut self, data: &mut Vec<u8>, flush: bool) -> bool {
        let bytes = match &mut self.enc {
            Some(e) => {
                if e.write_all(data).is_err() || (flush && e.flush().is_err()) {
                    return false;
                }
                data.clear();
                if e.get_ref().is_empty() {
                    return true;
                }
                self.spare.hand_over(e.get_mut())
            }
            // Hand the bytes over and keep a buffer of the same size, so the next item or event
            // is not written into an empty Vec that grows by reallocating.
            None if data.is_empty() => return true,
            None => self.spare.hand_over(data),
        };
        self.tx.send(Ok(bytes)).await.is_ok()
    }

    /// Ends the body cleanly.
    async fn close(mut self) {
        if let Some(e) = self.enc.take()
            && let Ok(tail) = e.finish()
            && !tail.is_empty()
        {
            let _ = self.tx.send(Ok(Bytes::from(tail))).await;
        }
    }

    /// Ends a stream that cannot go on: an item over the limit ends a watch with the events
    /// complete so far and an `ERROR` event; anything else resets the response.
    async fn fail(mut self, f: Fail, buf: &mut Vec<u8>, watch: bool) {
        match f {
            Fail::TooLarge(e) if watch => {
                tracing::warn!(error = %e, "watch ended with an ERROR event");
                buf.extend_from_slice(&e.watch_event());
                if self.send(buf, true).await {
                    self.close().await;
                }
            }
            Fail::TooLarge(e) => self.abort(e.to_string()).await,
            Fail::Abort(why) => self.abort(why).await,
        }
    }

    /// Ends the body with an error: the client sees a reset, not an end.
    async fn abort(self, why: String) {
        tracing::warn!(error = %why, "response stream aborted");
        let _ = self.tx.send(Err(Box::new(Aborted(why)))).await;
    }
}

/// One stream's rewriting: upstream in, through the rewriter, out to the client.
struct Pump {
    ctx: Ctx,
    upstream: Body,
    dec: Option<Gunzip>,
    rw: Rewriter<'static>,
    out: Out,
    /// Output not yet sent.
    buf: Vec<u8>,
    /// gzip-decoded input.
    plain: Vec<u8>,
    /// Time spent rewriting.
    cpu: Duration,
    /// Input the rewriter has taken so far (after gzip decoding).
    fed: usize,
    watch: bool,
    /// The rewriting has moved to the blocking pool.
    offloaded: bool,
}

async fn pump(
    ctx: Ctx,
    upstream: Counted<Body>,
    dec: Option<Gunzip>,
    initial: Vec<u8>,
    kind: Kind,
    encode: bool,
    tx: body::Sender,
) {
    let watch = kind == Kind::Watch;
    let rw = match kind {
        Kind::List => Rewriter::List(ctx.route.list_rewriter(Arc::clone(&ctx.rules))),
        Kind::Watch => Rewriter::Watch(ctx.route.watch_rewriter(Arc::clone(&ctx.rules))),
    };
    let out = Out {
        tx,
        enc: encode.then(|| GzEncoder::new(Vec::new(), Compression::fast())),
        spare: Recycler::default(),
    };
    let mut p = Pump {
        ctx,
        upstream: body::boxed(upstream),
        dec,
        rw,
        out,
        buf: Vec::with_capacity(if watch { 4096 } else { LIST_CHUNK * 2 }),
        plain: Vec::new(),
        cpu: Duration::ZERO,
        fed: initial.len(),
        watch,
        offloaded: false,
    };
    let t0 = Instant::now();
    let first =
        p.rw.feed(&initial, &mut p.buf)
            .map_err(|e| Fail::Abort(format!("rewriting the response: {e}")))
            .and_then(|()| p.rw.check(p.ctx.limits.max_item));
    p.cpu += t0.elapsed();
    drop(initial);
    if let Err(f) = first {
        p.ctx.rewrote(false, p.cpu);
        return p.out.fail(f, &mut p.buf, watch).await;
    }
    p.run().await;
}

impl Pump {
    async fn run(mut self) {
        let watch = self.watch;
        let max_item = self.ctx.limits.max_item;
        let stop = self.ctx.shutdown.clone().cancelled();
        tokio::pin!(stop);
        // Whether upstream had nothing at hand after the connection task was given a turn.
        let mut yielded = false;
        loop {
            // Output leaves as soon as upstream has nothing more at hand: what has already
            // arrived is taken first and sent together (one channel hand-off and one write to
            // the client for a burst of watch events instead of one each), up to `BATCH`, but
            // nothing waits for later input.
            //
            // hyper's client body holds one frame: the connection task decodes the next chunk
            // of what it has already read only when it next runs. So "nothing at hand" is
            // believed only after one yield to the scheduler (microseconds), which lets that
            // task (and the I/O driver) run; an idle upstream still costs a lone event just
            // that one yield.
            let at_hand = if !self.buf.is_empty() && self.buf.len() < BATCH {
                match frame_at_hand(&mut self.upstream).await {
                    Some(f) => Some(f),
                    None if !yielded => {
                        yielded = true;
                        tokio::task::yield_now().await;
                        continue;
                    }
                    None => None,
                }
            } else {
                None
            };
            yielded = false;
            let frame = match at_hand {
                Some(f) => f,
                None => {
                    if !self.buf.is_empty()
                        && (watch || self.buf.len() >= LIST_CHUNK)
                        && !self.out.send(&mut self.buf, watch).await
                    {
                        return; // The client went away: dropping `upstream` cancels the request.
                    }
                    tokio::select! {
                        biased;
                        _ = self.out.tx.closed() => return,
                        _ = &mut stop, if watch => {
                            // Shutdown: end the watch cleanly after the last whole event; the
                            // client re-watches.
                            self.ctx.rewrote(true, self.cpu);
                            if self.out.send(&mut self.buf, true).await {
                                self.out.close().await;
                            }
                            return;
                        }
                        f = self.upstream.frame() => f,
                    }
                }
            };
            let data = match frame {
                None => {
                    let t0 = Instant::now();
                    let res = self.rw.end(self.dec.take(), &mut self.plain, &mut self.buf);
                    self.cpu += t0.elapsed();
                    self.ctx.rewrote(res.is_ok(), self.cpu);
                    match res {
                        Ok(()) => {
                            if self.out.send(&mut self.buf, true).await {
                                self.out.close().await;
                            }
                        }
                        Err(e) => self.out.abort(e).await,
                    }
                    return;
                }
                Some(Err(e)) => {
                    self.ctx.rewrote(false, self.cpu);
                    let why = format!("reading the response from upstream: {e}");
                    if watch {
                        // Upstream broke (kube-apiserver restarted): the whole events so far, an
                        // ERROR event and a clean end, so the client re-lists as after any watch
                        // error instead of reading a broken stream.
                        tracing::warn!(error = %why, "watch ended with an ERROR event");
                        self.buf
                            .extend_from_slice(&crate::Error::Unavailable(why).watch_event());
                        if self.out.send(&mut self.buf, true).await {
                            self.out.close().await;
                        }
                        return;
                    }
                    return self.out.abort(why).await;
                }
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) => d,
                    Err(_) => continue,
                },
            };
            let t0 = Instant::now();
            let res =
                self.rw
                    .feed_checked(self.dec.as_mut(), &data, &mut self.plain, &mut self.buf, max_item);
            self.cpu += t0.elapsed();
            match res {
                Ok(n) => self.fed += n,
                Err(f) => {
                    self.ctx.rewrote(false, self.cpu);
                    return self.out.fail(f, &mut self.buf, watch).await;
                }
            }
            if self.may_offload()
                && let Some(permit) = offload::permit()
            {
                return offload::detach(self, permit);
            }
        }
    }

    /// A large LIST goes on on the blocking pool (see [`offload`]), gzip on either side with it.
    fn may_offload(&self) -> bool {
        !self.watch && !self.offloaded && self.fed >= offload::AFTER
    }
}

/// The next frame of `body` if it is ready now; `None` when it would have to be waited for.
async fn frame_at_hand<B>(body: &mut B) -> Option<Option<Result<http_body::Frame<Bytes>, B::Error>>>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    std::future::poll_fn(|cx| match std::pin::Pin::new(&mut *body).poll_frame(cx) {
        std::task::Poll::Ready(f) => std::task::Poll::Ready(Some(f)),
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_at_hand_are_taken_without_waiting() {
        let (tx, mut rx) = body::channel(4);
        assert!(frame_at_hand(&mut rx).await.is_none(), "nothing sent yet");
        tx.send(Ok(Bytes::from_static(b"{}\n"))).await.expect("send");
        tx.send(Ok(Bytes::from_static(b"[]\n"))).await.expect("send");
        for want in [&b"{}\n"[..], b"[]\n"] {
            let f = frame_at_hand(&mut rx).await.expect("ready").expect("a frame");
            assert_eq!(f.expect("data").into_data().expect("data"), want);
        }
        assert!(frame_at_hand(&mut rx).await.is_none(), "would wait");
        drop(tx);
        assert!(
            matches!(frame_at_hand(&mut rx).await, Some(None)),
            "the end is at hand"
        );
    }

    #[tokio::test]
    async fn out_send_keeps_the_buffer_capacity() {
        let (tx, mut rx) = body::channel(4);
        let mut out = Out {
            tx,
            enc: None,
            spare: Recycler::default(),
        };
        let mut buf = Vec::with_capacity(LIST_CHUNK * 2);
        for round in 0..3u8 {
            buf.extend_from_slice(&[round; 1000]);
            assert!(out.send(&mut buf, true).await);
            assert!(buf.is_empty() && buf.capacity() >= LIST_CHUNK * 2);
        }
        drop(out);
        let mut n = 0;
        while let Some(f) = rx.frame().await {
            let b = f.expect("a frame").into_data().expect("data");
            assert_eq!(b.len(), 1000);
            n += 1;
        }
        assert_eq!(n, 3);
    }
}
