//! Upgraded connections (exec, attach, port-forward, proxy; WebSocket and SPDY): once upstream
//! answers `101 Switching Protocols`, the client's and upstream's connections are spliced both
//! ways as raw bytes, until either side closes or nothing has moved either way for the stream
//! idle timeout, as the kubelet ends its streaming connections
//! (`--streaming-connection-idle-timeout`). The splice keeps the client connection's place under
//! the listener's cap ([`Place`]).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::server::conns::Place;

/// The two ends of an upgraded request, and what the splice keeps.
#[derive(Debug)]
pub struct Ends {
    /// The proxy's name, for the log.
    pub proxy: &'static str,
    /// The request path, for the log.
    pub path: String,
    /// The client's connection, once hyper hands it over.
    pub client: OnUpgrade,
    /// Upstream's connection.
    pub upstream: OnUpgrade,
    /// The client connection's place under the listener's cap.
    pub place: Option<Place>,
}

/// Splices `ends` in a task of its own until either side closes or nothing moves for `idle`.
pub fn spawn(ends: Ends, idle: Duration) {
    let Ends {
        proxy,
        path,
        client,
        upstream,
        place,
    } = ends;
    tokio::spawn(async move {
        let _place = place;
        let (client, upstream) = match tokio::try_join!(client, upstream) {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(proxy, %path, error = %e, "upgrade failed");
                return;
            }
        };
        let activity = Activity::new();
        let mut client = activity.wrap(TokioIo::new(client));
        let mut upstream = activity.wrap(TokioIo::new(upstream));
        tokio::select! {
            r = tokio::io::copy_bidirectional(&mut client, &mut upstream) => match r {
                Ok((up, down)) => {
                    tracing::debug!(proxy, %path, up, down, "upgraded connection closed")
                }
                Err(e) => tracing::debug!(proxy, %path, error = %e, "upgraded connection ended"),
            },
            () = activity.idle_for(idle) => {
                tracing::debug!(proxy, %path, ?idle, "upgraded connection idle; closed");
            }
        }
    });
}

/// When bytes last moved, shared by both sides of a splice.
#[derive(Debug, Clone)]
pub struct Activity {
    start: Instant,
    /// Milliseconds since `start`.
    last: Arc<AtomicU64>,
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}

impl Activity {
    /// Active now.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            last: Arc::new(AtomicU64::new(0)),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last.load(Ordering::Relaxed))
    }

    /// Completes once nothing has moved for `idle`.
    pub async fn idle_for(&self, idle: Duration) {
        loop {
            let deadline = self.last() + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }

    /// Wraps one side of the splice so its reads and writes count as activity.
    pub fn wrap<T>(&self, io: T) -> Tracked<T> {
        Tracked {
            io,
            activity: self.clone(),
        }
    }
}

/// An I/O object whose traffic counts as [`Activity`].
#[derive(Debug)]
pub struct Tracked<T> {
    io: T,
    activity: Activity,
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    #[tokio::test]
    async fn reads_and_writes_count_as_activity() {
        let a = Activity::new();
        let (x, y) = tokio::io::duplex(64);
        let (mut x, mut y) = (a.wrap(x), a.clone().wrap(y));
        tokio::time::sleep(Duration::from_millis(5)).await;
        x.write_all(b"hi").await.expect("write");
        let after_write = a.last.load(Ordering::Relaxed);
        assert!(after_write >= 5, "{after_write}");
        tokio::time::sleep(Duration::from_millis(5)).await;
        let mut b = [0u8; 2];
        y.read_exact(&mut b).await.expect("read");
        assert!(a.last.load(Ordering::Relaxed) > after_write);
        // Idle for no time at all: over at once.
        a.idle_for(Duration::ZERO).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_splice_ends_after_the_idle_timeout_and_not_before() {
        let a = Activity::new();
        let (x, _y) = tokio::io::duplex(64);
        let mut x = a.wrap(x);
        let idle = Duration::from_secs(4 * 3600);
        let start = Instant::now();
        tokio::time::sleep(idle / 2).await;
        x.write_all(b"keep").await.expect("write");
        a.idle_for(idle).await;
        assert_eq!(start.elapsed(), idle / 2 + idle, "counted from the last byte");
    }
}
