//! OpenAPI documents (`/openapi/v2`, `/openapi/v3...`) through the rewriting path.
//!
//! Upstream is asked for the document uncompressed, in the form the client asked for (JSON, or
//! the protobuf kubectl asks `/openapi/v2` for); the body is read whole (bounded) and restored
//! by the core's [`kube_api_rewriter::openapi`]. Rewritten documents are cached per upstream
//! ETag, rules version, path and media type, so a client polling an unchanged document costs
//! one upstream round trip and no rewriting. The ETag sent to clients is upstream's with the
//! rules version appended (`"ABC"` → `"ABC-r1f2e..."`): a document rewritten under older rules
//! never matches, so kubectl's disk cache cannot serve one. An `If-None-Match` carrying the
//! current rules version is passed upstream as upstream's own ETag, so a `304` still works.
//! Anything but a `200` (an upstream `404` for a group document it does not serve, a `304`
//! with its ETag extended) passes unchanged.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use kube_api_rewriter::Rules;
use kube_api_rewriter::openapi;

use crate::body::{self, Body, BoxError};
use crate::ctx::Ctx;
use crate::error::status;
use crate::headers::strip_hop_by_hop;
use crate::metrics::Side;

/// Largest OpenAPI document read (kube-apiserver's with many CRDs is tens of MiB).
const MAX_DOCUMENT: usize = 256 << 20;
/// Rewritten documents kept (a few paths × media types × rules versions).
const CACHE_ENTRIES: usize = 16;

/// The cache key: path (query included), media type, upstream ETag, rules version.
type Key = (String, String, String, u64);

fn cache() -> &'static Mutex<HashMap<Key, Bytes>> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Bytes>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The ETag sent to clients for upstream's `etag` under rules `version`.
pub(crate) fn client_etag(etag: &str, version: u64) -> String {
    let etag = etag.trim();
    match etag.strip_suffix('"') {
        Some(open) => format!("{open}-r{version:016x}\""),
        None => format!("{etag}-r{version:016x}"),
    }
}

/// Upstream's ETag from one the client sent, when it was made under rules `version`; `None`
/// for an ETag of other rules (or not ours).
pub(crate) fn upstream_etag(client: &str, version: u64) -> Option<String> {
    let client = client.trim();
    let suffix = format!("-r{version:016x}");
    match client.strip_suffix('"') {
        Some(open) => open.strip_suffix(suffix.as_str()).map(|o| format!("{o}\"")),
        None => client.strip_suffix(suffix.as_str()).map(str::to_owned),
    }
}

/// Request headers for an OpenAPI request: no compression (the body is rewritten), and an
/// `If-None-Match` translated to upstream's ETags (dropped when made under other rules).
pub(crate) fn request_headers(headers: &mut HeaderMap, rules: &Rules) {
    headers.remove(header::ACCEPT_ENCODING);
    let Some(inm) = headers.remove(header::IF_NONE_MATCH) else {
        return;
    };
    let Ok(inm) = inm.to_str() else { return };
    let tags: Vec<String> = inm
        .split(',')
        .filter_map(|t| upstream_etag(t, rules.version()))
        .collect();
    if !tags.is_empty()
        && let Ok(v) = HeaderValue::from_str(&tags.join(", "))
    {
        headers.insert(header::IF_NONE_MATCH, v);
    }
}

enum Format {
    Json,
    Protobuf,
}

/// JSON or protobuf, by the body, not the media type: older kube-apiservers label their JSON
/// `text/plain` and their protobuf `application/octet-stream`. A JSON document is an object; gnostic's `Document`
/// starts with a field tag, never `{` (field 15, wire type 3: groups, which OpenAPI never uses).
fn format_of(body: &[u8]) -> Format {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Format::Json,
        _ => Format::Protobuf,
    }
}

/// Restores an upstream OpenAPI response for the client.
pub(crate) async fn respond<B>(ctx: Ctx, resp: Response<B>) -> Response<Body>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let version = ctx.rules.version();
    let etag = parts
        .headers
        .get(header::ETAG)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(e) = &etag
        && let Ok(v) = HeaderValue::from_str(&client_etag(e, version))
    {
        parts.headers.insert(header::ETAG, v);
    }
    let ct = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let encoded = parts
        .headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes() != b"identity");
    let (true, false) = (parts.status == StatusCode::OK, encoded) else {
        return Response::from_parts(parts, body::boxed(body));
    };
    let key = etag.map(|e| {
        (
            ctx.route.upstream_path().to_owned(),
            ct.clone().unwrap_or_default(),
            e,
            version,
        )
    });
    let cached = key
        .as_ref()
        .and_then(|k| cache().lock().ok().and_then(|c| c.get(k).cloned()));
    let out = match cached {
        Some(b) => b,
        None => {
            let raw = match read(body).await {
                Ok(b) => b,
                Err(e) => {
                    return status(
                        StatusCode::BAD_GATEWAY,
                        "InternalError",
                        &format!("reading the OpenAPI document from upstream: {e}"),
                    );
                }
            };
            let t0 = Instant::now();
            let res = match format_of(&raw) {
                Format::Json => openapi::json::restore(&ctx.rules, &raw).map(|c| match c {
                    std::borrow::Cow::Borrowed(_) => None,
                    std::borrow::Cow::Owned(v) => Some(v),
                }),
                Format::Protobuf => openapi::proto::restore(&ctx.rules, &raw),
            };
            ctx.observe
                .rewritten(&ctx.route, Side::Target, res.is_ok(), t0.elapsed());
            let out = match res {
                Ok(Some(v)) => Bytes::from(v),
                Ok(None) => raw,
                Err(e) => {
                    tracing::warn!(path = %ctx.route.path(), error = %e, "OpenAPI document not rewritable; passed untouched");
                    raw
                }
            };
            if let Some(k) = key
                && let Ok(mut c) = cache().lock()
            {
                if c.len() >= CACHE_ENTRIES {
                    c.clear();
                }
                c.insert(k, out.clone());
            }
            out
        }
    };
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(out.len()));
    Response::from_parts(parts, body::full(out))
}

async fn read<B>(body: B) -> Result<Bytes, BoxError>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let collected = http_body_util::Limited::new(body, MAX_DOCUMENT).collect().await?;
    Ok(collected.to_bytes())
}

/// The number of cached documents (for tests).
#[doc(hidden)]
pub fn cached_documents() -> usize {
    cache().lock().map_or(0, |c| c.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags() {
        assert_eq!(client_etag("\"ABC\"", 1), "\"ABC-r0000000000000001\"");
        assert_eq!(client_etag("W/\"ABC\"", 255), "W/\"ABC-r00000000000000ff\"");
        assert_eq!(
            upstream_etag("\"ABC-r0000000000000001\"", 1).as_deref(),
            Some("\"ABC\"")
        );
        assert_eq!(
            upstream_etag("W/\"ABC-r00000000000000ff\"", 255).as_deref(),
            Some("W/\"ABC\"")
        );
        // Made under other rules, or not ours: not sent upstream.
        assert_eq!(upstream_etag("\"ABC-r0000000000000001\"", 2), None);
        assert_eq!(upstream_etag("\"ABC\"", 1), None);
        let mut h = HeaderMap::new();
        h.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_static("\"X-r0000000000000000\", \"Y\""),
        );
        h.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        request_headers(&mut h, &Rules::default());
        assert_eq!(
            h.get(header::IF_NONE_MATCH).map(|v| v.as_bytes()),
            Some(&b"\"X\""[..])
        );
        assert!(h.get(header::ACCEPT_ENCODING).is_none());
    }

    #[test]
    fn formats() {
        assert!(matches!(format_of(b" {\"swagger\":\"2.0\"}"), Format::Json));
        assert!(matches!(format_of(b"\n\x032.0"), Format::Protobuf));
        assert!(matches!(format_of(b""), Format::Protobuf));
    }
}
