//! The webhook's serving certificate: PEM files (rustls-pki-types) loaded into a rustls 0.23
//! server config (ring), and reloaded when the files change. Kubernetes updates a Secret
//! volume by swapping a `..data` symlink, which a watch on the file itself misses, so the files
//! are simply read again on a short poll; a failed reload keeps the current certificate.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::{Error, Result};

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Tls(format!("{}: {e}", path.display()))
}

/// Reads a certificate chain and its key.
fn load_pair(cert: &Path, key: &Path) -> Result<CertifiedKey> {
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(|e| tls_err(cert, e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| tls_err(cert, e))?;
    if certs.is_empty() {
        return Err(tls_err(cert, "no certificate found"));
    }
    let k = PrivateKeyDer::from_pem_file(key).map_err(|e| tls_err(key, e))?;
    CertifiedKey::from_der(certs, k, &provider()).map_err(|e| tls_err(cert, e))
}

/// A serving certificate that can be swapped while connections are served.
#[derive(Debug)]
pub struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl ReloadingCert {
    /// Loads the pair once; fails when it cannot be used.
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<ReloadingCert>> {
        let ck = load_pair(cert, key)?;
        Ok(Arc::new(ReloadingCert {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current: RwLock::new(Arc::new(ck)),
        }))
    }

    /// Reads the files again; on error the current certificate stays. True when it changed.
    pub fn reload(&self) -> Result<bool> {
        let ck = load_pair(&self.cert, &self.key)?;
        let mut cur = self.current.write().unwrap_or_else(|p| p.into_inner());
        if cur.cert == ck.cert {
            return Ok(false);
        }
        *cur = Arc::new(ck);
        Ok(true)
    }

    /// The certificate in use now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the files every `poll` for as long as the returned task runs.
    pub fn spawn_reloader(self: &Arc<Self>, poll: Duration) -> tokio::task::JoinHandle<()> {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(poll).await;
                match this.reload() {
                    Ok(true) => tracing::info!(cert = %this.cert.display(), "certificate reloaded"),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "certificate reload failed; keeping the current one")
                    }
                }
            }
        })
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The serving config: TLS 1.2 and 1.3, HTTP/1.1, no client certificates (kube-apiserver calls
/// webhooks without one unless configured to).
pub fn server_config(cert: Arc<ReloadingCert>) -> Result<rustls::ServerConfig> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(cert);
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(dir: &Path, name: &str, cn: &str) -> (PathBuf, PathBuf) {
        let (crt, key) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
        let out = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
            ])
            .args(["-days", "1", "-subj", &format!("/CN={cn}"), "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&crt)
            .output()
            .expect("openssl runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        (crt, key)
    }

    #[test]
    fn reload_swaps_the_certificate_and_keeps_it_on_errors() {
        let dir = std::env::temp_dir().join(format!("vc-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let (crt, key) = cert(&dir, "a", "first");
        let rc = ReloadingCert::load(&crt, &key).expect("loads");
        let first = rc.current().cert.clone();
        assert!(!rc.reload().expect("same files"), "nothing changed");
        let (crt2, key2) = cert(&dir, "b", "second");
        std::fs::copy(&crt2, &crt).expect("copy");
        std::fs::copy(&key2, &key).expect("copy");
        assert!(rc.reload().expect("new files"), "a new certificate");
        assert_ne!(rc.current().cert, first);
        std::fs::write(&crt, "garbage").expect("write");
        assert!(rc.reload().is_err());
        assert_eq!(
            rc.current().cert,
            ReloadingCert::load(&crt2, &key2).expect("b").current().cert
        );
        assert!(server_config(rc).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
