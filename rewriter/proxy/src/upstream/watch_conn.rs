//! Watches over HTTP/1.1 on a connection of their own, driven by the task that reads the body.
//!
//! hyper's HTTP/1 client hands a response body over from the connection task one chunk at a
//! time (its body channel holds one), and kube-apiserver sends each watch event as a chunk of
//! its own. Through the pooled client a burst of events therefore costs two cross-task
//! wake-ups per event (the connection task hands a chunk over, the reader takes it and wakes
//! the connection task for the next); tokio caps such ping-pong on one worker and moves it to
//! the run queue, waking another worker out of the I/O driver with an eventfd write: a burst costs
//! many more write syscalls in wake-ups than in socket writes.
//!
//! Here the connection future lives in the body: whoever polls the body polls the connection
//! first, so the chunks that have already arrived are decoded and taken in one poll, and the
//! only wake-up is the socket's readiness. The wake-ups the connection and the body raise for
//! each other while being polled here are absorbed by [`Relay`] (they would otherwise
//! reschedule the reading task once more after every burst).
//!
//! Hand-written: neither hyper nor hyper-util offers a client body that drives its own
//! connection.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use http::header::{HOST, HeaderValue};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use kube_api_rewriter_layer::{Body, BoxError};

/// Polls of the connection and the body in one [`DrivenBody::poll_frame`] at most while they
/// keep waking each other without a frame coming out.
const MAX_ROUNDS: usize = 4;

type Io = MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>;
type Conn = Pin<Box<http1::Connection<Io, Body>>>;

/// Sends `req` (an absolute URI) over a new HTTP/1.1 connection made by `connector`; the
/// response body owns and drives the connection.
pub(crate) async fn send(
    connector: &HttpsConnector<HttpConnector>,
    req: Request<Body>,
) -> Result<Response<DrivenBody>, BoxError> {
    let (mut parts, body) = req.into_parts();
    let uri = parts.uri.clone();
    let authority = uri.authority().ok_or("the upstream URI has no authority")?;
    if !parts.headers.contains_key(HOST) {
        parts
            .headers
            .insert(HOST, HeaderValue::from_str(authority.as_str())?);
    }
    // HTTP/1.1 to an origin server: the request target in origin form.
    parts.uri = uri
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str)
        .parse()?;
    let io = tower::ServiceExt::oneshot(connector.clone(), uri).await?;
    let (mut tx, conn) = http1::Builder::new().handshake(io).await?;
    let mut conn: Option<Conn> = Some(Box::pin(conn));
    let mut sent = std::pin::pin!(tx.send_request(Request::from_parts(parts, body)));
    // The connection is driven here until the response head arrives, then by the body.
    let resp = std::future::poll_fn(|cx| {
        if let Some(c) = conn.as_mut()
            && let Poll::Ready(r) = c.as_mut().poll(cx)
        {
            conn = None;
            // The request future reports why the connection ended.
            if let Err(e) = r {
                tracing::debug!(error = %e, "upstream watch connection ended before the response head");
            }
        }
        sent.as_mut().poll(cx)
    })
    .await?;
    Ok(resp.map(|body| DrivenBody {
        body,
        conn,
        relay: Arc::new(Relay::default()),
    }))
}

/// A response body that drives its own connection.
pub struct DrivenBody {
    body: Incoming,
    conn: Option<Conn>,
    relay: Arc<Relay>,
}

impl std::fmt::Debug for DrivenBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DrivenBody").finish_non_exhaustive()
    }
}

impl http_body::Body for DrivenBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let relay = Arc::clone(&this.relay);
        relay.enter(cx.waker());
        let waker = Waker::from(Arc::clone(&relay));
        let mut inner = Context::from_waker(&waker);
        let mut rounds = 0;
        loop {
            // The connection first: it decodes the next chunk of what it has read (or reads).
            if let Some(c) = this.conn.as_mut()
                && let Poll::Ready(r) = c.as_mut().poll(&mut inner)
            {
                this.conn = None;
                if let Err(e) = r {
                    // The body reports the broken connection as its own error.
                    tracing::debug!(error = %e, "upstream watch connection ended");
                }
            }
            match Pin::new(&mut this.body).poll_frame(&mut inner) {
                Poll::Ready(f) => {
                    relay.leave();
                    return Poll::Ready(f);
                }
                Poll::Pending => {
                    // A wake-up raised while polling means there may be more: poll again, a
                    // few times (a wake-up may also be tokio's cooperative budget asking the
                    // task to yield: then it must). Otherwise the next wake-up reaches the
                    // reading task.
                    if relay.leave() {
                        rounds += 1;
                        if rounds >= MAX_ROUNDS {
                            cx.waker().wake_by_ref();
                            return Poll::Pending;
                        }
                        relay.enter(cx.waker());
                        continue;
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        http_body::Body::is_end_stream(&self.body)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::Body::size_hint(&self.body)
    }
}

/// The waker the connection and the body see. While [`DrivenBody::poll_frame`] runs, a wake-up
/// only marks that something changed (the poll loop looks again); otherwise it wakes the task
/// that reads the body.
#[derive(Default)]
struct Relay {
    polling: AtomicBool,
    woken: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Relay {
    /// Starts a poll on behalf of the task with `waker`.
    fn enter(&self, waker: &Waker) {
        {
            let mut t = self.task.lock().unwrap_or_else(|p| p.into_inner());
            match t.as_ref() {
                Some(w) if w.will_wake(waker) => {}
                _ => *t = Some(waker.clone()),
            }
        }
        self.woken.store(false, Ordering::SeqCst);
        self.polling.store(true, Ordering::SeqCst);
    }

    /// Ends a poll; true when a wake-up came during it.
    fn leave(&self) -> bool {
        self.polling.store(false, Ordering::SeqCst);
        self.woken.swap(false, Ordering::SeqCst)
    }
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // `woken` before `polling` (both SeqCst): a wake-up racing with `leave` is either seen
        // by `leave` or sees `polling` false and wakes the task.
        self.woken.store(true, Ordering::SeqCst);
        if !self.polling.load(Ordering::SeqCst) {
            let w = self.task.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some(w) = w {
                w.wake();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn connector() -> HttpsConnector<HttpConnector> {
        crate::tls::install_default_provider();
        let tls = rustls::ClientConfig::builder()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http)
    }

    /// An upstream double that answers one request with `events` chunks, all in one write
    /// (as kube-apiserver does in a burst), then ends the body when `end`.
    async fn burst_upstream(events: usize, end: bool) -> std::net::SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.expect("accept");
            let mut head = Vec::new();
            let mut b = [0u8; 1024];
            while !head.ends_with(b"\r\n\r\n") {
                let n = s.read(&mut b).await.expect("read");
                assert!(n > 0, "request head cut");
                head.extend_from_slice(&b[..n]);
            }
            assert!(
                head.starts_with(b"GET /w?watch=1 HTTP/1.1\r\n"),
                "{}",
                String::from_utf8_lossy(&head)
            );
            let mut out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
            for i in 0..events {
                let ev = format!("{{\"type\":\"ADDED\",\"n\":{i}}}\n");
                out.extend_from_slice(format!("{:x}\r\n{ev}\r\n", ev.len()).as_bytes());
            }
            if end {
                out.extend_from_slice(b"0\r\n\r\n");
            }
            s.write_all(&out).await.expect("write");
            // Hold the connection until the proxy side closes it.
            let _ = s.read(&mut b).await;
        });
        addr
    }

    #[tokio::test]
    async fn a_burst_arrives_whole_through_a_driven_connection() {
        let addr = burst_upstream(500, true).await;
        let req = Request::get(format!("http://{addr}/w?watch=1"))
            .body(kube_api_rewriter_layer::body::empty())
            .expect("request");
        let resp = send(&connector(), req).await.expect("response");
        assert_eq!(resp.status(), 200);
        let body = tokio::time::timeout(std::time::Duration::from_secs(60), async {
            http_body_util::BodyExt::collect(resp.into_body()).await
        })
        .await
        .expect("the body ends")
        .expect("no error")
        .to_bytes();
        let lines: Vec<&[u8]> = body.split(|b| *b == b'\n').filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), 500);
        assert_eq!(lines[499], br#"{"type":"ADDED","n":499}"#);
    }

    #[tokio::test]
    async fn a_body_cut_mid_watch_is_an_error_not_an_end() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.expect("accept");
            let mut b = [0u8; 1024];
            let _ = s.read(&mut b).await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{}\n\r\n")
                .await;
            // Dropped: the connection closes in the middle of the chunked body.
        });
        let req = Request::get(format!("http://{addr}/w?watch=1"))
            .body(kube_api_rewriter_layer::body::empty())
            .expect("request");
        let resp = send(&connector(), req).await.expect("response");
        let r = tokio::time::timeout(std::time::Duration::from_secs(60), async {
            http_body_util::BodyExt::collect(resp.into_body()).await
        })
        .await
        .expect("the body ends");
        assert!(r.is_err(), "a cut chunked body must fail");
    }

    #[test]
    fn wake_ups_during_a_poll_are_absorbed_and_reported() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let task = Waker::from(Arc::clone(&count));
        let relay = Arc::new(Relay::default());
        relay.enter(&task);
        Waker::from(Arc::clone(&relay)).wake();
        assert_eq!(count.0.load(Ordering::SeqCst), 0, "absorbed while polling");
        assert!(relay.leave(), "reported to the poll loop");
        relay.enter(&task);
        assert!(!relay.leave(), "nothing since");
        Waker::from(Arc::clone(&relay)).wake();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "outside a poll the task is woken"
        );
    }
}
