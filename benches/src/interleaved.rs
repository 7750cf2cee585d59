//! Interleaved timing: serde_json's `IgnoredAny` scan, our validating skip and our streamed
//! restore of the same body, one after another, round after round, so that a machine that
//! speeds up or slows down mid-run moves all three alike. Medians of such rounds are what the
//! rewrite-to-scan ratio is quoted from.
//!
//! ```no_run
//! let body = kube_api_rewriter_benches::list(1_000, 42);
//! let t = kube_api_rewriter_benches::interleaved::time(&body, false, 5).unwrap();
//! println!("restore / scan: {:.2}x", t.median(2) / t.median(0));
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use kube_api_rewriter::object::Context;
use kube_api_rewriter::stream::{ListRewriter, WatchRewriter};
use kube_api_rewriter::{Direction, Rules, internals};

/// The contestants, in the order they run each round: a short name and a label.
pub const WHO: [(&str, &str); 3] = [
    ("serde", "serde_json IgnoredAny"),
    ("ours", "our scanner"),
    ("restore", "our streamed restore"),
];

/// The pieces the restore is fed in, as the proxy feeds upstream frames.
pub const PIECE: usize = 64 << 10;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Each contestant's times over the rounds, and the body's size.
pub struct Timings {
    /// Bytes per run.
    pub bytes: usize,
    /// Per contestant (in [`WHO`]'s order), the rounds' times, sorted.
    pub took: [Vec<Duration>; 3],
}

impl Timings {
    /// Contestant `i`'s median rate, bytes per second.
    pub fn median(&self, i: usize) -> f64 {
        let t = &self.took[i];
        self.bytes as f64 / t[t.len() / 2].as_secs_f64()
    }

    /// Contestant `i`'s best rate, bytes per second.
    pub fn best(&self, i: usize) -> f64 {
        self.bytes as f64 / self.took[i][0].as_secs_f64()
    }
}

/// Skips `body` (a stream of values when `ndjson`) with serde's scan (`serde`) or ours
/// (`ours`); how many values it held.
pub fn skip(which: &str, body: &[u8], ndjson: bool) -> Result<usize> {
    Ok(match (which, ndjson) {
        ("ours", false) => internals::skip_document(body).map(|_| 1)?,
        ("ours", true) => {
            let (spans, err) = internals::skip_values(body, 0);
            match err {
                Some(e) => return Err(e.into()),
                None => spans.len(),
            }
        }
        ("serde", false) => {
            serde_json::from_slice::<serde::de::IgnoredAny>(body)?;
            1
        }
        ("serde", true) => {
            let mut n = 0;
            for r in serde_json::Deserializer::from_slice(body).into_iter::<serde::de::IgnoredAny>() {
                r?;
                n += 1;
            }
            n
        }
        _ => return Err(format!("no scanner named {which}").into()),
    })
}

/// Restores `body` (a LIST, or a WATCH stream when `ndjson`) in [`PIECE`]s, handing each
/// piece's output on as the proxy does; the bytes written.
pub fn restore(rules: &Rules, body: &[u8], ndjson: bool) -> Result<usize> {
    let mut out = Vec::with_capacity(4 * PIECE);
    let mut written = 0;
    let mut hand_on = |out: &mut Vec<u8>| {
        black_box(&out[..]);
        written += out.len();
        out.clear();
    };
    if ndjson {
        let mut w = WatchRewriter::new(rules, Direction::Restore, Context::default());
        for piece in body.chunks(PIECE) {
            w.feed(piece, &mut out)?;
            hand_on(&mut out);
        }
        w.finish(&mut out)?;
    } else {
        let mut l = ListRewriter::new(rules, Direction::Restore, Context::default());
        for piece in body.chunks(PIECE) {
            l.feed(piece, &mut out)?;
            hand_on(&mut out);
        }
        l.finish(&mut out)?;
    }
    hand_on(&mut out);
    Ok(written)
}

/// Runs the three on `body`, `rounds` times interleaved (after one untimed warm-up round).
pub fn time(body: &[u8], ndjson: bool, rounds: usize) -> Result<Timings> {
    let rules = Rules::builtin_kubevirt();
    let mut took: [Vec<Duration>; 3] = Default::default();
    for round in 0..=rounds.max(1) {
        for ((who, _), took) in WHO.iter().zip(&mut took) {
            let t0 = Instant::now();
            if *who == "restore" {
                black_box(restore(&rules, black_box(body), ndjson)?);
            } else {
                black_box(skip(who, black_box(body), ndjson)?);
            }
            if round > 0 {
                took.push(t0.elapsed());
            }
        }
    }
    for t in &mut took {
        t.sort();
    }
    Ok(Timings {
        bytes: body.len(),
        took,
    })
}
