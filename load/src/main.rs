//! `kar-load`: the proxy's load and fault suite against the real kube-apiserver
//! (`scripts/load.sh`). Prints the figures and their Markdown report; exits 1 when an
//! expectation fails.
//!
//! Usage: `kar-load [--short] [--watches N] [--flood N] [--objects N] [--changes N]`.

use std::process::ExitCode;
use std::time::Instant;

use kube_api_rewriter_load::{Figures, Settings};
use kube_api_rewriter_testkit::report::Report;

/// The figures as the Markdown report `scripts/bench-report.sh` copies into the docs.
fn report(s: &Settings, f: &Figures, secs: f64) -> Report {
    let mut r = Report::new("load", &["measure", "figure"]);
    for (k, v) in &f.lines {
        r.row([k.as_str(), v.as_str()]);
        let headline = match k.as_str() {
            "events compared (proxy watches x events)" => {
                Some("load: watch events compared with a direct watch")
            }
            "proxy RSS before watches / with watches" => Some("load: proxy RSS idle / with the watches open"),
            "SIGTERM" => Some("load: SIGTERM with LISTs and watches in flight"),
            _ => None,
        };
        if let Some(h) = headline {
            r.headline(h, v.as_str());
        }
    }
    r.note(format!(
        "`kar-load` ({} watches, {} flood connections, {} objects changed {} times): {:.0} s in all.",
        s.watches, s.flood, s.objects, s.changes, secs
    ));
    r
}

fn main() -> ExitCode {
    let mut s = Settings::full();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> Option<usize> {
            let v = args.next().and_then(|v| v.parse().ok());
            if v.is_none() {
                eprintln!("kar-load: {what} needs a number");
            }
            v
        };
        match a.as_str() {
            "--short" => s = Settings::short(),
            "--watches" => match num("--watches") {
                Some(n) => s.watches = n,
                None => return ExitCode::from(2),
            },
            "--flood" => match num("--flood") {
                Some(n) => s.flood = n,
                None => return ExitCode::from(2),
            },
            "--objects" => match num("--objects") {
                Some(n) if n > 0 => s.objects = n,
                _ => return ExitCode::from(2),
            },
            "--changes" => match num("--changes") {
                Some(n) => s.changes = n,
                None => return ExitCode::from(2),
            },
            _ => {
                eprintln!(
                    "kar-load: unknown argument {a:?}; usage: kar-load [--short] [--watches N] [--flood N] [--objects N] [--changes N]"
                );
                return ExitCode::from(2);
            }
        }
    }
    eprintln!("kar-load: {s:?}");
    let t = Instant::now();
    match kube_api_rewriter_load::run(&s) {
        Ok(f) => {
            println!("{f}");
            report(&s, &f, t.elapsed().as_secs_f64()).print();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kar-load: FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}
