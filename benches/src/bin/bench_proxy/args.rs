//! The command line of the benchmark.

use std::path::PathBuf;

use crate::Result;
use kube_api_rewriter_testkit::vm::Vm;

/// The settings of a run.
pub(crate) struct Args {
    pub(crate) proxy_bin: PathBuf,
    /// Another sidecar binary measured beside the proxy (`--peer`), and its column's name.
    pub(crate) peer: Option<PathBuf>,
    pub(crate) peer_name: String,
    /// Rounds of the interleaved A/B mode, 0 without it: `--ab` (10 rounds) or `--ab-rounds N`,
    /// with `--peer BIN`, runs only that mode (see `ab.rs`): this proxy and the peer in turns,
    /// their CPU per GB of a LIST and the latency they add to a small GET, medians and spread.
    pub(crate) ab_rounds: usize,
    pub(crate) kubeconfig: Option<PathBuf>,
    pub(crate) crd: PathBuf,
    pub(crate) work_dir: PathBuf,
    pub(crate) vms: usize,
    pub(crate) events: usize,
    pub(crate) list_mb: usize,
    pub(crate) double_events: usize,
    pub(crate) gets: usize,
    pub(crate) repeat: usize,
    pub(crate) concurrency: usize,
    pub(crate) watch_concurrency: usize,
    pub(crate) burst_vms: usize,
    pub(crate) lone_rounds: usize,
    pub(crate) skip_double: bool,
    pub(crate) only: Option<String>,
}

impl Args {
    pub(crate) fn wants(&self, section: &str) -> bool {
        self.only
            .as_deref()
            .is_none_or(|o| o.split(',').any(|s| s == section))
    }

    /// The watch flag of the watches' query: `watch=1`, or with a peer `watch=true` (what
    /// client-go sends: a sidecar that takes only that for a watch is still measured).
    pub(crate) fn watch_flag(&self) -> &'static str {
        if self.peer.is_some() {
            "watch=true"
        } else {
            "watch=1"
        }
    }
}

/// The settings from the command line (`--print-vm` prints a VM and exits).
pub(crate) fn args() -> Result<Args> {
    let mut a = Args {
        proxy_bin: PathBuf::from("target/release/kube-api-rewriter"),
        peer: None,
        peer_name: "peer".to_owned(),
        ab_rounds: 0,
        kubeconfig: None,
        // The repository's testdata.
        crd: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/kubevirt-crds/original/virtualmachines.yaml"),
        work_dir: std::env::temp_dir(),
        vms: 10_000,
        events: 20_000,
        list_mb: 200,
        double_events: 100_000,
        gets: 2_000,
        repeat: 3,
        concurrency: 32,
        watch_concurrency: 4,
        burst_vms: 10_000,
        lone_rounds: 20,
        skip_double: false,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        if k == "--print-vm" {
            // The object the double serves, for checking by hand (`kube-api-rewriter rewrite`).
            println!("{}", Vm::new("vm-0000001", crate::NS).renamed().stored().json());
            std::process::exit(0);
        }
        if k == "--skip-double" {
            a.skip_double = true;
            continue;
        }
        if k == "--ab" {
            // The A/B mode with its default rounds, unless `--ab-rounds` gave some.
            if a.ab_rounds == 0 {
                a.ab_rounds = crate::ab::ROUNDS;
            }
            continue;
        }
        let v = it.next().ok_or_else(|| format!("{k} needs a value"))?;
        let n = || v.parse::<usize>().map_err(|e| format!("{k} {v}: {e}"));
        match k.as_str() {
            "--proxy-bin" => a.proxy_bin = PathBuf::from(&v),
            "--peer" => a.peer = Some(PathBuf::from(&v)),
            "--peer-name" => a.peer_name = v.clone(),
            "--ab-rounds" => a.ab_rounds = n()?.max(1),
            "--kubeconfig" => a.kubeconfig = Some(PathBuf::from(&v)).filter(|p| !p.as_os_str().is_empty()),
            "--crd" => a.crd = PathBuf::from(&v),
            "--work-dir" => a.work_dir = PathBuf::from(&v),
            "--vms" => a.vms = n()?,
            "--events" => a.events = n()?,
            "--list-mb" => a.list_mb = n()?,
            "--double-events" => a.double_events = n()?,
            "--gets" => a.gets = n()?,
            "--repeat" => a.repeat = n()?.max(1),
            "--concurrency" => a.concurrency = n()?.max(1),
            "--watch-concurrency" => a.watch_concurrency = n()?.max(1),
            "--burst-vms" => a.burst_vms = n()?,
            "--lone-rounds" => a.lone_rounds = n()?.max(1),
            "--only" => a.only = Some(v.clone()),
            _ => return Err(format!("unknown argument {k}").into()),
        }
    }
    Ok(a)
}
