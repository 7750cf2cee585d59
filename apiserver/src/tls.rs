//! TLS: the one crypto provider (ring), PEM loading, certificates that reload when their files
//! change, the serving config (front-proxy client certificates requested, verified against the
//! requestheader CA) and the client config for virt-api (mutual TLS).
//!
//! Kubernetes updates Secret volumes by swapping a `..data` symlink, which a watch on the file
//! itself does not see; so the directories holding the files are watched, every event reloads
//! both files, and a slow poll backs the watch up. A failed reload keeps the old certificate.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use rustls::client::ResolvesClientCert;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::{Error, Result};

/// The process's crypto provider: ring.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Installs ring as the process default (for kube-rs, which builds its own config).
pub fn install_default_provider() {
    // An error means a provider is installed already, which is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn tls_err(path: &Path, message: impl ToString) -> Error {
    Error::Tls {
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

/// Reads every certificate of a PEM file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| tls_err(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_err(path, e))?;
    if certs.is_empty() {
        return Err(tls_err(path, "no certificate found"));
    }
    Ok(certs)
}

/// Certificates from PEM text (a ConfigMap value); `what` names it in errors.
pub fn certs_from_pem(pem: &str, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::AuthConfig(format!("{what}: {e}")))?;
    if certs.is_empty() {
        return Err(Error::AuthConfig(format!("{what}: no certificate found")));
    }
    Ok(certs)
}

/// A root store of certificates.
pub fn root_store(certs: Vec<CertificateDer<'static>>, what: &str) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(Error::AuthConfig(format!("{what}: no usable CA certificate")));
    }
    Ok(roots)
}

fn load_pair(cert: &Path, key: &Path) -> Result<CertifiedKey> {
    let certs = load_certs(cert)?;
    let k = PrivateKeyDer::from_pem_file(key).map_err(|e| tls_err(key, e))?;
    CertifiedKey::from_der(certs, k, &provider()).map_err(|e| tls_err(cert, e))
}

/// A certificate and key that can be swapped while connections are served: the serving
/// certificate, and the client certificate presented to virt-api.
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

    /// Watches the files' directories (and polls every `poll`) for the life of the process.
    pub fn spawn_watcher(self: &Arc<Self>, poll: Duration) -> Result<()> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            if ev.is_ok() {
                let _ = tx.send(());
            }
        })
        .map_err(|e| tls_err(&self.cert, e))?;
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
                    .map_err(|e| tls_err(&dir, e))?;
                dirs.push(dir);
            }
        }
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let _watcher = watcher;
            loop {
                tokio::select! {
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
                    Ok(true) => tracing::info!(cert = %this.cert.display(), "certificate reloaded"),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "certificate reload failed; keeping the current one")
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

impl ResolvesClientCert for ReloadingCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// The serving config (HTTP/2 and HTTP/1.1): client certificates are requested and, when
/// given, must chain to `client_ca` (the requestheader CA); connections without one are
/// accepted and get 401 from the authenticator for everything but the health paths.
pub fn server_config(cert: Arc<ReloadingCert>, client_ca: RootCertStore) -> Result<rustls::ServerConfig> {
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(client_ca), provider())
        .allow_unauthenticated()
        .build()
        .map_err(|e| Error::AuthConfig(format!("requestheader-client-ca-file: {e}")))?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Internal(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(cert);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

/// The client config for virt-api: its CA bundle, our client certificate, HTTP/1.1 only
/// (upgrades).
pub fn client_config(ca_bundle: &Path, client_cert: Arc<ReloadingCert>) -> Result<rustls::ClientConfig> {
    let roots = root_store(load_certs(ca_bundle)?, &ca_bundle.display().to_string())?;
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Internal(e.to_string()))?
        .with_root_certificates(roots)
        .with_client_cert_resolver(client_cert);
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}
