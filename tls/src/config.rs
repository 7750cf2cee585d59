//! rustls configs around a [`ReloadingCert`]: TLS 1.2 and 1.3 with ring, the certificate asked
//! of the resolver at every handshake.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;

use crate::{Error, ReloadingCert, load_certs, provider, root_store};

/// ALPN of a server that speaks HTTP/2 and HTTP/1.1.
pub const ALPN_H2_HTTP1: &[&[u8]] = &[b"h2", b"http/1.1"];

/// ALPN of HTTP/1.1 only (webhooks, upgrades).
pub const ALPN_HTTP1: &[&[u8]] = &[b"http/1.1"];

fn alpn(protocols: &[&[u8]]) -> Vec<Vec<u8>> {
    protocols.iter().map(|p| p.to_vec()).collect()
}

/// A server config serving `cert`, without client certificates, offering `protocols` by ALPN.
///
/// ```no_run
/// use kube_api_rewriter_tls::{ALPN_HTTP1, ReloadingCert, server_config};
///
/// let cert = ReloadingCert::load("/certs/tls.crt".as_ref(), "/certs/tls.key".as_ref())?;
/// let config = server_config(cert, ALPN_HTTP1)?;
/// # let _ = config; Ok::<(), kube_api_rewriter_tls::Error>(())
/// ```
pub fn server_config(cert: Arc<ReloadingCert>, protocols: &[&[u8]]) -> Result<rustls::ServerConfig, Error> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(cert);
    cfg.alpn_protocols = alpn(protocols);
    Ok(cfg)
}

/// A server config serving `cert` that requests client certificates: one that is given must
/// chain to `client_ca`; a connection without one is accepted (the application decides what
/// it may do).
///
/// ```no_run
/// use kube_api_rewriter_tls::{ALPN_H2_HTTP1, ReloadingCert, load_certs, root_store};
///
/// let cert = ReloadingCert::load("/certs/tls.crt".as_ref(), "/certs/tls.key".as_ref())?;
/// let ca = root_store(load_certs("/certs/front-proxy-ca.crt".as_ref())?, "front-proxy CA")?;
/// let config = kube_api_rewriter_tls::server_config_with_client_ca(cert, ca, ALPN_H2_HTTP1)?;
/// # let _ = config; Ok::<(), kube_api_rewriter_tls::Error>(())
/// ```
pub fn server_config_with_client_ca(
    cert: Arc<ReloadingCert>,
    client_ca: RootCertStore,
    protocols: &[&[u8]],
) -> Result<rustls::ServerConfig, Error> {
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(client_ca), provider())
        .allow_unauthenticated()
        .build()?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(cert);
    cfg.alpn_protocols = alpn(protocols);
    Ok(cfg)
}

/// A client config that trusts the CAs of the PEM file `ca_bundle` and presents `cert` as its
/// client certificate, offering `protocols` by ALPN.
///
/// ```no_run
/// use kube_api_rewriter_tls::{ALPN_HTTP1, ReloadingCert, client_config};
///
/// let cert = ReloadingCert::load("/certs/client.crt".as_ref(), "/certs/client.key".as_ref())?;
/// let config = client_config("/certs/ca.crt".as_ref(), cert, ALPN_HTTP1)?;
/// # let _ = config; Ok::<(), kube_api_rewriter_tls::Error>(())
/// ```
pub fn client_config(
    ca_bundle: &Path,
    cert: Arc<ReloadingCert>,
    protocols: &[&[u8]],
) -> Result<rustls::ClientConfig, Error> {
    let roots = root_store(load_certs(ca_bundle)?, &ca_bundle.display().to_string())?;
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_cert_resolver(cert);
    cfg.alpn_protocols = alpn(protocols);
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{TempDir, cert, served_cert};

    #[test]
    fn configs_serve_the_certificate_with_their_alpn() {
        let dir = TempDir::new("configs");
        let (crt, key) = cert(dir.path(), "a", "first");
        let rc = ReloadingCert::load(&crt, &key).expect("loads");
        let cfg = server_config(Arc::clone(&rc), ALPN_HTTP1).expect("server config");
        assert_eq!(cfg.alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert_eq!(served_cert(Arc::new(cfg)), rc.current().cert[0]);

        let ca = root_store(load_certs(&crt).expect("ca"), "ca").expect("roots");
        let cfg = server_config_with_client_ca(Arc::clone(&rc), ca, ALPN_H2_HTTP1).expect("server config");
        assert_eq!(cfg.alpn_protocols, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
        // No client certificate is accepted.
        assert_eq!(served_cert(Arc::new(cfg)), rc.current().cert[0]);

        let cfg = client_config(&crt, Arc::clone(&rc), ALPN_HTTP1).expect("client config");
        assert!(cfg.client_auth_cert_resolver.has_certs());
        let e = client_config(&key, rc, ALPN_HTTP1).unwrap_err();
        assert_eq!(e.to_string(), format!("{}: no certificate found", key.display()));
    }
}
