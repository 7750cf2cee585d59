//! YAML for clients that ask for it (`Accept: application/yaml`) on routes whose bodies are
//! rewritten: upstream is asked for JSON, the response is restored as any other, and the result
//! is converted ([`kube_api_rewriter::yaml::json_to_yaml`]) before it leaves.
//!
//! kube-apiserver serves YAML for single objects, lists, Tables and `Status` errors, and refuses
//! a watch with a 406 `Status` (in YAML): a watch is therefore left alone, its `Accept` passed
//! on as the client sent it, so the client gets kube-apiserver's own refusal.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use kube_api_rewriter::{Route, is_json};

use crate::body::{self, Body};
use crate::error::Error;

const YAML: &str = "application/yaml";

/// True when the client's preferred media type is YAML, as kube-apiserver negotiates it, on a
/// route whose responses are rewritten and could be served as YAML (no watch, no OpenAPI).
///
/// Clauses are ranked by `q` (highest first), then by specificity (`type/subtype` before
/// `type/*` before `*/*`), then by position; the first one kube-apiserver serves (JSON, YAML,
/// protobuf, CBOR) decides.
pub(crate) fn wants_yaml(route: &Route, h: &HeaderMap) -> bool {
    route.rewrite_bodies() && !route.watch() && route.openapi().is_none() && preferred_is_yaml(h)
}

fn preferred_is_yaml(h: &HeaderMap) -> bool {
    let mut clauses: Vec<(u16, u8, usize, String)> = Vec::new();
    let items = h
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','));
    for (i, item) in items.enumerate() {
        let mut parts = item.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        if media.is_empty() {
            continue;
        }
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        if q.is_nan() || q <= 0.0 {
            continue;
        }
        let specificity = match media.as_str() {
            "*/*" => 0,
            m if m.ends_with("/*") => 1,
            _ => 2,
        };
        // q has at most three decimals (RFC 9110 12.4.2).
        clauses.push(((q.min(1.0) * 1000.0).round() as u16, specificity, i, media));
    }
    clauses.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
    for (_, _, _, media) in clauses {
        match media.as_str() {
            YAML => return true,
            "application/json" | "application/*" | "*/*" => return false,
            m if m.contains("protobuf") || m.contains("cbor") => return false,
            _ => {}
        }
    }
    false
}

/// The `Accept` for upstream: `value` (already made JSON-only where needed) with each YAML
/// clause asking for JSON instead, its parameters (`as=Table;v=v1;g=meta.k8s.io`) kept.
pub(crate) fn upstream_accept(value: &HeaderValue) -> HeaderValue {
    let Ok(v) = value.to_str() else {
        return HeaderValue::from_static("application/json");
    };
    let mut out: Vec<String> = Vec::new();
    for item in v.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (media, params) = item.split_once(';').unwrap_or((item, ""));
        let s = if media.trim().eq_ignore_ascii_case(YAML) {
            if params.is_empty() {
                "application/json".to_owned()
            } else {
                format!("application/json;{params}")
            }
        } else {
            item.to_owned()
        };
        if !out.contains(&s) {
            out.push(s);
        }
    }
    HeaderValue::from_str(&out.join(", ")).unwrap_or(HeaderValue::from_static("application/json"))
}

/// Converts a rewritten response to YAML: a JSON body is read whole (up to `limit`) and sent
/// as `application/yaml` with its status kept; anything else passes unchanged. A body that
/// cannot be read whole or converted becomes the matching `Status`, itself in YAML.
pub(crate) async fn respond(resp: Response<Body>, limit: usize) -> Response<Body> {
    if !convertible(&resp) {
        return resp;
    }
    let (parts, b) = resp.into_parts();
    let json = match read(b, limit).await {
        Ok(json) => json,
        Err(e) => return error(e),
    };
    if json.is_empty() {
        // No document (a HEAD request): nothing to convert.
        return Response::from_parts(parts, body::empty());
    }
    match convert(parts, &json) {
        Ok(r) => r,
        Err(e) => error(e),
    }
}

/// True for a plain JSON body (anything else is passed unchanged).
fn convertible(resp: &Response<Body>) -> bool {
    let status = resp.status();
    let ct = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    is_json(ct)
        && status != StatusCode::SWITCHING_PROTOCOLS
        && status != StatusCode::NO_CONTENT
        && status != StatusCode::NOT_MODIFIED
        && !resp.headers().contains_key(header::CONTENT_ENCODING)
}

/// The whole body, up to `limit` bytes. (A loop rather than `Limited`, whose error bound
/// makes the service future's `Send` unprovable for rustc.)
async fn read(mut b: Body, limit: usize) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    while let Some(f) = b.frame().await {
        let f = f.map_err(|e| Error::Yaml(format!("reading the response: {e}")))?;
        if let Ok(d) = f.into_data() {
            if out.len() + d.len() > limit {
                return Err(Error::ResponseTooLarge { limit });
            }
            out.extend_from_slice(&d);
        }
    }
    Ok(out)
}

fn convert(mut parts: http::response::Parts, json: &[u8]) -> Result<Response<Body>, Error> {
    let yaml = kube_api_rewriter::yaml::json_to_yaml(json).map_err(|e| Error::Yaml(e.to_string()))?;
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(YAML));
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(yaml.len()));
    Ok(Response::from_parts(parts, body::full(yaml)))
}

/// `e` as a `Status` in YAML (JSON if even that cannot be converted).
fn error(e: Error) -> Response<Body> {
    tracing::warn!(error = %e, "response not served as YAML");
    let code = e.status_code().as_u16();
    let json = kube_api_rewriter::status_json(code, e.reason(), &e.to_string(), None);
    let (parts, _) = e.into_response().into_parts();
    let json = Bytes::from(json);
    convert(parts, &json).unwrap_or_else(|_| {
        let mut r = Response::new(body::full(json));
        *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY);
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        r
    })
}

#[cfg(test)]
mod tests {
    use kube_api_rewriter::ProxyMode;
    use kube_api_rewriter::Rules;

    use super::*;

    fn accept(v: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_static(v));
        h
    }

    #[test]
    fn negotiates_as_kube_apiserver() {
        for (v, yaml) in [
            ("application/yaml", true),
            ("application/yaml, application/json", true),
            ("application/json, application/yaml", false),
            ("application/json;q=0.5, application/yaml", true),
            ("*/*, application/yaml", true),
            ("application/yaml;q=0.9, */*", false),
            ("text/html, application/yaml", true),
            ("application/yaml;q=0", false),
            ("application/yaml;as=Table;v=v1;g=meta.k8s.io", true),
            ("application/vnd.kubernetes.protobuf, application/yaml", false),
            ("application/*", false),
            ("", false),
        ] {
            assert_eq!(preferred_is_yaml(&accept(v)), yaml, "{v}");
        }
        assert!(!preferred_is_yaml(&HeaderMap::new()));
    }

    #[test]
    fn only_rewritten_routes_and_never_watches() {
        let rules = Rules::builtin_kubevirt();
        let route = |pq: &str| Route::new(&rules, ProxyMode::Api, "GET", pq);
        let h = accept("application/yaml");
        assert!(wants_yaml(
            &route("/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/a"),
            &h
        ));
        assert!(wants_yaml(&route("/apis/kubevirt.io/v1/virtualmachines"), &h));
        assert!(!wants_yaml(
            &route("/apis/kubevirt.io/v1/virtualmachines?watch=1"),
            &h
        ));
        assert!(!wants_yaml(&route("/version"), &h));
        assert!(!wants_yaml(&route("/openapi/v2"), &h));
    }

    #[test]
    fn upstream_gets_json_with_the_same_parameters() {
        for (v, up) in [
            ("application/yaml", "application/json"),
            (
                "application/yaml;as=Table;v=v1;g=meta.k8s.io, application/yaml",
                "application/json;as=Table;v=v1;g=meta.k8s.io, application/json",
            ),
            ("application/yaml, application/json", "application/json"),
        ] {
            assert_eq!(upstream_accept(&HeaderValue::from_static(v)), up, "{v}");
        }
    }

    #[tokio::test]
    async fn json_bodies_become_yaml_with_their_status() {
        let mut r = Response::new(body::full(
            &br#"{"kind":"Status","code":404,"message":"yes"}"#[..],
        ));
        *r.status_mut() = StatusCode::NOT_FOUND;
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let out = respond(r, 1 << 20).await;
        assert_eq!(out.status(), StatusCode::NOT_FOUND);
        assert_eq!(out.headers()[header::CONTENT_TYPE], YAML);
        let b = out.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&b[..], b"kind: Status\ncode: 404\nmessage: \"yes\"\n");

        // No body (HEAD): untouched.
        let mut r = Response::new(body::empty());
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let out = respond(r, 1 << 20).await;
        assert_eq!(out.status(), StatusCode::OK);
        assert!(
            out.into_body()
                .collect()
                .await
                .expect("body")
                .to_bytes()
                .is_empty()
        );

        // Not JSON: untouched.
        let mut r = Response::new(body::full(&b"a: b\n"[..]));
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(YAML));
        let out = respond(r, 1 << 20).await;
        assert_eq!(
            out.into_body().collect().await.expect("body").to_bytes(),
            "a: b\n"
        );
    }

    #[tokio::test]
    async fn failures_are_statuses_in_yaml() {
        let mut r = Response::new(body::full(&br#"{"kind":"#[..]));
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let out = respond(r, 1 << 20).await;
        assert_eq!(out.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(out.headers()[header::CONTENT_TYPE], YAML);
        let b = out.into_body().collect().await.expect("body").to_bytes();
        let text = String::from_utf8(b.to_vec()).expect("utf-8");
        assert!(
            text.starts_with("kind: Status\n") && text.contains("code: 502\n"),
            "{text}"
        );

        // A stream that aborts mid-body (a list upstream cut): never a partial YAML document.
        let (tx, rx) = body::channel(2);
        tx.send(Ok(Bytes::from_static(
            br#"{"kind":"VirtualMachineList","items":["#,
        )))
        .await
        .expect("send");
        tx.send(Err(Box::new(body::Aborted("upstream cut".into()))))
            .await
            .expect("send");
        drop(tx);
        let mut r = Response::new(body::boxed(rx));
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let out = respond(r, 1 << 20).await;
        assert_eq!(out.status(), StatusCode::BAD_GATEWAY);
        let b = out.into_body().collect().await.expect("body").to_bytes();
        let text = String::from_utf8_lossy(&b);
        assert!(
            text.starts_with("kind: Status\n") && text.contains("upstream cut"),
            "{text}"
        );

        let mut r = Response::new(body::full(vec![b' '; 100]));
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let out = respond(r, 10).await;
        assert_eq!(out.status(), StatusCode::BAD_GATEWAY);
        let b = out.into_body().collect().await.expect("body").to_bytes();
        assert!(String::from_utf8_lossy(&b).contains("larger than 10 bytes"));
    }
}
