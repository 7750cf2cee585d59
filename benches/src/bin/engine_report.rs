//! `engine_report [CRITERION_DIR]`: the engine benchmark's table, from the estimates criterion
//! left under `target/criterion` (`cargo bench -p kube-api-rewriter-benches --bench engine`),
//! as a Markdown report for `scripts/bench-report.sh`.
//!
//! Criterion keeps no table of its own; each benchmark's `new/estimates.json` holds its median
//! time and `new/benchmark.json` the bytes it processed. Criterion runs one function after
//! another, so a machine whose speed drifts between them skews the ratio; the report therefore
//! also times serde's scan and the restore of the same bodies interleaved
//! ([`interleaved`]), and quotes that median ratio in its headline.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kube_api_rewriter_benches::interleaved;
use kube_api_rewriter_testkit::report::Report;
use serde_json::Value;

/// Median bytes per second of `group/function`, and the bytes per iteration.
fn measure(dir: &Path, group: &str, function: &str) -> Result<(f64, u64), String> {
    let base = dir.join(group).join(function).join("new");
    let read = |f: &str| -> Result<Value, String> {
        let p = base.join(f);
        let s = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        serde_json::from_str(&s).map_err(|e| format!("{}: {e}", p.display()))
    };
    let ns = read("estimates.json")?["median"]["point_estimate"]
        .as_f64()
        .ok_or_else(|| format!("{group}/{function}: no median in estimates.json"))?;
    let bytes = read("benchmark.json")?["throughput"]["Bytes"]
        .as_u64()
        .ok_or_else(|| format!("{group}/{function}: no byte throughput in benchmark.json"))?;
    Ok((bytes as f64 / (ns / 1e9), bytes))
}

fn rate(bps: f64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if bps >= 1024.0 * MIB {
        format!("{:.2} GiB/s", bps / (1024.0 * MIB))
    } else {
        format!("{:.0} MiB/s", bps / MIB)
    }
}

/// Interleaved rounds behind the last column.
const ROUNDS: usize = 15;

fn run(dir: &Path) -> Result<Report, String> {
    let mut r = Report::new(
        "engine",
        &[
            "body",
            "serde_json `Value` round trip",
            "serde_json `IgnoredAny` scan",
            "our validating skip",
            "our rewrite",
            "rewrite / scan",
            "rewrite / scan, interleaved",
        ],
    );
    let bodies = [
        (
            "list",
            "LIST, 10,000 VMs",
            kube_api_rewriter_benches::engine_list(),
        ),
        (
            "watch",
            "WATCH, 20,000 events",
            kube_api_rewriter_benches::engine_watch(),
        ),
    ];
    for &(group, what, ref data) in &bodies {
        let ndjson = group == "watch";
        let t = interleaved::time(data, ndjson, ROUNDS).map_err(|e| format!("{group}: {e}"))?;
        let ratio = t.median(2) / t.median(0);
        let (value, bytes) = measure(dir, group, "value_roundtrip")?;
        let (scan, _) = measure(dir, group, "ignored_any_scan")?;
        let (skip, _) = measure(dir, group, "skip_value")?;
        let (restore, _) = measure(dir, group, "restore_stream_64k")?;
        let body = format!("{what}, {:.1} MB", bytes as f64 / 1e6);
        r.row([
            body.clone(),
            rate(value),
            rate(scan),
            rate(skip),
            format!("{} restore", rate(restore)),
            format!("{:.2}", restore / scan),
            format!("{ratio:.2}"),
        ]);
        r.headline(
            format!("engine: restore a {body}, streamed"),
            format!(
                "{} ({ratio:.2}x serde's validating scan, interleaved)",
                rate(restore),
            ),
        );
    }
    let (value, bytes) = measure(dir, "object", "value_roundtrip")?;
    let (scan, _) = measure(dir, "object", "ignored_any_scan")?;
    let (restore, _) = measure(dir, "object", "restore")?;
    let (rename, _) = measure(dir, "object", "rename")?;
    r.row([
        format!("one VM, {:.1} KB", bytes as f64 / 1e3),
        rate(value),
        rate(scan),
        String::new(),
        format!("{} restore, {} rename", rate(restore), rate(rename)),
        format!("{:.2}", restore / scan),
        String::new(),
    ]);
    r.note(format!(
        "Medians of criterion's samples (`cargo bench -p kube-api-rewriter-benches --bench engine`); \
         realistic generated KubeVirt VMs as the server holds them, restored to the original names, \
         fed in 64 KiB pieces with each piece's output handed on as the proxy does. The last \
         column: medians of {ROUNDS} rounds that each run serde's scan, our skip and the restore \
         on the same bodies one after another (`skip_json time` does the same for a file).",
    ));
    Ok(r)
}

fn main() -> ExitCode {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| "target/criterion".into());
    match run(&dir) {
        Ok(r) => {
            r.print();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "engine_report: {e} (run `cargo bench -p kube-api-rewriter-benches --bench engine` first)"
            );
            ExitCode::FAILURE
        }
    }
}
