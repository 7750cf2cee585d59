//! `engine_report [CRITERION_DIR]`: the engine benchmark's table, from the estimates criterion
//! left under `target/criterion` (`cargo bench -p kube-api-rewriter-benches --bench engine`),
//! as a Markdown report for `scripts/bench-report.sh`.
//!
//! Criterion keeps no table of its own; each benchmark's `new/estimates.json` holds its median
//! time and `new/benchmark.json` the bytes it processed. Criterion runs one function after
//! another, so a machine whose speed drifts between them skews the ratio; the report therefore
//! also times serde's scan and the restore of the same bodies interleaved
//! ([`interleaved`]), in [`RUNS`] processes of their own (where the body and the code land in
//! memory moves a process's figures more than its rounds vary), and quotes the median of those
//! runs' ratios in its headline.

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

/// Interleaved rounds of one run.
const ROUNDS: usize = 15;
/// Runs, each a process of its own, behind the last column.
const RUNS: usize = 5;
/// The argument that makes this program one such run: it prints the run's ratio.
const ONE_RUN: &str = "--interleaved-run";

/// The two streamed bodies by criterion's group: what each is.
const BODIES: [(&str, &str); 2] = [("list", "LIST, 10,000 VMs"), ("watch", "WATCH, 20,000 events")];

/// One interleaved run on `group`'s body: the median restore rate over the median scan rate.
fn one_run(group: &str) -> Result<f64, String> {
    let data = match group {
        "list" => kube_api_rewriter_benches::engine_list(),
        "watch" => kube_api_rewriter_benches::engine_watch(),
        _ => return Err(format!("no body named {group}")),
    };
    let t = interleaved::time(&data, group == "watch", ROUNDS).map_err(|e| format!("{group}: {e}"))?;
    Ok(t.median(2) / t.median(0))
}

/// The ratios of [`RUNS`] interleaved runs on `group`'s body, each in a new process, sorted.
fn runs(group: &str) -> Result<Vec<f64>, String> {
    let me = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let mut ratios = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let out = std::process::Command::new(&me)
            .args([ONE_RUN, group])
            .output()
            .map_err(|e| format!("{}: {e}", me.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let ratio = text.trim().parse::<f64>().map_err(|_| {
            format!(
                "an interleaved run on {group} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })?;
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    Ok(ratios)
}

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
            "rewrite / scan, interleaved (median of runs)",
        ],
    );
    for (group, what) in BODIES {
        let ratios = runs(group)?;
        let ratio = ratios[ratios.len() / 2];
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
            format!(
                "{ratio:.2} ({})",
                ratios
                    .iter()
                    .map(|r| format!("{r:.2}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ]);
        r.headline(
            format!("engine: restore a {body}, streamed"),
            format!(
                "{} ({ratio:.2}x serde's validating scan, interleaved, median of {RUNS} runs)",
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
         column: the median (and each) of {RUNS} runs, each a process of its own and each the \
         ratio of the medians of {ROUNDS} rounds that run serde's scan, our skip and the restore \
         on the same body one after another (`skip_json time` does one such run on a file).",
    ));
    Ok(r)
}

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    if args.first().is_some_and(|a| a == ONE_RUN) {
        let group = args.get(1).and_then(|g| g.to_str()).unwrap_or_default();
        return match one_run(group) {
            Ok(ratio) => {
                println!("{ratio}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("engine_report: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let dir = args
        .first()
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
