//! The proxy benchmark: the same requests through the proxy and directly, side by side.
//! `scripts/bench-proxy.sh` builds it in release mode, brings up the local control plane and runs
//! it; it can also be run by hand:
//!
//! ```sh
//! cargo build --release -p kube-api-rewriter-proxy --bin kube-api-rewriter -p kube-api-rewriter-benches --bin bench_proxy
//! target/release/bench_proxy --proxy-bin target/release/kube-api-rewriter \
//!     [--kubeconfig ADMIN_KUBECONFIG] [--vms 10000] [--events 20000] [--list-mb 200] ...
//! ```
//!
//! Part 1 (only with `--kubeconfig`): the real kube-apiserver. The renamed VirtualMachine CRD is
//! applied through the proxy, `--vms` realistic VMs are created directly (parallel POSTs of the
//! renamed kind), then a LIST of all of them is timed through the proxy and directly, and one
//! watch through the proxy and one directly receive the events of `--events` merge patches.
//!
//! Part 2: an in-memory upstream double in this process (HTTP/1.1 on 127.0.0.1) serving a
//! pre-built LIST of renamed VMs (`--list-mb`), the same bytes on a path the rules do not touch,
//! a pre-built watch stream and a small object, at memory speed.
//!
//! Part 3: a kube-apiserver-like upstream double (HTTP/1.1 written by hand): a `--events` watch
//! sent as one HTTP chunk per event, many chunks per 64 KiB write, and a LIST of `--burst-vms`
//! VMs, each timed through the proxy and directly, with the proxy's write syscalls (`syscw` of
//! `/proc/PID/io`: write and writev) and CPU seconds (threads' `schedstat`) per transfer (for a
//! LIST also this process's, the client's and the doubles', and the floor that CPU sets on this
//! machine's cores), plus one
//! untimed watch each way under `perf stat` on the syscall tracepoints that counts every kind
//! of write (send/sendto too) and tells the proxy's socket writes from its eventfd wake-ups
//! (and gives the double's socket writes as the direct baseline); then the time from the
//! double writing a lone watch event after an idle pause to the client receiving it. The
//! watches run again from two TLS doubles (`h2.rs`): one offering HTTP/2 and HTTP/1.1 as
//! kube-apiserver does (the proxy's watches take an HTTP/1.1 connection each; the LIST runs
//! from it too, over the pooled HTTP/2 lanes), one speaking only HTTP/2 (the watches share the
//! lanes).
//! `--only burst` runs just this part (without `--kubeconfig`).
//!
//! Everything binds 127.0.0.1, every loop is bounded, and the proxies started here are stopped
//! at the end.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper::body::{Frame, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use kube_api_rewriter_layer::body as pbody;
use kube_api_rewriter_proxy::upstream::UpstreamSource;
use kube_api_rewriter_proxy::upstream::Upstream;
use kube_api_rewriter_testkit::report::Report;
use serde_json::json;

mod h2;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = Error> = std::result::Result<T, E>;

const GROUP: &str = "internal.virtualization.deckhouse.io";
const KIND: &str = "InternalVirtualizationVirtualMachine";
const RESOURCE: &str = "internalvirtualizationvirtualmachines";
const LABEL: &str = "kubevirt.internal.virtualization.deckhouse.io";
const NS: &str = "default";

// ------------------------------------------------------------------------------------ settings

struct Args {
    proxy_bin: PathBuf,
    kubeconfig: Option<PathBuf>,
    crd: PathBuf,
    work_dir: PathBuf,
    vms: usize,
    events: usize,
    list_mb: usize,
    double_events: usize,
    gets: usize,
    repeat: usize,
    concurrency: usize,
    watch_concurrency: usize,
    burst_vms: usize,
    lone_rounds: usize,
    skip_double: bool,
    only: Option<String>,
}

impl Args {
    fn wants(&self, section: &str) -> bool {
        self.only
            .as_deref()
            .is_none_or(|o| o.split(',').any(|s| s == section))
    }
}

fn args() -> Result<Args> {
    let mut a = Args {
        proxy_bin: PathBuf::from("target/release/kube-api-rewriter"),
        kubeconfig: None,
        // The repository's testdata.
        crd: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/kubevirt-crds/original/virtualmachines.yaml"),
        work_dir: std::env::temp_dir(),
        vms: 10_000,
        events: 20_000,
        list_mb: 200,
        double_events: 100_000,
        gets: 2_000,
        repeat: 3,
        concurrency: 32,
        watch_concurrency: 4,
        burst_vms: 10_000,
        lone_rounds: 20,
        skip_double: false,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        if k == "--print-vm" {
            // The object the double serves, for checking by hand (`kube-api-rewriter rewrite`).
            println!("{}", vm("vm-0000001", true));
            std::process::exit(0);
        }
        if k == "--skip-double" {
            a.skip_double = true;
            continue;
        }
        let v = it.next().ok_or_else(|| format!("{k} needs a value"))?;
        let n = || v.parse::<usize>().map_err(|e| format!("{k} {v}: {e}"));
        match k.as_str() {
            "--proxy-bin" => a.proxy_bin = PathBuf::from(&v),
            "--kubeconfig" => a.kubeconfig = Some(PathBuf::from(&v)).filter(|p| !p.as_os_str().is_empty()),
            "--crd" => a.crd = PathBuf::from(&v),
            "--work-dir" => a.work_dir = PathBuf::from(&v),
            "--vms" => a.vms = n()?,
            "--events" => a.events = n()?,
            "--list-mb" => a.list_mb = n()?,
            "--double-events" => a.double_events = n()?,
            "--gets" => a.gets = n()?,
            "--repeat" => a.repeat = n()?.max(1),
            "--concurrency" => a.concurrency = n()?.max(1),
            "--watch-concurrency" => a.watch_concurrency = n()?.max(1),
            "--burst-vms" => a.burst_vms = n()?,
            "--lone-rounds" => a.lone_rounds = n()?.max(1),
            "--only" => a.only = Some(v.clone()),
            _ => return Err(format!("unknown argument {k}").into()),
        }
    }
    Ok(a)
}

// ------------------------------------------------------------------------------------ objects

/// A realistic VirtualMachine (about 4 KB of JSON, 5 KB once kube-apiserver adds its
/// managedFields) with the renamed names, as kube-apiserver stores it. `server` adds what the
/// server adds (uid, resourceVersion, managedFields, status).
fn vm(name: &str, server: bool) -> serde_json::Value {
    // Only the object's own metadata is renamed; inside spec.template the names stay original
    // (the rules leave a VM's template alone, on the way up as on the way back).
    let l = |k: &str| format!("{LABEL}/{k}");
    let o = |k: &str| format!("kubevirt.io/{k}");
    let user_data = format!(
        "#cloud-config\nhostname: {name}\nssh_pwauth: false\nusers:\n  - name: cloud\n    sudo: ALL=(ALL) NOPASSWD:ALL\n    shell: /bin/bash\n    ssh_authorized_keys:\n      - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIO7bench0bench1bench2bench3bench4bench5bench6 bench@example\npackage_update: true\npackages: [qemu-guest-agent, curl, jq, htop]\nwrite_files:\n  - path: /etc/motd\n    content: |\n      {name} is managed by the virtualization benchmark; changes are lost on restart.\n  - path: /etc/sysctl.d/90-bench.conf\n    content: |\n      net.core.somaxconn = 4096\n      vm.swappiness = 10\nruncmd:\n  - [systemctl, enable, --now, qemu-guest-agent]\n  - [sh, -c, 'echo ready > /run/bench-ready']\n"
    );
    let mut v = json!({
        "apiVersion": format!("{GROUP}/v1"),
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {
                l("vm"): name, l("os"): "linux", "app": "bench", "tier": "backend",
                "app.kubernetes.io/managed-by": "virt-operator-internal-virtualization",
            },
            "annotations": {
                l("latest-observed-api-version"): "v1",
                l("storage-observed-api-version"): "v1alpha3",
                "bench/description": "a benchmark virtual machine with a realistic specification",
            },
            "finalizers": [format!("{LABEL}/virtualMachineControllerFinalize")],
        },
        "spec": {
            "running": false,
            "template": {
                "metadata": {
                    "labels": {o("vm"): name, o("domain"): name, o("size"): "medium", "app": "bench"},
                    "annotations": {o("allow-pod-bridge-network-live-migration"): "true"},
                },
                "spec": {
                    "domain": {
                        "cpu": {"cores": 2, "sockets": 1, "threads": 1, "model": "host-model"},
                        "memory": {"guest": "2Gi"},
                        "resources": {"requests": {"memory": "2Gi", "cpu": "1"}, "limits": {"memory": "2Gi", "cpu": "2"}},
                        "machine": {"type": "q35"},
                        "firmware": {"serial": "6d3bd5a2-0cc5-4e5e-9b57-3c8d1f4f1c1e", "bootloader": {"efi": {"secureBoot": false}}},
                        "features": {"acpi": {}, "apic": {}, "smm": {"enabled": true}},
                        "clock": {"utc": {}, "timer": {"rtc": {"tickPolicy": "catchup"}, "pit": {"tickPolicy": "delay"}, "hpet": {"present": false}}},
                        "devices": {
                            "disks": [
                                {"name": "rootdisk", "disk": {"bus": "virtio"}, "bootOrder": 1},
                                {"name": "datadisk", "disk": {"bus": "virtio"}},
                                {"name": "cloudinitdisk", "disk": {"bus": "virtio"}},
                            ],
                            "interfaces": [{"name": "default", "masquerade": {}, "model": "virtio",
                                "ports": [{"name": "ssh", "port": 22, "protocol": "TCP"}, {"name": "http", "port": 80, "protocol": "TCP"}]}],
                            "rng": {},
                            "networkInterfaceMultiqueue": true,
                        },
                    },
                    "networks": [{"name": "default", "pod": {}}],
                    "terminationGracePeriodSeconds": 30,
                    "nodeSelector": {"kubernetes.io/os": "linux", o("schedulable"): "true"},
                    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                        "weight": 100,
                        "podAffinityTerm": {"labelSelector": {"matchLabels": {o("vm"): name}}, "topologyKey": "kubernetes.io/hostname"},
                    }]}},
                    "tolerations": [{"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"}],
                    "volumes": [
                        {"name": "rootdisk", "containerDisk": {"image": "quay.io/containerdisks/fedora:39", "imagePullPolicy": "IfNotPresent"}},
                        {"name": "datadisk", "persistentVolumeClaim": {"claimName": format!("{name}-data")}},
                        {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": user_data}},
                    ],
                },
            },
        },
    });
    if server {
        let m = v["metadata"].as_object_mut().expect("metadata");
        m.insert("uid".into(), json!("0b7e5d3e-8f1a-4a5b-9a3e-2f1c5d6e7f80"));
        m.insert("resourceVersion".into(), json!("123456"));
        m.insert("generation".into(), json!(1));
        m.insert("creationTimestamp".into(), json!("2024-05-01T10:00:00Z"));
        m.insert(
            "managedFields".into(),
            json!([{
                "manager": "kubectl-client-side-apply", "operation": "Update",
                "apiVersion": format!("{GROUP}/v1"), "time": "2024-05-01T10:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {
                        "f:annotations": {".": {}, format!("f:{}", l("latest-observed-api-version")): {}, format!("f:{}", l("storage-observed-api-version")): {}, "f:bench/description": {}},
                        "f:labels": {".": {}, "f:app": {}, "f:tier": {}, format!("f:{}", l("vm")): {}, format!("f:{}", l("os")): {}},
                    },
                    "f:spec": {".": {}, "f:running": {}, "f:template": {".": {},
                        "f:metadata": {".": {}, "f:labels": {".": {}, "f:app": {}, format!("f:{}", o("vm")): {}, format!("f:{}", o("domain")): {}}},
                        "f:spec": {".": {}, "f:domain": {".": {}, "f:cpu": {}, "f:devices": {}, "f:memory": {}, "f:resources": {}},
                            "f:networks": {}, "f:volumes": {}, "f:nodeSelector": {}, "f:affinity": {}, "f:tolerations": {}}}},
                },
            }]),
        );
        v.as_object_mut().expect("object").insert(
            "status".into(),
            json!({"printableStatus": "Stopped", "created": false, "ready": false,
                "conditions": [{"type": "Ready", "status": "False", "reason": "VMINotExists", "lastProbeTime": null, "lastTransitionTime": "2024-05-01T10:00:01Z"}],
                "volumeSnapshotStatuses": [{"name": "rootdisk", "enabled": false, "reason": "Volume type has no StorageClass defined"}]}),
        );
    }
    v
}

/// A small object for the latency runs (about 600 bytes).
fn small_vm(name: &str) -> String {
    json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": KIND,
        "metadata": {"name": name, "namespace": NS, "uid": "0b7e5d3e-8f1a-4a5b-9a3e-2f1c5d6e7f81", "resourceVersion": "42",
            "labels": {format!("{LABEL}/vm"): name, "app": "bench"}},
        "spec": {"running": false, "template": {"metadata": {"labels": {"kubevirt.io/vm": name}},
            "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}}}},
    })
    .to_string()
}

// ------------------------------------------------------------------------------------ the proxy

struct ProxyChild {
    child: Child,
    port: u16,
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl ProxyChild {
    async fn start(bin: &Path, kubeconfig: &Path, log: &Path) -> Result<ProxyChild> {
        let port = free_port()?;
        let mon = free_port()?;
        let f = std::fs::File::create(log)?;
        let child = Command::new(bin)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("WEBHOOK_ADDRESS")
            .env_remove("RULES_PATH")
            .env("KUBECONFIG", kubeconfig)
            .env("CLIENT_PROXY_ADDRESS", "127.0.0.1")
            .env("CLIENT_PROXY_PORT", port.to_string())
            .env("MONITORING_BIND_ADDRESS", format!("127.0.0.1:{mon}"))
            .env("LOG_LEVEL", "info")
            .env("LOG_FORMAT", "text")
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin.display()))?;
        let mut p = ProxyChild { child, port };
        let t = Instant::now();
        loop {
            if let Ok(mut c) = H1::connect(([127, 0, 0, 1], mon).into()).await
                && let Ok(r) = c.get("/readyz", &[]).await
                && r.status() == StatusCode::OK
            {
                return Ok(p);
            }
            if let Ok(Some(st)) = p.child.try_wait() {
                return Err(format!("the proxy exited ({st}); see {}", log.display()).into());
            }
            if t.elapsed() > Duration::from_secs(30) {
                return Err(format!("the proxy is not ready after 30 s; see {}", log.display()).into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    /// (peak, current) resident set in KiB.
    fn rss_kib(&self) -> (u64, u64) {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        let f = |k: &str| {
            s.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        };
        (f("VmHWM:"), f("VmRSS:"))
    }

    /// CPU seconds the proxy has used so far.
    fn cpu_secs(&self) -> f64 {
        cpu_secs(&format!("/proc/{}", self.child.id()))
    }
}

/// CPU seconds a process has used, from `/proc/<pid>` (`proc` is that directory): the sum of its
/// threads' `schedstat` run times (nanoseconds; a LIST here takes tens of milliseconds, finer
/// than `stat`'s 10 ms ticks), or `stat`'s user + system ticks where schedstat is missing. A
/// thread that ends in between drops out of the sum; the proxy's workers and its blocking
/// threads (kept 10 s idle) outlive a transfer.
fn cpu_secs(proc: &str) -> f64 {
    let threads = std::fs::read_dir(format!("{proc}/task"))
        .into_iter()
        .flatten()
        .flatten();
    let ns: Option<u64> = threads
        .map(|t| {
            let s = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            s.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum();
    if let Some(ns) = ns.filter(|&n| n > 0) {
        return ns as f64 / 1e9;
    }
    let f = stat_fields(proc).unwrap_or_default();
    // utime and stime, in USER_HZ (100) ticks.
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

/// The fields of `/proc/<pid>/stat` (`proc` is that directory) after the parenthesised command
/// name: index 0 is the state (field 3), 7 `minflt` (field 10), 11 and 12 `utime` and `stime`.
fn stat_fields(proc: &str) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("{proc}/stat")).ok()?;
    let rest = s.rsplit_once(')')?.1;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

impl Drop for ProxyChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ------------------------------------------------------------------------------------ clients

/// One keep-alive HTTP/1.1 connection.
struct H1 {
    addr: SocketAddr,
    tx: SendRequest<Empty<Bytes>>,
}

impl H1 {
    async fn connect(addr: SocketAddr) -> Result<H1> {
        let s = tokio::net::TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let (tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(H1 { addr, tx })
    }

    async fn get(&mut self, path: &str, headers: &[(&str, &str)]) -> Result<Response<pbody::Body>> {
        if self.tx.ready().await.is_err() {
            *self = H1::connect(self.addr).await?;
        }
        let mut b = Request::get(path).header(header::HOST, "127.0.0.1");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        Ok(self
            .tx
            .send_request(b.body(Empty::new())?)
            .await?
            .map(pbody::boxed))
    }
}

/// Sends a request straight to kube-apiserver with the kubeconfig's credentials.
async fn direct(
    up: &Upstream,
    method: &str,
    path: &str,
    ct: Option<&str>,
    body: Bytes,
) -> Result<Response<pbody::Body>> {
    let mut b = Request::builder()
        .method(method)
        .uri(up.uri(path)?)
        .header(header::ACCEPT, "application/json");
    if let Some(ct) = ct {
        b = b.header(header::CONTENT_TYPE, ct);
    }
    let mut req = b.body(if body.is_empty() {
        pbody::empty()
    } else {
        pbody::full(body)
    })?;
    up.authorize(req.headers_mut());
    Ok(up.send(req, None).await?.map(pbody::boxed))
}

/// What reading a whole body took.
#[derive(Clone, Copy, Debug)]
struct Read {
    bytes: u64,
    secs: f64,
}

/// Reads a body to the end, counting bytes; `check` sees every frame.
async fn drain(resp: Response<pbody::Body>, t0: Instant, mut check: impl FnMut(&[u8])) -> Result<Read> {
    let status = resp.status();
    let mut body = resp.into_body();
    let mut bytes = 0u64;
    let mut head = Vec::new();
    while let Some(f) = body.frame().await {
        if let Ok(d) = f?.into_data() {
            bytes += d.len() as u64;
            if head.len() < 512 {
                head.extend_from_slice(&d[..d.len().min(512)]);
            }
            check(&d);
        }
    }
    if !status.is_success() {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&head)).into());
    }
    Ok(Read {
        bytes,
        secs: t0.elapsed().as_secs_f64(),
    })
}

fn no_renamed(d: &[u8]) {
    assert!(
        memchr::memmem::find(d, GROUP.as_bytes()).is_none(),
        "renamed names reached the client through the proxy"
    );
}

fn best(v: &[Read]) -> Read {
    *v.iter()
        .min_by(|a, b| a.secs.total_cmp(&b.secs))
        .expect("at least one run")
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn mbps(r: Read) -> f64 {
    r.bytes as f64 / 1e6 / r.secs
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Seconds with three decimals.
fn secs(s: f64) -> String {
    format!("{s:.3} s")
}

// ------------------------------------------------------------------------------------ part 1

async fn part1(a: &Args, kubeconfig: &Path, rep: &mut Report) -> Result<()> {
    println!(
        "== 1. real kube-apiserver ({} VMs, {}-event watch); load average {}",
        a.vms,
        a.events,
        loadavg()
    );
    let up = Arc::new(Upstream::kube(&UpstreamSource::Kubeconfig(vec![kubeconfig.to_owned()])).await?);
    let log = a.work_dir.join("bench-proxy-apiserver.log");
    let proxy = ProxyChild::start(&a.proxy_bin, kubeconfig, &log).await?;
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
                let body = Bytes::from(vm(&format!("bench-vm-{i:05}"), false).to_string());
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
    let (mut via, mut dir) = (Vec::new(), Vec::new());
    for _ in 0..a.repeat {
        let mut c = H1::connect(proxy.addr()).await?;
        let t0 = Instant::now();
        let r = c.get(&list_proxy, &[("accept", "application/json")]).await?;
        via.push(drain(r, t0, no_renamed).await?);
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
    let tp = WatchTarget::Proxy(proxy.addr(), format!("{list_proxy}?watch=1&resourceVersion="));
    let td = WatchTarget::Direct(Arc::clone(&up), format!("{list_direct}?watch=1&resourceVersion="));
    let (wp, wd) = (tp.open(&rv).await?, td.open(&rv).await?);
    let hp = tokio::spawn(watch_loop(tp, wp, Arc::clone(&cp), true));
    let hd = tokio::spawn(watch_loop(td, wd, Arc::clone(&cd), false));
    // The patches go over a connection of their own.
    let up = Arc::new(Upstream::kube(&UpstreamSource::Kubeconfig(vec![kubeconfig.to_owned()])).await?);
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
    while (cp.events() < patched || cd.events() < patched) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    hp.abort();
    hd.abort();
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
        upstream,
        format!("{patched}-event watch, events/s"),
        format!("{:.0}", ep as f64 / sp),
        format!("{:.0}", ed as f64 / sd),
        format!("{ratio:.2}x the time per event"),
    ]);
    let (hwm, rss) = proxy.rss_kib();
    println!("   proxy RSS: peak {} MB, now {} MB", hwm / 1024, rss / 1024);
    Ok(())
}

#[derive(Default)]
struct Counter {
    events: AtomicUsize,
    restarts: AtomicUsize,
    bytes: AtomicU64,
    last: Mutex<Option<Instant>>,
}

impl Counter {
    fn events(&self) -> usize {
        self.events.load(Ordering::Relaxed)
    }

    fn last_secs(&self, t0: Instant) -> f64 {
        self.last
            .lock()
            .map(|l| l.map_or(f64::NAN, |t| (t - t0).as_secs_f64()))
            .unwrap_or(f64::NAN)
    }
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

/// Counts newline-terminated events; returns the last whole event.
async fn count_events(resp: Response<pbody::Body>, c: Arc<Counter>, check: bool) -> Vec<u8> {
    let mut body = resp.into_body();
    let mut line = Vec::new();
    let mut last = Vec::new();
    loop {
        let f = match body.frame().await {
            None => break,
            Some(Ok(f)) => f,
            Some(Err(_)) => break,
        };
        if let Ok(d) = f.into_data() {
            // The last whole event (lines may span frames).
            match memchr::memrchr(b'\n', &d) {
                Some(end) => {
                    let start = memchr::memrchr(b'\n', &d[..end]).map_or(0, |i| i + 1);
                    if start == 0 {
                        line.extend_from_slice(&d[..end]);
                        last = std::mem::take(&mut line);
                    } else {
                        last = d[start..end].to_vec();
                    }
                    line.clear();
                    line.extend_from_slice(&d[end + 1..]);
                }
                None => line.extend_from_slice(&d),
            }
            if check {
                no_renamed(&d);
            }
            let n = memchr::memchr_iter(b'\n', &d).count();
            c.bytes.fetch_add(d.len() as u64, Ordering::Relaxed);
            if n > 0 {
                c.events.fetch_add(n, Ordering::Relaxed);
                if let Ok(mut l) = c.last.lock() {
                    *l = Some(Instant::now());
                }
            }
        }
    }
    last
}

// ------------------------------------------------------------------------------------ part 2

/// The double's bodies, built once.
struct Fixtures {
    list: Bytes,
    items: usize,
    events: Vec<Bytes>,
    watch_events: usize,
    small: Bytes,
}

fn fixtures(list_mb: usize, watch_events: usize) -> Fixtures {
    let template = vm("vm-XXXXXXX", true).to_string();
    let mut list = format!(r#"{{"apiVersion":"{GROUP}/v1","items":["#).into_bytes();
    let target = list_mb << 20;
    let mut items = 0;
    while list.len() < target {
        if items > 0 {
            list.push(b',');
        }
        list.extend_from_slice(template.replace("XXXXXXX", &format!("{items:07}")).as_bytes());
        items += 1;
    }
    list.extend_from_slice(
        format!(r#"],"kind":"{KIND}List","metadata":{{"continue":"","resourceVersion":"123456"}}}}"#)
            .as_bytes(),
    );
    let events = (0..1000)
        .map(|i| {
            let obj = template.replace("XXXXXXX", &format!("{i:07}"));
            Bytes::from(format!("{{\"type\":\"MODIFIED\",\"object\":{obj}}}\n"))
        })
        .collect();
    Fixtures {
        list: Bytes::from(list),
        items,
        events,
        watch_events,
        small: Bytes::from(small_vm("vm-small")),
    }
}

/// The double's response body: slices of a shared buffer, or events one by one.
enum DBody {
    Chunks { data: Bytes, chunk: usize },
    Events { ev: Arc<Fixtures>, i: usize },
}

impl hyper::body::Body for DBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        Poll::Ready(match this {
            DBody::Chunks { data, chunk } => {
                if data.is_empty() {
                    None
                } else {
                    let n = (*chunk).min(data.len());
                    Some(Ok(Frame::data(data.split_to(n))))
                }
            }
            DBody::Events { ev, i } => {
                if *i >= ev.watch_events {
                    None
                } else {
                    let e = ev.events[*i % ev.events.len()].clone();
                    *i += 1;
                    Some(Ok(Frame::data(e)))
                }
            }
        })
    }
}

fn double_route(f: &Arc<Fixtures>, req: &Request<Incoming>) -> Response<DBody> {
    let path = req.uri().path();
    let watch = req
        .uri()
        .query()
        .is_some_and(|q| q.contains("watch=1") || q.contains("watch=true"));
    let chunks = |data: Bytes| DBody::Chunks {
        data,
        chunk: 32 << 10,
    };
    let (status, body) = if path == "/readyz" {
        (StatusCode::OK, chunks(Bytes::from_static(b"ok")))
    } else if path.ends_with("/vm-small") || path.ends_with("/widgets/w1") {
        (StatusCode::OK, chunks(f.small.clone()))
    } else if path.ends_with(&format!("/{RESOURCE}")) && watch {
        (
            StatusCode::OK,
            DBody::Events {
                ev: Arc::clone(f),
                i: 0,
            },
        )
    } else if path.ends_with(&format!("/{RESOURCE}")) || path.ends_with("/widgets") {
        (StatusCode::OK, chunks(f.list.clone()))
    } else {
        (StatusCode::NOT_FOUND, chunks(Bytes::from_static(b"{}")))
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

/// Starts the double on its own runtime thread; returns its address.
fn start_double(f: Arc<Fixtures>) -> Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    l.set_nonblocking(true)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("double")
        .enable_all()
        .build()?;
    std::thread::spawn(move || {
        rt.block_on(async move {
            let Ok(l) = tokio::net::TcpListener::from_std(l) else {
                return;
            };
            loop {
                let Ok((s, _)) = l.accept().await else { continue };
                let _ = s.set_nodelay(true);
                let f = Arc::clone(&f);
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let r = double_route(&f, &req);
                        async move { Ok::<_, Infallible>(r) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(s), svc)
                        .await;
                });
            }
        });
    });
    Ok(addr)
}

async fn part2(a: &Args, rep: &mut Report) -> Result<()> {
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
            let (me0, px0) = (cpu_secs("/proc/self"), proxy.cpu_secs());
            let t0 = Instant::now();
            let r = c.get(path, hdr).await?;
            via.push(drain(r, t0, |_| {}).await?);
            cpu_via += cpu_secs("/proc/self") - me0;
            cpu_proxy += proxy.cpu_secs() - px0;
            let mut c = H1::connect(addr).await?;
            let me0 = cpu_secs("/proc/self");
            let t0 = Instant::now();
            let r = c.get(path, hdr).await?;
            dir.push(drain(r, t0, |_| {}).await?);
            cpu_dir += cpu_secs("/proc/self") - me0;
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

// ------------------------------------------------------------------------------------ part 3

/// Writes per burst write of part 3's double: many event chunks each, as a busy kube-apiserver
/// sends them.
const BURST_WRITE: usize = 64 << 10;
/// The namespace whose watch sends lone events (one after each idle pause).
const LONE_NS: &str = "lone";
/// The name of part 3's double's runtime thread.
const DOUBLE_THREAD: &str = "burst-double";
/// The idle pause before each lone event.
const LONE_PAUSE: Duration = Duration::from_millis(100);

/// Part 3's upstream double. It speaks HTTP/1.1 by hand so every write is under its control,
/// and sends a watch the way kube-apiserver does: one HTTP chunk per event, and in a burst many
/// chunks per write. A watch in namespace [`LONE_NS`] instead sends one event, then one more
/// after each idle pause, noting when it wrote each.
struct Burst {
    /// The body of a LIST of `items` renamed VMs.
    list: Bytes,
    items: usize,
    /// Chunk-encoded events (`<hex length>\r\n<event>\r\n`).
    chunks: Vec<Bytes>,
    /// The same events as they are (for the HTTP/2 double's DATA frames).
    events_raw: Vec<Bytes>,
    events: usize,
    lone_rounds: usize,
    /// When each lone event was written.
    sent: Mutex<Vec<Instant>>,
}

fn burst_fixtures(items: usize, events: usize, lone_rounds: usize) -> Burst {
    let template = vm("vm-XXXXXXX", true).to_string();
    let mut list = format!(r#"{{"apiVersion":"{GROUP}/v1","items":["#).into_bytes();
    for i in 0..items {
        if i > 0 {
            list.push(b',');
        }
        list.extend_from_slice(template.replace("XXXXXXX", &format!("{i:07}")).as_bytes());
    }
    list.extend_from_slice(
        format!(r#"],"kind":"{KIND}List","metadata":{{"continue":"","resourceVersion":"123456"}}}}"#)
            .as_bytes(),
    );
    let events_raw: Vec<Bytes> = (0..1000)
        .map(|i| {
            let obj = template.replace("XXXXXXX", &format!("{i:07}"));
            Bytes::from(format!("{{\"type\":\"MODIFIED\",\"object\":{obj}}}\n"))
        })
        .collect();
    let chunks = events_raw
        .iter()
        .map(|ev| {
            let mut c = format!("{:x}\r\n", ev.len()).into_bytes();
            c.extend_from_slice(ev);
            c.extend_from_slice(b"\r\n");
            Bytes::from(c)
        })
        .collect();
    Burst {
        list: Bytes::from(list),
        items,
        chunks,
        events_raw,
        events,
        lone_rounds,
        sent: Mutex::new(Vec::new()),
    }
}

/// Starts part 3's double on its own runtime thread; returns its address.
fn start_burst_double(b: Arc<Burst>) -> Result<SocketAddr> {
    serve_on_thread(DOUBLE_THREAD, move |s| {
        tokio::spawn(burst_conn(s, Arc::clone(&b)));
    })
}

/// Accepts connections on a loopback port in a one-worker runtime on a thread named `name`
/// (whose socket writes can then be counted apart), handing each to `serve`; returns the
/// address.
fn serve_on_thread(
    name: &'static str,
    mut serve: impl FnMut(tokio::net::TcpStream) + Send + 'static,
) -> Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    l.set_nonblocking(true)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .enable_all()
        .build()?;
    std::thread::Builder::new().name(name.into()).spawn(move || {
        rt.block_on(async move {
            let Ok(l) = tokio::net::TcpListener::from_std(l) else {
                return;
            };
            loop {
                let Ok((s, _)) = l.accept().await else { continue };
                let _ = s.set_nodelay(true);
                serve(s);
            }
        });
    })?;
    Ok(addr)
}

/// Serves one keep-alive connection of part 3's double (GET requests only).
async fn burst_conn(s: tokio::net::TcpStream, b: Arc<Burst>) -> std::io::Result<()> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (r, mut w) = s.into_split();
    let mut r = tokio::io::BufReader::new(r);
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let target = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        loop {
            line.clear();
            if r.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            if line == "\r\n" || line == "\n" {
                break;
            }
        }
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let watch = query.split('&').any(|kv| kv == "watch=1" || kv == "watch=true");
        if path == "/readyz" {
            w.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok")
                .await?;
        } else if path.ends_with(&format!("/{RESOURCE}")) && watch {
            w.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
            )
            .await?;
            if path.contains(&format!("/namespaces/{LONE_NS}/")) {
                w.write_all(&b.chunks[0]).await?;
                for i in 0..b.lone_rounds {
                    tokio::time::sleep(LONE_PAUSE).await;
                    let c = &b.chunks[(i + 1) % b.chunks.len()];
                    if let Ok(mut s) = b.sent.lock() {
                        s.push(Instant::now());
                    }
                    w.write_all(c).await?;
                }
            } else {
                let mut buf = Vec::with_capacity(BURST_WRITE + (16 << 10));
                for i in 0..b.events {
                    buf.extend_from_slice(&b.chunks[i % b.chunks.len()]);
                    if buf.len() >= BURST_WRITE {
                        w.write_all(&buf).await?;
                        buf.clear();
                    }
                }
                buf.extend_from_slice(b"0\r\n\r\n");
                w.write_all(&buf).await?;
                continue;
            }
            w.write_all(b"0\r\n\r\n").await?;
        } else if path.ends_with(&format!("/{RESOURCE}")) {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                b.list.len()
            );
            w.write_all(head.as_bytes()).await?;
            w.write_all(&b.list).await?;
        } else {
            w.write_all(
                b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
            )
            .await?;
        }
    }
}

/// A proxy in front of the double at `addr`, through a kubeconfig written for it (files named
/// after `name` in the work directory): over HTTPS when the double's `ca` is given.
async fn proxy_for_double(a: &Args, addr: SocketAddr, name: &str, ca: Option<&Path>) -> Result<ProxyChild> {
    let kc = a.work_dir.join(format!("bench-{name}.kubeconfig"));
    let cluster = match ca {
        Some(ca) => format!(
            "server: https://{addr}\n    certificate-authority: {}",
            ca.display()
        ),
        None => format!("server: http://{addr}"),
    };
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: d\n  cluster:\n    {cluster}\nusers:\n- name: u\n  user:\n    token: doubletoken\ncontexts:\n- name: d\n  context: {{cluster: d, user: u}}\ncurrent-context: d\n"
        ),
    )?;
    ProxyChild::start(
        &a.proxy_bin,
        &kc,
        &a.work_dir.join(format!("bench-proxy-{name}.log")),
    )
    .await
}

/// Minor page faults of process `pid` so far (`minflt` of `/proc/<pid>/stat`).
fn minor_faults(pid: u32) -> Option<u64> {
    stat_fields(&format!("/proc/{pid}"))?.get(7)?.parse().ok()
}

/// Write syscalls a process has made so far (`syscw` of `/proc/<pid>/io`: write, writev and
/// the like, the socket writes of a tokio program included).
fn syscw(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("syscw:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The ids of this process's threads named `name` (part 3's double runs on its own runtime
/// threads, so their socket writes are the direct transfer's baseline).
fn threads_named(name: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name))
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .collect()
}

/// The proxy's write syscalls by kind, counted in the kernel by `perf stat` on the syscall
/// tracepoints (counting only: unlike strace, nothing stops the process per call).
#[derive(Clone, Copy, Debug, Default)]
struct WriteKinds {
    /// write, writev, sendto and sendmsg, on any descriptor.
    all: u64,
    /// Writes to the eventfd a tokio worker writes to wake another out of the I/O driver.
    wake: u64,
    /// Writes to stdout and stderr (the log).
    log: u64,
}

impl WriteKinds {
    /// Writes to sockets (everything but wake-ups and the log).
    fn socket(&self) -> u64 {
        self.all.saturating_sub(self.wake + self.log)
    }
}

/// Whose write syscalls to count.
enum Counted {
    /// A process (the proxy), every thread.
    Process(u32),
    /// Threads of this process (the double).
    Threads(Vec<u32>),
}

/// A running `perf stat` attached to the proxy or the double.
struct PerfWrites {
    child: Child,
    out: PathBuf,
}

/// The descriptors of `pid` that are eventfds (tokio's I/O driver wake-up).
fn eventfds(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == "anon_inode:[eventfd]"))
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

impl PerfWrites {
    /// Starts counting the write syscalls of `pid`; `None` when perf is missing or the
    /// tracepoints are not readable here.
    async fn start(who: &Counted, out: PathBuf) -> Option<PerfWrites> {
        let (fds, target) = match who {
            Counted::Process(pid) => (eventfds(*pid), ["-p".to_owned(), pid.to_string()]),
            Counted::Threads(tids) if !tids.is_empty() => {
                let tids: Vec<String> = tids.iter().map(u32::to_string).collect();
                (eventfds(std::process::id()), ["-t".to_owned(), tids.join(",")])
            }
            Counted::Threads(_) => return None,
        };
        let wake: Vec<String> = fds.iter().map(|fd| format!("fd == {fd}")).collect();
        let wake = if wake.is_empty() {
            "fd == 999999".to_owned()
        } else {
            wake.join(" || ")
        };
        let child = Command::new("perf")
            .args(["stat", "-x", ";", "-o"])
            .arg(&out)
            .args([
                "-e",
                "syscalls:sys_enter_write",
                "-e",
                "syscalls:sys_enter_write",
                "--filter",
            ])
            .arg(&wake)
            .args(["-e", "syscalls:sys_enter_write", "--filter", "fd <= 2"])
            .args([
                "-e",
                "syscalls:sys_enter_writev",
                "-e",
                "syscalls:sys_enter_sendto",
            ])
            .args(["-e", "syscalls:sys_enter_sendmsg"])
            .args(target)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let mut p = PerfWrites { child, out };
        // perf attaches to every thread before counting; give it time, and see it is still up.
        tokio::time::sleep(Duration::from_millis(500)).await;
        match p.child.try_wait() {
            Ok(None) => Some(p),
            _ => None,
        }
    }

    /// Stops counting and reads the counts.
    fn stop(mut self) -> Option<WriteKinds> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        let _ = self.child.wait();
        let text = std::fs::read_to_string(&self.out).ok()?;
        let _ = std::fs::remove_file(&self.out);
        // Lines: `count;unit;event;...` in the order of the -e options.
        let n: Vec<u64> = text
            .lines()
            .filter(|l| l.contains("syscalls:"))
            .map(|l| l.split(';').next().unwrap_or("").trim().parse().unwrap_or(0))
            .collect();
        if n.len() != 6 {
            return None;
        }
        Some(WriteKinds {
            all: n[0] + n[3] + n[4] + n[5],
            wake: n[1],
            log: n[2],
        })
    }
}

/// One timed transfer of part 3, with what the proxy spent on it.
#[derive(Clone, Copy, Debug)]
struct Costed {
    read: Read,
    events: usize,
    writes: Option<u64>,
    /// Write syscalls by kind (perf), when counted: the proxy's, or the double's for a direct
    /// transfer.
    kinds: Option<WriteKinds>,
    /// The proxy's CPU seconds (0 for a direct transfer).
    cpu: f64,
    /// This process's CPU seconds: the client and the doubles.
    own_cpu: f64,
    /// The proxy's minor page faults.
    faults: Option<u64>,
}

/// Reads `path` from `target` to the end, counting events (newlines); through the proxy, its
/// write syscalls and CPU time are taken around the transfer.
async fn costed(
    target: SocketAddr,
    path: &str,
    proxy: Option<&ProxyChild>,
    perf: Option<&Path>,
    verify: bool,
) -> Result<Costed> {
    let pid = proxy.map(|p| p.child.id());
    // Under perf: the proxy's writes through the proxy, the double's directly.
    let counter = match (pid, perf) {
        (_, None) => None,
        (Some(pid), Some(out)) => PerfWrites::start(&Counted::Process(pid), out.to_owned()).await,
        (None, Some(out)) => {
            PerfWrites::start(&Counted::Threads(threads_named(DOUBLE_THREAD)), out.to_owned()).await
        }
    };
    let before = (pid.and_then(syscw), proxy.map_or(0.0, ProxyChild::cpu_secs));
    let own_before = cpu_secs("/proc/self");
    let faults_before = pid.and_then(minor_faults);
    let mut c = H1::connect(target).await?;
    let mut events = 0;
    let t0 = Instant::now();
    let r = c.get(path, &[("accept", "application/json")]).await?;
    let read = drain(r, t0, |d| {
        events += memchr::memchr_iter(b'\n', d).count();
        if verify {
            no_renamed(d);
        }
    })
    .await?;
    let writes = match (before.0, pid.and_then(syscw)) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let cpu = proxy.map_or(0.0, ProxyChild::cpu_secs) - before.1;
    let own_cpu = cpu_secs("/proc/self") - own_before;
    let faults = match (faults_before, pid.and_then(minor_faults)) {
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

async fn part3(a: &Args, rep: &mut Report) -> Result<()> {
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
    let io = syscw(proxy.child.id()).is_some();
    let gb = |c: &Costed| c.read.bytes as f64 / 1e9;
    let watch_via = format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines?watch=1");
    let watch_dir = format!("/apis/{GROUP}/v1/namespaces/{NS}/{RESOURCE}?watch=1");
    let list_via = format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines");
    let list_dir = format!("/apis/{GROUP}/v1/namespaces/{NS}/{RESOURCE}");
    for (what, short, n, via_path, dir_path, proxy) in [
        (
            format!("watch, {} events", b.events),
            "kube-apiserver-like double, HTTP/1.1",
            b.events,
            watch_via.clone(),
            watch_dir.clone(),
            &proxy,
        ),
        (
            format!("rewritten LIST, {} VMs", b.items),
            "kube-apiserver-like double, HTTP/1.1",
            0,
            list_via.clone(),
            list_dir.clone(),
            &proxy,
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
        ),
    ] {
        // One untimed run checks that nothing renamed reaches the client, so that the timed
        // runs' client does the same work (counting) either way.
        let checked = costed(proxy.addr(), &via_path, Some(proxy), None, true).await?;
        let (mut via, mut dir) = (Vec::new(), Vec::new());
        for _ in 0..a.repeat {
            via.push(costed(proxy.addr(), &via_path, Some(proxy), None, false).await?);
            dir.push(costed(addr, &dir_path, None, None, false).await?);
        }
        // One more run each way under `perf stat`, untimed, to count every kind of write
        // syscall (syscw misses send/sendto, which std's TcpStream::write uses) and tell socket
        // writes from wake-ups.
        let perf_out = a.work_dir.join("bench-perf-writes.txt");
        let (split, base) = if n > 0 {
            (
                costed(proxy.addr(), &via_path, Some(proxy), Some(&perf_out), false)
                    .await?
                    .kinds,
                costed(addr, &dir_path, None, Some(&perf_out), false).await?.kinds,
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
        println!("   {what} (best of {}):", a.repeat);
        println!(
            "     through the proxy  {:>7.1} MB  {:>6.3} s    direct {:>6.3} s    ratio {ratio:.2}x",
            bv.bytes as f64 / 1e6,
            bv.secs,
            bd.secs,
        );
        let cpu_gb = via.iter().map(|c| c.cpu / gb(c)).sum::<f64>() / via.len().max(1) as f64;
        let measure = if n > 0 {
            format!("{n}-event watch (best of {})", a.repeat)
        } else {
            format!(
                "LIST of {} VMs, {:.0} MB (best of {})",
                b.items,
                bv.bytes as f64 / 1e6,
                a.repeat
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

fn main() -> Result<()> {
    let a = args()?;
    kube_api_rewriter_proxy::tls::install_default_provider();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        println!(
            "kube-api-rewriter proxy benchmark: {} CPUs, load average {}",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            loadavg()
        );
        let mut rep = Report::new(
            "proxy",
            &[
                "upstream",
                "measure",
                "through the proxy",
                "direct",
                "proxy / direct",
            ],
        );
        if let Some(kc) = &a.kubeconfig {
            part1(&a, kc, &mut rep).await?;
        }
        if !a.skip_double && ["list", "pass", "watch", "get"].iter().any(|s| a.wants(s)) {
            part2(&a, &mut rep).await?;
        }
        if !a.skip_double && a.wants("burst") {
            part3(&a, &mut rep).await?;
        }
        println!("done; load average {}", loadavg());
        rep.note(format!(
            "`scripts/bench-proxy.sh`, release build; the load average was {} at the end.",
            loadavg()
        ));
        rep.print();
        Ok::<_, Error>(())
    })?;
    // The double's thread is still serving; leave without waiting for it.
    rt.shutdown_timeout(Duration::from_millis(100));
    Ok(())
}
