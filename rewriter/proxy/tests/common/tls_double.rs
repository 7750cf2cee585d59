//! An HTTP/1.1 test double behind TLS (a webhook server, an aggregated API server) for the
//! end-to-end files that need one; each includes it with `#[path]`, since every file under
//! `tests/` is a crate of its own.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use kube_api_rewriter_proxy::tls;
use kube_api_rewriter_testkit::spawn_double;

/// Serves `serve` over TLS with `cert` and `key` (ALPN `http/1.1`, as kube-apiserver calls
/// webhooks and aggregated servers) on a free loopback port, and returns the port.
pub fn tls_double<F, Fut, E>(cert: &Path, key: &Path, serve: F) -> u16
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<Full<Bytes>>, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let certs = tls::load_certs(cert).expect("cert");
    let key = tls::load_key(key).expect("key");
    let mut cfg = rustls::ServerConfig::builder_with_provider(tls::provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    spawn_double(move |s| {
        let (acceptor, serve) = (acceptor.clone(), serve.clone());
        async move {
            let Ok(tls) = acceptor.accept(s).await else { return };
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), hyper::service::service_fn(serve))
                .await;
        }
    })
}
