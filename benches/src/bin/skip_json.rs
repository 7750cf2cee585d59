//! A pure validating skip over a file: the core's scanner (`ours`) or serde_json's `IgnoredAny`
//! (`serde`), on the same bytes.
//! With `--ndjson` the file is a stream of values (a WATCH body) skipped one after another.
//!
//! One skip per run is for instruction counts under callgrind. `time` runs the two skips and
//! the streamed restore (in 64 KiB pieces, as the proxy feeds it) interleaved, round after
//! round, so a busy machine slows them alike, and prints each one's best and median throughput
//! and each of ours against serde's.
//!
//! Usage: `skip_json ours|serde|time [--ndjson] [--rounds N] FILE`

use std::hint::black_box;

use kube_api_rewriter_benches::interleaved::{self, WHO};

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
    match which.as_str() {
        "time" => time(&body, ndjson, rounds),
        "ours" | "serde" => {
            let values = interleaved::skip(&which, &body, ndjson)?;
            println!("{} values", black_box(values));
            Ok(())
        }
        _ => Err(USAGE.into()),
    }
}

fn time(body: &[u8], ndjson: bool, rounds: usize) -> Result<(), Box<dyn std::error::Error>> {
    let t = interleaved::time(body, ndjson, rounds)?;
    const MIB: f64 = (1 << 20) as f64;
    println!(
        "{:.1} MiB, {} interleaved rounds; MiB/s best / median",
        body.len() as f64 / MIB,
        t.took[0].len()
    );
    for (i, (_, what)) in WHO.iter().enumerate() {
        println!(
            "  {what:<24} {:>7.0} / {:>7.0}",
            t.best(i) / MIB,
            t.median(i) / MIB
        );
    }
    for (i, (_, what)) in WHO.iter().enumerate().skip(1) {
        println!(
            "  {what} / serde: {:.2}x best, {:.2}x median",
            t.best(i) / t.best(0),
            t.median(i) / t.median(0)
        );
    }
    Ok(())
}
