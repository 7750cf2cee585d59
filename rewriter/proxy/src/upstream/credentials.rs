//! Where kube-apiserver is and how the proxy proves who it is: the kubeconfig (or in-cluster
//! configuration), a bearer token (a token file is re-read when it rotates) and the client
//! certificate. Credentials never reach a log: `Auth`'s `Debug` prints none.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use http::header::HeaderValue;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use secrecy::ExposeSecret;

use super::UpstreamError;
use crate::tls;

/// Where kube-apiserver and its credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamSource {
    /// These kubeconfig files (merged, as `KUBECONFIG`).
    Kubeconfig(Vec<PathBuf>),
    /// In-cluster service account if available, else `~/.kube/config`.
    Infer,
}

/// How the proxy authenticates itself (only when the client did not send `Authorization`).
pub(super) enum Auth {
    None,
    /// A fixed header value (bearer token or basic auth).
    Fixed(HeaderValue),
    /// A token file, re-read when it changes (rotated service-account tokens).
    TokenFile(TokenFile),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print credentials.
        match self {
            Auth::None => f.write_str("None"),
            Auth::Fixed(_) => f.write_str("Fixed(..)"),
            Auth::TokenFile(t) => write!(f, "TokenFile({})", t.path.display()),
        }
    }
}

pub(super) struct TokenFile {
    path: PathBuf,
    /// How often the file's modification time is looked at.
    check: Duration,
    state: Mutex<TokenState>,
}

struct TokenState {
    value: Option<HeaderValue>,
    checked: Instant,
    stamp: Option<(SystemTime, u64)>,
}

impl TokenFile {
    /// Reads `path`, and again when its modification time or size has changed, looking every
    /// `check`.
    pub(super) fn new(path: PathBuf, check: Duration) -> Result<TokenFile, UpstreamError> {
        let t = TokenFile {
            path,
            check,
            state: Mutex::new(TokenState {
                value: None,
                checked: Instant::now(),
                stamp: None,
            }),
        };
        let mut st = t.state.lock().unwrap_or_else(|p| p.into_inner());
        t.refresh(&mut st)
            .map_err(|e| UpstreamError::Config(format!("token file {}: {e}", t.path.display())))?;
        drop(st);
        Ok(t)
    }

    fn refresh(&self, st: &mut TokenState) -> std::io::Result<()> {
        let meta = std::fs::metadata(&self.path)?;
        let stamp = meta.modified().ok().map(|m| (m, meta.len()));
        st.checked = Instant::now();
        if st.value.is_some() && stamp.is_some() && stamp == st.stamp {
            return Ok(());
        }
        let text = std::fs::read_to_string(&self.path)?;
        st.value = bearer(text.trim());
        st.stamp = stamp;
        Ok(())
    }

    pub(super) fn header(&self) -> Option<HeaderValue> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.checked.elapsed() >= self.check
            && let Err(e) = self.refresh(&mut st)
        {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot re-read the token file; using the last token");
        }
        st.value.clone()
    }
}

pub(super) fn bearer(token: &str) -> Option<HeaderValue> {
    if token.is_empty() {
        return None;
    }
    let mut v = HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
    v.set_sensitive(true);
    Some(v)
}

pub(super) fn client_identity(
    a: &kube::config::AuthInfo,
) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>, UpstreamError> {
    let b64 = |what: &str, s: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .map_err(|e| UpstreamError::Config(format!("{what}: invalid base64: {e}")))
    };
    let read =
        |what: &str, p: &str| std::fs::read(p).map_err(|e| UpstreamError::Config(format!("{what} {p}: {e}")));
    let cert = match (&a.client_certificate_data, &a.client_certificate) {
        (Some(d), _) => Some(b64("client-certificate-data", d)?),
        (None, Some(p)) => Some(read("client-certificate", p)?),
        _ => None,
    };
    let key = match (&a.client_key_data, &a.client_key) {
        (Some(d), _) => Some(b64("client-key-data", d.expose_secret())?),
        (None, Some(p)) => Some(read("client-key", p)?),
        _ => None,
    };
    match (cert, key) {
        (Some(c), Some(k)) => {
            let certs = tls::certs_from_pem(&c, "client certificate")
                .map_err(|e| UpstreamError::Config(e.to_string()))?;
            // The key's bytes are never logged: only the kind of error.
            let key = PrivateKeyDer::from_pem_slice(&k)
                .map_err(|_| UpstreamError::Config("client key: not a PEM private key".into()))?;
            Ok(Some((certs, key)))
        }
        (None, None) => Ok(None),
        _ => Err(UpstreamError::Config(
            "a client certificate needs both the certificate and the key".into(),
        )),
    }
}

/// Loads the kube-apiserver configuration the way controller-runtime's `GetConfig` looks for it:
/// `KUBECONFIG`, then the in-cluster service account, then `~/.kube/config`.
pub async fn load_kube_config(source: &UpstreamSource) -> Result<kube::Config, UpstreamError> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let opts = KubeConfigOptions::default();
    match source {
        UpstreamSource::Kubeconfig(paths) => {
            let mut merged: Option<Kubeconfig> = None;
            for p in paths {
                let kc = Kubeconfig::read_from(p)
                    .map_err(|e| UpstreamError::Config(format!("{}: {e}", p.display())))?;
                merged = Some(match merged {
                    Some(m) => m.merge(kc).map_err(|e| UpstreamError::Config(e.to_string()))?,
                    None => kc,
                });
            }
            let kc = merged.ok_or_else(|| UpstreamError::Config("KUBECONFIG names no file".into()))?;
            kube::Config::from_custom_kubeconfig(kc, &opts)
                .await
                .map_err(|e| UpstreamError::Config(e.to_string()))
        }
        UpstreamSource::Infer => {
            if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
                return kube::Config::incluster()
                    .map_err(|e| UpstreamError::Config(format!("in-cluster: {e}")));
            }
            kube::Config::from_kubeconfig(&opts).await.map_err(|e| {
                UpstreamError::Config(format!(
                    "no KUBECONFIG, not in a cluster, and ~/.kube/config: {e}"
                ))
            })
        }
    }
}
