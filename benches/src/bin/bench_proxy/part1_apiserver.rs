//! Part 1: the real kube-apiserver. The renamed CRD is applied through the proxy, VMs are
//! created directly, then a LIST of all of them is timed through the proxy and directly, and a
//! watch each way receives the events of merge patches; with a peer, a LIST and a watch
//! through it too.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use kube_api_rewriter_layer::body as pbody;
use kube_api_rewriter_proxy::deadlines::Deadlines;
use kube_api_rewriter_proxy::upstream::{Upstream, UpstreamSource};
use kube_api_rewriter_testkit::report::Report;

use crate::args::Args;
use crate::client::{Counter, Framing, H1, count_events, direct, drain, no_renamed};
use crate::figures::{best, loadavg, mbps, secs};
use crate::peer::{Fig, PeerTable, Unit, answer, best_of, check, fetch, watch_into};
use crate::proxy_child::ProxyChild;
use crate::{GROUP, NS, RESOURCE, Result};
use kube_api_rewriter_testkit::vm::Vm;

/// Runs part 1 against the kube-apiserver of `kubeconfig`.
pub(crate) async fn part1(
    a: &Args,
    kubeconfig: &Path,
    rep: &mut Report,
    cmp: Option<&mut PeerTable>,
) -> Result<()> {
    println!(
        "== 1. real kube-apiserver ({} VMs, {}-event watch); load average {}",
        a.vms,
        a.events,
        loadavg()
    );
    let up = Arc::new(
        Upstream::kube(
            &UpstreamSource::Kubeconfig(vec![kubeconfig.to_owned()]),
            &Deadlines::default(),
        )
        .await?,
    );
    let log = a.work_dir.join("bench-proxy-apiserver.log");
    let proxy = ProxyChild::start(&a.proxy_bin, kubeconfig, &log).await?;
    let peer = match &a.peer {
        Some(bin) => {
            Some(ProxyChild::start(bin, kubeconfig, &a.work_dir.join("bench-peer-apiserver.log")).await?)
        }
        None => None,
    };
    let pkc = a.work_dir.join("bench-proxy.kubeconfig");
    std::fs::write(
        &pkc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: p\n  cluster:\n    server: http://127.0.0.1:{}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: p\n  context: {{cluster: p, user: u}}\ncurrent-context: p\n",
            proxy.port
        ),
    )?;
    // The renamed CRD, applied through the proxy.
    let o = Command::new(kube_api_rewriter_testkit::kubectl_bin())
        .env("KUBECONFIG", &pkc)
        .args(["apply", "-f"])
        .arg(&a.crd)
        .stdin(Stdio::null())
        .output()?;
    if !o.status.success() {
        return Err(format!(
            "kubectl apply through the proxy: {}",
            String::from_utf8_lossy(&o.stderr)
        )
        .into());
    }
    let list_direct = format!("/apis/{GROUP}/v1/namespaces/{NS}/{RESOURCE}");
    let t = Instant::now();
    loop {
        let r = direct(&up, "GET", &format!("{list_direct}?limit=1"), None, Bytes::new()).await?;
        let s = r.status();
        let _ = r.into_body().collect().await;
        if s == StatusCode::OK {
            break;
        }
        if t.elapsed() > Duration::from_secs(60) {
            return Err(format!("the renamed resource is not served after 60 s ({s})").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Create the VMs: parallel POSTs straight to kube-apiserver.
    let t = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..a.concurrency {
        let (up, next, failed, path, n) = (
            Arc::clone(&up),
            Arc::clone(&next),
            Arc::clone(&failed),
            list_direct.clone(),
            a.vms,
        );
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return;
                }
                let body = Bytes::from(
                    Vm::new(&format!("bench-vm-{i:05}"), NS)
                        .renamed()
                        .json()
                        .to_string(),
                );
                let ok = match direct(&up, "POST", &path, Some("application/json"), body).await {
                    Ok(r) => {
                        let s = r.status();
                        let _ = r.into_body().collect().await;
                        s.is_success() || s == StatusCode::CONFLICT
                    }
                    Err(_) => false,
                };
                if !ok {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let failed = failed.load(Ordering::Relaxed);
    println!(
        "   created {} VMs in {:.1} s ({:.0}/s, {failed} failed); load average {}",
        a.vms - failed,
        t.elapsed().as_secs_f64(),
        (a.vms - failed) as f64 / t.elapsed().as_secs_f64(),
        loadavg()
    );

    // LIST, alternating proxy and direct.
    let list_proxy = format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines");
    let (mut via, mut dir, mut other) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..a.repeat {
        let mut c = H1::connect(proxy.addr()).await?;
        let t0 = Instant::now();
        let r = c.get(&list_proxy, &[("accept", "application/json")]).await?;
        via.push(drain(r, t0, no_renamed).await?);
        if let Some(p) = &peer {
            other.push(
                fetch(p.addr(), &list_proxy, Framing::Modified, None, false)
                    .await
                    .map(|g| g.read),
            );
        }
        let t0 = Instant::now();
        let r = direct(&up, "GET", &list_direct, None, Bytes::new()).await?;
        dir.push(drain(r, t0, |_| {}).await?);
    }
    let (bv, bd) = (best(&via), best(&dir));
    let ratio = bv.secs / bd.secs;
    println!("   LIST of all VMs (best of {}):", a.repeat);
    println!(
        "     through the proxy  {:>7.1} MB  {:>6.3} s  {:>7.1} MB/s",
        bv.bytes as f64 / 1e6,
        bv.secs,
        mbps(bv)
    );
    println!(
        "     direct             {:>7.1} MB  {:>6.3} s  {:>7.1} MB/s",
        bd.bytes as f64 / 1e6,
        bd.secs,
        mbps(bd)
    );
    println!(
        "     time ratio proxy/direct {ratio:.2}x; all runs proxy {:?} s, direct {:?} s",
        via.iter()
            .map(|r| (r.secs * 1000.0).round() / 1000.0)
            .collect::<Vec<_>>(),
        dir.iter()
            .map(|r| (r.secs * 1000.0).round() / 1000.0)
            .collect::<Vec<_>>()
    );
    let upstream = format!(
        "kube-apiserver {}",
        std::env::var("KUBE_VERSION").unwrap_or_default()
    );
    rep.row([
        upstream.clone(),
        format!(
            "LIST of {} VMs, {:.1} MB (best of {})",
            a.vms,
            bv.bytes as f64 / 1e6,
            a.repeat
        ),
        secs(bv.secs),
        secs(bd.secs),
        format!("{ratio:.2}x"),
    ]);
    rep.headline(
        format!(
            "proxy: LIST of {} VMs from {upstream}, through the proxy / direct",
            a.vms
        ),
        format!("{ratio:.2}x"),
    );
    // The peer's LIST row: measure, direct, the proxy's seconds, the peer's.
    let list_peer = best_of(&other);
    let list_row = match &peer {
        Some(p) => {
            let answer = check(p.addr(), &list_proxy).await.map(|(a, _)| a);
            Some((
                format!(
                    "LIST of {} VMs, {:.1} MB (best of {})",
                    a.vms,
                    bv.bytes as f64 / 1e6,
                    a.repeat
                ),
                secs(bd.secs),
                bv.secs,
                Fig::of(list_peer.clone().map(|b| b.secs), &answer),
            ))
        }
        None => None,
    };
    if peer.is_some() {
        println!(
            "     peer               {}",
            list_peer.as_ref().map_or_else(Clone::clone, |b| format!(
                "{:>7.1} MB  {:>6.3} s",
                b.bytes as f64 / 1e6,
                b.secs
            ))
        );
    }

    // Watch: one through the proxy, one direct, both from the same resourceVersion; then patches.
    let r = direct(&up, "GET", &format!("{list_direct}?limit=1"), None, Bytes::new()).await?;
    let head: serde_json::Value = serde_json::from_slice(&r.into_body().collect().await?.to_bytes())?;
    let rv = head["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_owned();
    // kube-apiserver closes a watch whose events it cannot hand over fast enough ("Forcing
    // watcher close due to unresponsiveness"); the watchers then watch again from the last
    // resourceVersion they saw, as informers do, and the restarts are reported.
    let (cp, cd) = (Arc::new(Counter::default()), Arc::new(Counter::default()));
    let w = a.watch_flag();
    let tp = WatchTarget::Proxy(proxy.addr(), format!("{list_proxy}?{w}&resourceVersion="));
    let td = WatchTarget::Direct(Arc::clone(&up), format!("{list_direct}?{w}&resourceVersion="));
    let (wp, wd) = (tp.open(&rv).await?, td.open(&rv).await?);
    let hp = tokio::spawn(watch_loop(tp, wp, Arc::clone(&cp), true));
    let hd = tokio::spawn(watch_loop(td, wd, Arc::clone(&cd), false));
    // The peer's watch from the same resourceVersion, not watched again if it ends: the events
    // it missed are its figure.
    let (co, kept) = (Arc::new(Counter::default()), Arc::new(Mutex::new(Vec::new())));
    let ho = peer.as_ref().map(|p| {
        let path = format!("{list_proxy}?{w}&resourceVersion={rv}");
        tokio::spawn(watch_into(p.addr(), path, Arc::clone(&co), Arc::clone(&kept)))
    });
    // The patches go over a connection of their own.
    let up = Arc::new(
        Upstream::kube(
            &UpstreamSource::Kubeconfig(vec![kubeconfig.to_owned()]),
            &Deadlines::default(),
        )
        .await?,
    );
    let t0 = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let okc = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..a.watch_concurrency {
        let (up, next, okc, path, n, vms) = (
            Arc::clone(&up),
            Arc::clone(&next),
            Arc::clone(&okc),
            list_direct.clone(),
            a.events,
            a.vms,
        );
        tasks.spawn(async move {
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= n {
                    return;
                }
                let body = Bytes::from(format!(
                    r#"{{"metadata":{{"annotations":{{"bench/seq":"{k}"}}}}}}"#
                ));
                let p = format!("{path}/bench-vm-{:05}", k % vms);
                if let Ok(r) = direct(&up, "PATCH", &p, Some("application/merge-patch+json"), body).await {
                    let s = r.status();
                    let _ = r.into_body().collect().await;
                    if s.is_success() {
                        okc.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let patched = okc.load(Ordering::Relaxed);
    let patch_secs = t0.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(120);
    let peer_done = || {
        ho.as_ref()
            .is_none_or(|h| h.is_finished() || co.events() >= patched)
    };
    while (cp.events() < patched || cd.events() < patched || !peer_done()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    hp.abort();
    hd.abort();
    // How the peer's watch ended, if it did: Ok, or its error.
    let peer_end = match ho {
        Some(h) if h.is_finished() => Some(h.await.unwrap_or(Ok(()))),
        Some(h) => {
            h.abort();
            None
        }
        None => None,
    };
    let secs = |c: &Counter| c.last_secs(t0);
    let (ep, ed) = (cp.events(), cd.events());
    let (sp, sd) = (secs(&cp), secs(&cd));
    println!(
        "   watch: {patched} merge patches in {patch_secs:.1} s ({:.0}/s, concurrency {}); watches restarted: proxy {}, direct {}; load average {}",
        patched as f64 / patch_secs,
        a.watch_concurrency,
        cp.restarts.load(Ordering::Relaxed),
        cd.restarts.load(Ordering::Relaxed),
        loadavg()
    );
    println!(
        "     through the proxy  {ep:>6} events  last after {sp:>6.2} s  {:>7.0} events/s  {:>6.1} MB",
        ep as f64 / sp,
        cp.bytes.load(Ordering::Relaxed) as f64 / 1e6
    );
    println!(
        "     direct             {ed:>6} events  last after {sd:>6.2} s  {:>7.0} events/s  {:>6.1} MB",
        ed as f64 / sd,
        cd.bytes.load(Ordering::Relaxed) as f64 / 1e6
    );
    let ratio = (sp / ep.max(1) as f64) / (sd / ed.max(1) as f64);
    println!("     time per event ratio proxy/direct {ratio:.2}x",);
    rep.row([
        upstream.clone(),
        format!("{patched}-event watch, events/s"),
        format!("{:.0}", ep as f64 / sp),
        format!("{:.0}", ed as f64 / sd),
        format!("{ratio:.2}x the time per event"),
    ]);
    let (hwm, rss) = proxy.rss_kib();
    println!("   proxy RSS: peak {} MB, now {} MB", hwm / 1024, rss / 1024);
    if let (Some(p), Some(t), Some(list_row)) = (&peer, cmp, list_row) {
        let eo = co.events();
        let so = co.last_secs(t0);
        let rate = match peer_end {
            _ if eo == patched => Ok(eo as f64 / so),
            Some(Err(e)) => Err(format!("{e} after {eo} events of {patched}")),
            Some(Ok(())) => Err(format!("its watch ended after {eo} events of {patched}")),
            None => Err(format!("{eo} events of {patched} after 120 s")),
        };
        let judged = kept
            .lock()
            .map_or_else(|_| Err("lost".to_owned()), |b| answer(&b));
        println!(
            "     peer               {eo:>6} events  last after {so:>6.2} s  {}; answer {judged:?}",
            rate.as_ref()
                .map_or_else(Clone::clone, |r| format!("{r:>7.0} events/s"))
        );
        let (po, _) = p.rss_kib();
        println!("   peer RSS: peak {} MB", po / 1024);
        t.row(
            &upstream,
            list_row.0,
            list_row.1,
            Unit::Secs,
            list_row.2,
            &list_row.3,
        );
        let measure = format!("{patched}-event watch (merge patches)");
        let direct = format!("{:.0} events/s", ed as f64 / sd);
        t.row(
            &upstream,
            measure,
            direct,
            Unit::EventsPerSec,
            ep as f64 / sp,
            &Fig::of(rate, &judged),
        );
    }
    Ok(())
}

/// Where a watch of part 1 goes; the string is the path up to the resourceVersion value.
enum WatchTarget {
    Proxy(SocketAddr, String),
    Direct(Arc<Upstream>, String),
}

impl WatchTarget {
    async fn open(&self, rv: &str) -> Result<Response<pbody::Body>> {
        let r = match self {
            WatchTarget::Proxy(addr, p) => {
                H1::connect(*addr)
                    .await?
                    .get(&format!("{p}{rv}"), &[("accept", "application/json")])
                    .await?
            }
            WatchTarget::Direct(up, p) => direct(up, "GET", &format!("{p}{rv}"), None, Bytes::new()).await?,
        };
        if !r.status().is_success() {
            return Err(format!("watch: {}", r.status()).into());
        }
        Ok(r)
    }
}

/// Counts events, watching again from the last resourceVersion seen when the watch ends.
async fn watch_loop(target: WatchTarget, first: Response<pbody::Body>, c: Arc<Counter>, check: bool) {
    let mut resp = first;
    loop {
        let last = count_events(resp, Arc::clone(&c), check).await;
        let v: serde_json::Value = serde_json::from_slice(&last).unwrap_or_default();
        let Some(rv) = v["object"]["metadata"]["resourceVersion"].as_str() else {
            eprintln!("watch ended; no resourceVersion to watch again from");
            return;
        };
        c.restarts.fetch_add(1, Ordering::Relaxed);
        resp = match target.open(rv).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("watching again: {e}");
                return;
            }
        };
    }
}
