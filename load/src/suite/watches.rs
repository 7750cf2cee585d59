//! The proxy watches of a phase, the comparison of what they saw with the direct watch, and
//! the diagnostics printed when they fall short.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{bail, ensure};
use kube_api_rewriter_testkit::{ControlPlane, procfs};

use crate::client::{self, Event, Progress, Seen};

/// N proxy watches from one resourceVersion.
pub(super) struct Watches {
    /// Events received by all of them.
    pub(super) count: Arc<AtomicUsize>,
    /// Watches that got their response head.
    pub(super) started: Arc<AtomicUsize>,
    progress: Vec<Arc<Progress>>,
    port: u16,
    /// Resume watches kube-apiserver ends cleanly (off before it is killed and at SIGTERM).
    pub(super) resume: Arc<std::sync::atomic::AtomicBool>,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<Seen>>>,
}

impl Watches {
    /// Opens `n` watches of `path` through the proxy at `port`.
    pub(super) fn open(port: u16, n: usize, path: &str) -> Watches {
        let count = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(AtomicUsize::new(0));
        let (stop, rx) = tokio::sync::watch::channel(false);
        let progress: Vec<Arc<Progress>> = (0..n).map(|_| Arc::default()).collect();
        let resume = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let tasks = progress
            .iter()
            .map(|p| {
                tokio::spawn(client::watch(
                    port,
                    path.to_owned(),
                    Arc::clone(&count),
                    Arc::clone(&started),
                    Arc::clone(p),
                    rx.clone(),
                    Arc::clone(&resume),
                ))
            })
            .collect();
        Watches {
            count,
            started,
            progress,
            port,
            resume,
            stop,
            tasks,
        }
    }

    /// The per-watch diagnostics of a failure: how many watches got how many events, and each
    /// watch short of `expected` (the first 40) with its status, timings and connection.
    pub(super) fn report(&self, expected: usize) -> String {
        let mut by_count = std::collections::BTreeMap::<usize, usize>::new();
        let mut short = Vec::new();
        let socks = procfs::tcp_sockets_on(self.port);
        // The queues of both ends of a watch's connection to the proxy.
        let queues = |local: u16| {
            let end = |f: &dyn Fn(&procfs::TcpSocket) -> bool| {
                socks.iter().find(|s| f(s)).map_or("gone".to_owned(), |s| {
                    format!("tx {} rx {}", s.tx_queue, s.rx_queue)
                })
            };
            format!(
                "driver end {}, proxy end {}",
                end(&|s| s.local == local && s.remote == self.port),
                end(&|s| s.local == self.port && s.remote == local)
            )
        };
        for (i, p) in self.progress.iter().enumerate() {
            let n = p.events.load(Ordering::SeqCst);
            *by_count.entry(n).or_default() += 1;
            if n < expected {
                let local = u16::try_from(p.local_port.load(Ordering::SeqCst)).unwrap_or(0);
                short.push(format!("  watch {i}: {}; {}", p.describe(), queues(local)));
            }
        }
        let mut out = format!(
            "watches by events received (events: watches): {by_count:?}; {} of {} short of {expected}",
            short.len(),
            self.progress.len()
        );
        for l in short.iter().take(40) {
            out.push('\n');
            out.push_str(l);
        }
        if short.len() > 40 {
            out.push_str(&format!("\n  ... and {} more", short.len() - 40));
        }
        out
    }

    /// Watches resumed after kube-apiserver ended them cleanly, and how often.
    pub(super) fn resumed(&self) -> (usize, usize) {
        let n: Vec<usize> = self
            .progress
            .iter()
            .map(|p| p.resumed.load(Ordering::SeqCst))
            .collect();
        (n.iter().filter(|x| **x > 0).count(), n.iter().sum())
    }

    /// Waits for every watch to end (after telling them to stop, if `stop`); what each saw.
    pub(super) async fn finish(self, stop: bool) -> anyhow::Result<Vec<Seen>> {
        if stop {
            let _ = self.stop.send(true);
        }
        let mut out = Vec::new();
        for t in self.tasks {
            out.push(t.await??);
        }
        Ok(out)
    }
}

/// The proxy's (and kubectl's) connections to kube-apiserver with their socket queues: a
/// connection whose receive queue stays full is one the proxy stopped reading.
pub(super) fn upstream_sockets(cp: &ControlPlane) -> String {
    let Ok(api) = cp.get("APISERVER_PORT").parse::<u16>() else {
        return String::new();
    };
    let socks: Vec<String> = procfs::tcp_sockets_on(api)
        .into_iter()
        .filter(|s| s.remote == api)
        .map(|s| format!("{}(tx {} rx {})", s.local, s.tx_queue, s.rx_queue))
        .collect();
    format!(
        "connections to kube-apiserver: {}: {}",
        socks.len(),
        socks.join(" ")
    )
}

/// kube-apiserver's own count of watches it closed because they read too slowly
/// (`apiserver_terminated_watchers_total`, by resource).
pub(super) fn terminated_watchers(cp: &ControlPlane) -> String {
    let o = cp.kubectl(&["get", "--raw", "/metrics"]);
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("apiserver_terminated_watchers_total"))
        .collect();
    format!("kube-apiserver terminated watchers: {lines:?}")
}

/// Every watch saw exactly `direct`, restored, with status 200.
pub(super) fn compare(seen: &[Seen], direct: &[Event], what: &str) -> anyhow::Result<usize> {
    let mut compared = 0;
    for (i, s) in seen.iter().enumerate() {
        ensure!(s.status == 200, "{what}: watch {i} answered {}", s.status);
        let ours: Vec<(&str, &str, &str)> = s
            .events
            .iter()
            .map(|e| (e.kind.as_str(), e.name.as_str(), e.rv.as_str()))
            .collect();
        let theirs: Vec<(&str, &str, &str)> = direct
            .iter()
            .map(|e| (e.kind.as_str(), e.name.as_str(), e.rv.as_str()))
            .collect();
        if ours != theirs {
            let at = ours.iter().zip(&theirs).position(|(a, b)| a != b);
            bail!(
                "{what}: watch {i} saw {} events, direct {}; first difference at {at:?}: {:?} vs {:?}",
                ours.len(),
                theirs.len(),
                at.and_then(|a| ours.get(a)),
                at.and_then(|a| theirs.get(a))
            );
        }
        for e in &s.events {
            ensure!(
                e.object_kind == "VirtualMachine" && e.api_version == "kubevirt.io/v1",
                "{what}: watch {i}: not restored: {e:?}"
            );
        }
        compared += s.events.len();
    }
    Ok(compared)
}
