//! Test doubles for what cannot run here: the webhook server a sidecar's webhook listener sits in
//! front of (virt-api in Deckhouse), and a kubelet that accepts an exec upgrade (no kubelet runs
//! containers here). kube-apiserver, the sidecars and the clients stay real.

use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use base64::Engine as _;
use kube_api_rewriter_testkit::{self_signed_cert, spawn_double};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// A request the webhook double received: the path with its query, and the body.
#[derive(Clone, Debug)]
pub struct Seen {
    pub uri: String,
    pub body: Vec<u8>,
}

/// What a webhook double has received, newest last.
pub type SeenLog = Arc<Mutex<Vec<Seen>>>;

/// The JSON Patch the webhook double answers with: a KubeVirt label the sidecar must rename on
/// the way back to kube-apiserver.
pub const WEBHOOK_PATCH: &str =
    r#"[{"op":"add","path":"/metadata/labels/kubevirt.io~1mutated","value":"by-double"}]"#;

/// Webhook double: records each request and allows it, answering an AdmissionReview with
/// [`WEBHOOK_PATCH`] (plain HTTP, as the sidecars' `WEBHOOK_ADDRESS` allows). Returns its port
/// and its log.
pub fn webhook() -> (u16, SeenLog) {
    let log = SeenLog::default();
    let seen = log.clone();
    let port = spawn_double(move |mut s| {
        let seen = seen.clone();
        async move {
            let Ok((head, body)) = read_request(&mut s).await else {
                return;
            };
            let uri = head.split(' ').nth(1).unwrap_or("").to_owned();
            let uid = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v["request"]["uid"].as_str().map(str::to_owned))
                .unwrap_or_default();
            seen.lock().expect("lock").push(Seen { uri, body });
            let answer = json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {
                    "uid": uid,
                    "allowed": true,
                    "patchType": "JSONPatch",
                    "patch": base64::engine::general_purpose::STANDARD.encode(WEBHOOK_PATCH),
                },
            })
            .to_string();
            let _ = s
                .write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                        answer.len()
                    )
                    .as_bytes(),
                )
                .await;
        }
    });
    (port, log)
}

/// Kubelet double: a TLS listener (kube-apiserver, given no kubelet CA, does not verify it)
/// that answers every request with `101 Switching Protocols`, then one line naming the request
/// it got, then closes. What reaches the client after the 101 shows whether the sidecar
/// spliced the upgraded connection.
pub fn kubelet(dir: &Path) -> Result<u16> {
    let (crt, key) = (dir.join("kubelet-double.crt"), dir.join("kubelet-double.key"));
    self_signed_cert(&crt, &key, "kubelet-double");
    let config = tls_config(&crt, &key)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    Ok(spawn_double(move |s| {
        let acceptor = acceptor.clone();
        async move {
            let Ok(mut s) = acceptor.accept(s).await else {
                return;
            };
            let Ok((head, _)) = read_request(&mut s).await else {
                return;
            };
            let line = head.lines().next().unwrap_or("");
            let answer = format!(
                "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nkubelet double received: {line}\n"
            );
            let _ = s.write_all(answer.as_bytes()).await;
            let _ = s.shutdown().await;
        }
    }))
}

fn tls_config(crt: &Path, key: &Path) -> Result<rustls::ServerConfig> {
    use rustls_pki_types::pem::PemObject as _;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(crt)
        .context("kubelet double certificate")?
        .collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(key).context("kubelet double key")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?)
}

/// One HTTP/1.1 request: its head (request line and headers) and its body (`Content-Length`).
async fn read_request(s: &mut (impl AsyncRead + AsyncWrite + Unpin)) -> Result<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).await?;
        anyhow::ensure!(n > 0, "connection closed before the request's end");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let len = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
    let mut body = buf[end..].to_vec();
    while if chunked {
        !body.ends_with(b"0\r\n\r\n")
    } else {
        body.len() < len
    } {
        let n = s.read(&mut chunk).await?;
        anyhow::ensure!(n > 0, "connection closed before the body's end");
        body.extend_from_slice(&chunk[..n]);
    }
    Ok((head, if chunked { dechunk(&body) } else { body }))
}

/// The data of a chunked body.
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = b.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&b[..i])
            .ok()
            .and_then(|h| usize::from_str_radix(h.split(';').next().unwrap_or("").trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 || b.len() < i + 2 + size {
            break;
        }
        out.extend_from_slice(&b[i + 2..i + 2 + size]);
        b = &b[(i + 4 + size).min(b.len())..];
    }
    out
}
