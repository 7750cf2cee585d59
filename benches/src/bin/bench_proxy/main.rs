//! The proxy benchmark: the same requests through the proxy and directly, side by side.
//! `scripts/bench-proxy.sh` builds it in release mode, brings up the local control plane and runs
//! it; it can also be run by hand:
//!
//! ```sh
//! cargo build --release -p kube-api-rewriter-proxy --bin kube-api-rewriter -p kube-api-rewriter-benches --bin bench_proxy
//! target/release/bench_proxy --proxy-bin target/release/kube-api-rewriter \
//!     [--kubeconfig ADMIN_KUBECONFIG] [--vms 10000] [--events 20000] [--list-mb 200] ...
//! ```
//!
//! Part 1 (only with `--kubeconfig`): the real kube-apiserver. The renamed VirtualMachine CRD is
//! applied through the proxy, `--vms` realistic VMs are created directly (parallel POSTs of the
//! renamed kind), then a LIST of all of them is timed through the proxy and directly, and one
//! watch through the proxy and one directly receive the events of `--events` merge patches.
//!
//! Part 2: an in-memory upstream double in this process (HTTP/1.1 on 127.0.0.1) serving a
//! pre-built LIST of renamed VMs (`--list-mb`), the same bytes on a path the rules do not touch,
//! a pre-built watch stream and a small object, at memory speed.
//!
//! Part 3: a kube-apiserver-like upstream double (HTTP/1.1 written by hand): a `--events` watch
//! sent as one HTTP chunk per event, many chunks per 64 KiB write, and a LIST of `--burst-vms`
//! VMs, each timed through the proxy and directly, with the proxy's write syscalls (`syscw` of
//! `/proc/PID/io`: write and writev) and CPU seconds (threads' `schedstat`) per transfer (for a
//! LIST also this process's, the client's and the doubles', and the floor that CPU sets on this
//! machine's cores), plus one
//! untimed watch each way under `perf stat` on the syscall tracepoints that counts every kind
//! of write (send/sendto too) and tells the proxy's socket writes from its eventfd wake-ups
//! (and gives the double's socket writes as the direct baseline); then the time from the
//! double writing a lone watch event after an idle pause to the client receiving it. The
//! watches run again from two TLS doubles (`h2.rs`): one offering HTTP/2 and HTTP/1.1 as
//! kube-apiserver does (the proxy's watches take an HTTP/1.1 connection each; the LIST runs
//! from it too, over the pooled HTTP/2 lanes), one speaking only HTTP/2 (the watches share the
//! lanes).
//! `--only burst` runs just this part (without `--kubeconfig`).
//!
//! Parts 2 and 3 run first, then part 1: the control plane is idle while the doubles are timed.
//!
//! `--peer BIN` (and `--peer-name NAME`, its column's name) measures another sidecar binary
//! that reads the same environment beside the proxy, in the same run: each workload of the
//! three parts (the lone events and the write syscalls aside) runs through it too, right after
//! the proxy's run where the runs interleave, plus a ConfigMap LIST that the rules leave
//! unchanged (`--only unchanged`). Its answers are checked (no renamed name reaches the client,
//! every event arrives, pass-through and unchanged bodies byte for byte) and a wrong one is
//! printed instead of its figure. The watches then ask `watch=true`, which client-go sends, and
//! the peer's events are counted by their type, as a sidecar may send them without a newline in
//! between. A second table (`report:proxy-peer`) follows the proxy's.
//!
//! `--ab-rounds N` (or `--ab`, 10 rounds), with `--peer BIN`, runs instead an interleaved A/B
//! comparison of two builds (`ab.rs`), no control plane needed:
//!
//! ```sh
//! target/release/bench_proxy --proxy-bin NEW --peer OLD --peer-name before --ab-rounds 10
//! ```
//!
//! In each round, the first binary alternating, each one does a rewritten LIST of part 3's
//! double (`--burst-vms` VMs; its CPU seconds per GB) and 500 small GETs of part 2's small VM on
//! one keep-alive connection after 100 untimed (the median, minus the same straight to the
//! double in that round). Each round's figures are printed, then a table (`report:proxy-ab`) of
//! the medians over the rounds, their min–max and relative spread ((max − min) / median), the
//! difference of the medians in percent, and whether it is within max(5%, that spread).
//!
//! Everything binds 127.0.0.1, every loop is bounded, and the proxies started here are stopped
//! at the end.

mod ab;
mod args;
mod burst_double;
mod client;
mod figures;
mod h2;
mod memory_double;
mod part1_apiserver;
mod part2_memory;
mod part3_burst;
mod peer;
mod perf;
mod proxy_child;

use std::time::Duration;

use kube_api_rewriter_testkit::report::Report;
use kube_api_rewriter_testkit::vm::{RENAMED_GROUP as GROUP, RENAMED_KIND as KIND};

use crate::figures::loadavg;
use crate::part1_apiserver::part1;
use crate::part2_memory::part2;
use crate::part3_burst::part3;
use crate::peer::PeerTable;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = Error> = std::result::Result<T, E>;

const RESOURCE: &str = "internalvirtualizationvirtualmachines";
const NS: &str = "default";

fn main() -> Result<()> {
    let a = args::args()?;
    kube_api_rewriter_proxy::tls::install_default_provider();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        println!(
            "kube-api-rewriter proxy benchmark: {} CPUs, load average {}",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            loadavg()
        );
        if a.ab_rounds > 0 {
            return ab::ab(&a).await;
        }
        let mut rep = Report::new(
            "proxy",
            &[
                "upstream",
                "measure",
                "through the proxy",
                "direct",
                "proxy / direct",
            ],
        );
        let mut cmp = a.peer.as_ref().map(|_| PeerTable::new(&a.peer_name));
        // The doubles first: after part 1, its VMs and patches keep the control plane busy for
        // a while, and that CPU would be taken from the proxy's figures against the doubles.
        if !a.skip_double && ["list", "pass", "unchanged", "watch", "get"].iter().any(|s| a.wants(s)) {
            part2(&a, &mut rep, cmp.as_mut()).await?;
        }
        if !a.skip_double && a.wants("burst") {
            part3(&a, &mut rep, cmp.as_mut()).await?;
        }
        if let Some(kc) = &a.kubeconfig {
            part1(&a, kc, &mut rep, cmp.as_mut()).await?;
        }
        println!("done; load average {}", loadavg());
        rep.note(format!(
            "`scripts/bench-proxy.sh`, release build; the load average was {} at the end.",
            loadavg()
        ));
        rep.print();
        if let Some(t) = &mut cmp {
            t.note(format!(
                "`scripts/bench-proxy.sh --peer BIN --peer-name '{}'`: both sidecars in the same run, both with LOG_LEVEL=info; time, CPU and memory ratios are the peer's over this proxy's (for a rate, the inverse); the load average was {} at the end.",
                a.peer_name,
                loadavg()
            ));
            t.print();
        }
        Ok::<_, Error>(())
    })?;
    // The double's thread is still serving; leave without waiting for it.
    rt.shutdown_timeout(Duration::from_millis(100));
    Ok(())
}
