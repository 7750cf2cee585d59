//! Phase 1, `watches`: N watches through the proxy and one direct while objects are created and
//! changed; every proxy watch must see exactly the direct watch's events.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::ensure;
use kube_api_rewriter_testkit::{ControlPlane, procfs};

use super::direct::Direct;
use super::requests::{change_all, list_rv};
use super::watches::{Watches, terminated_watchers, upstream_sockets};
use super::{Figures, NS, RENAMED, Settings, VMS, proxy_cpu_secs, watch_query};
use crate::client;

/// Runs phase 1; returns the open watches, the direct watch and the events each has seen.
pub(super) async fn run(
    s: &Settings,
    cp: &ControlPlane,
    port: u16,
    pid: u32,
    fig: &mut Figures,
) -> anyhow::Result<(Watches, Direct, usize)> {
    let (rv0, _) = list_rv(port, &format!("{VMS}/{NS}/virtualmachines")).await?;
    let direct = Direct::start(
        cp,
        &format!(
            "{RENAMED}/{NS}/internalvirtualizationvirtualmachines{}",
            watch_query(&rv0)
        ),
    );
    let (before, cpu_before) = (procfs::memory(pid), proxy_cpu_secs(pid));
    let t = Instant::now();
    let w = Watches::open(
        port,
        s.watches,
        &format!("{VMS}/{NS}/virtualmachines{}", watch_query(&rv0)),
    );
    let all_open = client::until(Duration::from_secs(120), || {
        w.started.load(Ordering::SeqCst) == s.watches
    })
    .await;
    ensure!(
        all_open,
        "only {} of {} watches got their head\n{}",
        w.started.load(Ordering::SeqCst),
        s.watches,
        w.report(1)
    );
    fig.put(
        "watches open through the proxy",
        format!("{} (in {:.1} s)", s.watches, t.elapsed().as_secs_f64()),
    );
    let t = Instant::now();
    change_all(port, s.objects, 0, true).await?;
    for step in 1..=s.changes {
        change_all(port, s.objects, step, false).await?;
    }
    let expected = s.objects * (1 + s.changes);
    let writes = t.elapsed();
    let delivered = client::until(Duration::from_secs(300), || {
        w.count.load(Ordering::SeqCst) >= expected * s.watches && direct.len() >= expected
    })
    .await;
    let delivery = t.elapsed();
    ensure!(
        delivered,
        "events: proxy watches {} of {}, direct {} of {expected}\n{}\n{}\n{}",
        w.count.load(Ordering::SeqCst),
        expected * s.watches,
        direct.len(),
        w.report(expected),
        upstream_sockets(cp),
        terminated_watchers(cp)
    );
    // Nothing more may come.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (after, cpu_after) = (procfs::memory(pid), proxy_cpu_secs(pid));
    fig.put(
        "writes (create + changes)",
        format!("{expected} in {:.1} s", writes.as_secs_f64()),
    );
    fig.put(
        "all events delivered to every watch after",
        format!("{:.1} s", delivery.as_secs_f64()),
    );
    fig.put(
        "proxy RSS before watches / with watches",
        format!("{} KiB / {} KiB", before.rss_kib, after.rss_kib),
    );
    fig.put("proxy peak RSS (VmHWM)", format!("{} KiB", after.hwm_kib));
    fig.put(
        "proxy CPU seconds for the watch phase",
        format!("{:.2}", cpu_after - cpu_before),
    );
    fig.put("proxy open sockets with the watches", procfs::open_sockets(pid));
    let api_port: u16 = cp.get("APISERVER_PORT").parse()?;
    // Established sockets to kube-apiserver: the proxy's, plus one of the direct kubectl watch.
    let upstream = procfs::tcp_timers(None, api_port).len();
    fig.put(
        "upstream connections to kube-apiserver (proxy + 1 kubectl)",
        format!(
            "{upstream} for {} watches (up to 100 on a connection each, the rest at most 100 streams per connection)",
            s.watches
        ),
    );
    Ok((w, direct, expected))
}
