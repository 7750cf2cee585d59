//! The benchmark's HTTP clients (a keep-alive HTTP/1.1 connection, a request straight to
//! kube-apiserver) and the reading of bodies and watch streams.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response, header};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use kube_api_rewriter_layer::body as pbody;
use kube_api_rewriter_proxy::upstream::Upstream;

use crate::{GROUP, Result};

/// One keep-alive HTTP/1.1 connection.
pub(crate) struct H1 {
    addr: SocketAddr,
    tx: SendRequest<Empty<Bytes>>,
}

impl H1 {
    /// Connects to `addr` (TCP_NODELAY).
    pub(crate) async fn connect(addr: SocketAddr) -> Result<H1> {
        let s = tokio::net::TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let (tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(H1 { addr, tx })
    }

    /// Sends a GET of `path` with `headers`, connecting again if the connection was closed.
    pub(crate) async fn get(
        &mut self,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<Response<pbody::Body>> {
        if self.tx.ready().await.is_err() {
            *self = H1::connect(self.addr).await?;
        }
        let mut b = Request::get(path).header(header::HOST, "127.0.0.1");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        Ok(self
            .tx
            .send_request(b.body(Empty::new())?)
            .await?
            .map(pbody::boxed))
    }
}

/// Sends a request straight to kube-apiserver with the kubeconfig's credentials.
pub(crate) async fn direct(
    up: &Upstream,
    method: &str,
    path: &str,
    ct: Option<&str>,
    body: Bytes,
) -> Result<Response<pbody::Body>> {
    let mut b = Request::builder()
        .method(method)
        .uri(up.uri(path)?)
        .header(header::ACCEPT, "application/json");
    if let Some(ct) = ct {
        b = b.header(header::CONTENT_TYPE, ct);
    }
    let mut req = b.body(if body.is_empty() {
        pbody::empty()
    } else {
        pbody::full(body)
    })?;
    up.authorize(req.headers_mut());
    Ok(up.send(req, None).await?.map(pbody::boxed))
}

/// What reading a whole body took.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Read {
    pub(crate) bytes: u64,
    pub(crate) secs: f64,
}

/// Reads a body to the end, counting bytes; `check` sees every frame.
pub(crate) async fn drain(
    resp: Response<pbody::Body>,
    t0: Instant,
    mut check: impl FnMut(&[u8]),
) -> Result<Read> {
    let status = resp.status();
    let mut body = resp.into_body();
    let mut bytes = 0u64;
    let mut head = Vec::new();
    while let Some(f) = body.frame().await {
        if let Ok(d) = f?.into_data() {
            bytes += d.len() as u64;
            if head.len() < 512 {
                head.extend_from_slice(&d[..d.len().min(512)]);
            }
            check(&d);
        }
    }
    if !status.is_success() {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&head)).into());
    }
    Ok(Read {
        bytes,
        secs: t0.elapsed().as_secs_f64(),
    })
}

/// Panics if a renamed name reached the client.
pub(crate) fn no_renamed(d: &[u8]) {
    assert!(!renamed(d), "renamed names reached the client through the proxy");
}

/// Whether a renamed name is in `d`.
pub(crate) fn renamed(d: &[u8]) -> bool {
    memchr::memmem::find(d, GROUP.as_bytes()).is_some()
}

/// How a watch stream's events are counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// One event a line, as kube-apiserver sends them.
    Lines,
    /// By their `"type":"MODIFIED"` (the doubles' and the patches' events are all of that
    /// type), for a sidecar that sends them with no newline in between.
    Modified,
}

/// Counts the events of a stream read frame by frame.
pub(crate) struct Tally {
    framing: Framing,
    /// The end of the stream so far, shorter than the mark: a mark split between frames.
    carry: Vec<u8>,
}

impl Tally {
    const MARK: &[u8] = br#""type":"MODIFIED""#;

    pub(crate) fn new(framing: Framing) -> Tally {
        Tally {
            framing,
            carry: Vec::new(),
        }
    }

    /// The events that end (or, by their mark, begin) in the next frame `d`.
    pub(crate) fn feed(&mut self, d: &[u8]) -> usize {
        match self.framing {
            Framing::Lines => memchr::memchr_iter(b'\n', d).count(),
            Framing::Modified => {
                let k = Self::MARK.len() - 1;
                // The marks that begin in the carry and end in `d`.
                let mut joint = std::mem::take(&mut self.carry);
                let from_carry = joint.len();
                joint.extend_from_slice(&d[..d.len().min(k)]);
                let split = memchr::memmem::find_iter(&joint, Self::MARK)
                    .filter(|&i| i < from_carry)
                    .count();
                let n = split + memchr::memmem::find_iter(d, Self::MARK).count();
                self.carry = if d.len() >= k {
                    d[d.len() - k..].to_vec()
                } else {
                    joint[joint.len().saturating_sub(k)..].to_vec()
                };
                n
            }
        }
    }
}

/// What a watch has received so far.
#[derive(Default)]
pub(crate) struct Counter {
    pub(crate) events: AtomicUsize,
    pub(crate) restarts: AtomicUsize,
    pub(crate) bytes: AtomicU64,
    pub(crate) last: Mutex<Option<Instant>>,
}

impl Counter {
    /// Events received.
    pub(crate) fn events(&self) -> usize {
        self.events.load(Ordering::Relaxed)
    }

    /// Seconds from `t0` to the last event.
    pub(crate) fn last_secs(&self, t0: Instant) -> f64 {
        self.last
            .lock()
            .map(|l| l.map_or(f64::NAN, |t| (t - t0).as_secs_f64()))
            .unwrap_or(f64::NAN)
    }
}

/// Counts newline-terminated events; returns the last whole event.
pub(crate) async fn count_events(resp: Response<pbody::Body>, c: Arc<Counter>, check: bool) -> Vec<u8> {
    let mut body = resp.into_body();
    let mut line = Vec::new();
    let mut last = Vec::new();
    loop {
        let f = match body.frame().await {
            None => break,
            Some(Ok(f)) => f,
            Some(Err(_)) => break,
        };
        if let Ok(d) = f.into_data() {
            // The last whole event (lines may span frames).
            match memchr::memrchr(b'\n', &d) {
                Some(end) => {
                    let start = memchr::memrchr(b'\n', &d[..end]).map_or(0, |i| i + 1);
                    if start == 0 {
                        line.extend_from_slice(&d[..end]);
                        last = std::mem::take(&mut line);
                    } else {
                        last = d[start..end].to_vec();
                    }
                    line.clear();
                    line.extend_from_slice(&d[end + 1..]);
                }
                None => line.extend_from_slice(&d),
            }
            if check {
                no_renamed(&d);
            }
            let n = memchr::memchr_iter(b'\n', &d).count();
            c.bytes.fetch_add(d.len() as u64, Ordering::Relaxed);
            if n > 0 {
                c.events.fetch_add(n, Ordering::Relaxed);
                if let Ok(mut l) = c.last.lock() {
                    *l = Some(Instant::now());
                }
            }
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_counts_marks_across_frames() {
        let stream = br#"{"type":"MODIFIED","object":{}}{"type":"MODIFIED","object":{"a":"\"type\":\"MODIFIED\""}}{"type":"MODIFIED"}"#;
        for size in [1, 2, 7, 17, 18, 19, 64, stream.len()] {
            let mut t = Tally::new(Framing::Modified);
            let n: usize = stream.chunks(size).map(|c| t.feed(c)).sum();
            assert_eq!(n, 3, "frames of {size}");
        }
        let mut t = Tally::new(Framing::Lines);
        assert_eq!(t.feed(b"a\nb\nc"), 2);
    }
}
