//! Registry credentials: `.dockerconfigjson` files and `WWW-Authenticate` challenges.

use std::fmt;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use crate::{Error, Result};

/// A registry user and password. `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name.
    pub username: String,
    /// The password or token.
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Credentials {
    /// The credentials a `.dockerconfigjson` file (`{"auths":{"host:port":{"auth":...}}}`, or
    /// `username`/`password` fields) holds for `host`; `None` when it has none for it.
    pub fn from_docker_config(file: &Path, host: &str) -> Result<Option<Self>> {
        let text = std::fs::read(file).map_err(|e| Error::io(file, e))?;
        Self::parse_docker_config(&text, host)
            .map_err(|why| Error::Config(format!("{}: {why}", file.display())))
    }

    /// [`Credentials::from_docker_config`] of the file's bytes (a Secret's
    /// `.dockerconfigjson`).
    pub fn from_docker_config_json(json: &[u8], host: &str) -> Result<Option<Self>> {
        Self::parse_docker_config(json, host)
            .map_err(|why| Error::Config(format!(".dockerconfigjson: {why}")))
    }

    fn parse_docker_config(text: &[u8], host: &str) -> Result<Option<Self>, String> {
        #[derive(Deserialize)]
        struct Config {
            #[serde(default)]
            auths: std::collections::BTreeMap<String, Entry>,
        }
        #[derive(Deserialize)]
        struct Entry {
            auth: Option<String>,
            username: Option<String>,
            password: Option<String>,
        }
        let config: Config =
            serde_json::from_slice(text).map_err(|e| format!("not a dockerconfigjson file ({e})"))?;
        let key = |k: &str| {
            let k = k.trim_start_matches("https://").trim_start_matches("http://");
            k.split('/').next().unwrap_or(k).to_owned()
        };
        let Some(entry) = config.auths.iter().find(|(k, _)| key(k) == host).map(|(_, e)| e) else {
            return Ok(None);
        };
        if let (Some(u), Some(p)) = (&entry.username, &entry.password) {
            return Ok(Some(Credentials {
                username: u.clone(),
                password: p.clone(),
            }));
        }
        let auth = entry
            .auth
            .as_deref()
            .ok_or_else(|| format!("the entry of {host} has neither auth nor username/password"))?;
        let decoded = STANDARD
            .decode(auth.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| format!("the auth of {host} is not base64 of user:password"))?;
        let (u, p) = decoded
            .split_once(':')
            .ok_or_else(|| format!("the auth of {host} is not base64 of user:password"))?;
        Ok(Some(Credentials {
            username: u.to_owned(),
            password: p.to_owned(),
        }))
    }

    /// The value of an `Authorization: Basic` header.
    pub(crate) fn basic(&self) -> String {
        let raw = format!("{}:{}", self.username, self.password);
        format!("Basic {}", STANDARD.encode(raw))
    }
}

/// A parsed `WWW-Authenticate` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Challenge {
    Basic,
    Bearer { realm: String, service: Option<String> },
}

impl Challenge {
    /// Parses `Basic realm="..."` or `Bearer realm="...",service="...",scope="..."`.
    pub(crate) fn parse(header: &str) -> Option<Self> {
        let header = header.trim();
        let (scheme, params) = header.split_once(' ').unwrap_or((header, ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return Some(Challenge::Basic);
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let mut realm = None;
        let mut service = None;
        for (k, v) in params_of(params) {
            match k.to_ascii_lowercase().as_str() {
                "realm" => realm = Some(v),
                "service" => service = Some(v),
                _ => {}
            }
        }
        Some(Challenge::Bearer {
            realm: realm?,
            service,
        })
    }
}

/// `k="v",k2=v2` pairs (quoted values may hold commas).
fn params_of(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let Some((k, after)) = rest.split_once('=') else {
            break;
        };
        let k = k.trim().trim_start_matches(',').trim().to_owned();
        let after = after.trim_start();
        let (v, next) = if let Some(q) = after.strip_prefix('"') {
            match q.find('"') {
                Some(end) => (q[..end].to_owned(), &q[end + 1..]),
                None => (q.to_owned(), ""),
            }
        } else {
            match after.find(',') {
                Some(end) => (after[..end].trim().to_owned(), &after[end..]),
                None => (after.trim().to_owned(), ""),
            }
        };
        out.push((k, v));
        rest = next.trim_start().trim_start_matches(',').trim_start();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_config_auth_and_fields() {
        let auth = STANDARD.encode("admin:p:w");
        let text = format!(
            r#"{{"auths":{{"127.0.0.1:5000":{{"auth":"{auth}"}},"https://other.io/v1/":{{"username":"u","password":"p"}}}}}}"#
        );
        let c = Credentials::parse_docker_config(text.as_bytes(), "127.0.0.1:5000")
            .unwrap()
            .unwrap();
        assert_eq!((c.username.as_str(), c.password.as_str()), ("admin", "p:w"));
        assert!(!format!("{c:?}").contains("p:w"));
        let c = Credentials::parse_docker_config(text.as_bytes(), "other.io")
            .unwrap()
            .unwrap();
        assert_eq!(c.username, "u");
        assert_eq!(
            Credentials::parse_docker_config(text.as_bytes(), "x").unwrap(),
            None
        );
        assert!(Credentials::parse_docker_config(b"\"x\"", "x").is_err());
        let bad = br#"{"auths":{"x":{"auth":"!!"}}}"#;
        assert!(Credentials::parse_docker_config(bad, "x").is_err());
    }

    #[test]
    fn challenges() {
        assert_eq!(
            Challenge::parse(r#"Basic realm="Registry""#),
            Some(Challenge::Basic)
        );
        let c = Challenge::parse(
            r#"Bearer realm="https://auth.io/token",service="registry.io",scope="repository:a/b:pull,push""#,
        );
        assert_eq!(
            c,
            Some(Challenge::Bearer {
                realm: "https://auth.io/token".into(),
                service: Some("registry.io".into())
            })
        );
        assert_eq!(Challenge::parse("Negotiate"), None);
        assert_eq!(Challenge::parse("Bearer service=x"), None);
    }
}
