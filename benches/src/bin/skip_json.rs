//! A pure validating skip over a file: the core's scanner (`ours`) or serde_json's `IgnoredAny`
//! (`serde`), on the same bytes.
//! With `--ndjson` the file is a stream of values (a WATCH body) skipped one after another.
//!
//! One skip per run is for instruction counts under callgrind. `time` runs the two
//! interleaved, round after round, so a busy machine slows them alike, and prints each one's
//! best and median throughput and ours against serde's.
//!
//! Usage: `skip_json ours|serde|time [--ndjson] [--rounds N] FILE`

use std::hint::black_box;
use std::time::{Duration, Instant};

use kube_api_rewriter::internals;

const USAGE: &str = "usage: skip_json ours|serde|time [--ndjson] [--rounds N] FILE";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut which, mut file, mut ndjson, mut rounds) = (None, None, false, 30);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--ndjson" => ndjson = true,
            "--rounds" => rounds = args.next().and_then(|n| n.parse().ok()).ok_or(USAGE)?,
            _ if which.is_none() => which = Some(a),
            _ if file.is_none() => file = Some(a),
            _ => return Err(USAGE.into()),
        }
    }
    let (Some(which), Some(file)) = (which, file) else {
        return Err(USAGE.into());
    };
    let body = std::fs::read(file)?;
    if which == "time" {
        return time(&body, ndjson, rounds);
    }
    let values = skip(&which, &body, ndjson)?;
    println!("{} values", black_box(values));
    Ok(())
}

/// Skips `body` with one scanner; how many values it held.
fn skip(which: &str, body: &[u8], ndjson: bool) -> Result<usize, Box<dyn std::error::Error>> {
    Ok(match (which, ndjson) {
        ("ours", false) => internals::skip_document(body).map(|_| 1)?,
        ("ours", true) => ndjson_count(internals::skip_values(body, 0))?,
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
        _ => return Err(USAGE.into()),
    })
}

fn time(body: &[u8], ndjson: bool, rounds: usize) -> Result<(), Box<dyn std::error::Error>> {
    const WHO: [&str; 2] = ["serde", "ours"];
    let mut took: [Vec<Duration>; 2] = Default::default();
    for _ in 0..rounds.max(1) {
        for (who, took) in WHO.iter().zip(&mut took) {
            let t0 = Instant::now();
            black_box(skip(who, black_box(body), ndjson)?);
            took.push(t0.elapsed());
        }
    }
    let mib = body.len() as f64 / f64::from(1 << 20);
    let rate = |d: Duration| mib / d.as_secs_f64();
    let mut best = [0.0; 2];
    let mut median = [0.0; 2];
    for (i, t) in took.iter_mut().enumerate() {
        t.sort();
        best[i] = rate(t[0]);
        median[i] = rate(t[t.len() / 2]);
    }
    println!(
        "{:.1} MiB, {} interleaved rounds; MiB/s best / median",
        mib,
        took[0].len()
    );
    for (i, who) in WHO.iter().enumerate() {
        let what = if *who == "serde" {
            "serde_json IgnoredAny"
        } else {
            "our scanner"
        };
        println!("  {what:<24} {:>7.0} / {:>7.0}", best[i], median[i]);
    }
    println!(
        "  ours / serde: {:.2}x best, {:.2}x median",
        best[1] / best[0],
        median[1] / median[0]
    );
    Ok(())
}

fn ndjson_count((spans, err): internals::Skips) -> Result<usize, kube_api_rewriter::JsonError> {
    match err {
        Some(e) => Err(e),
        None => Ok(spans.len()),
    }
}
