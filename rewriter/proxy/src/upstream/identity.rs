//! The front-proxy identity (`X-Remote-User`, `X-Remote-Group`) the API proxy sends upstream.
//!
//! An upstream that trusts the proxy's client certificate as a front proxy (KubeVirt's virt-api
//! behind virtualization-api, an aggregated API server) takes the user from these headers. The
//! client certificate is the proxy's, never the client's, so nothing a client sends may choose
//! the identity: every client `X-Remote-*` header is dropped, and the configured user and
//! groups (`REMOTE_USER`, `REMOTE_GROUPS`), if any, are set.

use http::header::{HeaderMap, HeaderName, HeaderValue};

/// The configured identity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteIdentity {
    user: Option<HeaderValue>,
    groups: Vec<HeaderValue>,
}

/// A `REMOTE_USER` or `REMOTE_GROUPS` value that cannot be a header.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a valid header value")]
pub struct InvalidIdentity(pub String);

impl RemoteIdentity {
    /// `user` (empty: none) and comma-separated `groups` (empty entries skipped). Groups
    /// without a user are refused: a front proxy sends no group for nobody.
    ///
    /// ```
    /// use kube_api_rewriter_proxy::upstream::identity::RemoteIdentity;
    /// let id = RemoteIdentity::new("system:serviceaccount:ns:sa", "system:serviceaccounts").unwrap();
    /// let mut h = http::HeaderMap::new();
    /// h.insert("x-remote-user", "admin".parse().unwrap());
    /// h.insert("x-remote-extra-scopes", "x".parse().unwrap());
    /// id.apply(&mut h);
    /// assert_eq!(h["x-remote-user"], "system:serviceaccount:ns:sa");
    /// assert_eq!(h["x-remote-group"], "system:serviceaccounts");
    /// assert!(!h.contains_key("x-remote-extra-scopes"));
    /// ```
    pub fn new(user: &str, groups: &str) -> Result<RemoteIdentity, InvalidIdentity> {
        let value = |s: &str| HeaderValue::from_str(s).map_err(|_| InvalidIdentity(s.to_owned()));
        let user = match user.trim() {
            "" => None,
            u => Some(value(u)?),
        };
        let groups = groups
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(value)
            .collect::<Result<Vec<_>, _>>()?;
        if user.is_none() && !groups.is_empty() {
            return Err(InvalidIdentity(format!("groups {groups:?} without a user")));
        }
        Ok(RemoteIdentity { user, groups })
    }

    /// Whether a user is configured.
    pub fn is_set(&self) -> bool {
        self.user.is_some()
    }

    /// Drops every client `X-Remote-*` header and sets the configured identity.
    pub fn apply(&self, headers: &mut HeaderMap) {
        let client: Vec<HeaderName> = headers
            .keys()
            .filter(|k| k.as_str().starts_with("x-remote-"))
            .cloned()
            .collect();
        for k in client {
            headers.remove(&k);
        }
        if let Some(u) = &self.user {
            headers.insert(HeaderName::from_static("x-remote-user"), u.clone());
            for g in &self.groups {
                headers.append(HeaderName::from_static("x-remote-group"), g.clone());
            }
        }
    }
}

/// The kubeconfig's impersonation as request headers.
pub(super) fn impersonation(a: &kube::config::AuthInfo) -> Vec<(http::HeaderName, HeaderValue)> {
    let mut out = Vec::new();
    let mut push = |name: http::HeaderName, v: &str| match HeaderValue::from_str(v) {
        Ok(v) => out.push((name, v)),
        Err(_) => {
            tracing::warn!(header = %name, "kubeconfig impersonation value is not a valid header value; skipped")
        }
    };
    if let Some(u) = &a.impersonate {
        push(http::HeaderName::from_static("impersonate-user"), u);
    }
    if let Some(u) = &a.impersonate_uid {
        push(http::HeaderName::from_static("impersonate-uid"), u);
    }
    for g in a.impersonate_groups.iter().flatten() {
        push(http::HeaderName::from_static("impersonate-group"), g);
    }
    let mut extra: Vec<_> = a.impersonate_user_extra.iter().flatten().collect();
    extra.sort();
    for (k, vs) in extra {
        match http::HeaderName::from_bytes(format!("impersonate-extra-{}", escape_extra_key(k)).as_bytes()) {
            Ok(name) => {
                for v in vs {
                    push(name.clone(), v);
                }
            }
            Err(_) => tracing::warn!(key = %k, "kubeconfig as-user-extra key makes no header name; skipped"),
        }
    }
    out
}

/// An `Impersonate-Extra-` key: lower case (header names are), percent-encoded outside the
/// header token characters (kube-apiserver decodes either case of hex digit).
fn escape_extra_key(k: &str) -> String {
    let mut out = String::with_capacity(k.len());
    for b in k.to_ascii_lowercase().bytes() {
        if b.is_ascii_alphanumeric() || b"-!#$&'*+.^_`|~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02x}"));
        }
    }
    out
}

fn is_impersonation(name: &http::HeaderName) -> bool {
    name.as_str().starts_with("impersonate-")
}

/// The identity of a request sent with the proxy's credentials: the configured impersonation
/// replaces every client `Impersonate-*` header; without one, client headers pass unless
/// `drop_client` is set.
pub(super) fn fix_identity(
    headers: &mut HeaderMap,
    configured: &[(http::HeaderName, HeaderValue)],
    drop_client: bool,
) {
    if configured.is_empty() && !drop_client {
        return;
    }
    let client: Vec<http::HeaderName> = headers.keys().filter(|k| is_impersonation(k)).cloned().collect();
    for k in client {
        headers.remove(&k);
    }
    for (k, v) in configured {
        headers.append(k.clone(), v.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_headers_never_reach_upstream() {
        let mut h = HeaderMap::new();
        h.insert("x-remote-user", HeaderValue::from_static("admin"));
        h.append("x-remote-group", HeaderValue::from_static("system:masters"));
        h.append("X-Remote-Group", HeaderValue::from_static("other"));
        h.insert("x-remote-extra-scopes", HeaderValue::from_static("x"));
        h.insert("accept", HeaderValue::from_static("application/json"));
        let mut none = h.clone();
        RemoteIdentity::default().apply(&mut none);
        assert_eq!(none.len(), 1, "{none:?}");
        let id = RemoteIdentity::new("sa", " g1, ,g2 ").expect("valid");
        id.apply(&mut h);
        let groups: Vec<_> = h.get_all("x-remote-group").iter().collect();
        assert_eq!(groups, ["g1", "g2"]);
        assert_eq!(h["x-remote-user"], "sa");
        assert!(!h.contains_key("x-remote-extra-scopes"));
        assert_eq!(h["accept"], "application/json");
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(RemoteIdentity::new("a\nb", "").is_err());
        assert!(RemoteIdentity::new("", "g").is_err());
        assert!(!RemoteIdentity::new("", "").expect("valid").is_set());
    }
}

#[cfg(test)]
mod impersonation_tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        m
    }

    fn all(m: &HeaderMap, k: &str) -> Vec<String> {
        m.get_all(k)
            .iter()
            .map(|v| v.to_str().expect("ascii").to_owned())
            .collect()
    }

    #[test]
    fn kubeconfig_impersonation_becomes_headers() {
        let a = kube::config::AuthInfo {
            impersonate: Some("sa".into()),
            impersonate_uid: Some("u-1".into()),
            impersonate_groups: Some(vec!["g1".into(), "g2".into()]),
            impersonate_user_extra: Some([("Scopes/A b".to_owned(), vec!["x".to_owned()])].into()),
            ..Default::default()
        };
        let names: Vec<String> = impersonation(&a)
            .iter()
            .map(|(k, v)| format!("{k}={}", v.to_str().expect("ascii")))
            .collect();
        assert_eq!(
            names,
            [
                "impersonate-user=sa",
                "impersonate-uid=u-1",
                "impersonate-group=g1",
                "impersonate-group=g2",
                "impersonate-extra-scopes%2fa%20b=x"
            ]
        );
    }

    #[test]
    fn configured_identity_cannot_be_replaced_or_widened() {
        let configured = h(&[("impersonate-user", "sa"), ("impersonate-group", "g1")]);
        let configured: Vec<_> = configured.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let mut m = h(&[
            ("impersonate-user", "admin"),
            ("impersonate-group", "system:masters"),
            ("impersonate-extra-x", "y"),
            ("accept", "application/json"),
        ]);
        fix_identity(&mut m, &configured, false);
        assert_eq!(all(&m, "impersonate-user"), ["sa"]);
        assert_eq!(all(&m, "impersonate-group"), ["g1"]);
        assert!(m.get("impersonate-extra-x").is_none());
        assert_eq!(all(&m, "accept"), ["application/json"]);
    }

    #[test]
    fn client_impersonation_passes_or_is_dropped_without_a_configured_one() {
        let client = [("impersonate-user", "u"), ("impersonate-group", "g")];
        let mut m = h(&client);
        fix_identity(&mut m, &[], false);
        assert_eq!(all(&m, "impersonate-user"), ["u"]);
        let mut m = h(&client);
        fix_identity(&mut m, &[], true);
        assert!(m.is_empty(), "{m:?}");
    }
}
