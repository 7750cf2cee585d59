//! The HTTP(S) client of sources and registries: hyper over rustls (ring), trusting the OS
//! roots plus an optional CA file, with the importer's timeouts.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt as _;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::sync::mpsc;

use crate::{Error, Result};

/// Connecting (TCP and TLS) may take this long.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// A response's headers, or the next piece of a body, may take this long.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A request body: a whole buffer or a stream of pieces.
pub(crate) type Body = BoxBody<Bytes, io::Error>;

/// An empty body.
pub(crate) fn empty() -> Body {
    full(Bytes::new())
}

/// A body of `b`.
pub(crate) fn full(b: impl Into<Bytes>) -> Body {
    http_body_util::Full::new(b.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A body fed by a channel (pieces read from a file by a blocking thread), of `len` bytes.
pub(crate) struct ChannelBody {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    len: u64,
    sent: Arc<AtomicU64>,
}

impl ChannelBody {
    /// The body, and the count of bytes hyper has taken from it (for [`Http::send_watched`]).
    pub(crate) fn body(rx: mpsc::Receiver<io::Result<Bytes>>, len: u64) -> (Body, Arc<AtomicU64>) {
        let sent = Arc::new(AtomicU64::new(0));
        let body = ChannelBody {
            rx,
            len,
            sent: Arc::clone(&sent),
        };
        (body.boxed(), sent)
    }
}

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<io::Result<Frame<Bytes>>>> {
        let sent = Arc::clone(&self.sent);
        self.rx.poll_recv(cx).map(|o| {
            o.map(|r| {
                r.map(|b| {
                    sent.fetch_add(b.len() as u64, Ordering::Relaxed);
                    Frame::data(b)
                })
            })
        })
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len)
    }
}

/// The client.
#[derive(Clone)]
pub(crate) struct Http {
    client: Client<HttpsConnector<HttpConnector>, Body>,
}

impl Http {
    /// A client trusting the OS roots and the certificates of `ca_file`.
    pub(crate) fn new(ca_file: Option<&Path>) -> Result<Self> {
        let certs = match ca_file {
            Some(ca) => kube_api_rewriter_tls::load_certs(ca)?,
            None => Vec::new(),
        };
        Self::trusting(
            certs,
            &ca_file.map(|p| p.display().to_string()).unwrap_or_default(),
        )
    }

    /// A client trusting the OS roots and the PEM certificates `ca_pem` (`what` names them in
    /// errors).
    pub(crate) fn with_pem(ca_pem: Option<&[u8]>, what: &str) -> Result<Self> {
        let certs = match ca_pem {
            Some(pem) => kube_api_rewriter_tls::certs_from_pem(pem, what)?,
            None => Vec::new(),
        };
        Self::trusting(certs, what)
    }

    fn trusting(certs: Vec<rustls::pki_types::CertificateDer<'static>>, what: &str) -> Result<Self> {
        kube_api_rewriter_tls::install_default_provider();
        let mut roots = rustls::RootCertStore::empty();
        // A container may have no OS store; the CA file (or nothing, for http) then suffices.
        let native = rustls_native_certs::load_native_certs();
        let _ = roots.add_parsable_certificates(native.certs);
        for c in certs {
            roots.add(c).map_err(|e| Error::Tls(format!("{what}: {e}")))?;
        }
        let tls = rustls::ClientConfig::builder_with_provider(kube_api_rewriter_tls::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Tls(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(https);
        Ok(Http { client })
    }

    /// Sends `req`; its response's headers must come within [`IDLE_TIMEOUT`] (connecting
    /// within [`CONNECT_TIMEOUT`]).
    pub(crate) async fn send(&self, req: Request<Body>) -> Result<Response<Incoming>> {
        let what = format!("{} {}", req.method(), redact(&req.uri().to_string()));
        match tokio::time::timeout(CONNECT_TIMEOUT + IDLE_TIMEOUT, self.client.request(req)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(Error::Http(format!("{what}: {}", client_error(&e)))),
            Err(_) => Err(Error::Http(format!(
                "{what}: no answer within {}s",
                (CONNECT_TIMEOUT + IDLE_TIMEOUT).as_secs()
            ))),
        }
    }
}

impl Http {
    /// Sends `req` whose body may take long (a layer): no overall deadline, but
    /// [`IDLE_TIMEOUT`] without `sent` growing (the body stalled, or its answer is late) fails.
    pub(crate) async fn send_watched(
        &self,
        req: Request<Body>,
        sent: &AtomicU64,
    ) -> Result<Response<Incoming>> {
        let what = format!("{} {}", req.method(), redact(&req.uri().to_string()));
        let fut = self.client.request(req);
        tokio::pin!(fut);
        let mut last = sent.load(Ordering::Relaxed);
        loop {
            tokio::select! {
                r = &mut fut => {
                    return r.map_err(|e| Error::Http(format!("{what}: {}", client_error(&e))));
                }
                () = tokio::time::sleep(IDLE_TIMEOUT) => {
                    let now = sent.load(Ordering::Relaxed);
                    if now == last {
                        return Err(Error::Http(format!(
                            "{what}: no progress for {}s ({now} bytes sent)",
                            IDLE_TIMEOUT.as_secs()
                        )));
                    }
                    last = now;
                }
            }
        }
    }
}

/// A URL without its query (which may hold a signed token) or user info, for messages.
pub(crate) fn redact(url: &str) -> String {
    let (url, query) = match url.split_once('?') {
        Some((u, _)) => (u, "?..."),
        None => (url, ""),
    };
    let after = url.find("://").map_or(0, |i| i + 3);
    let host_end = url[after..].find('/').map_or(url.len(), |i| after + i);
    match url[after..host_end].rfind('@') {
        Some(at) => format!("{}{}{query}", &url[..after], &url[after + at + 1..]),
        None => format!("{url}{query}"),
    }
}

/// A client error in a few words: `cannot connect: Connection refused (os error 111)` rather
/// than hyper-util's wrappers.
fn client_error(e: &hyper_util::client::legacy::Error) -> String {
    let mut innermost: &dyn std::error::Error = e;
    while let Some(c) = innermost.source() {
        innermost = c;
    }
    if e.is_connect() {
        format!("cannot connect: {innermost}")
    } else {
        error_chain(e).replace("client error (SendRequest): ", "")
    }
}

/// An error and its causes on one line.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let cs = c.to_string();
        if !s.contains(&cs) {
            s.push_str(": ");
            s.push_str(&cs);
        }
        cur = c.source();
    }
    s
}

/// The next piece of `body`, waiting at most [`IDLE_TIMEOUT`]; `None` at its end.
pub(crate) async fn next_chunk(body: &mut Incoming, what: &str) -> Result<Option<Bytes>> {
    loop {
        let frame = match tokio::time::timeout(IDLE_TIMEOUT, body.frame()).await {
            Err(_) => {
                return Err(Error::Http(format!(
                    "{what}: no data for {}s",
                    IDLE_TIMEOUT.as_secs()
                )));
            }
            Ok(None) => return Ok(None),
            Ok(Some(Err(e))) => return Err(Error::Http(format!("{what}: {}", error_chain(&e)))),
            Ok(Some(Ok(f))) => f,
        };
        if let Ok(data) = frame.into_data()
            && !data.is_empty()
        {
            return Ok(Some(data));
        }
    }
}

/// A whole (small) body, at most `limit` bytes.
pub(crate) async fn read_body(mut body: Incoming, limit: usize, what: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(c) = next_chunk(&mut body, what).await? {
        if out.len() + c.len() > limit {
            return Err(Error::Http(format!(
                "{what}: the answer is larger than {limit} bytes"
            )));
        }
        out.extend_from_slice(&c);
    }
    Ok(out)
}

/// A blocking `Read` over pieces sent from async code (for the tar reader).
pub(crate) struct ChannelReader {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    cur: Bytes,
}

impl ChannelReader {
    pub(crate) fn new(rx: mpsc::Receiver<io::Result<Bytes>>) -> Self {
        ChannelReader {
            rx,
            cur: Bytes::new(),
        }
    }
}

impl io::Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                None => return Ok(0),
                Some(Err(e)) => return Err(e),
                Some(Ok(b)) => self.cur = b,
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        let _ = self.cur.split_to(n);
        Ok(n)
    }
}

/// Hex of bytes.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_urls_keep_no_secrets() {
        assert_eq!(redact("https://u:p@h:1/a?sig=x"), "https://h:1/a?...");
        assert_eq!(redact("http://h/a@b"), "http://h/a@b");
        assert_eq!(redact("http://h"), "http://h");
    }
}
