//! Phase 2, `restart`: kube-apiserver is killed under the watches of phase 1; they end cleanly,
//! `/readyz` goes unready and ready again, every client re-lists and watches again, and one more
//! change of every object reaches them all.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kube_api_rewriter_testkit::{ControlPlane, ProxyProc};

use super::direct::Direct;
use super::requests::{change_all, list_rv};
use super::watches::{Watches, compare};
use super::{Figures, NS, RENAMED, Settings, VMS, watch_query};
use crate::client::{self, End};

/// Runs phase 2 on the watches of phase 1 (`expected` events each); returns the resumed
/// watches and a new direct watch.
pub(super) async fn run(
    s: &Settings,
    cp: &ControlPlane,
    p: &mut ProxyProc,
    port: u16,
    pid: u32,
    fig: &mut Figures,
    (w, direct, expected): (Watches, Direct, usize),
) -> anyhow::Result<(Watches, Direct)> {
    w.resume.store(false, Ordering::SeqCst);
    direct.stop_resuming();
    let (watches_resumed, resumptions) = w.resumed();
    fig.put(
        "watches kube-apiserver ended cleanly and the driver resumed (watches / times)",
        format!(
            "{watches_resumed} / {resumptions}; the direct kubectl watch: {}",
            direct.resumed()
        ),
    );
    let o = cp.script_env("stop-apiserver", &[("KAR_STOP_TIMEOUT", "0")]);
    ensure!(o.status.success(), "stop-apiserver: {o:?}");
    let t = Instant::now();
    let seen = tokio::time::timeout(Duration::from_secs(120), w.finish(false))
        .await
        .context("watches did not end within 120 s of kube-apiserver's death")??;
    fig.put(
        "watch ends after kube-apiserver was killed",
        format!("{:.1} s", t.elapsed().as_secs_f64()),
    );
    let direct_events = direct.events();
    drop(direct);
    ensure!(
        direct_events.len() == expected,
        "direct watch saw {} of {expected}",
        direct_events.len()
    );
    let compared = compare(&seen, &direct_events, "watch phase")?;
    fig.put(
        "events compared (proxy watches x events)",
        format!(
            "{compared} ({} x {expected}), all equal to the direct watch",
            s.watches
        ),
    );
    let mut ends = std::collections::BTreeMap::<String, usize>::new();
    for x in &seen {
        let k = match &x.end {
            End::Clean if !x.errors.is_empty() => format!(
                "ERROR event ({}), then a clean end",
                x.errors.join("; ").split(':').next().unwrap_or("")
            ),
            End::Clean => "clean end".to_owned(),
            End::BrokenAtBoundary(_) => "broken between events".to_owned(),
            End::Truncated(why) => bail!("a watch ended inside an event: {why}"),
            End::Stopped => "stopped".to_owned(),
        };
        *ends.entry(k).or_default() += 1;
    }
    fig.put(
        "watch endings at kube-apiserver death",
        format!("{ends:?}; truncated events: 0"),
    );
    let unready = client::until(Duration::from_secs(30), || p.readyz() == "503").await;
    ensure!(unready, "/readyz stayed {} with kube-apiserver down", p.readyz());
    let t = Instant::now();
    let o = cp.script("start-apiserver");
    ensure!(o.status.success(), "start-apiserver: {o:?}");
    let ready = client::until(Duration::from_secs(60), || p.readyz() == "200").await;
    ensure!(ready, "/readyz not back");
    ensure!(p.child.try_wait()?.is_none(), "the proxy exited");
    fig.put(
        "proxy /readyz: 503 while down, 200 again after restart in",
        format!("{:.1} s (same process {pid})", t.elapsed().as_secs_f64()),
    );
    // Re-list and resume, as client-go does.
    let last: Vec<(String, String)> = {
        let mut m = std::collections::BTreeMap::new();
        for e in &seen[0].events {
            m.insert(e.name.clone(), e.rv.clone());
        }
        m.into_iter().collect()
    };
    // At most RELISTS_AT_ONCE in flight: 1,000 LISTs at once from a freshly started
    // kube-apiserver on two shared cores take longer than its 60 s request timeout (it answers
    // 504, or resets a stream it had begun). A LIST kube-apiserver fails is retried after a
    // second, as client-go's reflector does; the retries are printed.
    const RELISTS_AT_ONCE: usize = 100;
    let gate = Arc::new(tokio::sync::Semaphore::new(RELISTS_AT_ONCE));
    let retried = Arc::new(Mutex::new(Vec::<String>::new()));
    let t = Instant::now();
    let mut rvs = std::collections::BTreeSet::new();
    let mut lists = Vec::new();
    for _ in 0..s.watches {
        let path = format!("{VMS}/{NS}/virtualmachines");
        let (gate, retried) = (Arc::clone(&gate), Arc::clone(&retried));
        lists.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await?;
            let mut tries = 0;
            loop {
                match list_rv(port, &path).await {
                    Ok(x) => return anyhow::Ok(x),
                    Err(e) if tries < 3 => {
                        tries += 1;
                        let mut m = format!("{e:#}");
                        m.truncate(160);
                        retried.lock().unwrap_or_else(|p| p.into_inner()).push(m);
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    Err(e) => return Err(e.context("a re-list failed 4 times")),
                }
            }
        }));
    }
    for l in lists {
        let (rv, items) = l.await??;
        ensure!(items == last, "a re-list differs from what the watch saw");
        rvs.insert(rv);
    }
    ensure!(rvs.len() == 1, "re-lists at different resourceVersions: {rvs:?}");
    let retried = retried.lock().unwrap_or_else(|p| p.into_inner()).clone();
    fig.put(
        "re-lists after the restart",
        format!(
            "{} in {:.1} s, at most {RELISTS_AT_ONCE} at once, each equal to what its watch saw; {} retried{}",
            s.watches,
            t.elapsed().as_secs_f64(),
            retried.len(),
            if retried.is_empty() {
                String::new()
            } else {
                format!(" ({:?})", &retried[..retried.len().min(3)])
            }
        ),
    );
    let rv1 = rvs.into_iter().next().unwrap_or_default();
    let direct = Direct::start(
        cp,
        &format!(
            "{RENAMED}/{NS}/internalvirtualizationvirtualmachines{}",
            watch_query(&rv1)
        ),
    );
    let w = Watches::open(
        port,
        s.watches,
        &format!("{VMS}/{NS}/virtualmachines{}", watch_query(&rv1)),
    );
    let all_open = client::until(Duration::from_secs(120), || {
        w.started.load(Ordering::SeqCst) == s.watches
    })
    .await;
    ensure!(
        all_open,
        "resumed watches: {} of {} opened\n{}",
        w.started.load(Ordering::SeqCst),
        s.watches,
        w.report(1)
    );
    change_all(port, s.objects, s.changes + 1, false).await?;
    Ok((w, direct))
}
