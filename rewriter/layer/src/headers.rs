//! Header decisions a rewriting proxy makes: hop-by-hop headers, upgrades, gzip, and the
//! `Accept` that asks for JSON where bodies are rewritten.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Headers that describe one connection and never cross the proxy (RFC 9110 7.6.1).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
];

/// Removes hop-by-hop headers and those the `Connection` header names.
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// let mut h = HeaderMap::new();
/// h.insert("connection", HeaderValue::from_static("x-trace"));
/// h.insert("x-trace", HeaderValue::from_static("1"));
/// h.insert("accept", HeaderValue::from_static("application/json"));
/// kube_api_rewriter_layer::headers::strip_hop_by_hop(&mut h);
/// assert_eq!(h.len(), 1);
/// ```
pub fn strip_hop_by_hop(h: &mut HeaderMap) {
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in HOP_BY_HOP {
        h.remove(n);
    }
}

/// True for an HTTP/1.1 upgrade request (WebSocket, SPDY).
pub fn is_upgrade(h: &HeaderMap) -> bool {
    h.contains_key(header::UPGRADE)
        && h.get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade")))
}

/// True when `Accept-Encoding` allows gzip.
pub fn accepts_gzip(h: &HeaderMap) -> bool {
    h.get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            let mut parts = t.split(';');
            let coding = parts.next().unwrap_or("").trim();
            let q_zero = parts.any(|p| {
                let p = p.trim().replace(' ', "");
                p == "q=0" || p == "q=0.0" || p == "q=0.00" || p == "q=0.000"
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !q_zero
        })
}

/// The client's `Accept` when every media type it names is CBOR: nothing the proxy can answer
/// with for a resource whose bodies it rewrites (it rewrites JSON, and kube-apiserver's CBOR is
/// not JSON). `None` when any other type (JSON, YAML, protobuf, `*/*`) is acceptable, or none is
/// named.
pub fn cbor_only(h: &HeaderMap) -> Option<String> {
    let values: Vec<&str> = h
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let mut items = values
        .iter()
        .flat_map(|v| v.split(','))
        .map(|i| i.split(';').next().unwrap_or("").trim())
        .filter(|m| !m.is_empty())
        .peekable();
    items.peek()?;
    items
        .all(|m| m.eq_ignore_ascii_case("application/cbor") || m.eq_ignore_ascii_case("application/cbor-seq"))
        .then(|| values.join(", "))
}

/// `Accept` for a resource whose bodies are rewritten: protobuf and CBOR become JSON, keeping
/// parameters such as `as=Table;v=v1;g=meta.k8s.io`, so Table and PartialObjectMetadata
/// responses still come back as such. No `Accept` at all becomes `application/json`.
pub fn json_accept(h: &HeaderMap) -> HeaderValue {
    let mut out: Vec<String> = Vec::new();
    for v in h.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()) {
        for item in v.split(',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (media, params) = match item.split_once(';') {
                Some((m, p)) => (m.trim(), Some(p)),
                None => (item, None),
            };
            let m = media.to_ascii_lowercase();
            let binary = m.contains("protobuf") || m.contains("cbor");
            let s = if binary {
                let kept: Vec<&str> = params
                    .into_iter()
                    .flat_map(|p| p.split(';'))
                    .map(str::trim)
                    .filter(|p| !p.starts_with("stream="))
                    .collect();
                if kept.is_empty() {
                    "application/json".to_owned()
                } else {
                    format!("application/json;{}", kept.join(";"))
                }
            } else {
                item.to_owned()
            };
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    if out.is_empty() {
        return HeaderValue::from_static("application/json");
    }
    HeaderValue::from_str(&out.join(", ")).unwrap_or(HeaderValue::from_static("application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn accept_keeps_table_and_replaces_protobuf() {
        let h = map(&[(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )]);
        assert_eq!(
            json_accept(&h),
            "application/json;as=Table;v=v1;g=meta.k8s.io, application/json"
        );
        let h = map(&[("accept", "application/vnd.kubernetes.protobuf, application/json")]);
        assert_eq!(json_accept(&h), "application/json");
        let h = map(&[(
            "accept",
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        )]);
        assert_eq!(
            json_accept(&h),
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
        );
        let h = map(&[("accept", "application/cbor;stream=watch")]);
        assert_eq!(json_accept(&h), "application/json");
        assert_eq!(json_accept(&HeaderMap::new()), "application/json");
    }

    #[test]
    fn cbor_only_accept() {
        assert_eq!(
            cbor_only(&map(&[("accept", "application/cbor")])).as_deref(),
            Some("application/cbor")
        );
        assert_eq!(
            cbor_only(&map(&[("accept", "application/cbor;stream=watch")])).as_deref(),
            Some("application/cbor;stream=watch")
        );
        for accept in [
            "application/cbor, application/json;q=0.9",
            "application/cbor, */*",
            "application/vnd.kubernetes.protobuf",
            "application/json",
        ] {
            assert_eq!(cbor_only(&map(&[("accept", accept)])), None, "{accept}");
        }
        assert_eq!(cbor_only(&HeaderMap::new()), None);
    }

    #[test]
    fn hop_by_hop() {
        let mut h = map(&[
            ("connection", "keep-alive, x-foo"),
            ("x-foo", "1"),
            ("keep-alive", "5"),
            ("x-bar", "2"),
        ]);
        strip_hop_by_hop(&mut h);
        assert!(h.get("x-foo").is_none() && h.get("keep-alive").is_none() && h.get("connection").is_none());
        assert_eq!(h.get("x-bar").map(|v| v.as_bytes()), Some(&b"2"[..]));
        assert!(is_upgrade(&map(&[
            ("connection", "Upgrade"),
            ("upgrade", "websocket")
        ])));
        assert!(!is_upgrade(&map(&[("upgrade", "websocket")])));
    }

    #[test]
    fn gzip() {
        assert!(accepts_gzip(&map(&[("accept-encoding", "gzip, deflate")])));
        assert!(!accepts_gzip(&map(&[("accept-encoding", "gzip;q=0")])));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }
}
