//! The driver's HTTP/1.1 client: one TCP connection per request, as client-go talks to a
//! plain-HTTP proxy (no h2c), and watch streams split into events.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// A request body.
type ReqBody = http_body_util::Either<Empty<Bytes>, Full<Bytes>>;

/// Sends one request on a new connection to `127.0.0.1:port` and returns the response head.
pub async fn open(
    port: u16,
    method: &str,
    path: &str,
    body: Option<(&str, Vec<u8>)>,
) -> anyhow::Result<http::Response<Incoming>> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    tcp.set_nodelay(true)?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut b = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", format!("127.0.0.1:{port}"))
        .header("accept", "application/json");
    let body = match body {
        Some((ct, bytes)) => {
            b = b.header("content-type", ct);
            http_body_util::Either::Right(Full::new(Bytes::from(bytes)))
        }
        None => http_body_util::Either::Left(Empty::new()),
    };
    let req: http::Request<ReqBody> = b.body(body)?;
    Ok(send.send_request(req).await?)
}

/// One request, the whole body read: (status, body).
pub async fn call(
    port: u16,
    method: &str,
    path: &str,
    body: Option<(&str, Vec<u8>)>,
) -> anyhow::Result<(u16, Bytes)> {
    let resp = open(port, method, path, body).await?;
    let status = resp.status().as_u16();
    let b = resp.into_body().collect().await?.to_bytes();
    Ok((status, b))
}

/// [`call`] that must answer 2xx; returns the JSON body.
pub async fn json(
    port: u16,
    method: &str,
    path: &str,
    body: Option<(&str, Vec<u8>)>,
) -> anyhow::Result<serde_json::Value> {
    let (status, b) = call(port, method, path, body).await?;
    anyhow::ensure!(
        (200..300).contains(&status),
        "{method} {path}: {status} {}",
        String::from_utf8_lossy(&b[..b.len().min(500)])
    );
    Ok(serde_json::from_slice(&b)?)
}

/// One watch event, as compared between clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    pub kind: String,
    /// The object's name (empty for ERROR).
    pub name: String,
    /// The object's resourceVersion.
    pub rv: String,
    /// The object's `kind` (restored names through the proxy).
    pub object_kind: String,
    /// The object's `apiVersion`.
    pub api_version: String,
}

impl Event {
    /// Parses one line of a watch stream.
    pub fn parse(line: &[u8]) -> Option<Event> {
        let v: serde_json::Value = serde_json::from_slice(line).ok()?;
        let o = &v["object"];
        let s = |x: &serde_json::Value| x.as_str().unwrap_or("").to_owned();
        Some(Event {
            kind: s(&v["type"]),
            name: s(&o["metadata"]["name"]),
            rv: s(&o["metadata"]["resourceVersion"]),
            object_kind: s(&o["kind"]),
            api_version: s(&o["apiVersion"]),
        })
    }
}

/// How a watch stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The body ended (terminating chunk) after a whole event.
    Clean,
    /// The body failed between two events.
    BrokenAtBoundary(String),
    /// The body ended or failed in the middle of an event.
    Truncated(String),
    /// The driver stopped reading.
    Stopped,
}

/// What one watch saw.
#[derive(Debug, Clone)]
pub struct Seen {
    /// HTTP status of the watch.
    pub status: u16,
    /// Events in order (ERROR events apart).
    pub events: Vec<Event>,
    /// ERROR events (the Status reason and message).
    pub errors: Vec<String>,
    /// How it ended.
    pub end: End,
}

/// Splits a watch body into events until it ends or `stop` fires; `count` grows by one per
/// event and `started` once the head arrived.
pub async fn watch(
    port: u16,
    path: String,
    count: Arc<AtomicUsize>,
    started: Arc<AtomicUsize>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Seen> {
    let resp = open(port, "GET", &path, None).await?;
    started.fetch_add(1, Ordering::SeqCst);
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut buf = BytesMut::new();
    let mut events = Vec::new();
    let mut errors = Vec::new();
    let mut stop = stop;
    let end = loop {
        let frame = tokio::select! {
            f = body.frame() => f,
            _ = stop.wait_for(|s| *s) => break End::Stopped,
        };
        match frame {
            None if buf.is_empty() => break End::Clean,
            None => break End::Truncated(format!("{} bytes after the last event", buf.len())),
            Some(Err(e)) if buf.is_empty() => break End::BrokenAtBoundary(e.to_string()),
            Some(Err(e)) => break End::Truncated(format!("{e} with {} bytes of an event", buf.len())),
            Some(Ok(f)) => {
                if let Ok(d) = f.into_data() {
                    buf.extend_from_slice(&d);
                    while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                        let line = buf.split_to(i + 1);
                        match Event::parse(&line[..i]) {
                            Some(ev) if ev.kind == "ERROR" => {
                                let v: serde_json::Value = serde_json::from_slice(&line[..i])?;
                                errors.push(format!(
                                    "{}: {}",
                                    v["object"]["reason"].as_str().unwrap_or(""),
                                    v["object"]["message"].as_str().unwrap_or("")
                                ));
                            }
                            Some(ev) => events.push(ev),
                            None => anyhow::bail!(
                                "not an event: {}",
                                String::from_utf8_lossy(&line[..i.min(300)])
                            ),
                        }
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }
    };
    Ok(Seen {
        status,
        events,
        errors,
        end,
    })
}

/// Polls `f` every 50 ms until true or `limit`.
pub async fn until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = tokio::time::Instant::now();
    while t.elapsed() < limit {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f()
}
