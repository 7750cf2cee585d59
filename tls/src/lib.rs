//! A rustls certificate that follows its PEM files on disk: the serving certificate of the
//! `kube-api-rewriter` webhook listener, of virtualization-api and of the
//! virtualization-controller webhook, and virtualization-api's client certificate for virt-api.
//!
//! [`ReloadingCert`] loads a certificate chain and its private key (PEM, read with
//! `rustls-pki-types`), hands the current pair to rustls as a server or client certificate
//! resolver, and [`ReloadingCert::follow`] reads the files again when they change: on a
//! directory watch (Kubernetes updates a Secret volume by swapping a `..data` symlink, which a
//! watch on the file itself misses), on a poll, or both. A replacement that cannot be used is
//! logged and the current certificate stays. The task stops when the caller's signal completes,
//! so every binary keeps its own shutdown.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kube_api_rewriter_tls::Error> {
//! use std::path::Path;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use kube_api_rewriter_tls::{ALPN_H2_HTTP1, Follow, ReloadingCert, server_config};
//!
//! let cert = ReloadingCert::load(Path::new("/certs/tls.crt"), Path::new("/certs/tls.key"))?;
//! let follow = Follow {
//!     name: "serving certificate",
//!     poll: Duration::from_secs(60),
//!     watch_dirs: true,
//! };
//! cert.follow(follow, std::future::pending())?;
//! let config = Arc::new(server_config(cert, ALPN_H2_HTTP1)?);
//! // config goes to tokio_rustls::TlsAcceptor::from(config).
//! # let _ = config; Ok(()) }
//! ```
//!
//! The one crypto provider of the workspace is ring ([`provider`]). Log lines and errors name
//! files and say what is wrong with them; they never quote a key.

#![warn(unreachable_pub)]

mod config;
mod error;
mod pem;
mod reload;

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

pub use config::{ALPN_H2_HTTP1, ALPN_HTTP1, client_config, server_config, server_config_with_client_ca};
pub use error::Error;
pub use pem::{certs_from_pem, load_certs, load_key, root_store};
pub use reload::{Follow, ReloadingCert};

/// The process's crypto provider: ring.
///
/// ```
/// let provider = kube_api_rewriter_tls::provider();
/// assert!(!provider.cipher_suites.is_empty());
/// ```
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Installs ring as the process default, for code that calls `ClientConfig::builder()` (kube-rs
/// builds its own config). Installing twice is fine.
///
/// ```
/// kube_api_rewriter_tls::install_default_provider();
/// assert!(rustls::crypto::CryptoProvider::get_default().is_some());
/// ```
pub fn install_default_provider() {
    // An error means a provider is installed already, which is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
pub(crate) mod testutil;
