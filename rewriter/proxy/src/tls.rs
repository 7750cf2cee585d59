//! TLS: the one crypto provider (ring), PEM loading, and a server certificate that reloads when
//! its files change.
//!
//! Kubernetes updates Secret volumes by swapping a `..data` symlink, which a watch on the file
//! itself does not see; so the directories holding the files are watched, every event reloads
//! both files, and a slow poll backs the watch up. A failed reload keeps the old certificate.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::shutdown::Watch;

/// The process's crypto provider: ring.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Installs ring as the process default (for code that calls `ClientConfig::builder()`).
pub fn install_default_provider() {
    // An error means a provider is installed already, which is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A certificate or key that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Reading or decoding PEM failed.
    #[error("{path}: {source}")]
    Pem {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// The file has no certificate.
    #[error("{0}: no certificate found")]
    NoCertificate(String),
    /// rustls refused the material.
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
    /// The directory watch could not be set up.
    #[error("watching {path}: {source}")]
    Watch {
        /// The directory.
        path: String,
        /// Why.
        #[source]
        source: notify::Error,
    },
}

/// Reads every certificate of a PEM file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |source| TlsError::Pem {
        path: path.display().to_string(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(pem)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.display().to_string()));
    }
    Ok(certs)
}

/// Reads the private key of a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|source| TlsError::Pem {
        path: path.display().to_string(),
        source,
    })
}

/// Certificates from PEM bytes.
pub fn certs_from_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, rustls_pki_types::pem::Error> {
    CertificateDer::pem_slice_iter(pem).collect()
}

fn load_pair(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let certs = load_certs(cert)?;
    let key = load_key(key)?;
    Ok(CertifiedKey::from_der(certs, key, &provider())?)
}

/// A server certificate that can be swapped while connections are served.
#[derive(Debug)]
pub struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl ReloadingCert {
    /// Loads the pair once; fails when it cannot be used.
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<ReloadingCert>, TlsError> {
        let ck = load_pair(cert, key)?;
        Ok(Arc::new(ReloadingCert {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current: RwLock::new(Arc::new(ck)),
        }))
    }

    /// Reads the files again; on error the current certificate stays.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let ck = load_pair(&self.cert, &self.key)?;
        let mut cur = self.current.write().unwrap_or_else(|p| p.into_inner());
        if cur.cert == ck.cert {
            return Ok(false);
        }
        *cur = Arc::new(ck);
        Ok(true)
    }

    /// The certificate served now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Watches the files' directories (and polls every `poll`) until shutdown.
    pub fn spawn_watcher(self: &Arc<Self>, poll: Duration, shutdown: Watch) -> Result<(), TlsError> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            if ev.is_ok() {
                let _ = tx.send(());
            }
        })
        .map_err(|source| TlsError::Watch {
            path: self.cert.display().to_string(),
            source,
        })?;
        let mut dirs: Vec<PathBuf> = Vec::new();
        for f in [&self.cert, &self.key] {
            let dir = f
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_owned();
            if !dirs.contains(&dir) {
                watcher
                    .watch(&dir, RecursiveMode::NonRecursive)
                    .map_err(|source| TlsError::Watch {
                        path: dir.display().to_string(),
                        source,
                    })?;
                dirs.push(dir);
            }
        }
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let _watcher = watcher;
            let stop = shutdown.cancelled();
            tokio::pin!(stop);
            loop {
                tokio::select! {
                    _ = &mut stop => return,
                    ev = rx.recv() => {
                        if ev.is_none() {
                            return;
                        }
                        // Let the writer (or the symlink swap) finish, then take all events at once.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        while rx.try_recv().is_ok() {}
                    }
                    _ = tokio::time::sleep(poll) => {}
                }
                match this.reload() {
                    Ok(true) => tracing::info!(cert = %this.cert.display(), "webhook certificate reloaded"),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "webhook certificate reload failed; keeping the current one")
                    }
                }
            }
        });
        Ok(())
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// A server config (HTTP/2 and HTTP/1.1) serving `cert`.
pub fn server_config(cert: Arc<ReloadingCert>) -> Result<rustls::ServerConfig, TlsError> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(cert);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

/// A verifier that accepts any server certificate (the webhook target, as the Go sidecar does,
/// and kubeconfigs with `insecure-skip-tls-verify`). Signatures are still checked.
#[derive(Debug)]
pub struct NoVerify(pub Arc<CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
