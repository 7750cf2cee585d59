//! The HTTPS listener: TLS with a handshake deadline, HTTP/1.1 and HTTP/2 with upgrades, a
//! header read timeout, and graceful shutdown with a deadline.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::app::App;

/// Time a client has to finish the TLS handshake, and to send request headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time open requests get after shutdown starts.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `listener` until `shutdown` completes, then waits up to [`SHUTDOWN_TIMEOUT`].
pub async fn serve(
    listener: TcpListener,
    tls: TlsAcceptor,
    app: Arc<App>,
    shutdown: impl Future<Output = ()>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .max_concurrent_streams(250);
    let builder = Arc::new(builder);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let watcher = graceful.watcher();
        let builder = Arc::clone(&builder);
        let tls = tls.clone();
        let app = Arc::clone(&app);
        tokio::spawn(async move {
            let s = match tokio::time::timeout(HEADER_READ_TIMEOUT, tls.accept(stream)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
            };
            let cert = s
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| Arc::new(c.clone().into_owned()));
            let svc = service_fn(move |req| {
                let app = Arc::clone(&app);
                let cert = cert.clone();
                async move { Ok::<_, Infallible>(app.handle(req, cert).await) }
            });
            let res = watcher
                .watch(
                    builder
                        .serve_connection_with_upgrades(TokioIo::new(s), svc)
                        .into_owned(),
                )
                .await;
            if let Err(e) = res {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tracing::info!("shutting down: waiting for open requests");
    if tokio::time::timeout(SHUTDOWN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("shutdown deadline passed; closing the remaining connections");
    }
}
