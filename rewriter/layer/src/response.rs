//! Response rewriting, shared by the sidecar and the layer through [`crate::Exchange`].
//!
//! * `Pass`: the body streams through untouched (a watch ends at an event boundary at shutdown).
//! * `Object`: the body is read whole (bounded), rewritten, and sent with a new length; an
//!   excluded object becomes a 404 `Status`; a body that is not valid JSON is passed untouched.
//! * `List` / `Watch`: the body streams through the core's push rewriters. Output leaves as soon
//!   as an item or event is complete; watch events are sent one by one. A failure mid-body (bad
//!   JSON, upstream cut) aborts the response instead of ending it, so a client never takes a cut
//!   body as complete. A client that goes away cancels the upstream request at once.
//!
//! gzip from upstream is decoded for rewriting and encoded again when the client accepts it.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flate2::Compression;
use flate2::write::{GzEncoder, MultiGzDecoder};
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use kube_api_rewriter::Rules;
use kube_api_rewriter::stream::{ListRewriter, MAX_LOOK_AHEAD, Shape, WatchRewriter, look_ahead};
use kube_api_rewriter::{BodyMode, ResponseBody, Route, is_json};

use crate::body::{self, Aborted, Body, BoxError, Counted, EndOnShutdown};
use crate::error::{Error, status};
use crate::exchange::Limits;
use crate::headers::strip_hop_by_hop;
use crate::metrics::{ByteCounter, Decision, Flow, Observe, Side};
use crate::shutdown::Watch;

/// Compressed input decoded at a time: deflate inflates at most about 1032:1, so one slice
/// never makes more than about 8 MiB of output before the limits are checked.
const GZ_SLICE: usize = 8 << 10;
/// Chunks that may wait between the rewriting task and the client.
const CHANNEL_DEPTH: usize = 4;
/// Frames read ahead of the client on a pass-through body.
const PASS_DEPTH: usize = 16;
/// LIST output is sent once this much is ready (watch events go one by one).
const LIST_CHUNK: usize = 64 << 10;
/// Watch events that have already arrived are sent together up to this much.
const WATCH_BATCH: usize = 64 << 10;

/// What the response path needs to know about a request.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub(crate) rules: Arc<Rules>,
    pub(crate) route: Arc<Route>,
    /// The client accepts gzip.
    pub(crate) client_gzip: bool,
    pub(crate) limits: Limits,
    pub(crate) shutdown: Watch,
    pub(crate) observe: Arc<dyn Observe>,
}

impl Ctx {
    fn counter(&self, flow: Flow, decision: Decision) -> Option<ByteCounter> {
        self.observe.byte_counter(&self.route, flow, decision)
    }

    /// Records one response-body rewrite.
    fn rewrote(&self, ok: bool, took: Duration) {
        self.observe.rewritten(&self.route, Side::Target, ok, took);
    }

    fn invalid_json(&self, status: u16) {
        self.observe.invalid_json(&self.route, status);
    }
}

/// Whether a response is rewritten or passed through.
pub(crate) fn decision(route: &Route, resp_status: u16, content_type: Option<&str>) -> Decision {
    if route.response_mode(resp_status, content_type) == BodyMode::Pass {
        Decision::Pass
    } else {
        Decision::Rewrite
    }
}

/// Rewrites an upstream response for the client.
pub(crate) async fn rewrite<B>(ctx: Ctx, resp: Response<B>) -> Response<Body>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    if ctx.route.openapi.is_some() {
        return crate::openapi::respond(ctx, resp).await;
    }
    let (mut parts, body) = resp.into_parts();
    let status_code = parts.status.as_u16();
    let ct = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut mode = ctx.route.response_mode(status_code, ct.as_deref());
    let gz = match parts
        .headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
    {
        None | Some("") | Some("identity") => false,
        Some(e) if e.eq_ignore_ascii_case("gzip") || e.eq_ignore_ascii_case("x-gzip") => true,
        Some(_) => {
            // deflate, br, ...: not decoded, so not rewritten.
            mode = BodyMode::Pass;
            false
        }
    };
    strip_hop_by_hop(&mut parts.headers);
    let decision = if mode == BodyMode::Pass {
        Decision::Pass
    } else {
        Decision::Rewrite
    };
    let from_target = ctx.counter(Flow::FromTarget, decision);
    let to_client = ctx.counter(Flow::ToClient, decision);
    let upstream = Counted::new(body::boxed(body), from_target);
    match mode {
        BodyMode::Pass => {
            let b = if ctx.route.watch {
                body::boxed(EndOnShutdown::new(
                    upstream,
                    ctx.shutdown.clone(),
                    is_json(ct.as_deref()),
                ))
            } else {
                body::boxed(upstream)
            };
            let b = body::prefetched(b, PASS_DEPTH);
            Response::from_parts(parts, body::boxed(Counted::new(b, to_client)))
        }
        BodyMode::Object => match read_all(upstream, Vec::new(), ctx.limits.max_response).await {
            Ok(raw) => object(&ctx, parts, raw, gz, to_client),
            Err(e) => upstream_read_error(e),
        },
        BodyMode::List => list(ctx, parts, upstream, gz, to_client).await,
        BodyMode::Watch => {
            let dec = gz.then(Gunzip::new);
            stream(ctx, parts, upstream, dec, Vec::new(), Kind::Watch, to_client)
        }
    }
}

/// Why a response could not be read whole.
enum ReadError {
    Upstream(BoxError),
    TooLarge(Error),
}

fn upstream_read_error(e: ReadError) -> Response<Body> {
    match e {
        ReadError::Upstream(e) => status(
            StatusCode::BAD_GATEWAY,
            "InternalError",
            &format!("reading the response from upstream: {e}"),
        ),
        ReadError::TooLarge(e) => {
            tracing::warn!(error = %e, "response refused");
            e.into_response()
        }
    }
}

async fn read_all(mut b: Counted<Body>, mut acc: Vec<u8>, limit: usize) -> Result<Vec<u8>, ReadError> {
    while let Some(f) = b.frame().await {
        if let Ok(d) = f.map_err(ReadError::Upstream)?.into_data() {
            if acc.len() + d.len() > limit {
                return Err(ReadError::TooLarge(Error::ResponseTooLarge { limit }));
            }
            acc.extend_from_slice(&d);
        }
    }
    Ok(acc)
}

/// Rewrites a whole body. `raw` is the body as received (gzip when `gz`).
fn object(
    ctx: &Ctx,
    mut parts: http::response::Parts,
    raw: Vec<u8>,
    gz: bool,
    to_client: Option<ByteCounter>,
) -> Response<Body> {
    let pass = |mut parts: http::response::Parts, raw: Vec<u8>| {
        parts
            .headers
            .insert(header::CONTENT_LENGTH, HeaderValue::from(raw.len()));
        if let Some(count) = &to_client {
            count(raw.len() as u64);
        }
        Response::from_parts(parts, body::full(raw))
    };
    let (plain, compressed) = if gz {
        let mut g = Gunzip::new();
        let mut out = Vec::new();
        let limit = ctx.limits.max_response;
        let mut inflated = Ok(());
        for piece in raw.chunks(GZ_SLICE) {
            inflated = g.push(piece, &mut out);
            if inflated.is_err() {
                break;
            }
            if out.len() > limit {
                return upstream_read_error(ReadError::TooLarge(Error::ResponseTooLarge { limit }));
            }
        }
        if inflated.and_then(|()| g.finish(&mut out)).is_err() {
            ctx.invalid_json(parts.status.as_u16());
            return pass(parts, raw);
        }
        if out.len() > limit {
            return upstream_read_error(ReadError::TooLarge(Error::ResponseTooLarge { limit }));
        }
        (out, Some(raw))
    } else {
        (raw, None)
    };
    let t0 = Instant::now();
    let res = ctx.route.response_body(&ctx.rules, &plain);
    let took = t0.elapsed();
    let (out, not_found) = match res {
        Ok(ResponseBody::Body(b)) => (b.into_owned(), false),
        Ok(ResponseBody::NotFound(s)) => (s, true),
        Err(e) => {
            ctx.rewrote(false, took);
            ctx.invalid_json(parts.status.as_u16());
            tracing::debug!(path = %ctx.route.path, error = %e, "response body not rewritable; passed untouched");
            // Send what upstream sent, as it sent it.
            return pass(parts, compressed.unwrap_or(plain));
        }
    };
    ctx.rewrote(true, took);
    if not_found {
        parts.status = StatusCode::NOT_FOUND;
        parts
            .headers
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    let out = if gz && ctx.client_gzip && !not_found {
        parts
            .headers
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        gzip(&out)
    } else {
        parts.headers.remove(header::CONTENT_ENCODING);
        out
    };
    pass(parts, out)
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::with_capacity(b.len() / 4 + 64), Compression::fast());
    // Writing to a Vec cannot fail.
    let _ = e.write_all(b);
    e.finish().unwrap_or_default()
}

/// Reads the head of a LIST response until it shows whether it is a list, then streams it, or
/// (a Table, a Status, anything else) rewrites it whole.
async fn list(
    ctx: Ctx,
    parts: http::response::Parts,
    mut upstream: Counted<Body>,
    gz: bool,
    to_client: Option<ByteCounter>,
) -> Response<Body> {
    let mut raw = Vec::new();
    let mut plain = Vec::new();
    let mut dec = gz.then(Gunzip::new);
    loop {
        let frame = match upstream.frame().await {
            None => break,
            Some(Err(e)) => return upstream_read_error(ReadError::Upstream(e)),
            Some(Ok(f)) => f,
        };
        let Ok(d) = frame.into_data() else { continue };
        raw.extend_from_slice(&d);
        match &mut dec {
            Some(g) => {
                if g.push_sliced(&d, &mut plain, MAX_LOOK_AHEAD).is_err() {
                    break;
                }
            }
            None => plain.extend_from_slice(&d),
        }
        if plain.is_empty() {
            continue;
        }
        match look_ahead(&plain, false) {
            Some(Shape::List) => return stream(ctx, parts, upstream, dec, plain, Kind::List, to_client),
            Some(Shape::Object) => break,
            None => {}
        }
    }
    match read_all(upstream, raw, ctx.limits.max_response).await {
        Ok(raw) => object(&ctx, parts, raw, gz, to_client),
        Err(e) => upstream_read_error(e),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
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

    /// Input held for the item or event not yet complete.
    fn held(&self) -> usize {
        match self {
            Rewriter::List(r) => r.held(),
            Rewriter::Watch(r) => r.held(),
        }
    }

    /// Feeds `data` (gzip-decoded first, a slice at a time, when `dec`), failing once the
    /// unfinished item or event is over `max_item`.
    fn feed_checked(
        &mut self,
        dec: Option<&mut Gunzip>,
        data: &[u8],
        plain: &mut Vec<u8>,
        out: &mut Vec<u8>,
        max_item: usize,
    ) -> Result<(), Fail> {
        let rewrite = |e: kube_api_rewriter::Error| Fail::Abort(format!("rewriting the response: {e}"));
        match dec {
            Some(g) => {
                for piece in data.chunks(GZ_SLICE) {
                    plain.clear();
                    g.push(piece, plain)
                        .map_err(|e| Fail::Abort(format!("decoding gzip: {e}")))?;
                    self.feed(plain, out).map_err(rewrite)?;
                    self.check(max_item)?;
                }
            }
            None => {
                self.feed(data, out).map_err(rewrite)?;
                self.check(max_item)?;
            }
        }
        Ok(())
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
fn stream(
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
                std::mem::take(e.get_mut())
            }
            // Hand the bytes over and keep a buffer of the same size, so the next item or event
            // is not written into an empty Vec that grows by reallocating.
            None => take_keeping_capacity(data),
        };
        if bytes.is_empty() {
            return true;
        }
        self.tx.send(Ok(Bytes::from(bytes))).await.is_ok()
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

async fn pump(
    ctx: Ctx,
    mut upstream: Counted<Body>,
    mut dec: Option<Gunzip>,
    initial: Vec<u8>,
    kind: Kind,
    encode: bool,
    tx: body::Sender,
) {
    let rules = Arc::clone(&ctx.rules);
    let mut rw = match kind {
        Kind::List => Rewriter::List(ctx.route.list_rewriter(&rules)),
        Kind::Watch => Rewriter::Watch(ctx.route.watch_rewriter(&rules)),
    };
    let watch = kind == Kind::Watch;
    let mut out = Out {
        tx,
        enc: encode.then(|| GzEncoder::new(Vec::new(), Compression::fast())),
    };
    let mut buf = Vec::with_capacity(if watch { 4096 } else { LIST_CHUNK * 2 });
    let mut plain = Vec::new();
    let mut cpu = Duration::ZERO;
    let stop = ctx.shutdown.clone().cancelled();
    tokio::pin!(stop);

    let max_item = ctx.limits.max_item;
    let t0 = Instant::now();
    let first = rw
        .feed(&initial, &mut buf)
        .map_err(|e| Fail::Abort(format!("rewriting the response: {e}")))
        .and_then(|()| rw.check(max_item));
    cpu += t0.elapsed();
    if let Err(f) = first {
        ctx.rewrote(false, cpu);
        return out.fail(f, &mut buf, watch).await;
    }
    drop(initial);
    loop {
        // Watch events leave as soon as upstream has nothing more at hand: events that have
        // already arrived are taken first and sent together (one channel hand-off and one write
        // for several events instead of one each), but none waits for a later one.
        let at_hand = if watch && !buf.is_empty() && buf.len() < WATCH_BATCH {
            frame_at_hand(&mut upstream).await
        } else {
            None
        };
        let frame = match at_hand {
            Some(f) => f,
            None => {
                if !buf.is_empty() && (watch || buf.len() >= LIST_CHUNK) && !out.send(&mut buf, watch).await {
                    return; // The client went away: dropping `upstream` cancels the request.
                }
                tokio::select! {
                    biased;
                    _ = out.tx.closed() => return,
                    _ = &mut stop, if watch => {
                        // Shutdown: end the watch cleanly after the last whole event; the client re-watches.
                        ctx.rewrote(true, cpu);
                        if out.send(&mut buf, true).await {
                            out.close().await;
                        }
                        return;
                    }
                    f = upstream.frame() => f,
                }
            }
        };
        let data = match frame {
            None => {
                let t0 = Instant::now();
                let mut res = Ok(());
                if let Some(g) = dec.take() {
                    plain.clear();
                    res = g.finish(&mut plain).map_err(|e| format!("decoding gzip: {e}"));
                    if res.is_ok() {
                        res = rw
                            .feed(&plain, &mut buf)
                            .map_err(|e| format!("rewriting the response: {e}"));
                    }
                }
                if res.is_ok() {
                    res = rw
                        .finish(&mut buf)
                        .map_err(|e| format!("rewriting the response: {e}"));
                }
                cpu += t0.elapsed();
                ctx.rewrote(res.is_ok(), cpu);
                match res {
                    Ok(()) => {
                        if out.send(&mut buf, true).await {
                            out.close().await;
                        }
                    }
                    Err(e) => out.abort(e).await,
                }
                return;
            }
            Some(Err(e)) => {
                ctx.rewrote(false, cpu);
                return out
                    .abort(format!("reading the response from upstream: {e}"))
                    .await;
            }
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => d,
                Err(_) => continue,
            },
        };
        let t0 = Instant::now();
        let res = rw.feed_checked(dec.as_mut(), &data, &mut plain, &mut buf, max_item);
        cpu += t0.elapsed();
        if let Err(f) = res {
            ctx.rewrote(false, cpu);
            return out.fail(f, &mut buf, watch).await;
        }
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

/// Takes the contents of `data`, leaving it empty with the same capacity.
fn take_keeping_capacity(data: &mut Vec<u8>) -> Vec<u8> {
    let cap = data.capacity();
    std::mem::replace(data, Vec::with_capacity(cap))
}

/// Push-style gzip decoding.
struct Gunzip {
    dec: MultiGzDecoder<Vec<u8>>,
}

impl Gunzip {
    fn new() -> Self {
        Self {
            dec: MultiGzDecoder::new(Vec::new()),
        }
    }

    fn push(&mut self, data: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
        self.dec.write_all(data)?;
        out.append(self.dec.get_mut());
        Ok(())
    }

    /// Pushes `data` a slice at a time, failing once `out` is over `limit`.
    fn push_sliced(&mut self, data: &[u8], out: &mut Vec<u8>, limit: usize) -> std::io::Result<()> {
        for piece in data.chunks(GZ_SLICE) {
            self.push(piece, out)?;
            if out.len() > limit {
                return Err(std::io::Error::other("inflated past the limit"));
            }
        }
        Ok(())
    }

    fn finish(self, out: &mut Vec<u8>) -> std::io::Result<()> {
        let mut rest = self.dec.finish()?;
        out.append(&mut rest);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sending_keeps_the_buffer_capacity() {
        let mut buf = Vec::with_capacity(8192);
        buf.extend_from_slice(&[b'x'; 5000]);
        let sent = take_keeping_capacity(&mut buf);
        assert_eq!(sent.len(), 5000);
        assert!(buf.is_empty());
        assert!(buf.capacity() >= 8192, "{}", buf.capacity());
    }

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
        let mut out = Out { tx, enc: None };
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
