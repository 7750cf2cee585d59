//! Progress of a transfer, logged about once a second as a JSON log line.

use std::time::{Duration, Instant};

/// Counts the bytes of one transfer.
pub(crate) struct Progress {
    what: &'static str,
    total: Option<u64>,
    bytes: u64,
    start: Instant,
    last: Instant,
    last_bytes: u64,
}

const EVERY: Duration = Duration::from_secs(1);

impl Progress {
    pub(crate) fn new(what: &'static str, total: Option<u64>) -> Self {
        let now = Instant::now();
        Progress {
            what,
            total,
            bytes: 0,
            start: now,
            last: now,
            last_bytes: 0,
        }
    }

    pub(crate) fn add(&mut self, n: usize) {
        self.bytes += n as u64;
        let now = Instant::now();
        let since = now - self.last;
        if since >= EVERY {
            let speed = ((self.bytes - self.last_bytes) as f64 / since.as_secs_f64()) as u64;
            self.log(speed);
            self.last = now;
            self.last_bytes = self.bytes;
        }
    }

    fn log(&self, speed: u64) {
        match self.total {
            Some(t) if t > 0 => {
                let percent = (self.bytes as f64 * 100.0 / t as f64).min(100.0);
                tracing::info!(
                    what = self.what,
                    bytes = self.bytes,
                    total = t,
                    percent = format!("{percent:.1}"),
                    bytes_per_second = speed,
                    "progress"
                );
            }
            _ => tracing::info!(
                what = self.what,
                bytes = self.bytes,
                bytes_per_second = speed,
                "progress"
            ),
        }
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The average speed so far, bytes per second.
    pub(crate) fn average(&self) -> u64 {
        average(self.bytes, self.start.elapsed())
    }

    /// Logs the end of the transfer.
    pub(crate) fn finish(&self) {
        tracing::info!(
            what = self.what,
            bytes = self.bytes,
            seconds = format!("{:.3}", self.start.elapsed().as_secs_f64()),
            bytes_per_second = self.average(),
            "done"
        );
    }
}

/// Bytes per second of `bytes` in `d` (a zero duration counts as a millisecond).
pub(crate) fn average(bytes: u64, d: Duration) -> u64 {
    let secs = d.as_secs_f64().max(0.001);
    (bytes as f64 / secs) as u64
}
