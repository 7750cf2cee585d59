//! The phases (see the crate documentation).
//!
//! `run` starts the control plane and the proxy, then runs one function per phase, each in its
//! own module; what a phase leaves open for the next (the watches, the direct watch, the large
//! LIST's path) it returns.

mod direct;
mod phase1_watches;
mod phase2_restart;
mod phase3_slow;
mod phase4_flood;
mod phase5_sigterm;
mod requests;
mod watches;

use std::time::Duration;

use anyhow::{bail, ensure};
use kube_api_rewriter_testkit::{ControlPlane, ProxyProc, procfs, temp_dir, wait_crd_established};

/// Sizes of one run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Concurrent watches through the proxy.
    pub watches: usize,
    /// Objects changed under the watches.
    pub objects: usize,
    /// Changes per object (after its creation).
    pub changes: usize,
    /// Idle and half-open connections of the flood (split between the two ports).
    pub flood: usize,
    /// Objects of the large LIST (about 200 KB each).
    pub big_objects: usize,
    /// LISTs in flight at SIGTERM.
    pub lists_at_sigterm: usize,
    /// Requests timed with and without the flood.
    pub samples: usize,
}

impl Settings {
    /// The full suite (`scripts/load.sh`).
    pub fn full() -> Self {
        Self {
            watches: 1000,
            objects: 100,
            changes: 10,
            flood: 5000,
            big_objects: 250,
            lists_at_sigterm: 10,
            samples: 50,
        }
    }

    /// The short form run by `cargo test`.
    pub fn short() -> Self {
        Self {
            watches: 200,
            objects: 100,
            changes: 10,
            flood: 1000,
            // 30 MB. What the proxy holds for two stalled streams anyway (two 1 MiB windows, a
            // 200 KB object being rewritten, allocator slack of a debug build while 200 watches
            // are busy) does not grow with the LIST and reached +6.7 MB at 12 MB, +10.1 MB at
            // 20 MB; a proxy that buffered the LIST would grow by all of it.
            big_objects: 150,
            lists_at_sigterm: 4,
            samples: 20,
        }
    }
}

/// What a run measured.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    /// Lines of `name: value`, in order.
    pub lines: Vec<(String, String)>,
}

impl Figures {
    fn put(&mut self, k: &str, v: impl std::fmt::Display) {
        let v = v.to_string();
        eprintln!("[load] {k}: {v}");
        self.lines.push((k.to_owned(), v));
    }
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (k, v) in &self.lines {
            writeln!(f, "{k}: {v}")?;
        }
        Ok(())
    }
}

const NS: &str = "load";
const BIG_NS: &str = "big";
const VMS: &str = "/apis/kubevirt.io/v1/namespaces";
const RENAMED: &str = "/apis/internal.virtualization.deckhouse.io/v1/namespaces";
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs every phase; panics never, returns the first violated expectation as an error.
pub fn run(s: &Settings) -> anyhow::Result<Figures> {
    // The driver holds thousands of sockets: the proxy's own raiser lifts its soft limit.
    let nofile = match kube_api_rewriter_proxy::rlimit::raise_nofile() {
        Ok((Some(soft), _)) => soft.to_string(),
        Ok((None, _)) => "unlimited".to_owned(),
        Err(e) => format!("not raised: {e}"),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut fig = Figures::default();
    fig.put("open files (driver soft limit)", nofile);
    let cp = ControlPlane::up();
    let dir = temp_dir("load");
    let mut p = ProxyProc::start(
        &dir,
        &[
            ("KUBECONFIG", cp.kubeconfig()),
            ("LOG_LEVEL", "info"),
            ("SHUTDOWN_TIMEOUT", "20s"),
            ("MAX_CONNECTIONS", "4096"),
        ],
    );
    let pid = p.child.id();
    p.apply_vm_crd();
    if let Some(e) = wait_crd_established(&p, "virtualmachines.kubevirt.io") {
        bail!("CRD not established: {e}");
    }
    for ns in [NS, BIG_NS] {
        let o = cp.kubectl(&["create", "namespace", ns]);
        ensure!(o.status.success(), "namespace {ns}: {o:?}");
    }
    let port = p.port;
    let res = rt.block_on(phases(s, &cp, &mut p, port, pid, &mut fig));
    let res = match res {
        Ok(()) => {
            let _ = std::fs::remove_dir_all(&dir);
            Ok(fig)
        }
        Err(e) => {
            // Keep the proxy's log for the post-mortem; name its warnings here.
            let logs = p.logs();
            let warn: Vec<&str> = logs
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                .collect();
            let mut kinds = std::collections::BTreeMap::<String, usize>::new();
            for l in &warn {
                // The message without the timestamp and fields, roughly.
                let key: String = l.split_whitespace().skip(2).take(8).collect::<Vec<_>>().join(" ");
                *kinds.entry(key).or_default() += 1;
            }
            Err(e.context(format!(
                "proxy log kept at {}; {} WARN/ERROR lines: {kinds:#?}",
                p.log.display(),
                warn.len()
            )))
        }
    };
    drop(p);
    drop(cp);
    res
}

/// The query of a watch from `rv` (as client-go's informers ask, with a long timeout).
fn watch_query(rv: &str) -> String {
    format!("?watch=1&resourceVersion={rv}&timeoutSeconds=1800")
}

/// The CPU seconds (user + system) process `pid` has used so far, from `/proc/PID/stat`.
fn proxy_cpu_secs(pid: u32) -> f64 {
    procfs::stat(pid).map_or(0.0, |s| s.cpu_secs())
}

/// The phases in order, each given what the one before left open.
async fn phases(
    s: &Settings,
    cp: &ControlPlane,
    p: &mut ProxyProc,
    port: u16,
    pid: u32,
    fig: &mut Figures,
) -> anyhow::Result<()> {
    let watching = phase1_watches::run(s, cp, port, pid, fig).await?;
    let (w, direct) = phase2_restart::run(s, cp, p, port, pid, fig, watching).await?;
    let big = phase3_slow::run(s, cp, port, pid, fig, &w, &direct).await?;
    phase4_flood::run(s, p, port, pid, fig).await?;
    phase5_sigterm::run(s, p, port, fig, (w, direct), big).await
}
