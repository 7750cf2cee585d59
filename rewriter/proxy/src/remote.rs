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
    /// use kube_api_rewriter_proxy::remote::RemoteIdentity;
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
