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
    open_with(port, method, path, body, |_| ()).await
}

/// [`open`], telling `connected` the connection's local port.
pub async fn open_with(
    port: u16,
    method: &str,
    path: &str,
    body: Option<(&str, Vec<u8>)>,
    connected: impl FnOnce(u16),
) -> anyhow::Result<http::Response<Incoming>> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    tcp.set_nodelay(true)?;
    connected(tcp.local_addr()?.port());
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

/// How often [`call`] sends a request again that was answered with `Retry-After`, as client-go
/// does (its default is 10).
const RETRY_AFTER_TRIES: u32 = 10;

/// One request, the whole body read: (status, body). A 429 or 5xx answer that carries
/// `Retry-After` (kube-apiserver's "storage is (re)initializing" while a new resource's cache
/// fills) is sent again after the seconds it names, up to 10 times, as
/// client-go does.
pub async fn call(
    port: u16,
    method: &str,
    path: &str,
    body: Option<(&str, Vec<u8>)>,
) -> anyhow::Result<(u16, Bytes)> {
    let mut tries = 0;
    loop {
        let resp = open(port, method, path, body.clone()).await?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let b = resp.into_body().collect().await?.to_bytes();
        match retry_after {
            Some(secs) if (status == 429 || status >= 500) && tries < RETRY_AFTER_TRIES => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_secs(secs.clamp(1, 10))).await;
            }
            _ => return Ok((status, b)),
        }
    }
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

/// What one watch has done so far, readable while it runs (the per-watch diagnostics a failure
/// prints: which watches starved, what they were answered, when).
#[derive(Debug, Default)]
pub struct Progress {
    /// Events (ERROR events included) received.
    pub events: AtomicUsize,
    /// HTTP status of the head (0 until it arrived).
    pub status: AtomicUsize,
    /// The driver's local TCP port of the watch's connection to the proxy (0 until connected).
    pub local_port: AtomicUsize,
    /// Milliseconds from the watch's start to its response head (0 until then).
    pub head_ms: AtomicUsize,
    /// Milliseconds from the watch's start to its first event (0 until then).
    pub first_event_ms: AtomicUsize,
    /// Body bytes received.
    pub bytes: AtomicUsize,
    /// Set when the watch ended (body ended, failed, or the driver stopped reading).
    pub ended: std::sync::atomic::AtomicBool,
    /// Times the watch was resumed after kube-apiserver ended it cleanly (no ERROR event).
    pub resumed: AtomicUsize,
    /// Why the watch failed before or while reading its body, if it did.
    pub failure: std::sync::Mutex<Option<String>>,
}

impl Progress {
    /// One line for a failure report.
    pub fn describe(&self) -> String {
        let ms = |a: &AtomicUsize| match a.load(Ordering::SeqCst) {
            0 => "-".to_owned(),
            n => format!("{n} ms"),
        };
        format!(
            "status {}, {} events ({} bytes, resumed {} times), head after {}, first event after {}, local port {}, {}{}",
            self.status.load(Ordering::SeqCst),
            self.events.load(Ordering::SeqCst),
            self.bytes.load(Ordering::SeqCst),
            self.resumed.load(Ordering::SeqCst),
            ms(&self.head_ms),
            ms(&self.first_event_ms),
            self.local_port.load(Ordering::SeqCst),
            if self.ended.load(Ordering::SeqCst) {
                "ended"
            } else {
                "open"
            },
            self.failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map(|f| format!(", failed: {f}"))
                .unwrap_or_default()
        )
    }
}

/// Splits a watch body into events until it ends or `stop` fires; `count` grows by one per
/// event, `started` once the head arrived, and `progress` records this watch alone.
///
/// While `resume` is set, a watch that kube-apiserver ends cleanly without an ERROR event (it
/// closes watchers that fall behind) is opened again from the last resourceVersion it saw, as
/// client-go's reflector does; its events continue the same sequence.
pub async fn watch(
    port: u16,
    path: String,
    count: Arc<AtomicUsize>,
    started: Arc<AtomicUsize>,
    progress: Arc<Progress>,
    stop: tokio::sync::watch::Receiver<bool>,
    resume: Arc<std::sync::atomic::AtomicBool>,
) -> anyhow::Result<Seen> {
    let mut r = watch_inner(
        port,
        path.clone(),
        Arc::clone(&count),
        Arc::clone(&started),
        &progress,
        stop.clone(),
    )
    .await;
    while let Ok(seen) = &r {
        let ended_by_server = seen.end == End::Clean && seen.errors.is_empty() && seen.status == 200;
        if !(ended_by_server && resume.load(Ordering::SeqCst)) {
            break;
        }
        let Some(last) = seen.events.last().map(|e| e.rv.clone()) else {
            break;
        };
        progress.resumed.fetch_add(1, Ordering::SeqCst);
        let again = match path.split_once("resourceVersion=") {
            Some((a, b)) => {
                let rest = b.find('&').map_or("", |i| &b[i..]);
                format!("{a}resourceVersion={last}{rest}")
            }
            None => break,
        };
        // `started` counts heads once per watch.
        let more = watch_inner(
            port,
            again,
            Arc::clone(&count),
            Arc::new(AtomicUsize::new(0)),
            &progress,
            stop.clone(),
        )
        .await;
        r = match (r, more) {
            (Ok(mut a), Ok(b)) => {
                a.events.extend(b.events);
                a.errors.extend(b.errors);
                a.end = b.end;
                Ok(a)
            }
            (_, Err(e)) | (Err(e), _) => Err(e),
        };
    }
    progress.ended.store(true, Ordering::SeqCst);
    if let Err(e) = &r {
        *progress.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("{e:#}"));
    }
    r
}

async fn watch_inner(
    port: u16,
    path: String,
    count: Arc<AtomicUsize>,
    started: Arc<AtomicUsize>,
    progress: &Progress,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Seen> {
    let t = std::time::Instant::now();
    let since = || (t.elapsed().as_millis() as usize).max(1);
    let resp = open_with(port, "GET", &path, None, |local| {
        progress.local_port.store(usize::from(local), Ordering::SeqCst)
    })
    .await?;
    progress.head_ms.store(since(), Ordering::SeqCst);
    let status = resp.status().as_u16();
    progress.status.store(usize::from(status), Ordering::SeqCst);
    started.fetch_add(1, Ordering::SeqCst);
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
                    progress.bytes.fetch_add(d.len(), Ordering::SeqCst);
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
                        if progress.events.fetch_add(1, Ordering::SeqCst) == 0 {
                            progress.first_event_ms.store(since(), Ordering::SeqCst);
                        }
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }
    };
    if status != 200 && !buf.is_empty() {
        // A Status body without a newline: keep it for the report.
        errors.push(String::from_utf8_lossy(&buf[..buf.len().min(300)]).into_owned());
    }
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
