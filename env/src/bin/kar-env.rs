//! `kar-env COMMAND DIR`: the local control plane up, down, its status and env file (see
//! `kar-env --help`). Ctrl-C or SIGTERM during `up` stops what it started.

use std::process::ExitCode;

use anyhow::Context as _;
use kube_api_rewriter_env::{Config, ControlPlane, Invocation, USAGE, parse_args, run};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, dir) = match parse_args(&args) {
        Ok(Invocation::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Invocation::Run(c, d)) => (c, d),
        Err(e) => {
            eprintln!("kar-env: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    watch_signals();
    let result = Config::from_env()
        .context("reading the environment")
        .and_then(|config| {
            let cp = ControlPlane::new(&dir, config);
            run(command, &cp, &mut std::io::stdout(), &mut std::io::stderr())
                .with_context(|| format!("{} {}", args[0], dir.display()))
        });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("[control-plane] ERROR: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Ctrl-C and SIGTERM make every wait give up, so `up` stops what it started and exits 1.
fn watch_signals() {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    let Ok(runtime) = runtime else { return };
    // Registered here, before any process starts; waited for on a thread of its own.
    let guard = runtime.enter();
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
    else {
        return;
    };
    drop(guard);
    std::thread::spawn(move || {
        runtime.block_on(async {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        });
        eprintln!("[control-plane] interrupted: stopping what was started");
        kube_api_rewriter_env::interrupt();
    });
}
