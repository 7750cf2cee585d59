//! Phase 3, `slow`: a client that stops reading a large LIST and one that stops reading a busy
//! watch; the proxy must not buffer for them, and the other watches must not be held up.

use std::io::{Read as _, Write as _};
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::ensure;
use kube_api_rewriter_testkit::{ControlPlane, procfs};

use super::direct::Direct;
use super::requests::{change_all, list_rv, patch, vm};
use super::watches::{Watches, terminated_watchers, upstream_sockets};
use super::{BIG_NS, Figures, Settings, VMS};
use crate::client;

/// Runs phase 3 beside the resumed watches; returns the large LIST's path and the events
/// each resumed watch has seen.
pub(super) async fn run(
    s: &Settings,
    cp: &ControlPlane,
    port: u16,
    pid: u32,
    fig: &mut Figures,
    w: &Watches,
    direct: &Direct,
) -> anyhow::Result<(String, usize)> {
    let note = "x".repeat(200_000);
    for i in 0..s.big_objects {
        client::json(
            port,
            "POST",
            &format!("{VMS}/{BIG_NS}/virtualmachines"),
            Some(("application/json", vm(BIG_NS, &format!("big-{i:04}"), &note))),
        )
        .await?;
    }
    let big_path = format!("{VMS}/{BIG_NS}/virtualmachines");
    let (_, big_len) = {
        let (st, b) = client::call(port, "GET", &big_path, None).await?;
        ensure!(st == 200, "big LIST {st}");
        (st, b.len())
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let base = procfs::memory(pid);
    let mut stalled_list = std::net::TcpStream::connect(("127.0.0.1", port))?;
    write!(
        stalled_list,
        "GET {big_path} HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n\r\n"
    )?;
    let mut first = vec![0u8; 64 << 10];
    stalled_list.read_exact(&mut first)?;
    let (brv, _) = list_rv(port, &format!("{big_path}?limit=1")).await?;
    let mut stalled_watch = std::net::TcpStream::connect(("127.0.0.1", port))?;
    write!(
        stalled_watch,
        "GET {big_path}?watch=1&resourceVersion={brv} HTTP/1.1\r\nHost: x\r\n\r\n"
    )?;
    // Busy: every big object changes twice while neither client reads.
    for step in 0..2 {
        for i in 0..s.big_objects {
            client::json(
                port,
                "PATCH",
                &format!("{big_path}/big-{i:04}"),
                Some(patch(step, &format!("{step}{}", &note[1..]))),
            )
            .await?;
        }
    }
    change_all(port, s.objects, s.changes + 2, false).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stalled = procfs::memory(pid);
    let growth = stalled.rss_kib.saturating_sub(base.rss_kib);
    fig.put(
        "large LIST",
        format!("{big_len} bytes ({} objects)", s.big_objects),
    );
    fig.put(
        "proxy RSS with a stalled LIST reader and a stalled busy watch",
        format!("{} KiB -> {} KiB (+{growth} KiB)", base.rss_kib, stalled.rss_kib),
    );
    ensure!(
        (growth as usize) * 1024 < big_len / 2,
        "the proxy buffered for a stalled client: +{growth} KiB for a {big_len}-byte LIST"
    );
    // The others were not held up: each resumed watch got both changes of every object.
    let expected2 = 2 * s.objects;
    let delivered = client::until(Duration::from_secs(120), || {
        w.count.load(Ordering::SeqCst) >= expected2 * s.watches && direct.len() >= expected2
    })
    .await;
    ensure!(
        delivered,
        "resumed watches: {} of {} events\n{}\n{}\n{}",
        w.count.load(Ordering::SeqCst),
        expected2 * s.watches,
        w.report(expected2),
        upstream_sockets(cp),
        terminated_watchers(cp)
    );
    // The stalled LIST is whole once read.
    let mut rest = Vec::new();
    stalled_list.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = stalled_list.read(&mut buf)?;
        rest.extend_from_slice(&buf[..n]);
        if n == 0 || rest.ends_with(b"\r\n0\r\n\r\n") {
            break;
        }
    }
    ensure!(
        rest.ends_with(b"\r\n0\r\n\r\n"),
        "the stalled LIST did not end with its last chunk"
    );
    drop(stalled_list);
    drop(stalled_watch);
    Ok((big_path, expected2))
}
