//! Part 2: the proxy in front of the in-memory upstream double: rewritten LIST, pass-through,
//! watch and small GETs, each through the proxy and directly.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use http_body_util::BodyExt;
use kube_api_rewriter_testkit::procfs;
use kube_api_rewriter_testkit::report::Report;

use crate::args::Args;
use crate::client::{Counter, H1, Read, count_events, drain, no_renamed};
use crate::figures::{best, loadavg, mbps, median, secs};
use crate::memory_double::{fixtures, start_double};
use crate::proxy_child::proxy_for_double;
use crate::{Error, GROUP, NS, RESOURCE, Result};

/// Runs part 2.
pub(crate) async fn part2(a: &Args, rep: &mut Report) -> Result<()> {
    println!(
        "== 2. in-memory upstream double (HTTP/1.1, 127.0.0.1); load average {}",
        loadavg()
    );
    let t = Instant::now();
    let fx = Arc::new(fixtures(a.list_mb, a.double_events));
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
    let hdr: &[(&str, &str)] = &[("accept", "application/json")];

    // Rewritten LIST.
    if a.wants("list") {
        let (mut via, mut dir) = (Vec::new(), Vec::new());
        for _ in 0..a.repeat {
            let mut c = H1::connect(proxy.addr()).await?;
            let t0 = Instant::now();
            let r = c
                .get(
                    &format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines"),
                    hdr,
                )
                .await?;
            via.push(drain(r, t0, no_renamed).await?);
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
    }
    // Pass-through: a group the rules do not touch; the body must arrive byte for byte.
    if a.wants("pass") {
        let (mut via, mut dir) = (Vec::new(), Vec::new());
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
    }
    // Watch.
    if a.wants("watch") {
        let mut rates = Vec::new();
        for (label, target, p) in [
            (
                "through the proxy",
                proxy.addr(),
                format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines?watch=1"),
            ),
            (
                "direct           ",
                addr,
                format!("/apis/{GROUP}/v1/namespaces/{NS}/{RESOURCE}?watch=1"),
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
    }
    // Small GETs, sequential on one keep-alive connection.
    if a.wants("get") {
        let lat = |target: SocketAddr, p: String| {
            let n = a.gets;
            async move {
                let mut c = H1::connect(target).await?;
                let mut v = Vec::with_capacity(n);
                for i in 0..n + 200 {
                    let t0 = Instant::now();
                    let r = c.get(&p, &[("accept", "application/json")]).await?;
                    let body = r.into_body().collect().await?.to_bytes();
                    if i >= 200 {
                        v.push(t0.elapsed().as_secs_f64() * 1e3);
                    }
                    if body.is_empty() {
                        return Err("empty small GET".into());
                    }
                }
                let p99 = {
                    let mut s = v.clone();
                    s.sort_by(f64::total_cmp);
                    s[s.len() * 99 / 100]
                };
                Ok::<_, Error>((median(&mut v), p99))
            }
        };
        let (rv_m, rv_p) = lat(
            proxy.addr(),
            format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines/vm-small"),
        )
        .await?;
        let (rd_m, rd_p) = lat(
            addr,
            format!("/apis/{GROUP}/v1/namespaces/{NS}/{RESOURCE}/vm-small"),
        )
        .await?;
        let (pv_m, pv_p) = lat(
            proxy.addr(),
            "/apis/bench.example.com/v1/namespaces/bench/widgets/w1".into(),
        )
        .await?;
        let (pd_m, pd_p) = lat(
            addr,
            "/apis/bench.example.com/v1/namespaces/bench/widgets/w1".into(),
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
    }
    let (hwm, rss) = proxy.rss_kib();
    println!(
        "   proxy RSS at the end: peak {:.1} MB, now {:.1} MB; load average {}",
        hwm as f64 / 1024.0,
        rss as f64 / 1024.0,
        loadavg()
    );
    Ok(())
}
