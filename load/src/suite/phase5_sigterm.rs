//! Phase 5, `sigterm`: SIGTERM while LISTs are read and the watches are open; every LIST is
//! whole, every watch ends on an event boundary, the proxy exits within `SHUTDOWN_TIMEOUT`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kube_api_rewriter_testkit::ProxyProc;

use super::direct::Direct;
use super::watches::{Watches, compare};
use super::{Figures, SHUTDOWN_TIMEOUT, Settings};
use crate::client::{self, End};

/// Runs phase 5 on the resumed watches, with LISTs of `big_path` in flight (`expected2`
/// events seen by each watch).
pub(super) async fn run(
    s: &Settings,
    p: &mut ProxyProc,
    port: u16,
    fig: &mut Figures,
    (w, direct): (Watches, Direct),
    (big_path, expected2): (String, usize),
) -> anyhow::Result<()> {
    let mut lists = Vec::new();
    for _ in 0..s.lists_at_sigterm {
        let resp = client::open(port, "GET", &big_path, None).await?;
        ensure!(resp.status() == 200, "LIST {}", resp.status());
        lists.push(tokio::spawn(async move {
            use http_body_util::BodyExt as _;
            let b = resp.into_body().collect().await?.to_bytes();
            let v: serde_json::Value = serde_json::from_slice(&b).context("a LIST in flight at SIGTERM")?;
            anyhow::Ok(v["items"].as_array().map_or(0, Vec::len))
        }));
    }
    let t = Instant::now();
    w.resume.store(false, Ordering::SeqCst);
    let (watches_resumed, resumptions) = w.resumed();
    fig.put(
        "resumed watches kube-apiserver ended cleanly and the driver resumed again (watches / times)",
        format!(
            "{watches_resumed} / {resumptions}; the direct kubectl watch: {}",
            direct.resumed()
        ),
    );
    p.signal("TERM");
    let mut whole = 0;
    for l in lists {
        let n = l.await??;
        ensure!(n == s.big_objects, "a LIST in flight at SIGTERM had {n} items");
        whole += 1;
    }
    let seen = tokio::time::timeout(SHUTDOWN_TIMEOUT + Duration::from_secs(10), w.finish(false))
        .await
        .context("watches did not end after SIGTERM")??;
    let code = p.wait_exit(SHUTDOWN_TIMEOUT + Duration::from_secs(10));
    let exit = t.elapsed();
    ensure!(code == Some(0), "proxy exit code after SIGTERM: {code:?}");
    let mut clean = 0;
    for x in &seen {
        match &x.end {
            End::Clean if x.errors.is_empty() => clean += 1,
            other => bail!("a watch at SIGTERM ended {other:?}"),
        }
    }
    let direct_events = direct.events();
    let compared2 = compare(
        &seen,
        &direct_events[..expected2.min(direct_events.len())],
        "resumed watches",
    )?;
    fig.put(
        "events compared after resume",
        format!("{compared2} ({} x {expected2})", s.watches),
    );
    fig.put(
        "SIGTERM",
        format!(
            "{whole} LISTs in flight finished whole, {clean} of {} watches ended cleanly on an event boundary, exit 0 after {:.1} s (SHUTDOWN_TIMEOUT {:?})",
            s.watches,
            exit.as_secs_f64(),
            SHUTDOWN_TIMEOUT
        ),
    );
    Ok(())
}
