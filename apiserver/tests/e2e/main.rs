//! virtualization-api end to end on the real local control plane (`scripts/control-plane.sh`):
//! the APIService routed by kube-apiserver's aggregator to the server on loopback, real
//! kubectl, real RBAC and SubjectAccessReviews, a tokio-tungstenite WebSocket client, a fake
//! virt-api (a test double: the streams, freeze and unfreeze need virt-handler, which cannot run
//! here) and KubeVirt's own virt-api. The double's cases run once per mode: straight to virt-api
//! (mutual TLS), then through a kube-api-rewriter sidecar (`rules/virtualization-api.yaml`,
//! plain HTTP on loopback) that renames the group and holds the certificate and the identity;
//! the `kubevirt` mode's cases go through such a sidecar to the real virt-api.
//!
//! A `libtest-mimic` harness (`harness = false`): each case in each mode is a test of its own,
//! `direct::NAME`, `sidecar::NAME`, `kubevirt::NAME`, so `cargo test -p virtualization-api
//! --test e2e -- console` runs the console cases alone and a failure names its case. One
//! environment ([`env::setup`]) is shared by all the tests of a run; it is built by the first
//! test that runs, so `--list` or a filter that matches nothing starts nothing. One APIService
//! per group/version exists in a cluster and the cases change shared state, so the tests run
//! one at a time in the order of [`CASES`], mode by mode (the environment switches mode at most
//! twice).

#[path = "../fake_virtapi/mod.rs"]
mod fake_virtapi;

mod auth;
mod certs;
mod client;
mod discovery;
mod env;
mod hostile;
mod kubevirt;
mod phases;
mod puts;
mod streams;
mod upstream;

use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use kube_api_rewriter_testkit::panic_message;
use libtest_mimic::{Arguments, Failed, Trial};

use env::{Env, Mode};

/// One case: its test name, what it checks, and the modes it runs in.
struct Case {
    name: &'static str,
    what: &'static str,
    run: fn(&Env),
    modes: &'static [Mode],
}

/// A case for both modes with virt-api's double.
const fn case(name: &'static str, what: &'static str, run: fn(&Env)) -> Case {
    Case {
        name,
        what,
        run,
        modes: &[Mode::Direct, Mode::Sidecar],
    }
}

/// Every case, in the order they run in each mode.
const CASES: &[Case] = &[
    case(
        "discovery",
        "discovery through kube-apiserver",
        discovery::discovery,
    ),
    case(
        "openapi",
        "openapi v2 merged by the aggregator, v3 direct",
        discovery::openapi,
    ),
    case("health", "health and version", discovery::health),
    case("console", "console over WebSocket", streams::console),
    case("vnc", "vnc over WebSocket", streams::vnc),
    case(
        "portforward",
        "portforward to the echo port",
        streams::portforward,
    ),
    case("puts", "freeze, unfreeze, addvolume, removevolume", puts::puts),
    case(
        "virt_api_errors",
        "virt-api's errors come back in our group",
        upstream::virt_api_errors,
    ),
    case("get_vm", "GET virtualmachines/{name}", discovery::get_vm),
    case(
        "forbidden_by_kube_apiserver",
        "403 from kube-apiserver for a user without RBAC",
        auth::forbidden_by_kube_apiserver,
    ),
    case(
        "forbidden_by_us",
        "403 from our own SubjectAccessReview",
        auth::forbidden_by_us,
    ),
    case(
        "wrong_phase",
        "409 for a VM in the wrong phase",
        phases::wrong_phase,
    ),
    case(
        "unauthorized",
        "401 without the front-proxy certificate",
        auth::unauthorized,
    ),
    case(
        "reload",
        "serving certificate reloaded on a ..data swap",
        certs::reload,
    ),
    case("slow_clients", "slow clients are cut off", hostile::slow_clients),
    case("bad_input", "bad input, no leaked connection", hostile::bad_input),
    // After bad_input, which needs the refused server refused: this case leaves it accepted.
    Case {
        modes: &[Mode::Direct],
        ..case(
            "proxy_cert_reload",
            "proxy client certificate reloaded",
            certs::proxy_cert_reload,
        )
    },
    case(
        "identity",
        "only the configured identity reaches virt-api",
        upstream::identity,
    ),
    Case {
        modes: &[Mode::KubeVirt],
        ..case(
            "volumes",
            "addvolume and removevolume through KubeVirt's own virt-api",
            kubevirt::volumes,
        )
    },
];

/// The shared environment and what the tests of the run learned about it.
struct Shared {
    env: Option<Env>,
    /// Why the environment could not be built (or switched to a mode): the later tests fail
    /// with it instead of trying again.
    broken: Option<(Option<Mode>, String)>,
    /// The modes whose logs were already printed for a failed case.
    logs_shown: Vec<Mode>,
    started: Option<Instant>,
}

static SHARED: Mutex<Shared> = Mutex::new(Shared::new());

impl Shared {
    const fn new() -> Shared {
        Shared {
            env: None,
            broken: None,
            logs_shown: Vec::new(),
            started: None,
        }
    }

    /// The environment in `mode`: built on the first call, switched when the mode changes.
    fn env(&mut self, mode: Mode) -> Result<&Env, Failed> {
        if let Some((m, why)) = &self.broken
            && m.is_none_or(|m| m == mode)
        {
            return Err(format!("no environment: {why}").into());
        }
        if self.env.is_none() {
            let t = Instant::now();
            self.started = Some(t);
            match std::panic::catch_unwind(env::setup) {
                Ok(e) => self.env = Some(e),
                Err(p) => {
                    let why = format!("setup failed: {}", panic_message(&*p));
                    self.broken = Some((None, why.clone()));
                    return Err(why.into());
                }
            }
            eprintln!("setup took {:?}", t.elapsed());
        }
        let e = self.env.as_mut().expect("built above");
        if e.mode != mode {
            let t = Instant::now();
            if let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(|| e.switch(mode))) {
                let why = format!(
                    "starting the {} servers failed: {}",
                    mode.name(),
                    panic_message(&*p)
                );
                self.broken = Some((Some(mode), why.clone()));
                return Err(why.into());
            }
            eprintln!("--- mode {} (servers up in {:?})", mode.name(), t.elapsed());
        }
        Ok(e)
    }

    /// Prints the logs of this mode's servers and sidecars, in full the first time.
    fn show_logs(&mut self, case: &Case) {
        let Some(e) = &self.env else { return };
        eprintln!(
            "===== mode {}: {} ({}) failed",
            e.mode.name(),
            case.name,
            case.what
        );
        let first = !self.logs_shown.contains(&e.mode);
        let logs = [&e.server, &e.server_down, &e.server_refused]
            .into_iter()
            .map(|s| (&s.log, s.logs()))
            .chain(e.sidecars.iter().map(|s| (&s.log, s.logs())));
        for (path, text) in logs {
            if first {
                eprintln!("===== {}\n{text}", path.display());
            } else {
                eprintln!("===== {} (printed above for an earlier failure)", path.display());
            }
        }
        if first {
            self.logs_shown.push(e.mode);
        }
    }
}

/// Runs `case` in `mode` on the shared environment.
fn run(mode: Mode, case: &'static Case) -> Result<(), Failed> {
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    let e = shared.env(mode)?;
    match std::panic::catch_unwind(AssertUnwindSafe(|| (case.run)(e))) {
        Ok(()) => Ok(()),
        Err(p) => {
            shared.show_logs(case);
            Err(format!("{}: {}", case.what, panic_message(&*p)).into())
        }
    }
}

fn trials() -> Vec<Trial> {
    let mut trials = Vec::new();
    for mode in [Mode::Direct, Mode::Sidecar, Mode::KubeVirt] {
        for case in CASES {
            if !case.modes.contains(&mode) {
                continue;
            }
            let name = format!("{}::{}", mode.name(), case.name);
            trials.push(Trial::test(name, move || run(mode, case)));
        }
    }
    trials
}

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    // One registration, shared state: one test at a time, in order.
    args.test_threads = Some(1);
    let conclusion = libtest_mimic::run(&args, trials());
    let shared = std::mem::replace(
        &mut *SHARED.lock().unwrap_or_else(PoisonError::into_inner),
        Shared::new(),
    );
    if let Some(e) = shared.env {
        e.finish(conclusion.has_failed());
    }
    if let Some(t) = shared.started {
        eprintln!("the environment's whole run took {:?}", t.elapsed());
    }
    conclusion.exit_code()
}
