//! The phases (see the crate documentation).

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kube_api_rewriter_testkit::{ControlPlane, ProxyProc, temp_dir, wait_crd_established};

use crate::client::{self, End, Event, Progress, Seen};
use crate::procstat;

/// Sizes of one run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Concurrent watches through the proxy.
    pub watches: usize,
    /// Objects changed under the watches.
    pub objects: usize,
    /// Changes per object (after its creation).
    pub changes: usize,
    /// Idle and half-open connections of the flood (split between the two ports).
    pub flood: usize,
    /// Objects of the large LIST (about 200 KB each).
    pub big_objects: usize,
    /// LISTs in flight at SIGTERM.
    pub lists_at_sigterm: usize,
    /// Requests timed with and without the flood.
    pub samples: usize,
}

impl Settings {
    /// The full suite (`scripts/load.sh`).
    pub fn full() -> Self {
        Self {
            watches: 1000,
            objects: 100,
            changes: 10,
            flood: 5000,
            big_objects: 250,
            lists_at_sigterm: 10,
            samples: 50,
        }
    }

    /// The short form run by `cargo test`.
    pub fn short() -> Self {
        Self {
            watches: 200,
            objects: 100,
            changes: 10,
            flood: 1000,
            // 30 MB. What the proxy holds for two stalled streams anyway (two 1 MiB windows, a
            // 200 KB object being rewritten, allocator slack of a debug build while 200 watches
            // are busy) does not grow with the LIST and reached +6.7 MB at 12 MB, +10.1 MB at
            // 20 MB; a proxy that buffered the LIST would grow by all of it.
            big_objects: 150,
            lists_at_sigterm: 4,
            samples: 20,
        }
    }
}

/// What a run measured.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    /// Lines of `name: value`, in order.
    pub lines: Vec<(String, String)>,
}

impl Figures {
    fn put(&mut self, k: &str, v: impl std::fmt::Display) {
        let v = v.to_string();
        eprintln!("[load] {k}: {v}");
        self.lines.push((k.to_owned(), v));
    }
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (k, v) in &self.lines {
            writeln!(f, "{k}: {v}")?;
        }
        Ok(())
    }
}

const NS: &str = "load";
const BIG_NS: &str = "big";
const VMS: &str = "/apis/kubevirt.io/v1/namespaces";
const RENAMED: &str = "/apis/internal.virtualization.deckhouse.io/v1/namespaces";
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);

fn vm(name: &str, note: &str) -> Vec<u8> {
    serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "annotations": {"note": note}},
        "spec": {"running": false, "template": {"spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}}}},
    })
    .to_string()
    .into_bytes()
}

fn patch(step: usize, note: &str) -> (&'static str, Vec<u8>) {
    (
        "application/merge-patch+json",
        serde_json::json!({"metadata": {"annotations": {"step": step.to_string(), "note": note}}})
            .to_string()
            .into_bytes(),
    )
}

/// A watch straight to kube-apiserver: `kubectl get --raw` streams the body. When
/// kube-apiserver ends it (it closes watchers that fall behind; kubectl then exits) it is
/// started again from the last resourceVersion seen, as the proxy watches are, until dropped.
struct Direct {
    child: Arc<Mutex<Option<std::process::Child>>>,
    events: Arc<Mutex<Vec<Event>>>,
    done: Arc<std::sync::atomic::AtomicBool>,
    resumed: Arc<AtomicUsize>,
}

impl Direct {
    fn start(cp: &ControlPlane, path: &str) -> Direct {
        let events = Arc::new(Mutex::new(Vec::<Event>::new()));
        let child = Arc::new(Mutex::new(None));
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let resumed = Arc::new(AtomicUsize::new(0));
        let (e, c, d, r) = (
            Arc::clone(&events),
            Arc::clone(&child),
            Arc::clone(&done),
            Arc::clone(&resumed),
        );
        let kubeconfig = cp.kubeconfig().to_owned();
        let path = path.to_owned();
        std::thread::spawn(move || {
            let mut path = path;
            loop {
                let mut ch = match std::process::Command::new(kube_api_rewriter_testkit::kubectl_bin())
                    .args(["--kubeconfig", &kubeconfig, "get", "--raw", &path])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                {
                    Ok(ch) => ch,
                    Err(_) => return,
                };
                let Some(out) = ch.stdout.take() else { return };
                *c.lock().expect("lock") = Some(ch);
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if let Some(ev) = Event::parse(line.as_bytes()) {
                        e.lock().expect("lock").push(ev);
                    }
                }
                if let Some(mut ch) = c.lock().expect("lock").take() {
                    let _ = ch.wait();
                }
                if d.load(Ordering::SeqCst) {
                    return;
                }
                let Some(last) = e.lock().expect("lock").last().map(|ev| ev.rv.clone()) else {
                    return;
                };
                let Some((a, b)) = path.split_once("resourceVersion=") else {
                    return;
                };
                let rest = b.find('&').map_or("", |i| &b[i..]).to_owned();
                path = format!("{a}resourceVersion={last}{rest}");
                r.fetch_add(1, Ordering::SeqCst);
            }
        });
        Direct {
            child,
            events,
            done,
            resumed,
        }
    }

    fn len(&self) -> usize {
        self.events.lock().expect("lock").len()
    }

    fn events(&self) -> Vec<Event> {
        self.events.lock().expect("lock").clone()
    }

    fn resumed(&self) -> usize {
        self.resumed.load(Ordering::SeqCst)
    }

    /// No more restarts (before kube-apiserver is killed).
    fn stop_resuming(&self) {
        self.done.store(true, Ordering::SeqCst);
    }
}

impl Drop for Direct {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(mut ch) = self.child.lock().expect("lock").take() {
            let _ = ch.kill();
            let _ = ch.wait();
        }
    }
}

/// N proxy watches from one resourceVersion.
struct Watches {
    count: Arc<AtomicUsize>,
    started: Arc<AtomicUsize>,
    progress: Vec<Arc<Progress>>,
    port: u16,
    /// Resume watches kube-apiserver ends cleanly (off before it is killed and at SIGTERM).
    resume: Arc<std::sync::atomic::AtomicBool>,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<Seen>>>,
}

impl Watches {
    fn open(port: u16, n: usize, path: &str) -> Watches {
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
    fn report(&self, expected: usize) -> String {
        let mut by_count = std::collections::BTreeMap::<usize, usize>::new();
        let mut short = Vec::new();
        let socks = procstat::sockets(self.port);
        // The queues of both ends of a watch's connection to the proxy.
        let queues = |local: u16| {
            let end = |f: &dyn Fn(&kube_api_rewriter_testkit::TcpSocket) -> bool| {
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
    fn resumed(&self) -> (usize, usize) {
        let n: Vec<usize> = self
            .progress
            .iter()
            .map(|p| p.resumed.load(Ordering::SeqCst))
            .collect();
        (n.iter().filter(|x| **x > 0).count(), n.iter().sum())
    }

    async fn finish(self, stop: bool) -> anyhow::Result<Vec<Seen>> {
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
fn upstream_sockets(cp: &ControlPlane) -> String {
    let Ok(api) = cp.get("APISERVER_PORT").parse::<u16>() else {
        return String::new();
    };
    let socks: Vec<String> = procstat::sockets(api)
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
fn terminated_watchers(cp: &ControlPlane) -> String {
    let o = cp.kubectl(&["get", "--raw", "/metrics"]);
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("apiserver_terminated_watchers_total"))
        .collect();
    format!("kube-apiserver terminated watchers: {lines:?}")
}

/// Every watch saw exactly `direct`, restored, with status 200.
fn compare(seen: &[Seen], direct: &[Event], what: &str) -> anyhow::Result<usize> {
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

/// Median and maximum of the latencies of `n` GETs on new connections.
async fn latency(port: u16, path: &str, n: usize) -> anyhow::Result<(Duration, Duration)> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let (status, _) =
            tokio::time::timeout(Duration::from_secs(60), client::call(port, "GET", path, None))
                .await
                .context("no answer within 60 s")??;
        v.push(t.elapsed());
        ensure!(status == 200, "GET {path}: {status}");
    }
    v.sort();
    Ok((v[v.len() / 2], v[v.len() - 1]))
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// Runs every phase; panics never, returns the first violated expectation as an error.
pub fn run(s: &Settings) -> anyhow::Result<Figures> {
    let nofile = procstat::raise_nofile();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut fig = Figures::default();
    fig.put("open files (driver soft limit)", format!("{nofile:?}"));
    let cp = ControlPlane::up();
    let dir = temp_dir("load");
    let mut p = ProxyProc::start(
        &dir,
        &[
            ("KUBECONFIG", cp.kubeconfig()),
            ("LOG_LEVEL", "info"),
            ("SHUTDOWN_TIMEOUT", "20s"),
            ("MAX_CONNECTIONS", "4096"),
        ],
    );
    let pid = p.child.id();
    p.apply_vm_crd();
    if let Some(e) = wait_crd_established(&p, "virtualmachines.kubevirt.io") {
        bail!("CRD not established: {e}");
    }
    for ns in [NS, BIG_NS] {
        let o = cp.kubectl(&["create", "namespace", ns]);
        ensure!(o.status.success(), "namespace {ns}: {o:?}");
    }
    let port = p.port;
    let res = rt.block_on(phases(s, &cp, &mut p, port, pid, &mut fig));
    let res = match res {
        Ok(()) => {
            let _ = std::fs::remove_dir_all(&dir);
            Ok(fig)
        }
        Err(e) => {
            // Keep the proxy's log for the post-mortem; name its warnings here.
            let logs = p.logs();
            let warn: Vec<&str> = logs
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                .collect();
            let mut kinds = std::collections::BTreeMap::<String, usize>::new();
            for l in &warn {
                // The message without the timestamp and fields, roughly.
                let key: String = l.split_whitespace().skip(2).take(8).collect::<Vec<_>>().join(" ");
                *kinds.entry(key).or_default() += 1;
            }
            Err(e.context(format!(
                "proxy log kept at {}; {} WARN/ERROR lines: {kinds:#?}",
                p.log.display(),
                warn.len()
            )))
        }
    };
    drop(p);
    drop(cp);
    res
}

async fn list_rv(port: u16, path: &str) -> anyhow::Result<(String, Vec<(String, String)>)> {
    let l = client::json(port, "GET", path, None).await?;
    let rv = l["metadata"]["resourceVersion"].as_str().unwrap_or("").to_owned();
    let mut items: Vec<(String, String)> = l["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|o| {
                    (
                        o["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                        o["metadata"]["resourceVersion"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    items.sort();
    Ok((rv, items))
}

/// Changes every object once (`step`), a few writers at a time.
async fn change_all(port: u16, objects: usize, step: usize, create: bool) -> anyhow::Result<()> {
    let writers = 8;
    let mut tasks = Vec::new();
    for w in 0..writers {
        tasks.push(tokio::spawn(async move {
            for i in (w..objects).step_by(writers) {
                let name = format!("vm-{i:04}");
                if create {
                    client::json(
                        port,
                        "POST",
                        &format!("{VMS}/{NS}/virtualmachines"),
                        Some(("application/json", vm(&name, "0"))),
                    )
                    .await?;
                } else {
                    client::json(
                        port,
                        "PATCH",
                        &format!("{VMS}/{NS}/virtualmachines/{name}"),
                        Some(patch(step, &step.to_string())),
                    )
                    .await?;
                }
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

async fn phases(
    s: &Settings,
    cp: &ControlPlane,
    p: &mut ProxyProc,
    port: u16,
    pid: u32,
    fig: &mut Figures,
) -> anyhow::Result<()> {
    // ---- 1. watches
    let (rv0, _) = list_rv(port, &format!("{VMS}/{NS}/virtualmachines")).await?;
    let q = |rv: &str| format!("?watch=1&resourceVersion={rv}&timeoutSeconds=1800");
    let direct = Direct::start(
        cp,
        &format!("{RENAMED}/{NS}/internalvirtualizationvirtualmachines{}", q(&rv0)),
    );
    let before = procstat::of(pid);
    let t = Instant::now();
    let w = Watches::open(port, s.watches, &format!("{VMS}/{NS}/virtualmachines{}", q(&rv0)));
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
    let after = procstat::of(pid);
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
        format!("{:.2}", after.cpu_s - before.cpu_s),
    );
    fig.put(
        "proxy open sockets with the watches",
        kube_api_rewriter_testkit::open_sockets(pid),
    );
    let api_port: u16 = cp.get("APISERVER_PORT").parse()?;
    // Established sockets to kube-apiserver: the proxy's, plus one of the direct kubectl watch.
    let upstream = kube_api_rewriter_testkit::tcp_timers(None, api_port).len();
    fig.put(
        "upstream connections to kube-apiserver (proxy + 1 kubectl)",
        format!(
            "{upstream} for {} watches (up to 100 on a connection each, the rest at most 100 streams per connection)",
            s.watches
        ),
    );

    // ---- 2. restart
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
        &format!("{RENAMED}/{NS}/internalvirtualizationvirtualmachines{}", q(&rv1)),
    );
    let w = Watches::open(port, s.watches, &format!("{VMS}/{NS}/virtualmachines{}", q(&rv1)));
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

    // ---- 3. slow clients
    let note = "x".repeat(200_000);
    for i in 0..s.big_objects {
        client::json(
            port,
            "POST",
            &format!("{VMS}/{BIG_NS}/virtualmachines"),
            Some(("application/json", vm(&format!("big-{i:04}"), &note))),
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
    let base = procstat::of(pid);
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
    let stalled = procstat::of(pid);
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

    // ---- 4. flood
    let one = format!("{VMS}/{NS}/virtualmachines/vm-0000");
    let (med0, max0) = latency(port, &one, s.samples).await?;
    let sockets0 = kube_api_rewriter_testkit::open_sockets(pid);
    let mut flood = Vec::with_capacity(s.flood);
    let t = Instant::now();
    for i in 0..s.flood {
        let target = if i % 2 == 0 { port } else { p.mon_port };
        match tokio::net::TcpStream::connect(("127.0.0.1", target)).await {
            Ok(mut c) => {
                if i % 4 < 2 {
                    // Half-open: part of a request head, never finished.
                    use tokio::io::AsyncWriteExt as _;
                    let _ = c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").await;
                }
                flood.push(c);
            }
            Err(e) => bail!("flood connection {i}: {e}"),
        }
    }
    fig.put(
        "flood connections opened",
        format!(
            "{} in {:.1} s (half to each port, half of them half-open)",
            s.flood,
            t.elapsed().as_secs_f64()
        ),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = kube_api_rewriter_testkit::open_sockets(pid).saturating_sub(sockets0);
    let (med1, max1) = latency(port, &one, s.samples).await?;
    fig.put(
        "flood connections held by the proxy",
        format!("{held} (the rest closed at the listeners' caps)"),
    );
    fig.put(
        "GET latency without flood (median / max)",
        format!("{} / {}", ms(med0), ms(max0)),
    );
    fig.put(
        "GET latency with flood (median / max)",
        format!("{} / {}", ms(med1), ms(max1)),
    );
    fig.put(
        "GET median latency ratio (flood / none)",
        format!("{:.2}", med1.as_secs_f64() / med0.as_secs_f64()),
    );
    drop(flood);

    // ---- 5. SIGTERM
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
    let before_term = procstat::of(pid);
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
    let end = procstat::of(pid);
    let _ = (before_term, end);
    Ok(())
}
