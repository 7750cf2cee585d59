//! Test support: certificates made by openssl (testkit's helper, as the workspace's other tests
//! make them), a handshake in memory, captured log lines.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, ServerConfig, ServerConnection};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use crate::provider;

/// A temporary directory, removed when dropped.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        TempDir(kube_api_rewriter_testkit::temp_dir(&format!("tls-{tag}")))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `DIR/NAME.crt` and `DIR/NAME.key`: a self-signed EC certificate for `cn`.
pub(crate) fn cert(dir: &Path, name: &str, cn: &str) -> (PathBuf, PathBuf) {
    let (crt, key) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
    kube_api_rewriter_testkit::self_signed_cert(&crt, &key, cn);
    (crt, key)
}

/// Accepts any server certificate: the tests ask which one is served, not whether it is
/// trusted (the self-signed certificates are CAs, which webpki refuses as end entities).
#[derive(Debug)]
struct AcceptAny(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Runs a TLS handshake against `server` in memory and returns the certificate it presented.
pub(crate) fn served_cert(server: Arc<ServerConfig>) -> CertificateDer<'static> {
    let client = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAny(provider())))
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").expect("name");
    let mut client = ClientConnection::new(Arc::new(client), name).expect("client");
    let mut server = ServerConnection::new(server).expect("server");
    for _ in 0..10 {
        if !client.is_handshaking() && !server.is_handshaking() {
            break;
        }
        let mut buf = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut buf).expect("client writes");
        }
        let mut rd = &buf[..];
        while !rd.is_empty() {
            server.read_tls(&mut rd).expect("server reads");
            server.process_new_packets().expect("server handshake");
        }
        let mut buf = Vec::new();
        while server.wants_write() {
            server.write_tls(&mut buf).expect("server writes");
        }
        let mut rd = &buf[..];
        while !rd.is_empty() {
            client.read_tls(&mut rd).expect("client reads");
            client.process_new_packets().expect("client handshake");
        }
    }
    assert!(!client.is_handshaking(), "the handshake completes");
    client.peer_certificates().expect("a server certificate")[0]
        .clone()
        .into_owned()
}

/// Log lines written since [`Logs::capture`], by any thread of the test binary.
///
/// One global subscriber, installed by the first capture, writes every line into one buffer. A
/// subscriber per test (`set_default`, thread-local) can miss lines: tracing caches each
/// callsite's interest globally, and a callsite first reached on another test's thread, where no
/// subscriber listens, can stay disabled for this one. Tests look for lines naming their own
/// files, so the other tests' lines do not disturb them.
pub(crate) struct Logs {
    from: usize,
}

static LOG_BUFFER: Mutex<Vec<u8>> = Mutex::new(Vec::new());

fn log_buffer() -> std::sync::MutexGuard<'static, Vec<u8>> {
    LOG_BUFFER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Logs {
    pub(crate) fn capture() -> Logs {
        static INSTALLED: std::sync::Once = std::sync::Once::new();
        INSTALLED.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_ansi(false)
                .with_max_level(tracing::Level::DEBUG)
                .with_writer(|| Writer)
                .finish();
            tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
        });
        Logs {
            from: log_buffer().len(),
        }
    }

    pub(crate) fn text(&self) -> String {
        let buf = log_buffer();
        String::from_utf8_lossy(&buf[self.from.min(buf.len())..]).into_owned()
    }
}

struct Writer;

impl std::io::Write for Writer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        log_buffer().extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
