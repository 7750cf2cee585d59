//! Part 2: the proxy in front of the in-memory upstream double: rewritten LIST, pass-through,
//! watch and small GETs, each through the proxy and directly; with a peer, through it too, and
//! a LIST the rules leave unchanged.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use http_body_util::BodyExt;
use kube_api_rewriter_testkit::procfs;
use kube_api_rewriter_testkit::report::Report;

use crate::args::Args;
use crate::client::{Counter, Framing, H1, Read, count_events, drain, no_renamed};
use crate::figures::{best, loadavg, mbps, median, secs};
use crate::memory_double::{Fixtures, UNCHANGED_PATH, fixtures, start_double};
use crate::peer::{Answer, Fig, PeerTable, Unit, answer, best_of, check, fetch};
use crate::proxy_child::{ProxyChild, peer_for_double, proxy_for_double};
use crate::{GROUP, NS, RESOURCE, Result};

const UPSTREAM: &str = "in-memory double";

/// Reads `path` through the peer, failing on other bytes than `expect`.
async fn peer_read(peer: &ProxyChild, path: &str, expect: Option<&[u8]>) -> Result<Read, String> {
    let g = fetch(peer.addr(), path, Framing::Modified, expect, false).await?;
    if !g.identical {
        return Err(format!(
            "changed the body ({} bytes of {})",
            g.read.bytes,
            expect.map_or(0, <[u8]>::len)
        ));
    }
    Ok(g.read)
}

/// Runs part 2.
pub(crate) async fn part2(a: &Args, rep: &mut Report, mut cmp: Option<&mut PeerTable>) -> Result<()> {
    println!(
        "== 2. in-memory upstream double (HTTP/1.1, 127.0.0.1); load average {}",
        loadavg()
    );
    let t = Instant::now();
    let fx = Arc::new(fixtures(a.list_mb, a.double_events, a.peer.is_some()));
    println!(
        "   built a {:.1} MB LIST of {} renamed VMs ({} bytes each) and a {}-event watch stream in {:.1} s",
        fx.list.len() as f64 / 1e6,
        fx.items,
        fx.list.len() / fx.items.max(1),
        fx.watch_events,
        t.elapsed().as_secs_f64()
    );
    let addr = start_double(Arc::clone(&fx))?;
    let proxy = proxy_for_double(a, addr, "double", None).await?;
    let peer = peer_for_double(a, addr, "double", None).await?;
    let hdr: &[(&str, &str)] = &[("accept", "application/json")];

    // Rewritten LIST.
    if a.wants("list") {
        let (mut via, mut dir, mut other) = (Vec::new(), Vec::new(), Vec::new());
        let list_path = format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines");
        for _ in 0..a.repeat {
            let mut c = H1::connect(proxy.addr()).await?;
            let t0 = Instant::now();
            let r = c.get(&list_path, hdr).await?;
            via.push(drain(r, t0, no_renamed).await?);
            if let Some(p) = &peer {
                other.push(peer_read(p, &list_path, None).await);
            }
            let mut c = H1::connect(addr).await?;
            let t0 = Instant::now();
            let r = c
                .get(&format!("/apis/{GROUP}/v1/namespaces/{NS}/{RESOURCE}"), hdr)
                .await?;
            dir.push(drain(r, t0, |_| {}).await?);
        }
        let (hwm_list, _) = proxy.rss_kib();
        let (bv, bd) = (best(&via), best(&dir));
        println!("   rewritten LIST (best of {}):", a.repeat);
        println!(
            "     through the proxy  {:>7.1} MB  {:>6.3} s  {:>7.1} MB/s client-visible",
            bv.bytes as f64 / 1e6,
            bv.secs,
            mbps(bv),
        );
        println!(
            "     direct             {:>7.1} MB  {:>6.3} s  {:>7.1} MB/s",
            bd.bytes as f64 / 1e6,
            bd.secs,
            mbps(bd)
        );
        println!(
            "     proxy peak RSS after the LISTs: {:.1} MB",
            hwm_list as f64 / 1024.0,
        );
        let list = format!("{:.0} MB LIST", bv.bytes as f64 / 1e6);
        rep.row([
            "in-memory double".to_owned(),
            format!("rewritten {list}, MB/s (best of {})", a.repeat),
            format!("{:.0}", mbps(bv)),
            format!("{:.0} (not rewritten)", mbps(bd)),
            String::new(),
        ]);
        rep.row([
            "in-memory double".to_owned(),
            format!("proxy peak RSS with the {list} (VmHWM)"),
            format!("{:.1} MB", hwm_list as f64 / 1024.0),
            String::new(),
            String::new(),
        ]);
        rep.headline(
            format!("proxy: rewritten {list}, client-visible"),
            format!("{:.0} MB/s", mbps(bv)),
        );
        rep.headline(
            format!("proxy: peak RSS with a {list} in flight"),
            format!("{:.1} MB", hwm_list as f64 / 1024.0),
        );
        if let (Some(p), Some(t)) = (&peer, cmp.as_deref_mut()) {
            let b = best_of(&other);
            let hwm = p.rss_kib().0 as f64 / 1024.0;
            let ans = check(p.addr(), &list_path).await.map(|(a, _)| a);
            println!(
                "     peer: {}; peak RSS {hwm:.1} MB",
                b.as_ref()
                    .map_or_else(Clone::clone, |b| format!("{:.3} s, {:.1} MB/s", b.secs, mbps(*b)))
            );
            let measure = format!("rewritten {list} (best of {})", a.repeat);
            let direct = format!("{:.0} MB/s (not rewritten)", mbps(bd));
            t.row(
                UPSTREAM,
                measure,
                direct,
                Unit::MbPerSec,
                mbps(bv),
                &Fig::of(b.map(mbps), &ans),
            );
            t.row(
                UPSTREAM,
                format!("peak RSS with the {list} (VmHWM)"),
                "",
                Unit::Mb,
                hwm_list as f64 / 1024.0,
                &Fig::plain(hwm),
            );
        }
    }
    // Pass-through: a group the rules do not touch; the body must arrive byte for byte.
    if a.wants("pass") {
        let (mut via, mut dir, mut other) = (Vec::new(), Vec::new(), Vec::new());
        let path = "/apis/bench.example.com/v1/namespaces/bench/widgets";
        // CPU seconds used: (this process: client + double, the proxy) through the proxy, and
        // this process directly.
        let (mut cpu_via, mut cpu_proxy, mut cpu_dir) = (0.0, 0.0, 0.0);
        for _ in 0..a.repeat {
            let mut c = H1::connect(proxy.addr()).await?;
            let (me0, px0) = (procfs::cpu_secs(std::process::id()), proxy.cpu_secs());
            let t0 = Instant::now();
            let r = c.get(path, hdr).await?;
            via.push(drain(r, t0, |_| {}).await?);
            cpu_via += procfs::cpu_secs(std::process::id()) - me0;
            cpu_proxy += proxy.cpu_secs() - px0;
            if let Some(p) = &peer {
                other.push(peer_read(p, path, Some(&fx.list)).await);
            }
            let mut c = H1::connect(addr).await?;
            let me0 = procfs::cpu_secs(std::process::id());
            let t0 = Instant::now();
            let r = c.get(path, hdr).await?;
            dir.push(drain(r, t0, |_| {}).await?);
            cpu_dir += procfs::cpu_secs(std::process::id()) - me0;
        }
        let (bv, bd) = (best(&via), best(&dir));
        if bv.bytes != fx.list.len() as u64 {
            return Err(format!(
                "pass-through changed the body: {} bytes of {}",
                bv.bytes,
                fx.list.len()
            )
            .into());
        }
        let ratio = bv.secs / bd.secs;
        println!(
            "   pass-through {:.1} MB (best of {}):",
            fx.list.len() as f64 / 1e6,
            a.repeat
        );
        println!(
            "     through the proxy  {:>6.3} s  {:>7.1} MB/s",
            bv.secs,
            mbps(bv)
        );
        println!(
            "     direct             {:>6.3} s  {:>7.1} MB/s",
            bd.secs,
            mbps(bd)
        );
        println!("     time ratio proxy/direct {ratio:.2}x",);
        rep.row([
            "in-memory double".to_owned(),
            format!(
                "pass-through {:.0} MB (best of {})",
                fx.list.len() as f64 / 1e6,
                a.repeat
            ),
            secs(bv.secs),
            secs(bd.secs),
            format!("{ratio:.2}x"),
        ]);
        let n = a.repeat as f64;
        println!(
            "     CPU per transfer: direct {:.3} s (client + double); through the proxy {:.3} s (client + double) + {:.3} s (proxy), on {} cores",
            cpu_dir / n,
            cpu_via / n,
            cpu_proxy / n,
            std::thread::available_parallelism().map_or(0, usize::from)
        );
        if let Some(t) = cmp.as_deref_mut().filter(|_| peer.is_some()) {
            let b = best_of(&other);
            println!(
                "     peer: {}",
                b.as_ref().map_or_else(Clone::clone, |b| secs(b.secs))
            );
            let measure = format!(
                "pass-through {:.0} MB, a group no rule names (best of {})",
                fx.list.len() as f64 / 1e6,
                a.repeat
            );
            let fig = Fig::of(b.map(|b| b.secs), &Ok(Answer::Right));
            t.row(UPSTREAM, measure, secs(bd.secs), Unit::Secs, bv.secs, &fig);
        }
    }
    if let (Some(p), Some(t)) = (&peer, cmp.as_deref_mut())
        && a.wants("unchanged")
    {
        unchanged(a, &fx, addr, &proxy, p, t).await?;
    }
    // Watch.
    if a.wants("watch") {
        let mut rates = Vec::new();
        for (label, target, p) in [
            (
                "through the proxy",
                proxy.addr(),
                format!(
                    "/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines?{}",
                    a.watch_flag()
                ),
            ),
            (
                "direct           ",
                addr,
                format!("/apis/{GROUP}/v1/namespaces/{NS}/{RESOURCE}?{}", a.watch_flag()),
            ),
        ] {
            let mut runs = Vec::new();
            for _ in 0..a.repeat.min(2) {
                let mut c = H1::connect(target).await?;
                let t0 = Instant::now();
                let r = c.get(&p, hdr).await?;
                let c = Arc::new(Counter::default());
                let check = target == proxy.addr();
                count_events(r, Arc::clone(&c), check).await;
                let secs = t0.elapsed().as_secs_f64();
                if c.events() != fx.watch_events {
                    return Err(format!("{label}: {} events of {}", c.events(), fx.watch_events).into());
                }
                runs.push(Read {
                    bytes: c.bytes.load(Ordering::Relaxed),
                    secs,
                });
            }
            let b = best(&runs);
            let rate = fx.watch_events as f64 / b.secs;
            rates.push(rate);
            println!(
                "   watch {label}  {} events  {:>6.3} s  {:>8.0} events/s  {:>7.1} MB/s",
                fx.watch_events,
                b.secs,
                rate,
                mbps(b)
            );
        }
        rep.row([
            "in-memory double".to_owned(),
            format!("{}-event watch, events/s", fx.watch_events),
            format!("{:.0}", rates[0]),
            format!("{:.0}", rates[1]),
            format!("{:.2}x the time", rates[1] / rates[0]),
        ]);
        if let (Some(p), Some(t)) = (&peer, cmp.as_deref_mut()) {
            let path = format!(
                "/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines?{}",
                a.watch_flag()
            );
            let events = |n: usize| match n {
                n if n == fx.watch_events => Ok(()),
                n => Err(format!("{n} events of {}", fx.watch_events)),
            };
            let ans = check(p.addr(), &path)
                .await
                .and_then(|(a, n)| events(n).map(|()| a));
            let mut runs = Vec::new();
            for _ in 0..a.repeat.min(2) {
                let g = fetch(p.addr(), &path, Framing::Modified, None, false).await;
                runs.push(g.and_then(|g| events(g.events).map(|()| g.read)));
            }
            let rate = best_of(&runs).map(|b| fx.watch_events as f64 / b.secs);
            println!(
                "   watch peer               {}",
                rate.as_ref()
                    .map_or_else(Clone::clone, |r| format!("{r:.0} events/s"))
            );
            let measure = format!("{}-event watch (best of {})", fx.watch_events, a.repeat.min(2));
            let direct = format!("{:.0} events/s", rates[1]);
            t.row(
                UPSTREAM,
                measure,
                direct,
                Unit::EventsPerSec,
                rates[0],
                &Fig::of(rate, &ans),
            );
        }
    }
    // Small GETs, sequential on one keep-alive connection.
    if a.wants("get") {
        let lat = |target: SocketAddr, p: String, check: bool| async move {
            small_gets(target, &p, GET_WARMUP, a.gets, check).await
        };
        let (rv_m, rv_p, _) = lat(
            proxy.addr(),
            format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines/vm-small"),
            true,
        )
        .await?;
        let (rd_m, rd_p, _) = lat(
            addr,
            format!("/apis/{GROUP}/v1/namespaces/{NS}/{RESOURCE}/vm-small"),
            false,
        )
        .await?;
        let (pv_m, pv_p, _) = lat(
            proxy.addr(),
            "/apis/bench.example.com/v1/namespaces/bench/widgets/w1".into(),
            false,
        )
        .await?;
        let (pd_m, pd_p, _) = lat(
            addr,
            "/apis/bench.example.com/v1/namespaces/bench/widgets/w1".into(),
            false,
        )
        .await?;
        println!(
            "   small GET, median (p99) of {} sequential requests on one keep-alive connection:",
            a.gets
        );
        println!(
            "     rewritten VM ({} B)   proxy {rv_m:.3} ms ({rv_p:.3})  direct {rd_m:.3} ms ({rd_p:.3})  added {:+.3} ms",
            fx.small.len(),
            rv_m - rd_m,
        );
        rep.row([
            "in-memory double".to_owned(),
            format!("GET of one VM, median of {}", a.gets),
            format!("{rv_m:.3} ms"),
            format!("{rd_m:.3} ms"),
            format!("{:+.3} ms", rv_m - rd_m),
        ]);
        rep.headline(
            "proxy: latency added to a small GET (median)",
            format!("{:+.3} ms", rv_m - rd_m),
        );
        println!(
            "     pass-through          proxy {pv_m:.3} ms ({pv_p:.3})  direct {pd_m:.3} ms ({pd_p:.3})  added {:+.3} ms",
            pv_m - pd_m
        );
        if let (Some(p), Some(t)) = (&peer, cmp) {
            let vm = format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines/vm-small");
            let got = lat(p.addr(), vm, true).await.map_err(|e| e.to_string());
            println!(
                "     rewritten VM, peer    {}",
                got.as_ref()
                    .map_or_else(Clone::clone, |(m, p99, _)| format!("{m:.3} ms ({p99:.3})"))
            );
            let what = format!(
                "GET of one VM ({} B), {} on one connection",
                fx.small.len(),
                a.gets
            );
            let ans = got.as_ref().map(|g| g.2).map_err(Clone::clone);
            let m = Fig::of(got.as_ref().map(|g| g.0 - rd_m).map_err(Clone::clone), &ans);
            t.row(
                UPSTREAM,
                format!("{what}: added median"),
                format!("{rd_m:.3} ms"),
                Unit::AddedMs,
                rv_m - rd_m,
                &m,
            );
            let p99 = Fig::of(got.map(|g| g.1 - rd_p), &ans);
            t.row(
                UPSTREAM,
                format!("{what}: added p99"),
                format!("{rd_p:.3} ms"),
                Unit::AddedMs,
                rv_p - rd_p,
                &p99,
            );
        }
    }
    let (hwm, rss) = proxy.rss_kib();
    println!(
        "   proxy RSS at the end: peak {:.1} MB, now {:.1} MB; load average {}",
        hwm as f64 / 1024.0,
        rss as f64 / 1024.0,
        loadavg()
    );
    if let Some(p) = &peer {
        let (hwm, rss) = p.rss_kib();
        println!(
            "   peer RSS at the end: peak {:.1} MB, now {:.1} MB",
            hwm as f64 / 1024.0,
            rss as f64 / 1024.0
        );
    }
    Ok(())
}

/// Untimed GETs before [`small_gets`]' timed ones in part 2.
const GET_WARMUP: usize = 200;

/// `n` GETs of `path`, one after another on one keep-alive connection to `target`, timed after
/// `warmup` untimed ones: the median and the p99 in milliseconds, and with `check`, how right
/// the answers were (all alike, or the first error). An empty body is an error.
pub(crate) async fn small_gets(
    target: SocketAddr,
    path: &str,
    warmup: usize,
    n: usize,
    check: bool,
) -> Result<(f64, f64, Answer)> {
    let mut worst = Answer::Right;
    let mut c = H1::connect(target).await?;
    let mut v = Vec::with_capacity(n);
    for i in 0..n + warmup {
        let t0 = Instant::now();
        let r = c.get(path, &[("accept", "application/json")]).await?;
        let body = r.into_body().collect().await?.to_bytes();
        if i >= warmup {
            v.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        if body.is_empty() {
            return Err("empty small GET".into());
        }
        if check {
            worst = worst.max(answer(&body)?);
        }
    }
    if v.is_empty() {
        return Err("no timed GET".into());
    }
    let p99 = {
        let mut s = v.clone();
        s.sort_by(f64::total_cmp);
        s[s.len() * 99 / 100]
    };
    Ok((median(&mut v), p99, worst))
}

/// A LIST of ConfigMaps that the rules leave as they are, through the proxy, through the peer
/// and directly (best of the runs): both must hand it over byte for byte.
async fn unchanged(
    a: &Args,
    fx: &Fixtures,
    addr: SocketAddr,
    proxy: &ProxyChild,
    peer: &ProxyChild,
    t: &mut PeerTable,
) -> Result<()> {
    let (mut via, mut dir, mut other) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..a.repeat {
        let g = fetch(
            proxy.addr(),
            UNCHANGED_PATH,
            Framing::Lines,
            Some(&fx.unchanged),
            false,
        )
        .await?;
        if !g.identical {
            return Err(format!(
                "the proxy changed the unchanged LIST ({} bytes of {})",
                g.read.bytes,
                fx.unchanged.len()
            )
            .into());
        }
        via.push(g.read);
        other.push(peer_read(peer, UNCHANGED_PATH, Some(&fx.unchanged)).await);
        dir.push(
            fetch(addr, UNCHANGED_PATH, Framing::Lines, None, false)
                .await?
                .read,
        );
    }
    let (bv, bd) = (best(&via), best(&dir));
    let bo = best_of(&other).map(|b| b.secs);
    println!(
        "   a {:.1} MB ConfigMap LIST the rules leave unchanged (best of {}): proxy {:.3} s, peer {}, direct {:.3} s",
        fx.unchanged.len() as f64 / 1e6,
        a.repeat,
        bv.secs,
        bo.as_ref().map_or_else(Clone::clone, |s| secs(*s)),
        bd.secs
    );
    let measure = format!(
        "{:.0} MB ConfigMap LIST, nothing to rewrite (best of {})",
        fx.unchanged.len() as f64 / 1e6,
        a.repeat
    );
    t.row(
        UPSTREAM,
        measure,
        secs(bd.secs),
        Unit::Secs,
        bv.secs,
        &Fig::of(bo, &Ok(Answer::Right)),
    );
    Ok(())
}
