//! A tiny HTTP/1.1 responder for the probe and metrics listeners: `GET /healthz`, `/readyz` and
//! `/metrics` ([`crate::metrics`]), one request per connection. Deckhouse's listen-address syntax (`:8083`) is
//! accepted.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use crate::reconcile::Context;

/// Parses a listen address; an empty host (`:8083`) means every interface.
pub fn listen_addr(s: &str) -> Result<SocketAddr, String> {
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_owned()
    };
    full.parse().map_err(|e| format!("listen address {s:?}: {e}"))
}

/// What a listener answers.
#[derive(Clone, Copy, Debug)]
pub enum Endpoints {
    /// `/healthz` (always 200) and `/readyz` (200 once every watched resource could be listed,
    /// else 503).
    Probes,
    /// `/metrics` (Prometheus text).
    Metrics,
}

/// Serves `endpoints` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, endpoints: Endpoints, ctx: Arc<Context>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(5), answer(stream, endpoints, &ctx)).await;
        });
    }
}

/// The status line and body for `path`.
pub fn respond(path: &str, endpoints: Endpoints, ctx: &Context) -> (&'static str, String) {
    match (endpoints, path) {
        (Endpoints::Probes, "/healthz") => ("200 OK", "ok\n".into()),
        (Endpoints::Probes, "/readyz") if ctx.ready.load(Ordering::Relaxed) => ("200 OK", "ok\n".into()),
        (Endpoints::Probes, "/readyz") => ("503 Service Unavailable", "not ready\n".into()),
        (Endpoints::Metrics, "/metrics") => (
            "200 OK",
            crate::metrics::render(ctx.errors.load(Ordering::Relaxed), ctx.vm_rows()),
        ),
        _ => ("404 Not Found", "not found\n".into()),
    }
}

async fn answer(mut stream: TcpStream, endpoints: Endpoints, ctx: &Context) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let mut parts = head.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, body) = if method == "GET" || method == "HEAD" {
        respond(path, endpoints, ctx)
    } else {
        ("405 Method Not Allowed", "method not allowed\n".into())
    };
    let body = if method == "HEAD" { String::new() } else { body };
    let content_type = match endpoints {
        Endpoints::Metrics if status == "200 OK" => {
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        }
        _ => "text/plain; charset=utf-8",
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(resp.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(listen_addr(":8083").unwrap(), "0.0.0.0:8083".parse().unwrap());
        assert_eq!(
            listen_addr("127.0.0.1:8080").unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
        assert!(listen_addr("nowhere").is_err());
    }

    #[tokio::test]
    async fn probes_follow_readiness_and_metrics_count_errors() {
        let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().expect("url")))
            .expect("client");
        let ctx = Context::new(client);
        assert_eq!(respond("/healthz", Endpoints::Probes, &ctx).0, "200 OK");
        assert_eq!(
            respond("/readyz", Endpoints::Probes, &ctx).0,
            "503 Service Unavailable"
        );
        ctx.ready.store(true, Ordering::Relaxed);
        assert_eq!(respond("/readyz", Endpoints::Probes, &ctx).0, "200 OK");
        assert_eq!(respond("/metrics", Endpoints::Probes, &ctx).0, "404 Not Found");
        ctx.errors.store(3, Ordering::Relaxed);
        let (status, body) = respond("/metrics", Endpoints::Metrics, &ctx);
        assert_eq!(status, "200 OK");
        assert!(
            body.contains("virtualization_controller_reconcile_errors_total 3\n"),
            "{body}"
        );
        assert_eq!(respond("/healthz", Endpoints::Metrics, &ctx).0, "404 Not Found");
    }
}
