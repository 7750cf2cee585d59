//! The virtualization-controller end to end, on the real local control plane
//! (`scripts/control-plane.sh`), in both rewriter modes: the `virtualization-controller` binary
//! behind its own `kube-api-rewriter` sidecar, and the binary with the rewriter's Layer embedded
//! in its client (`--embedded-rewriter`, talking to kube-apiserver directly). Real KubeVirt
//! runs throughout (`scripts/kubevirt.sh`): virt-controller behind a sidecar of its own, kwok's
//! Nodes running the virt-launcher Pods, and a virt-handler double (`../virt_handler_double/`)
//! starting and stopping the instances, since virt-handler needs a hypervisor. Users' objects are written with kubectl straight to kube-apiserver; what KubeVirt
//! objects became is checked straight against kube-apiserver, where they exist only under
//! `internal.virtualization.deckhouse.io` names.
//!
//! A `libtest-mimic` harness (`harness = false`): every case is a trial of its own in each mode,
//! `sidecar::NAME` and `embedded::NAME`, and `deploy_manifests` is one trial for both, so
//! `cargo test -p virtualization-controller --test e2e -- NAME` runs one case (`--exact` where
//! a name is part of another, as `operations` is of `bad_operations`) and a failure names it.
//! `--list` and a filter that matches nothing start no process: the environment (control plane,
//! KubeVirt, both sidecars, the virt-handler double) is made by the first trial that runs and shared
//! by the others, and a mode's controller is started by the first trial of that mode (and stopped
//! when the other mode's first trial comes). Trials run one at a time, in the order of [`CASES`]
//! (all of the sidecar mode, then all of the embedded mode, then the manifests), each case in
//! namespaces of its own (suffixed with the mode), polling with deadlines.

#[path = "../csi_double/mod.rs"]
mod csi_double;
#[path = "../kubelet_double/mod.rs"]
mod kubelet_double;
#[path = "../support/mod.rs"]
mod support;
#[path = "../virt_handler_double/mod.rs"]
mod virt_handler_double;

mod attach;
mod class;
mod controller;
mod disk;
mod env;
mod image;
mod manifests;
mod metrics_auth;
mod pool;
mod resilience;
mod snapshot;
mod snapshot_api;
mod vm;
mod vmop;
mod webhook;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use libtest_mimic::{Arguments, Trial};

use crate::controller::Mode;
use crate::env::{Env, Lazy};

/// A case: checks the environment, panics on failure.
type Case = fn(&Env);

/// The cases that run in each mode, in this order. `sigterm` is last: it stops the controller.
const CASES: &[(&str, Case)] = &[
    ("probes", controller::probes),
    ("lifecycle", vm::lifecycle),
    ("run_policy", vm::run_policy),
    ("operations", vmop::operations),
    ("migrate", vmop::migrate),
    ("spec_change", vm::spec_change),
    ("invalid_spec", vm::invalid_spec),
    ("hand_edit", vm::hand_edit),
    ("bad_operations", vmop::bad_operations),
    ("conflict", resilience::conflict),
    ("apiserver_restart", resilience::apiserver_restart),
    ("class", class::class),
    ("disks", disk::disks),
    ("images", image::images),
    ("upload", image::upload),
    ("import_failures", image::import_failures),
    ("snapshots", snapshot::snapshots),
    ("snapshot_timeout", snapshot::snapshot_timeout),
    ("optional_snapshot_api", snapshot_api::optional_snapshot_api),
    ("hotplug", attach::hotplug),
    ("pools", pool::pools),
    ("webhook", webhook::webhook),
    ("metrics_auth", metrics_auth::metrics_auth),
    ("sigterm", controller::sigterm),
];

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    // The cases of a mode share one controller process, and some restart kube-apiserver or stop
    // the controller: never two at once.
    args.test_threads = Some(1);
    let lazy = Arc::new(Lazy::default());
    let mut trials = Vec::new();
    for mode in [Mode::Sidecar, Mode::Embedded] {
        for &(name, case) in CASES {
            trials.push(trial(format!("{}::{name}", mode.name()), &lazy, Some(mode), case));
        }
    }
    // Once, not per mode: the manifests do not depend on it.
    trials.push(trial(
        "deploy_manifests".to_owned(),
        &lazy,
        None,
        manifests::deploy_manifests,
    ));
    let conclusion = libtest_mimic::run(&args, trials);
    // Stops the controller, the sidecars and the control plane, if a trial started them.
    drop(lazy.take());
    conclusion.exit_code()
}

/// The trial `name`: gets the environment (making it if no trial has yet), makes the controller
/// run in `mode` if the case needs one, and runs `case`.
fn trial(name: String, lazy: &Arc<Lazy>, mode: Option<Mode>, case: Case) -> Trial {
    let lazy = Arc::clone(lazy);
    Trial::test(name.clone(), move || {
        let env = lazy.get()?;
        if let Some(mode) = mode {
            env.enter(mode)?;
        }
        let t = Instant::now();
        case(&env);
        eprintln!("--- {name} in {:?}", t.elapsed());
        Ok(())
    })
}
