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
//!
//! This file decides the mode and rewrites whole bodies; `stream/` pumps lists and watches,
//! `gzip.rs` holds the codec.

use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use kube_api_rewriter::stream::{MAX_LOOK_AHEAD, Shape, look_ahead};
use kube_api_rewriter::{BodyMode, ResponseBody, Route, is_json};

use crate::body::{self, Body, BoxError, Counted, EndOnShutdown};
use crate::ctx::Ctx;
use crate::error::{Error, status};
use crate::gzip::{GZ_SLICE, Gunzip, gzip};
use crate::headers::strip_hop_by_hop;
use crate::metrics::{ByteCounter, Decision, Flow};
use crate::stream::{Kind, stream};

/// Frames read ahead of the client on a pass-through body.
const PASS_DEPTH: usize = 16;

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
    if ctx.route.openapi().is_some() {
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
            let b = if ctx.route.watch() {
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
            match g.push_within(piece, &mut out, limit) {
                Ok(true) => {}
                Ok(false) => {
                    return upstream_read_error(ReadError::TooLarge(Error::ResponseTooLarge { limit }));
                }
                Err(e) => {
                    inflated = Err(e);
                    break;
                }
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
            tracing::debug!(path = %ctx.route.path(), error = %e, "response body not rewritable; passed untouched");
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
