//! The crate's one error type.

/// A certificate, key or CA bundle that cannot be used, or a watch that cannot be set up.
///
/// Every variant names the file (or, for PEM text, what it is); none quotes a private key.
///
/// ```
/// use std::path::Path;
///
/// let err = kube_api_rewriter_tls::load_key(Path::new("/nonexistent/tls.key")).unwrap_err();
/// assert!(err.to_string().starts_with("/nonexistent/tls.key: "), "{err}");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A certificate file (or PEM text) cannot be read or decoded.
    #[error("{path}: {source}")]
    Pem {
        /// The file, or what the PEM text is.
        path: String,
        /// Why.
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// The file (or PEM text) holds no certificate.
    #[error("{0}: no certificate found")]
    NoCertificate(String),
    /// A private key file cannot be read or holds no usable PEM key. The reason says what kind
    /// of problem it is and never quotes the file.
    #[error("{path}: {reason}")]
    Key {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The certificate and its key cannot be used together (they do not match, or the key type
    /// is not supported).
    #[error("{path}: {source}")]
    Pair {
        /// The certificate file.
        path: String,
        /// Why.
        #[source]
        source: rustls::Error,
    },
    /// None of the certificates can be a trust anchor.
    #[error("{0}: no usable CA certificate")]
    NoCa(String),
    /// The client certificate verifier cannot be built from the CA certificates.
    #[error("{0}")]
    ClientVerifier(#[from] rustls::server::VerifierBuilderError),
    /// rustls refused the configuration.
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
    /// A directory watch could not be set up.
    #[error("watching {path}: {source}")]
    Watch {
        /// The directory.
        path: String,
        /// Why.
        #[source]
        source: notify::Error,
    },
}
