//! Accept loops: HTTP/1.1 and HTTP/2 (plain or TLS), upgrades, header read timeout, graceful
//! shutdown with a deadline.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::shutdown::Watch;
use kube_api_rewriter_layer::Body;

/// How connections are served.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// For the log lines.
    pub name: &'static str,
    /// Time a client has to send request headers (and finish a TLS handshake).
    pub header_read_timeout: Duration,
    /// Time open connections get after shutdown starts.
    pub shutdown_timeout: Duration,
}

/// Serves `listener` until shutdown, then waits up to the deadline for open requests.
pub async fn serve<H, F>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    handler: H,
    opts: ServeOptions,
    shutdown: Watch,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(opts.header_read_timeout)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)));
    let builder = Arc::new(builder);
    let graceful = GracefulShutdown::new();
    let stop = shutdown.cancelled();
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut stop => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(listener = opts.name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let watcher = graceful.watcher();
        let builder = Arc::clone(&builder);
        let handler = handler.clone();
        let tls = tls.clone();
        let timeout = opts.header_read_timeout;
        let name = opts.name;
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let h = handler.clone();
                async move { Ok::<_, Infallible>(h(req).await) }
            });
            let res = match tls {
                Some(acc) => match tokio::time::timeout(timeout, acc.accept(stream)).await {
                    Ok(Ok(s)) => {
                        watcher
                            .watch(
                                builder
                                    .serve_connection_with_upgrades(TokioIo::new(s), svc)
                                    .into_owned(),
                            )
                            .await
                    }
                    Ok(Err(e)) => {
                        return tracing::debug!(listener = name, %peer, error = %e, "TLS handshake failed");
                    }
                    Err(_) => return tracing::debug!(listener = name, %peer, "TLS handshake timed out"),
                },
                None => {
                    watcher
                        .watch(
                            builder
                                .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                                .into_owned(),
                        )
                        .await
                }
            };
            if let Err(e) = res {
                tracing::debug!(listener = name, %peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tracing::info!(listener = opts.name, "shutting down: waiting for open requests");
    if tokio::time::timeout(opts.shutdown_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            listener = opts.name,
            "shutdown deadline passed; closing the remaining connections"
        );
    }
}

/// Binds a listener, naming the address on failure.
pub async fn bind(addr: SocketAddr, what: &str) -> Result<TcpListener, std::io::Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("{what}: binding {addr}: {e}")))
}
