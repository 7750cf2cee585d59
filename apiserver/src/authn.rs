//! Front-proxy (requestheader) authentication, as aggregated API servers do it.
//!
//! kube-apiserver's aggregator presents its proxy client certificate and names the user in
//! `X-Remote-User`, `X-Remote-Group` and `X-Remote-Extra-*`. The certificate's chain is checked
//! by rustls against the requestheader CA during the handshake ([`kube_api_rewriter_tls::server_config_with_client_ca`]);
//! here its common name is checked against the allowed names, the identity is read, and the
//! identity headers are removed from the request whether they were trusted or not.

use std::collections::BTreeMap;

use http::HeaderMap;
use http::header::HeaderName;
use rustls_pki_types::CertificateDer;

use crate::error::{Error, Result};

/// The front-proxy configuration from `kube-system/extension-apiserver-authentication`.
#[derive(Debug, Clone)]
pub struct RequestHeaderConfig {
    /// The CA that signs the front-proxy client certificate.
    pub client_ca: Vec<CertificateDer<'static>>,
    /// Common names allowed to assert identities; empty: any certificate of the CA.
    pub allowed_names: Vec<String>,
    /// Headers holding the user name (the first present wins).
    pub username_headers: Vec<HeaderName>,
    /// Headers holding groups (every value is one group).
    pub group_headers: Vec<HeaderName>,
    /// Prefixes of the extra-attribute headers, lower case.
    pub extra_prefixes: Vec<String>,
}

/// An authenticated user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The user name.
    pub name: String,
    /// The groups, `system:authenticated` included.
    pub groups: Vec<String>,
    /// Extra attributes.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl RequestHeaderConfig {
    /// Reads the ConfigMap's `data`.
    pub fn from_configmap(data: &BTreeMap<String, String>) -> Result<RequestHeaderConfig> {
        let ca = data.get("requestheader-client-ca-file").ok_or_else(|| {
            Error::AuthConfig(
                "no requestheader-client-ca-file: front-proxy authentication is not configured".into(),
            )
        })?;
        let client_ca = crate::tls::certs_from_pem(ca.as_bytes(), "requestheader-client-ca-file")
            .map_err(|e| Error::AuthConfig(e.to_string()))?;
        let list = |key: &str| -> Result<Vec<String>> {
            match data.get(key) {
                None => Ok(Vec::new()),
                Some(s) if s.trim().is_empty() => Ok(Vec::new()),
                Some(s) => serde_json::from_str(s).map_err(|e| Error::AuthConfig(format!("{key}: {e}"))),
            }
        };
        let names = |key: &str, default: &str| -> Result<Vec<HeaderName>> {
            let mut v = list(key)?;
            if v.is_empty() {
                v.push(default.to_owned());
            }
            v.iter()
                .map(|h| {
                    HeaderName::try_from(h.as_str())
                        .map_err(|e| Error::AuthConfig(format!("{key}: {h:?}: {e}")))
                })
                .collect()
        };
        let mut extra_prefixes = list("requestheader-extra-headers-prefix")?;
        if extra_prefixes.is_empty() {
            extra_prefixes.push("X-Remote-Extra-".into());
        }
        Ok(RequestHeaderConfig {
            client_ca,
            allowed_names: list("requestheader-allowed-names")?,
            username_headers: names("requestheader-username-headers", "X-Remote-User")?,
            group_headers: names("requestheader-group-headers", "X-Remote-Group")?,
            extra_prefixes: extra_prefixes
                .into_iter()
                .map(|p| p.to_ascii_lowercase())
                .collect(),
        })
    }

    /// Removes every identity header from `headers` (also the `X-Remote-*` defaults).
    pub fn strip(&self, headers: &mut HeaderMap) {
        let doomed: Vec<HeaderName> = headers
            .keys()
            .filter(|k| {
                let n = k.as_str();
                n.starts_with("x-remote-")
                    || self.username_headers.contains(k)
                    || self.group_headers.contains(k)
                    || self.extra_prefixes.iter().any(|p| n.starts_with(p.as_str()))
            })
            .cloned()
            .collect();
        for k in doomed {
            headers.remove(k);
        }
    }

    /// Authenticates a request by its (already chain-verified) peer certificate and identity
    /// headers; the headers are removed in every case.
    pub fn authenticate(&self, peer: Option<&CertificateDer<'_>>, headers: &mut HeaderMap) -> Result<User> {
        let user = self.identity(peer, headers);
        self.strip(headers);
        user
    }

    fn identity(&self, peer: Option<&CertificateDer<'_>>, headers: &HeaderMap) -> Result<User> {
        let unauthorized = |why: &str| Err(Error::Unauthorized(format!("Unauthorized: {why}")));
        let Some(cert) = peer else {
            return unauthorized("no front-proxy client certificate");
        };
        if !self.allowed_names.is_empty() {
            match subject_common_name(cert) {
                Some(cn) if self.allowed_names.contains(&cn) => {}
                Some(cn) => {
                    return unauthorized(&format!(
                        "client certificate CN {cn:?} is not an allowed requestheader name"
                    ));
                }
                None => return unauthorized("client certificate has no common name"),
            }
        }
        let name = self
            .username_headers
            .iter()
            .find_map(|h| {
                headers
                    .get(h)
                    .and_then(|v| v.to_str().ok())
                    .filter(|v| !v.is_empty())
            })
            .map(str::to_owned);
        let Some(name) = name else {
            return unauthorized("no user in the request headers");
        };
        let mut groups: Vec<String> = Vec::new();
        for h in &self.group_headers {
            for v in headers.get_all(h) {
                if let Ok(g) = v.to_str() {
                    groups.push(g.to_owned());
                }
            }
        }
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, v) in headers {
            let n = k.as_str();
            if let Some(p) = self.extra_prefixes.iter().find(|p| n.starts_with(p.as_str()))
                && let Ok(v) = v.to_str()
            {
                let key = percent_decode(&n[p.len()..]);
                extra.entry(key).or_default().push(v.to_owned());
            }
        }
        if name != "system:anonymous" && !groups.iter().any(|g| g == "system:authenticated") {
            groups.push("system:authenticated".into());
        }
        Ok(User { name, groups, extra })
    }
}

/// `%XX` unescaping of an extra-header key (as k8s.io/apiserver does with `url.PathUnescape`).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// One DER element: its tag, its content and what follows it.
fn der(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, b) = b.split_first()?;
    let (&len0, b) = b.split_first()?;
    let (len, b) = if len0 < 0x80 {
        (usize::from(len0), b)
    } else {
        let n = usize::from(len0 & 0x7f);
        if n == 0 || n > 4 || b.len() < n {
            return None;
        }
        let len = b[..n].iter().fold(0usize, |acc, &x| acc << 8 | usize::from(x));
        (len, &b[n..])
    };
    if b.len() < len {
        return None;
    }
    Some((tag, &b[..len], &b[len..]))
}

/// The subject's common name (the last CN attribute) of an X.509 certificate.
pub fn subject_common_name(cert: &CertificateDer<'_>) -> Option<String> {
    const SEQ: u8 = 0x30;
    let (t, cert, _) = der(cert.as_ref())?;
    (t == SEQ).then_some(())?;
    let (t, mut tbs, _) = der(cert)?;
    (t == SEQ).then_some(())?;
    // [0] version (optional), serialNumber, signature, issuer, validity, subject
    let (t, _, rest) = der(tbs)?;
    if t == 0xa0 {
        tbs = rest;
        tbs = der(tbs)?.2; // serial
    } else {
        tbs = rest; // that was the serial
    }
    for _ in 0..3 {
        tbs = der(tbs)?.2;
    }
    let (t, mut subject, _) = der(tbs)?;
    (t == SEQ).then_some(())?;
    let mut cn = None;
    while !subject.is_empty() {
        let (t, mut set, rest) = der(subject)?;
        (t == 0x31).then_some(())?;
        subject = rest;
        while !set.is_empty() {
            let (_, atv, rest) = der(set)?;
            set = rest;
            let (t, oid, value) = der(atv)?;
            if t == 0x06 && oid == [0x55, 0x04, 0x03] {
                let (_, v, _) = der(value)?;
                cn = Some(String::from_utf8_lossy(v).into_owned());
            }
        }
    }
    cn
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls_pki_types::pem::PemObject as _;

    // openssl req -x509 -newkey ec ... -subj "/O=org/CN=front-proxy-client"
    const CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBrDCCAVOgAwIBAgIUUBZkKo3TWnzyGeNICcUglD5ZTqcwCgYIKoZIzj0EAwIw
KzEMMAoGA1UECgwDb3JnMRswGQYDVQQDDBJmcm9udC1wcm94eS1jbGllbnQwIBcN
MjYxMTMwMjE0NzA1WhgPMjEyNjExMDYyMTQ3MDVaMCsxDDAKBgNVBAoMA29yZzEb
MBkGA1UEAwwSZnJvbnQtcHJveHktY2xpZW50MFkwEwYHKoZIzj0CAQYIKoZIzj0D
AQcDQgAEhNlNHLNUshu9mxAkXXx3SDJw20xX+B9IRhYyJ2q6X1NByoCK+WtrhKuM
mU5g8MckCiS/T94e4YjG9Vj2EuI33KNTMFEwHQYDVR0OBBYEFPg+aajXfWdMtncf
heZl+IYi8FOeMB8GA1UdIwQYMBaAFPg+aajXfWdMtncfheZl+IYi8FOeMA8GA1Ud
EwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDRwAwRAIgb95CjM+JuV2ULxqlAQLXu3hj
RuNNhBvYjUrZeO2bIEcCIAbBmey+Ys4zWz/m1lSRpSuLAoXnsOSTDnQYspku4dBv
-----END CERTIFICATE-----
";

    fn cert() -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(CERT.as_bytes()).unwrap()
    }

    fn config(allowed: &str) -> RequestHeaderConfig {
        let data: BTreeMap<String, String> = [
            ("requestheader-client-ca-file", CERT),
            ("requestheader-allowed-names", allowed),
            ("requestheader-username-headers", r#"["X-Remote-User"]"#),
            ("requestheader-group-headers", r#"["X-Remote-Group"]"#),
            ("requestheader-extra-headers-prefix", r#"["X-Remote-Extra-"]"#),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        RequestHeaderConfig::from_configmap(&data).unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::try_from(*k).unwrap(), v.parse().unwrap());
        }
        h
    }

    #[test]
    fn common_name_of_a_certificate() {
        assert_eq!(
            subject_common_name(&cert()).as_deref(),
            Some("front-proxy-client")
        );
        assert_eq!(
            subject_common_name(&CertificateDer::from(vec![0x30, 0x03, 1, 2])),
            None
        );
        assert_eq!(subject_common_name(&CertificateDer::from(Vec::new())), None);
        // Every truncation of the certificate is handled without a panic.
        let der = cert().as_ref().to_vec();
        for n in 0..der.len() {
            let _ = subject_common_name(&CertificateDer::from(der[..n].to_vec()));
        }
    }

    #[test]
    fn identity_from_headers_and_the_headers_are_removed() {
        let cfg = config(r#"["front-proxy-client"]"#);
        let mut h = headers(&[
            ("x-remote-user", "alice"),
            ("x-remote-group", "dev"),
            ("x-remote-group", "ops"),
            ("x-remote-extra-scopes", "a"),
            ("x-remote-extra-acme.com%2fproject", "p1"),
            ("accept", "application/json"),
        ]);
        let u = cfg.authenticate(Some(&cert()), &mut h).unwrap();
        assert_eq!(u.name, "alice");
        assert_eq!(u.groups, ["dev", "ops", "system:authenticated"]);
        assert_eq!(u.extra["scopes"], ["a"]);
        assert_eq!(u.extra["acme.com/project"], ["p1"]);
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h.contains_key("accept"));
    }

    #[test]
    fn headers_without_a_valid_certificate_are_not_trusted() {
        let cfg = config(r#"["front-proxy-client"]"#);
        let mut h = headers(&[("x-remote-user", "admin"), ("x-remote-group", "system:masters")]);
        let e = cfg.authenticate(None, &mut h).unwrap_err();
        assert!(matches!(e, Error::Unauthorized(_)), "{e}");
        assert!(h.is_empty(), "identity headers are removed: {h:?}");

        let other = config(r#"["someone-else"]"#);
        let mut h = headers(&[("x-remote-user", "admin")]);
        let e = other.authenticate(Some(&cert()), &mut h).unwrap_err();
        assert!(e.to_string().contains("not an allowed requestheader name"), "{e}");

        let any = config("");
        let mut h = headers(&[("x-remote-user", "bob")]);
        assert_eq!(any.authenticate(Some(&cert()), &mut h).unwrap().name, "bob");

        let mut h = headers(&[("x-remote-group", "g")]);
        let e = any.authenticate(Some(&cert()), &mut h).unwrap_err();
        assert!(e.to_string().contains("no user"), "{e}");
    }

    #[test]
    fn configmap_errors() {
        let e = RequestHeaderConfig::from_configmap(&BTreeMap::new()).unwrap_err();
        assert!(e.to_string().contains("requestheader-client-ca-file"), "{e}");
        let mut data = BTreeMap::new();
        data.insert("requestheader-client-ca-file".to_owned(), CERT.to_owned());
        data.insert("requestheader-allowed-names".to_owned(), "not json".to_owned());
        let e = RequestHeaderConfig::from_configmap(&data).unwrap_err();
        assert!(e.to_string().contains("requestheader-allowed-names"), "{e}");
        data.remove("requestheader-allowed-names");
        let cfg = RequestHeaderConfig::from_configmap(&data).unwrap();
        assert_eq!(cfg.username_headers, ["x-remote-user"]);
        assert_eq!(cfg.extra_prefixes, ["x-remote-extra-"]);
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%2Fb"), "a/b");
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
