//! The upload server: a user sends a disk image over HTTPS (`PUT` or `POST` on `/upload` or
//! `/`, e.g. `curl -T disk.qcow2 https://HOST:PORT/upload`); it is detected, converted and
//! stored as an import would, answered with the [`TerminationMessage`], and the server ends.
//!
//! A body that ends early, or an image that is refused, is discarded and the server keeps
//! serving, so the user can send again; a second upload while one runs gets 409.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use ring::digest::{Context, SHA256};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::client::{IDLE_TIMEOUT, error_chain, hex};
use crate::destination::Input;
use crate::format::QemuImg;
use crate::import::Scratch;
use crate::progress::Progress;
use crate::{Destination, Error, Result, TerminationMessage};

/// The TLS handshake and a request's headers may take this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once.
const MAX_CONNECTIONS: usize = 8;
/// After the upload, connections still open are given this long to finish.
const DRAIN: Duration = Duration::from_secs(10);

/// What [`serve`] does.
#[derive(Debug, Clone)]
pub struct Upload {
    /// The HTTPS listener's address.
    pub listen: SocketAddr,
    /// The serving certificate chain (PEM).
    pub cert_file: PathBuf,
    /// Its private key (PEM).
    pub key_file: PathBuf,
    /// The largest body accepted (413 beyond).
    pub max_size: Option<u64>,
    /// Where the image goes.
    pub destination: Destination,
    /// Where the upload and conversions are written (default: the temp directory).
    pub scratch_dir: Option<PathBuf>,
    /// The qemu-img binary (default `qemu-img` on `PATH`).
    pub qemu_img: Option<PathBuf>,
}

struct State {
    opts: Upload,
    busy: AtomicBool,
    done: watch::Sender<Option<TerminationMessage>>,
}

/// Serves until an upload has been stored (its message) or `shutdown` completes (an error).
pub async fn serve(opts: Upload, shutdown: impl Future<Output = ()>) -> Result<TerminationMessage> {
    kube_api_rewriter_tls::install_default_provider();
    let cert = kube_api_rewriter_tls::ReloadingCert::load(&opts.cert_file, &opts.key_file)?;
    let config = kube_api_rewriter_tls::server_config(cert, kube_api_rewriter_tls::ALPN_HTTP1)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(opts.listen)
        .await
        .map_err(|e| Error::Http(format!("cannot listen on {}: {e}", opts.listen)))?;
    tracing::info!(address = %opts.listen, "waiting for an upload");
    let (done, mut done_rx) = watch::channel(None);
    let state = Arc::new(State {
        opts,
        busy: AtomicBool::new(false),
        done,
    });
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    let message = loop {
        let accept = async {
            let permit = Arc::clone(&slots).acquire_owned().await;
            (permit, listener.accept().await)
        };
        tokio::select! {
            (permit, accepted) = accept => {
                let (Ok(permit), Ok((tcp, peer))) = (permit, accepted) else { continue };
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let state = Arc::clone(&state);
                conns.spawn(async move {
                    connection(tcp, peer, acceptor, state).await;
                    drop(permit);
                });
            }
            _ = done_rx.changed() => {
                if let Some(m) = done_rx.borrow().clone() { break m; }
            }
            () = &mut shutdown => {
                return Err(Error::Http("stopped before an upload was stored".into()));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    };
    let drained = tokio::time::timeout(DRAIN, async { while conns.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        conns.abort_all();
    }
    Ok(message)
}

async fn connection(
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    acceptor: tokio_rustls::TlsAcceptor,
    state: Arc<State>,
) {
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    let mut done = state.done.subscribe();
    let svc_state = Arc::clone(&state);
    let service = hyper::service::service_fn(move |req| {
        let state = Arc::clone(&svc_state);
        async move { Ok::<_, std::convert::Infallible>(handle(req, peer, state).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT)
        .serve_connection(TokioIo::new(tls), service);
    tokio::pin!(conn);
    let finished = tokio::select! {
        r = conn.as_mut() => Some(r),
        _ = done.wait_for(Option::is_some) => None,
    };
    let result = match finished {
        Some(r) => r,
        None => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %error_chain(&e), "connection ended");
    }
}

fn answer(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r
}

fn failure(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let mut r = answer(
        status,
        format!("{}\n", TerminationMessage::failure(message).to_line()),
    );
    r.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// Clears the busy flag when an upload did not succeed.
struct Busy<'a>(&'a AtomicBool, bool);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        if !self.1 {
            self.0.store(false, Ordering::SeqCst);
        }
    }
}

async fn handle(req: Request<Incoming>, peer: SocketAddr, state: Arc<State>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if path == "/healthz" || path == "/readyz" {
        return match *req.method() {
            Method::GET | Method::HEAD => answer(StatusCode::OK, "ok\n"),
            _ => answer(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n"),
        };
    }
    if path != "/" && path != "/upload" {
        return answer(
            StatusCode::NOT_FOUND,
            "not found: send the image with PUT or POST to /upload\n",
        );
    }
    if !matches!(*req.method(), Method::PUT | Method::POST) {
        return answer(
            StatusCode::METHOD_NOT_ALLOWED,
            "send the image with PUT or POST\n",
        );
    }
    if state.done.borrow().is_some() {
        return failure(StatusCode::CONFLICT, "an image has been uploaded already");
    }
    if state
        .busy
        .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        return failure(StatusCode::CONFLICT, "another upload is in progress");
    }
    let mut busy = Busy(&state.busy, false);
    let length = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let (Some(l), Some(max)) = (length, state.opts.max_size)
        && l > max
    {
        return failure(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("the body of {l} bytes is larger than {max} bytes"),
        );
    }
    tracing::info!(%peer, bytes = length, "upload started");
    match receive_and_store(req.into_body(), length, &state).await {
        Ok(m) => {
            busy.1 = true;
            let line = m.to_line();
            tracing::info!(%peer, "upload stored");
            let _ = state.done.send(Some(m));
            let mut r = answer(StatusCode::OK, format!("{line}\n"));
            r.headers_mut().insert(
                CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            r
        }
        Err((status, e)) => {
            tracing::warn!(%peer, error = %e, "upload failed; waiting for another");
            failure(status, &e.to_string())
        }
    }
}

async fn receive_and_store(
    mut body: Incoming,
    length: Option<u64>,
    state: &State,
) -> Result<TerminationMessage, (StatusCode, Error)> {
    let opts = &state.opts;
    let internal = |e: Error| (StatusCode::INTERNAL_SERVER_ERROR, e);
    let scratch = Scratch::new(opts.scratch_dir.as_deref()).map_err(internal)?;
    let file = scratch.path().join("upload");
    let mut out = tokio::fs::File::create(&file)
        .await
        .map_err(|e| internal(Error::io(&file, e)))?;
    let mut sha = Context::new(&SHA256);
    let mut progress = Progress::new("upload", length);
    let start = Instant::now();
    let cut = |why: String| {
        (
            StatusCode::BAD_REQUEST,
            Error::Http(format!("the upload ended early: {why}")),
        )
    };
    loop {
        let frame = match tokio::time::timeout(IDLE_TIMEOUT, body.frame()).await {
            Err(_) => return Err(cut(format!("no data for {}s", IDLE_TIMEOUT.as_secs()))),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(cut(error_chain(&e))),
            Ok(Some(Ok(f))) => f,
        };
        let Ok(data) = frame.into_data() else { continue };
        if let Some(max) = opts
            .max_size
            .filter(|m| progress.bytes() + data.len() as u64 > *m)
        {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                Error::Http(format!("the body is larger than {max} bytes")),
            ));
        }
        sha.update(&data);
        out.write_all(&data)
            .await
            .map_err(|e| internal(Error::io(&file, e)))?;
        progress.add(data.len());
    }
    out.flush().await.map_err(|e| internal(Error::io(&file, e)))?;
    drop(out);
    if let Some(l) = length.filter(|l| *l != progress.bytes()) {
        return Err(cut(format!("{} of {l} bytes", progress.bytes())));
    }
    progress.finish();
    let speed = crate::progress::average(progress.bytes(), start.elapsed());
    tracing::info!(
        bytes = progress.bytes(),
        sha256 = hex(sha.finish().as_ref()),
        "upload received"
    );
    let qemu = QemuImg::new(opts.qemu_img.clone());
    let bad = |e: Error| {
        let status = match e {
            Error::NotDiskImage(_) | Error::QemuImg(_) | Error::TooLarge { .. } => StatusCode::BAD_REQUEST,
            _ => StatusCode::BAD_GATEWAY,
        };
        (status, e)
    };
    let info = qemu.detect(&file).await.map_err(bad)?;
    tracing::info!(
        format = info.format.name(),
        virtual_size = info.virtual_size,
        "detected"
    );
    let ready = opts.destination.prepare().await.map_err(bad)?;
    let input = Input {
        path: &file,
        owned: true,
        info,
    };
    let mut m = ready.store(input, scratch.path(), &qemu).await.map_err(bad)?;
    m.average_speed = Some(speed);
    Ok(m)
}
