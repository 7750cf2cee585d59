//! `MONITORING_AUTH`: `/metrics` behind a bearer token, as the Go sidecar's auth middleware
//! (and kube-rbac-proxy) do it. A TokenReview authenticates the token, a SubjectAccessReview
//! authorizes its user for the configured resource attributes; both through the proxy's own
//! upstream client and credentials. Decisions are cached for two minutes (at most
//! [`CACHE_ENTRIES`] tokens), keyed by the token's SHA-256: the cache holds no usable
//! credential. Tokens are never logged.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, AUTHORIZATION, HeaderValue};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use kube_api_rewriter_layer::body;
use serde::Deserialize;

use crate::deadlines::Deadlines;
use crate::upstream::Upstream;

/// Tokens remembered at most; when full, expired entries go, then everything.
pub const CACHE_ENTRIES: usize = 1024;
/// Largest review answer read.
const MAX_ANSWER: usize = 1 << 20;

/// The SubjectAccessReview resource attributes `/metrics` requires (`MONITORING_AUTH`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceAttributes {
    /// Namespace.
    pub namespace: String,
    /// Verb, e.g. `get`.
    pub verb: String,
    /// API group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource.
    pub resource: String,
    /// Object name.
    pub name: String,
    /// Subresource (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subresource: Option<String>,
}

impl ResourceAttributes {
    /// Parses `MONITORING_AUTH`: a JSON object with all six attributes (and an optional
    /// `subresource`).
    pub fn parse(v: &str) -> Result<Self, String> {
        serde_json::from_str(v).map_err(|e| e.to_string())
    }
}

/// The answer for a request to `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Serve it.
    Allowed,
    /// 401: no token, or a token kube-apiserver does not accept.
    Unauthenticated,
    /// 403: the user may not.
    Forbidden,
}

/// The `/metrics` guard.
#[derive(Debug)]
pub struct MonitoringAuth {
    upstream: Arc<Upstream>,
    attrs: ResourceAttributes,
    cache: Mutex<HashMap<TokenKey, (Instant, Decision)>>,
    /// How long a decision is kept.
    ttl: Duration,
    /// kube-apiserver's time to answer a review.
    review_deadline: Duration,
}

#[derive(Deserialize)]
struct Review<S> {
    status: Option<S>,
}

#[derive(Deserialize)]
struct TokenStatus {
    #[serde(default)]
    authenticated: bool,
    user: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct AccessStatus {
    #[serde(default)]
    allowed: bool,
}

impl MonitoringAuth {
    /// Checks tokens against `upstream` for `attrs`.
    pub fn new(upstream: Arc<Upstream>, attrs: ResourceAttributes, d: &Deadlines) -> Arc<Self> {
        Arc::new(Self {
            upstream,
            attrs,
            cache: Mutex::new(HashMap::new()),
            ttl: d.metrics_auth_cache,
            review_deadline: d.metrics_auth_review,
        })
    }

    /// The decision for a request with these headers. Review failures (upstream unreachable)
    /// are not cached and deny with 401.
    pub async fn check(&self, headers: &HeaderMap) -> Decision {
        let Some(token) = bearer_token(headers) else {
            return Decision::Unauthenticated;
        };
        if let Some(d) = self.cached(token) {
            return d;
        }
        match self.review(token).await {
            Ok(d) => {
                self.remember(token, d);
                d
            }
            Err(e) => {
                tracing::warn!(error = %e, "monitoring authentication: review failed");
                Decision::Unauthenticated
            }
        }
    }

    fn cached(&self, token: &str) -> Option<Decision> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .get(&TokenKey::of(token))
            .filter(|(t, _)| t.elapsed() < self.ttl)
            .map(|(_, d)| *d)
    }

    fn remember(&self, token: &str, d: Decision) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CACHE_ENTRIES {
            let ttl = self.ttl;
            cache.retain(|_, (t, _)| t.elapsed() < ttl);
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
        }
        cache.insert(TokenKey::of(token), (Instant::now(), d));
    }

    async fn review(&self, token: &str) -> Result<Decision, String> {
        let tr: Review<TokenStatus> = self
            .post(
                "/apis/authentication.k8s.io/v1/tokenreviews",
                serde_json::json!({
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenReview",
                    "spec": {"token": token},
                }),
            )
            .await?;
        let Some(TokenStatus {
            authenticated: true,
            user: Some(user),
        }) = tr.status
        else {
            return Ok(Decision::Unauthenticated);
        };
        let mut spec = serde_json::json!({ "resourceAttributes": &self.attrs });
        for (from, to) in [
            ("username", "user"),
            ("uid", "uid"),
            ("groups", "groups"),
            ("extra", "extra"),
        ] {
            if let Some(v) = user.get(from) {
                spec[to] = v.clone();
            }
        }
        let sar: Review<AccessStatus> = self
            .post(
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                serde_json::json!({
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": spec,
                }),
            )
            .await?;
        Ok(if sar.status.is_some_and(|s| s.allowed) {
            Decision::Allowed
        } else {
            Decision::Forbidden
        })
    }

    async fn post<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: serde_json::Value,
    ) -> Result<T, String> {
        let uri = self.upstream.uri(path).map_err(|e| e.to_string())?;
        let mut headers = HeaderMap::new();
        self.upstream.authorize(&mut headers);
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        let bytes = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
        let mut req = Request::new(body::full(Bytes::from(bytes)));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = uri;
        *req.headers_mut() = headers;
        let resp = tokio::time::timeout(
            self.review_deadline,
            self.upstream.send(req, Some(self.review_deadline)),
        )
        .await
        .map_err(|_| format!("{path}: no answer within {:?}", self.review_deadline))?
        .map_err(|e| format!("{path}: {e}"))?;
        let status = resp.status();
        let b = Limited::new(resp.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| format!("{path}: {e}"))?
            .to_bytes();
        if status != StatusCode::CREATED && status != StatusCode::OK {
            return Err(format!("{path}: kube-apiserver answered {status}"));
        }
        serde_json::from_slice(&b).map_err(|e| format!("{path}: {e}"))
    }
}

/// A cache key: the token's SHA-256, so a memory dump of the cache yields no token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct TokenKey([u8; 32]);

impl TokenKey {
    fn of(token: &str) -> Self {
        let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let mut k = [0u8; 32];
        k.copy_from_slice(d.as_ref());
        Self(k)
    }
}

/// The bearer token of `Authorization`, if any.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_as_deckhouse_writes_them() {
        let a = ResourceAttributes::parse(
            r#"{"namespace":"d8-virtualization","verb":"get","group":"apps","version":"v1","resource":"deployments","name":"virt-api","subresource":"prometheus-metrics"}"#,
        )
        .expect("valid");
        assert_eq!(a.subresource.as_deref(), Some("prometheus-metrics"));
        assert!(
            ResourceAttributes::parse(r#"{"namespace":"d","verb":"get"}"#).is_err(),
            "all six"
        );
        assert!(ResourceAttributes::parse("yes").is_err());
    }

    #[test]
    fn cache_keys_are_digests_not_tokens() {
        let k = TokenKey::of("abc");
        // SHA-256("abc"), FIPS 180-2 appendix B.1.
        assert_eq!(k.0[..4], [0xba, 0x78, 0x16, 0xbf], "{:02x?}", k.0);
        assert_ne!(TokenKey::of("abd"), k);
        assert!(!format!("{k:?}").contains("abc"));
    }

    #[test]
    fn bearer_tokens() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(AUTHORIZATION, HeaderValue::from_str(v).expect("value"));
            m
        };
        assert_eq!(bearer_token(&h("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&h("bearer  abc ")), Some("abc"));
        assert_eq!(bearer_token(&h("Basic abc")), None);
        assert_eq!(bearer_token(&h("Bearer ")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }
}
