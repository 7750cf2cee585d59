//! Accepting connections: HTTP/1.1 and HTTP/2 (plain or TLS), upgrades, graceful shutdown with a
//! deadline, and what keeps hostile clients from holding connections; each request then goes
//! to the listener's service (for the proxies, the stack of [`crate::stack`]):
//!
//! * Every connection must complete its first request (TLS handshake, HTTP/1-or-2 detection and
//!   request headers) within the header read timeout, or it is closed; hyper's own
//!   `header_read_timeout` covers later HTTP/1 requests, keep-alive pings HTTP/2 connections.
//! * At most `max_connections` per listener ([`conns`]): at the cap, the oldest
//!   connection that has not yet sent a complete request is closed to admit the new one (none:
//!   the new one is closed).
//! * A connection with no request in flight for the idle timeout is closed (HTTP/1 keep-alive
//!   and HTTP/2 alike; a watch is in flight until its body ends; [`idle`]).
//! * TCP keep-alive on accepted sockets.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::{Service, ServiceExt};

use crate::deadlines::Deadlines;
use crate::shutdown::ShutdownSignal;
use conns::{Admit, Conns};
use idle::{Requests, TrackedBody};
use kube_api_rewriter_layer::{Body, body};

pub mod conns;
pub mod idle;

/// How connections are served.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// For the log lines.
    pub name: &'static str,
    /// Open connections at most.
    pub max_connections: usize,
    /// Time open connections get after shutdown starts.
    pub shutdown_deadline: std::time::Duration,
    /// The header read and idle timeouts, keep-alive and pings.
    pub deadlines: Deadlines,
}

fn keepalive(stream: &tokio::net::TcpStream, d: &Deadlines) {
    let ka = socket2::TcpKeepalive::new()
        .with_time(d.tcp_keepalive_time)
        .with_interval(d.tcp_keepalive_interval);
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_keepalive(&ka) {
        tracing::debug!(error = %e, "cannot set TCP keep-alive");
    }
}

/// Serves `listener` until shutdown, then waits up to the deadline for open requests.
pub async fn serve<S>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    service: S,
    opts: ServeOptions,
    shutdown: ShutdownSignal,
) where
    S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let d = opts.deadlines;
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(d.header_read)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(d.h2_ping_interval))
        .keep_alive_timeout(d.h2_ping_timeout);
    let builder = Arc::new(builder);
    let conns = Conns::new(opts.max_connections);
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
                    tokio::time::sleep(d.accept_retry).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        keepalive(&stream, &d);
        let guard = match conns.admit() {
            Admit::Open(g) => g,
            Admit::Full => {
                tracing::warn!(listener = opts.name, %peer, "at the connection limit and every connection is busy; closing the new one");
                drop(stream);
                continue;
            }
        };
        let watcher = graceful.watcher();
        let builder = Arc::clone(&builder);
        let service = service.clone();
        let tls = tls.clone();
        let timeout = d.header_read;
        let name = opts.name;
        tokio::spawn(async move {
            let requested = guard.requested();
            let requests = Requests::new();
            let svc = {
                let requested = Arc::clone(&requested);
                let requests = requests.clone();
                let place = guard.place();
                service_fn(move |mut req: Request<Incoming>| {
                    requested.store(true, Ordering::Relaxed);
                    // An upgrade takes it into the splice: the spliced connection keeps
                    // counting toward the cap after this task ends.
                    req.extensions_mut().insert(place.clone());
                    let flight = requests.begin();
                    let service = service.clone();
                    async move {
                        let resp = service.oneshot(req).await?;
                        Ok::<_, Infallible>(resp.map(|b| body::boxed(TrackedBody::new(b, flight))))
                    }
                })
            };
            let idle = d.connection_idle;
            // No request within the header read timeout (nothing sent, part of the HTTP/2
            // preface, part of the headers, a stalled TLS handshake): the connection is closed.
            let first_request = {
                let requested = Arc::clone(&requested);
                async move {
                    tokio::time::sleep(timeout).await;
                    if requested.load(Ordering::Relaxed) {
                        std::future::pending::<()>().await;
                    }
                }
            };
            let evicted = guard.evicted();
            let conn = async move {
                match tls {
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
                            tracing::debug!(listener = name, %peer, error = %e, "TLS handshake failed");
                            Ok(())
                        }
                        Err(_) => {
                            tracing::debug!(listener = name, %peer, "TLS handshake timed out");
                            Ok(())
                        }
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
                }
            };
            let res = tokio::select! {
                r = conn => r,
                () = first_request => {
                    return tracing::debug!(listener = name, %peer, "no complete request within the header read timeout; closed");
                }
                () = requests.idle_for(idle) => {
                    return tracing::debug!(listener = name, %peer, ?idle, "no request in flight for the idle timeout; closed");
                }
                () = evicted => {
                    return tracing::debug!(listener = name, %peer, "closed to admit a new connection (at the connection limit, no complete request yet)");
                }
            };
            drop(guard);
            if let Err(e) = res {
                tracing::debug!(listener = name, %peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tracing::info!(listener = opts.name, "shutting down: waiting for open requests");
    if tokio::time::timeout(opts.shutdown_deadline, graceful.shutdown())
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
