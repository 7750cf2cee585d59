//! TLS: the workspace's TLS crate ([`kube_api_rewriter_tls`]: the one crypto provider, ring; PEM
//! loading; the webhook listener's certificate that follows its files) and the verifier the
//! webhook target and `insecure-skip-tls-verify` kubeconfigs use.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls_pki_types::CertificateDer;

pub use kube_api_rewriter_tls::{
    Error as TlsError, Follow, ReloadingCert, certs_from_pem, install_default_provider, load_certs, load_key,
    provider,
};

/// A server config (HTTP/2 and HTTP/1.1) serving `cert`, without client certificates.
pub fn server_config(cert: Arc<ReloadingCert>) -> Result<rustls::ServerConfig, TlsError> {
    kube_api_rewriter_tls::server_config(cert, kube_api_rewriter_tls::ALPN_H2_HTTP1)
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
