//! Part 3's kube-apiserver-like upstream double over plain HTTP/1.1, written by hand (the TLS
//! doubles are in `h2.rs`), and the fixtures all of part 3's doubles serve.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::{GROUP, KIND, RESOURCE, Result};
use kube_api_rewriter_testkit::vm::Vm;

/// Writes per burst write of part 3's double: many event chunks each, as a busy kube-apiserver
/// sends them.
pub(crate) const BURST_WRITE: usize = 64 << 10;
/// The namespace whose watch sends lone events (one after each idle pause).
pub(crate) const LONE_NS: &str = "lone";
/// The name of part 3's double's runtime thread.
pub(crate) const DOUBLE_THREAD: &str = "burst-double";
/// The idle pause before each lone event.
pub(crate) const LONE_PAUSE: Duration = Duration::from_millis(100);

/// Part 3's upstream double. It speaks HTTP/1.1 by hand so every write is under its control,
/// and sends a watch the way kube-apiserver does: one HTTP chunk per event, and in a burst many
/// chunks per write. A watch in namespace [`LONE_NS`] instead sends one event, then one more
/// after each idle pause, noting when it wrote each.
pub(crate) struct Burst {
    /// The body of a LIST of `items` renamed VMs.
    pub(crate) list: Bytes,
    pub(crate) items: usize,
    /// Chunk-encoded events (`<hex length>\r\n<event>\r\n`).
    chunks: Vec<Bytes>,
    /// The same events as they are (for the HTTP/2 double's DATA frames).
    pub(crate) events_raw: Vec<Bytes>,
    pub(crate) events: usize,
    pub(crate) lone_rounds: usize,
    /// When each lone event was written.
    pub(crate) sent: Mutex<Vec<Instant>>,
}

/// Builds a LIST of `items` VMs and the events of a watch of `events` events.
pub(crate) fn burst_fixtures(items: usize, events: usize, lone_rounds: usize) -> Burst {
    let template = Vm::new("vm-XXXXXXX", crate::NS)
        .renamed()
        .stored()
        .json()
        .to_string();
    let mut list = format!(r#"{{"apiVersion":"{GROUP}/v1","items":["#).into_bytes();
    for i in 0..items {
        if i > 0 {
            list.push(b',');
        }
        list.extend_from_slice(template.replace("XXXXXXX", &format!("{i:07}")).as_bytes());
    }
    list.extend_from_slice(
        format!(r#"],"kind":"{KIND}List","metadata":{{"continue":"","resourceVersion":"123456"}}}}"#)
            .as_bytes(),
    );
    let events_raw: Vec<Bytes> = (0..1000)
        .map(|i| {
            let obj = template.replace("XXXXXXX", &format!("{i:07}"));
            Bytes::from(format!("{{\"type\":\"MODIFIED\",\"object\":{obj}}}\n"))
        })
        .collect();
    let chunks = events_raw
        .iter()
        .map(|ev| {
            let mut c = format!("{:x}\r\n", ev.len()).into_bytes();
            c.extend_from_slice(ev);
            c.extend_from_slice(b"\r\n");
            Bytes::from(c)
        })
        .collect();
    Burst {
        list: Bytes::from(list),
        items,
        chunks,
        events_raw,
        events,
        lone_rounds,
        sent: Mutex::new(Vec::new()),
    }
}

/// Starts part 3's double on its own runtime thread; returns its address.
pub(crate) fn start_burst_double(b: Arc<Burst>) -> Result<SocketAddr> {
    serve_on_thread(DOUBLE_THREAD, move |s| {
        tokio::spawn(burst_conn(s, Arc::clone(&b)));
    })
}

/// Accepts connections on a loopback port in a one-worker runtime on a thread named `name`
/// (whose socket writes can then be counted apart), handing each to `serve`; returns the
/// address.
pub(crate) fn serve_on_thread(
    name: &'static str,
    mut serve: impl FnMut(tokio::net::TcpStream) + Send + 'static,
) -> Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    l.set_nonblocking(true)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .enable_all()
        .build()?;
    std::thread::Builder::new().name(name.into()).spawn(move || {
        rt.block_on(async move {
            let Ok(l) = tokio::net::TcpListener::from_std(l) else {
                return;
            };
            loop {
                let Ok((s, _)) = l.accept().await else { continue };
                let _ = s.set_nodelay(true);
                serve(s);
            }
        });
    })?;
    Ok(addr)
}

/// Serves one keep-alive connection of part 3's double (GET requests only).
async fn burst_conn(s: tokio::net::TcpStream, b: Arc<Burst>) -> std::io::Result<()> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (r, mut w) = s.into_split();
    let mut r = tokio::io::BufReader::new(r);
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let target = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        loop {
            line.clear();
            if r.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            if line == "\r\n" || line == "\n" {
                break;
            }
        }
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let watch = query.split('&').any(|kv| kv == "watch=1" || kv == "watch=true");
        if path == "/readyz" {
            w.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok")
                .await?;
        } else if path.ends_with(&format!("/{RESOURCE}")) && watch {
            w.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
            )
            .await?;
            if path.contains(&format!("/namespaces/{LONE_NS}/")) {
                w.write_all(&b.chunks[0]).await?;
                for i in 0..b.lone_rounds {
                    tokio::time::sleep(LONE_PAUSE).await;
                    let c = &b.chunks[(i + 1) % b.chunks.len()];
                    if let Ok(mut s) = b.sent.lock() {
                        s.push(Instant::now());
                    }
                    w.write_all(c).await?;
                }
            } else {
                let mut buf = Vec::with_capacity(BURST_WRITE + (16 << 10));
                for i in 0..b.events {
                    buf.extend_from_slice(&b.chunks[i % b.chunks.len()]);
                    if buf.len() >= BURST_WRITE {
                        w.write_all(&buf).await?;
                        buf.clear();
                    }
                }
                buf.extend_from_slice(b"0\r\n\r\n");
                w.write_all(&buf).await?;
                continue;
            }
            w.write_all(b"0\r\n\r\n").await?;
        } else if path.ends_with(&format!("/{RESOURCE}")) {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                b.list.len()
            );
            w.write_all(head.as_bytes()).await?;
            w.write_all(&b.list).await?;
        } else {
            w.write_all(
                b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
            )
            .await?;
        }
    }
}
