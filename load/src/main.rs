//! `kar-load`: the proxy's load and fault suite against the real kube-apiserver
//! (`scripts/load.sh`). Prints the figures; exits 1 when an expectation fails.
//!
//! Usage: `kar-load [--short] [--watches N] [--flood N] [--objects N] [--changes N]`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut s = kube_api_rewriter_load::Settings::full();
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
            "--short" => s = kube_api_rewriter_load::Settings::short(),
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
    match kube_api_rewriter_load::run(&s) {
        Ok(f) => {
            println!("{f}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kar-load: FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}
