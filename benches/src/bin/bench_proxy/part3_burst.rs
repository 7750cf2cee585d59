//! Part 3: the proxy in front of the kube-apiserver-like doubles (plain HTTP/1.1, and TLS with
//! HTTP/2): watches and LISTs timed each way with the proxy's write syscalls and CPU time, and
//! the latency of lone watch events; with a peer, its watches and LISTs and CPU time too.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use http_body_util::BodyExt;
use kube_api_rewriter_testkit::procfs;
use kube_api_rewriter_testkit::report::Report;

use crate::args::Args;
use crate::burst_double::{
    BURST_WRITE, Burst, DOUBLE_THREAD, LONE_NS, LONE_PAUSE, burst_fixtures, start_burst_double,
};
use crate::client::{Framing, H1, Read, Tally, drain, renamed};
use crate::figures::{best, loadavg, median, secs};
use crate::h2;
use crate::peer::{Answer, Fig, PeerTable, Unit, best_of, check};
use crate::perf::{Counted, PerfWrites, WriteKinds};
use crate::proxy_child::{ProxyChild, peer_for_double, proxy_for_double};
use crate::{GROUP, NS, RESOURCE, Result};

/// Runs of each LIST at least: one takes about a twentieth of a second, so its CPU per GB (a
/// mean over the runs) moves by a tenth between runs, more than the watches' do.
const LIST_RUNS: usize = 10;

/// One timed transfer of part 3, with what the proxy spent on it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Costed {
    pub(crate) read: Read,
    events: usize,
    writes: Option<u64>,
    /// Write syscalls by kind (perf), when counted: the proxy's, or the double's for a direct
    /// transfer.
    kinds: Option<WriteKinds>,
    /// The proxy's CPU seconds (0 for a direct transfer).
    pub(crate) cpu: f64,
    /// This process's CPU seconds: the client and the doubles.
    own_cpu: f64,
    /// The proxy's minor page faults.
    faults: Option<u64>,
}

/// Reads `path` from `target` to the end, counting events by `framing`; through the proxy, its
/// write syscalls and CPU time are taken around the transfer. With `verify`, a renamed name
/// reaching the client is an error.
pub(crate) async fn costed(
    target: SocketAddr,
    path: &str,
    proxy: Option<&ProxyChild>,
    perf: Option<&Path>,
    verify: bool,
    framing: Framing,
) -> Result<Costed> {
    let pid = proxy.map(ProxyChild::pid);
    // Under perf: the proxy's writes through the proxy, the double's directly.
    let counter = match (pid, perf) {
        (_, None) => None,
        (Some(pid), Some(out)) => PerfWrites::start(&Counted::Process(pid), out.to_owned()).await,
        (None, Some(out)) => {
            PerfWrites::start(
                &Counted::Threads(procfs::threads_named(std::process::id(), DOUBLE_THREAD)),
                out.to_owned(),
            )
            .await
        }
    };
    let before = (
        pid.and_then(procfs::syscw),
        proxy.map_or(0.0, ProxyChild::cpu_secs),
    );
    let own_before = procfs::cpu_secs(std::process::id());
    let faults_before = pid.and_then(procfs::stat).map(|s| s.minflt);
    let mut c = H1::connect(target).await?;
    let (mut events, mut leaked) = (0, false);
    let mut tally = Tally::new(framing);
    let t0 = Instant::now();
    let r = c.get(path, &[("accept", "application/json")]).await?;
    let read = drain(r, t0, |d| {
        events += tally.feed(d);
        leaked |= verify && renamed(d);
    })
    .await?;
    if leaked {
        return Err("renamed names reached the client".into());
    }
    let writes = match (before.0, pid.and_then(procfs::syscw)) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let cpu = proxy.map_or(0.0, ProxyChild::cpu_secs) - before.1;
    let own_cpu = procfs::cpu_secs(std::process::id()) - own_before;
    let faults = match (faults_before, pid.and_then(procfs::stat).map(|s| s.minflt)) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    Ok(Costed {
        read,
        events,
        writes,
        kinds: counter.and_then(PerfWrites::stop),
        cpu,
        own_cpu,
        faults,
    })
}

/// Milliseconds from each lone event's write by the double to its arrival at the client.
async fn lone_latencies(b: &Burst, target: SocketAddr, path: &str) -> Result<Vec<f64>> {
    if let Ok(mut s) = b.sent.lock() {
        s.clear();
    }
    let mut c = H1::connect(target).await?;
    let r = c.get(path, &[("accept", "application/json")]).await?;
    let mut body = r.into_body();
    let mut arrived = Vec::new();
    while let Some(f) = body.frame().await {
        if let Ok(d) = f?.into_data() {
            let now = Instant::now();
            arrived.extend(memchr::memchr_iter(b'\n', &d).map(|_| now));
        }
    }
    let sent = b.sent.lock().map(|s| s.clone()).unwrap_or_default();
    if arrived.len() != sent.len() + 1 || sent.len() != b.lone_rounds {
        return Err(format!(
            "lone events: {} arrived, {} sent after the first",
            arrived.len(),
            sent.len()
        )
        .into());
    }
    Ok(sent
        .iter()
        .zip(&arrived[1..])
        .map(|(s, a)| a.duration_since(*s).as_secs_f64() * 1e3)
        .collect())
}

/// Runs part 3.
pub(crate) async fn part3(a: &Args, rep: &mut Report, mut cmp: Option<&mut PeerTable>) -> Result<()> {
    println!(
        "== 3. kube-apiserver-like upstream double (one chunk per event, {} KiB writes in a burst); load average {}",
        BURST_WRITE >> 10,
        loadavg()
    );
    let b = Arc::new(burst_fixtures(a.burst_vms, a.events, a.lone_rounds));
    let addr = start_burst_double(Arc::clone(&b))?;
    let proxy = proxy_for_double(a, addr, "burst", None).await?;
    // The same events from an upstream that speaks HTTP/2 over TLS, as kube-apiserver does.
    let d2 = h2::start(Arc::clone(&b), &a.work_dir, false)?;
    let proxy2 = proxy_for_double(a, d2.addr, "burst-tls", Some(&d2.ca)).await?;
    // And from one that speaks only HTTP/2: the watches too go through the pooled lanes.
    let d3 = h2::start(Arc::clone(&b), &a.work_dir.join("h2-only"), true)?;
    let proxy3 = proxy_for_double(a, d3.addr, "burst-h2-only", Some(&d3.ca)).await?;
    let peer = peer_for_double(a, addr, "burst", None).await?;
    let peer2 = peer_for_double(a, d2.addr, "burst-tls", Some(&d2.ca)).await?;
    let peer3 = peer_for_double(a, d3.addr, "burst-h2-only", Some(&d3.ca)).await?;
    let io = procfs::syscw(proxy.pid()).is_some();
    let gb = |c: &Costed| c.read.bytes as f64 / 1e9;
    let watch_via = format!(
        "/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines?{}",
        a.watch_flag()
    );
    let watch_dir = format!("/apis/{GROUP}/v1/namespaces/{NS}/{RESOURCE}?{}", a.watch_flag());
    let list_via = format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines");
    let list_dir = format!("/apis/{GROUP}/v1/namespaces/{NS}/{RESOURCE}");
    for (what, short, n, via_path, dir_path, proxy, peer) in [
        (
            format!("watch, {} events", b.events),
            "kube-apiserver-like double, HTTP/1.1",
            b.events,
            watch_via.clone(),
            watch_dir.clone(),
            &proxy,
            peer.as_ref(),
        ),
        (
            format!("rewritten LIST, {} VMs", b.items),
            "kube-apiserver-like double, HTTP/1.1",
            0,
            list_via.clone(),
            list_dir.clone(),
            &proxy,
            peer.as_ref(),
        ),
        (
            format!(
                "rewritten LIST, {} VMs, upstream over TLS and HTTP/2 as from kube-apiserver (direct: the HTTP/1.1 double, plain)",
                b.items
            ),
            "kube-apiserver-like double, TLS, HTTP/2",
            0,
            list_via,
            list_dir,
            &proxy2,
            peer2.as_ref(),
        ),
        (
            format!(
                "watch, {} events, upstream over TLS offering HTTP/2 and HTTP/1.1 as kube-apiserver does (direct: the HTTP/1.1 double, plain)",
                b.events
            ),
            "kube-apiserver-like double, TLS, HTTP/2 and HTTP/1.1",
            b.events,
            watch_via.clone(),
            watch_dir.clone(),
            &proxy2,
            peer2.as_ref(),
        ),
        (
            format!(
                "watch, {} events, upstream over TLS speaking only HTTP/2: the pooled lanes (direct: the HTTP/1.1 double, plain)",
                b.events
            ),
            "kube-apiserver-like double, TLS, HTTP/2 only",
            b.events,
            watch_via,
            watch_dir,
            &proxy3,
            peer3.as_ref(),
        ),
    ] {
        // One untimed run checks that nothing renamed reaches the client, so that the timed
        // runs' client does the same work (counting) either way.
        let lines = Framing::Lines;
        let checked = costed(proxy.addr(), &via_path, Some(proxy), None, true, lines).await?;
        // The peer's answer is checked once, untimed; each of its runs must bring every event.
        let events = |c: usize| match c {
            c if n > 0 && c != n => Err(format!("{c} events of {n}")),
            _ => Ok(()),
        };
        let ans = match peer {
            Some(p) => check(p.addr(), &via_path)
                .await
                .and_then(|(a, c)| events(c).map(|()| a)),
            None => Ok(Answer::Right),
        };
        let peer_run =
            async |p: &ProxyChild| match costed(p.addr(), &via_path, Some(p), None, false, Framing::Modified)
                .await
            {
                Ok(c) => events(c.events).map(|()| c),
                Err(e) => Err(e.to_string()),
            };
        let repeat = if n == 0 { a.repeat.max(LIST_RUNS) } else { a.repeat };
        let (mut via, mut dir, mut other) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..repeat {
            via.push(costed(proxy.addr(), &via_path, Some(proxy), None, false, lines).await?);
            if let Some(p) = peer {
                other.push(peer_run(p).await);
            }
            dir.push(costed(addr, &dir_path, None, None, false, lines).await?);
        }
        // One more run each way under `perf stat`, untimed, to count every kind of write
        // syscall (syscw misses send/sendto, which std's TcpStream::write uses) and tell socket
        // writes from wake-ups.
        let perf_out = a.work_dir.join("bench-perf-writes.txt");
        let (split, base) = if n > 0 {
            (
                costed(
                    proxy.addr(),
                    &via_path,
                    Some(proxy),
                    Some(&perf_out),
                    false,
                    lines,
                )
                .await?
                .kinds,
                costed(addr, &dir_path, None, Some(&perf_out), false, lines)
                    .await?
                    .kinds,
            )
        } else {
            (None, None)
        };
        if n > 0 && via.iter().chain(&dir).chain([&checked]).any(|c| c.events != n) {
            return Err(format!("{what}: events lost").into());
        }
        let reads = |v: &[Costed]| v.iter().map(|c| c.read).collect::<Vec<_>>();
        let (bv, bd) = (best(&reads(&via)), best(&reads(&dir)));
        let ratio = bv.secs / bd.secs;
        println!("   {what} (best of {repeat}):");
        println!(
            "     through the proxy  {:>7.1} MB  {:>6.3} s    direct {:>6.3} s    ratio {ratio:.2}x",
            bv.bytes as f64 / 1e6,
            bv.secs,
            bd.secs,
        );
        let cpu_gb = via.iter().map(|c| c.cpu / gb(c)).sum::<f64>() / via.len().max(1) as f64;
        let measure = if n > 0 {
            format!("{n}-event watch (best of {repeat})")
        } else {
            format!(
                "LIST of {} VMs, {:.0} MB (best of {repeat})",
                b.items,
                bv.bytes as f64 / 1e6,
            )
        };
        rep.row([
            short.to_owned(),
            measure,
            secs(bv.secs),
            secs(bd.secs),
            format!("{ratio:.2}x"),
        ]);
        rep.row([
            short.to_owned(),
            format!("proxy CPU per GB, {}", if n > 0 { "watch" } else { "LIST" }),
            format!("{cpu_gb:.2} s"),
            String::new(),
            String::new(),
        ]);
        if let (Some(p), Some(t)) = (peer, cmp.as_deref_mut()) {
            peer_rows(t, short, n, repeat, (bv, bd, cpu_gb), &other, &ans);
            println!("     peer peak RSS {:.1} MB", p.rss_kib().0 as f64 / 1024.0);
        }
        let runs = |f: &dyn Fn(&Costed) -> String| via.iter().map(f).collect::<Vec<_>>().join(", ");
        println!(
            "     proxy CPU per GB (each run): {}",
            runs(&|c| format!("{:.2} s", c.cpu / gb(c)))
        );
        if n == 0 {
            // What two cores allow: through the proxy, the client, the double and the proxy
            // all want CPU at once, so no run can beat their CPU time shared over the cores.
            let mean = |v: &[Costed], f: fn(&Costed) -> f64| v.iter().map(f).sum::<f64>() / v.len() as f64;
            let (own_via, proxy_cpu, own_dir) = (
                mean(&via, |c| c.own_cpu),
                mean(&via, |c| c.cpu),
                mean(&dir, |c| c.own_cpu),
            );
            let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
            let floor = (own_via + proxy_cpu) / cores;
            println!(
                "     CPU per LIST (means): direct {own_dir:.3} s (client + double); through the proxy {own_via:.3} s (client + double) + {proxy_cpu:.3} s (proxy) = {:.3} s, so at least {floor:.3} s on {cores} cores: {:.2}x direct's best",
                own_via + proxy_cpu,
                floor / bd.secs
            );
            println!(
                "     proxy minor page faults per LIST (each run): {}",
                runs(&|c| c.faults.map_or("?".into(), |f| f.to_string()))
            );
        }
        if n > 0 {
            let k = |w: u64| w as f64 * 1000.0 / n as f64;
            match split {
                Some(w) => {
                    println!(
                        "     proxy write syscalls per 1,000 events (a separate run under perf stat): {:.1} = {:.1} socket writes + {:.1} wake-ups (eventfd) + {:.1} log",
                        k(w.all),
                        k(w.socket()),
                        k(w.wake),
                        k(w.log),
                    );
                    rep.row([
                        short.to_owned(),
                        "write syscalls per 1,000 events (perf)".to_owned(),
                        format!("{:.1} ({:.1} to sockets)", k(w.all), k(w.socket())),
                        base.map_or(String::new(), |b| format!("{:.1} (the double's)", k(b.socket()))),
                        String::new(),
                    ]);
                    if short.ends_with("HTTP/2 and HTTP/1.1") {
                        rep.headline(
                            "proxy: write syscalls per 1,000 watch events, TLS upstream",
                            format!("{:.1}", k(w.all)),
                        );
                    }
                }
                None => println!(
                    "     (write syscalls not told apart: perf stat on the syscall tracepoints is unavailable here)"
                ),
            }
            if let Some(w) = base {
                println!(
                    "     direct baseline (a separate run under perf stat): the double's {:.1} socket writes per 1,000 events, {:.1} other writes",
                    k(w.socket()),
                    k(w.wake + w.log)
                );
            }
        }
        if io {
            if n > 0 {
                let per_k = |c: &Costed| c.writes.unwrap_or(0) as f64 * 1000.0 / n as f64;
                println!(
                    "     proxy write + writev per 1,000 events in the timed runs (syscw, which misses sendto): {}",
                    runs(&|c| format!("{:.1}", per_k(c))),
                );
            } else {
                println!(
                    "     proxy write syscalls per MB (each run): {}",
                    runs(&|c| format!(
                        "{:.1}",
                        c.writes.unwrap_or(0) as f64 / (c.read.bytes as f64 / 1e6)
                    ))
                );
            }
        }
    }
    if !io {
        println!("     (write syscalls not counted: /proc/PID/io unreadable)");
    }
    // Lone events, from each double.
    let lone = |ns: &str, group: &str, res: &str| format!("/apis/{group}/v1/namespaces/{ns}/{res}?watch=1");
    let via_path = lone(LONE_NS, "kubevirt.io", "virtualmachines");
    let mut dir = lone_latencies(&b, addr, &lone(LONE_NS, GROUP, RESOURCE)).await?;
    let md = median(&mut dir);
    let xd = dir.iter().copied().fold(0.0, f64::max);
    println!(
        "   lone watch event after a {} ms pause ({} rounds), write to arrival: median (max)",
        LONE_PAUSE.as_millis(),
        b.lone_rounds
    );
    for (upstream, p) in [
        ("HTTP/1.1", &proxy),
        ("TLS, HTTP/2 and HTTP/1.1", &proxy2),
        ("TLS, HTTP/2 only", &proxy3),
    ] {
        let mut via = lone_latencies(&b, p.addr(), &via_path).await?;
        let mv = median(&mut via);
        let xv = via.iter().copied().fold(0.0, f64::max);
        println!(
            "     through the proxy, upstream {upstream}: {mv:.3} ms ({xv:.3})  direct {md:.3} ms ({xd:.3})  added {:+.3} ms",
            mv - md,
        );
        rep.row([
            format!("kube-apiserver-like double, {upstream}"),
            format!(
                "lone watch event after {} ms idle, median of {}",
                LONE_PAUSE.as_millis(),
                b.lone_rounds
            ),
            format!("{mv:.3} ms"),
            format!("{md:.3} ms"),
            format!("{:+.3} ms", mv - md),
        ]);
    }
    println!("   load average {}", loadavg());
    Ok(())
}

/// The peer's rows for one of part 3's transfers: its best time and its CPU per GB (the mean
/// over the runs), beside the proxy's `ours` (best, direct's best, CPU per GB).
fn peer_rows(
    t: &mut PeerTable,
    short: &str,
    n: usize,
    repeat: usize,
    ours: (Read, Read, f64),
    runs: &[std::result::Result<Costed, String>],
    ans: &std::result::Result<Answer, String>,
) {
    let (bv, bd, cpu_gb) = ours;
    let reads: Vec<_> = runs
        .iter()
        .map(|r| r.as_ref().map(|c| c.read).map_err(Clone::clone))
        .collect();
    let b = best_of(&reads);
    let cpu = b.as_ref().map_err(Clone::clone).map(|_| {
        let ok: Vec<&Costed> = runs.iter().flatten().collect();
        ok.iter()
            .map(|c| c.cpu / (c.read.bytes as f64 / 1e9))
            .sum::<f64>()
            / ok.len() as f64
    });
    println!(
        "     peer: {}; CPU per GB {}; answer {ans:?}",
        b.as_ref().map_or_else(Clone::clone, |b| format!(
            "{:.1} MB  {:.3} s",
            b.bytes as f64 / 1e6,
            b.secs
        )),
        cpu.as_ref().map_or_else(Clone::clone, |c| format!("{c:.2} s")),
    );
    let (measure, kind) = if n > 0 {
        (format!("{n}-event watch (best of {repeat})"), "watch")
    } else {
        (
            format!(
                "rewritten LIST of {} MB (best of {repeat})",
                (bv.bytes as f64 / 1e6).round()
            ),
            "LIST",
        )
    };
    t.row(
        short,
        measure,
        secs(bd.secs),
        Unit::Secs,
        bv.secs,
        &Fig::of(b.map(|b| b.secs), ans),
    );
    t.row(
        short,
        format!("CPU per GB, {kind}"),
        "",
        Unit::CpuPerGb,
        cpu_gb,
        &Fig::of(cpu, ans),
    );
}
