//! Part 3's upstream double over TLS, the way kube-apiserver serves the proxy in a cluster: it
//! offers HTTP/2 and HTTP/1.1 by ALPN, and over HTTP/2 every watch event is its own DATA frame,
//! a burst of them as fast as flow control lets them go. The proxy's watches take an HTTP/1.1
//! connection each from it; ordinary requests share the pooled HTTP/2 lanes. Started
//! `h2_only`, it speaks (and offers) only HTTP/2, so the watches too go through the lanes.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::mpsc;

use crate::burst_double::{Burst, LONE_NS, LONE_PAUSE, serve_on_thread};
use crate::{RESOURCE, Result};

/// The double's thread (Linux keeps 15 bytes of a thread's name).
pub(crate) const THREAD: &str = "burst-tls";
/// The thread of the double that speaks only HTTP/2.
pub(crate) const THREAD_H2_ONLY: &str = "burst-h2-only";

type DBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// The running double: where it listens and the CA that signed its certificate.
pub(crate) struct H2Double {
    pub(crate) addr: SocketAddr,
    pub(crate) ca: PathBuf,
}

/// Starts the double on its own runtime thread, with a certificate made in `dir`.
pub(crate) fn start(b: Arc<Burst>, dir: &Path, h2_only: bool) -> Result<H2Double> {
    std::fs::create_dir_all(dir)?;
    let (ca, ca_key) = kube_api_rewriter_testkit::make_ca(dir, "bench-double-ca");
    let (crt, key) = kube_api_rewriter_testkit::signed_cert(
        dir,
        "bench-double-h2",
        "127.0.0.1",
        Some("IP:127.0.0.1,DNS:localhost"),
        &ca,
        &ca_key,
    );
    let cert = kube_api_rewriter_tls::ReloadingCert::load(&crt, &key)?;
    let protocols: &[&[u8]] = if h2_only {
        &[b"h2"]
    } else {
        kube_api_rewriter_tls::ALPN_H2_HTTP1
    };
    let cfg = kube_api_rewriter_tls::server_config(cert, protocols)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let addr = serve_on_thread(if h2_only { THREAD_H2_ONLY } else { THREAD }, move |s| {
        let (acceptor, b) = (acceptor.clone(), Arc::clone(&b));
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(s).await else { return };
            let svc = hyper::service::service_fn(move |req| {
                let b = Arc::clone(&b);
                async move { Ok::<_, Infallible>(route(&b, &req)) }
            });
            let mut server = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if h2_only {
                server = server.http2_only();
            }
            let _ = server.serve_connection(TokioIo::new(tls), svc).await;
        });
    })?;
    Ok(H2Double { addr, ca })
}

fn route(b: &Arc<Burst>, req: &Request<Incoming>) -> Response<DBody> {
    let path = req.uri().path();
    let watch = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .any(|kv| kv == "watch=1" || kv == "watch=true");
    let json = |body: DBody| {
        Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(body)
            .expect("response")
    };
    if path == "/readyz" {
        return Response::new(Full::new(Bytes::from_static(b"ok")).boxed());
    }
    if !path.ends_with(&format!("/{RESOURCE}")) {
        let mut r = json(Full::new(Bytes::from_static(b"{}")).boxed());
        *r.status_mut() = StatusCode::NOT_FOUND;
        return r;
    }
    if !watch {
        return json(Full::new(b.list.clone()).boxed());
    }
    // Events go through a channel deep enough that a burst is all at hand.
    let (tx, rx) = mpsc::channel(1024);
    let lone = path.contains(&format!("/namespaces/{LONE_NS}/"));
    let b = Arc::clone(b);
    tokio::spawn(async move {
        if lone {
            let _ = tx.send(b.events_raw[0].clone()).await;
            for i in 0..b.lone_rounds {
                tokio::time::sleep(LONE_PAUSE).await;
                if let Ok(mut s) = b.sent.lock() {
                    s.push(Instant::now());
                }
                let e = &b.events_raw[(i + 1) % b.events_raw.len()];
                if tx.send(e.clone()).await.is_err() {
                    return;
                }
            }
        } else {
            for i in 0..b.events {
                if tx
                    .send(b.events_raw[i % b.events_raw.len()].clone())
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    });
    json(Events(rx).boxed())
}

/// A body of the events sent through the channel, one DATA frame each.
struct Events(mpsc::Receiver<Bytes>);

impl hyper::body::Body for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|e| e.map(|e| Ok(Frame::data(e))))
    }
}
