//! The TLS test doubles of `wire.rs`: in-process HTTPS servers (HTTP/2 and HTTP/1.1 by ALPN)
//! that record what they were sent, and an [`Upstream`] to reach them.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube_api_rewriter_proxy::deadlines::Deadlines;
use kube_api_rewriter_proxy::tls::{self, ReloadingCert};
use kube_api_rewriter_proxy::upstream::Upstream;
use kube_api_rewriter_testkit::{self_signed_cert, spawn_double};
use tokio_rustls::TlsAcceptor;

/// What a TLS test double saw: HTTP version, path with query, body.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) version: http::Version,
    pub(crate) path: String,
    pub(crate) body: Bytes,
}

pub(crate) type Handler = fn(&Seen) -> (StatusCode, String);

pub(crate) fn self_signed(dir: &Path, cn: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    std::fs::create_dir_all(dir).expect("dir");
    let (crt, key) = (dir.join(format!("{cn}.crt")), dir.join(format!("{cn}.key")));
    self_signed_cert(&crt, &key, cn);
    (crt, key)
}

/// An in-process TLS server (HTTP/2 and HTTP/1.1 by ALPN) answering with `handler`.
pub(crate) fn tls_double(dir: &Path, handler: Handler) -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let (addr, seen, _) = tls_double_serving(dir, handler, false);
    (addr, seen)
}

/// [`tls_double`], or with `h2_only` one that speaks (and offers by ALPN) only HTTP/2; also
/// counts the connections it accepted.
pub(crate) fn tls_double_serving(
    dir: &Path,
    handler: Handler,
    h2_only: bool,
) -> (SocketAddr, Arc<Mutex<Vec<Seen>>>, Arc<AtomicUsize>) {
    tls::install_default_provider();
    let (crt, key) = self_signed(dir, "double");
    let rc = ReloadingCert::load(&crt, &key).expect("certificate");
    let protocols: &[&[u8]] = if h2_only {
        &[b"h2"]
    } else {
        kube_api_rewriter_tls::ALPN_H2_HTTP1
    };
    let cfg = kube_api_rewriter_tls::server_config(rc, protocols).expect("server config");
    let acc = TlsAcceptor::from(Arc::new(cfg));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = Arc::clone(&seen);
    let conns = Arc::new(AtomicUsize::new(0));
    let conns2 = Arc::clone(&conns);
    let port = spawn_double(move |s| {
        let (acc, seen, conns) = (acc.clone(), Arc::clone(&seen2), Arc::clone(&conns2));
        async move {
            conns.fetch_add(1, Ordering::SeqCst);
            let Ok(s) = acc.accept(s).await else { return };
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let seen = Arc::clone(&seen);
                async move {
                    let version = req.version();
                    let path = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned();
                    let body = req
                        .into_body()
                        .collect()
                        .await
                        .map(|c| c.to_bytes())
                        .unwrap_or_default();
                    let s = Seen { version, path, body };
                    let (code, text) = handler(&s);
                    seen.lock().expect("lock").push(s);
                    let mut r = Response::new(Full::new(Bytes::from(text)));
                    *r.status_mut() = code;
                    r.headers_mut()
                        .insert("content-type", "application/json".parse().expect("hv"));
                    Ok::<_, Infallible>(r)
                }
            });
            let mut server = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if h2_only {
                server = server.http2_only();
            }
            let _ = server.serve_connection(TokioIo::new(s), svc).await;
        }
    });
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    (addr, seen, conns)
}

pub(crate) fn seen_now(seen: &Mutex<Vec<Seen>>) -> Vec<Seen> {
    seen.lock().expect("lock").clone()
}

/// A kubeconfig-less [`Upstream`] for the TLS double at `addr` (its certificate not checked),
/// and a runtime to use it on.
pub(crate) fn upstream_for(addr: SocketAddr) -> (tokio::runtime::Runtime, Arc<Upstream>) {
    let mut cfg = kube::Config::new(format!("https://{addr}").parse().expect("url"));
    cfg.accept_invalid_certs = true;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let up = rt.block_on(async {
        Arc::new(Upstream::from_kube_config(cfg, &Deadlines::default()).expect("upstream"))
    });
    (rt, up)
}

pub(crate) fn watch_request(up: &Upstream, i: usize) -> Request<kube_api_rewriter_layer::Body> {
    Request::get(
        up.uri(&format!("/api/v1/namespaces/n{i}/configmaps?watch=1"))
            .expect("uri"),
    )
    .body(kube_api_rewriter_layer::body::empty())
    .expect("request")
}
