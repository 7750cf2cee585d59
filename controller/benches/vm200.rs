//! The 200-VM benchmark (it prints figures; it asserts nothing about time). On the local control
//! plane, for each rewriter mode in turn (the sidecar, then the Layer embedded in the
//! controller's client): start the controller, create 200 `AlwaysOn` VMs with one
//! `kubectl apply`, and report the time until all of them are Running, with the peak RSS and CPU
//! seconds of the controller and, in sidecar mode, of its sidecar, and the CPU seconds the
//! sidecars of real virt-controller and virt-api (its webhooks review every VM and VMI) spent on
//! them. Real KubeVirt (`scripts/kubevirt.sh`: virt-controller and virt-api behind their own
//! sidecars, kwok's Nodes) and the virt-handler double are shared by both modes.
//!
//! ```sh
//! cargo bench -p virtualization-controller --bench vm200        # VMS=50 for fewer
//! ```

#[path = "../tests/support/mod.rs"]
mod support;
#[path = "../tests/virt_handler_double/mod.rs"]
#[allow(
    dead_code,
    reason = "the bench starts instances only: no freezes, no hot-plugs"
)]
mod virt_handler_double;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube_api_rewriter_testkit::procfs;
use kube_api_rewriter_testkit::report::Report;
use kube_api_rewriter_testkit::*;

const VM: &str = "virtualmachines.virtualization.deckhouse.io";

/// Peak RSS (MiB) and CPU seconds (user + system) of a live process, from `/proc`.
fn usage(pid: u32) -> (f64, f64) {
    let hwm_kib = procfs::memory(pid).hwm_kib;
    (
        hwm_kib as f64 / 1024.0,
        procfs::stat(pid).map_or(0.0, |s| s.cpu_secs()),
    )
}

fn start_controller(dir: &Path, kubeconfig: &Path, embedded: bool) -> (Child, u16) {
    let health = free_port();
    let log = std::fs::File::create(dir.join(format!("bench-controller-{embedded}.log"))).expect("log");
    let child = Command::new(env!("CARGO_BIN_EXE_virtualization-controller"))
        .env("KUBECONFIG", kubeconfig)
        .env("EMBEDDED_REWRITER", embedded.to_string())
        .env("HEALTH_PROBE_BIND_ADDRESS", format!("127.0.0.1:{health}"))
        .env("METRICS_BIND_ADDRESS", format!("127.0.0.1:{}", free_port()))
        .env("LOG_LEVEL", "warn")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("dup"))
        .stderr(log)
        .spawn()
        .expect("controller starts");
    (child, health)
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs bench targets without it,
    // and a control plane with 200 VMs is no test.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("vm200: a benchmark; run it with `cargo bench -p virtualization-controller --bench vm200`");
        return;
    }
    let n: usize = std::env::var("VMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let cp = ControlPlane::up();
    // Real KubeVirt: its CRDs stored renamed, virt-controller behind its own sidecar, kwok's
    // Nodes.
    let kubevirt = KubeVirt::up(&cp, &["disk=ssd"]);
    let kv_sidecar = ProxyProc::start(&cp.dir, &[("KUBECONFIG", cp.kubeconfig())]);
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    ok(&cp.kubectl(&["apply", "-f", crds.to_str().expect("utf-8")]));
    if let Some(err) = wait_crd_established(&kv_sidecar, VM) {
        panic!("{VM}: {err}");
    }
    // Kept to the end: dropping the runtime stops the double.
    let rt = support::runtime();
    // As kubevirt-handler, through its own sidecar: virt-api puts back a VMI status anyone
    // else writes.
    let handler_port = kubevirt.get("VIRT_HANDLER_SIDECAR_PORT").parse().expect("port");
    rt.spawn(virt_handler_double::run(
        support::sidecar_client(&rt, handler_port),
        Default::default(),
    ));

    println!("{n} VMs created with one kubectl apply, time until all are Running:");
    let mut rep = Report::new(
        "vm200",
        &[
            "mode",
            "all Running after",
            "of which `kubectl apply`",
            "controller peak RSS / CPU",
            "sidecar peak RSS / CPU",
            "virt-controller's sidecar peak RSS / CPU",
            "virt-api's sidecar (webhooks) peak RSS / CPU",
        ],
    );
    for embedded in [false, true] {
        let mode = if embedded { "embedded" } else { "sidecar" };
        let sidecar = (!embedded).then(|| ProxyProc::start(&cp.dir, &[("KUBECONFIG", cp.kubeconfig())]));
        let kubeconfig = sidecar
            .as_ref()
            .map_or_else(|| Path::new(cp.kubeconfig()).to_owned(), |s| s.kubeconfig.clone());
        let (mut ctl, health) = start_controller(&cp.dir, &kubeconfig, embedded);
        wait_for("controller ready", Duration::from_secs(120), || {
            // Connection refused ("000") until the controller listens.
            http_status(&[&format!("http://127.0.0.1:{health}/readyz")]) == "200"
        });
        let pid = |k: &str| -> u32 { kubevirt.get(k).parse().expect("pid") };
        let (vc_sidecar, va_sidecar) = (pid("VIRT_CONTROLLER_SIDECAR_PID"), pid("VIRT_API_SIDECAR_PID"));
        let (vc_cpu_before, va_cpu_before) = (usage(vc_sidecar).1, usage(va_sidecar).1);
        let ns = format!("bench-{mode}");
        ok(&cp.kubectl(&["create", "namespace", &ns]));
        let yaml: String = (0..n)
            .map(|i| {
                format!(
                    "---\n{}",
                    support::vm_yaml(&ns, &format!("vm-{i}"), "AlwaysOn", "256Mi")
                )
            })
            .collect();
        let t = Instant::now();
        ok(&kubectl_in(cp.kubeconfig(), &["apply", "-f", "-"], &yaml));
        let applied = t.elapsed();
        wait_for("all Running", Duration::from_secs(900), || {
            let out = ok(&cp.kubectl(&[
                "get",
                VM,
                "-n",
                &ns,
                "-o",
                "jsonpath={range .items[*]}{.status.phase}{\"\\n\"}{end}",
            ]));
            out.lines().filter(|l| *l == "Running").count() == n
        });
        let all = t.elapsed();
        let (ctl_rss, ctl_cpu) = usage(ctl.id());
        let side = sidecar.as_ref().map(|s| usage(s.child.id()));
        let (vc_rss, vc_cpu) = usage(vc_sidecar);
        let vc_cpu = vc_cpu - vc_cpu_before;
        let (va_rss, va_cpu) = usage(va_sidecar);
        let va_cpu = va_cpu - va_cpu_before;
        println!(
            "  {mode:>8}: {:.1} s (kubectl apply {:.1} s); controller peak RSS {ctl_rss:.1} MiB, CPU {ctl_cpu:.2} s{}",
            all.as_secs_f64(),
            applied.as_secs_f64(),
            side.map_or_else(String::new, |(rss, cpu)| format!(
                "; sidecar peak RSS {rss:.1} MiB, CPU {cpu:.2} s"
            )),
        );
        rep.row([
            mode.to_owned(),
            format!("{:.1} s", all.as_secs_f64()),
            format!("{:.1} s", applied.as_secs_f64()),
            format!("{ctl_rss:.1} MiB / {ctl_cpu:.2} s"),
            side.map_or_else(
                || "(none)".into(),
                |(rss, cpu)| format!("{rss:.1} MiB / {cpu:.2} s"),
            ),
            format!("{vc_rss:.1} MiB / {vc_cpu:.2} s"),
            format!("{va_rss:.1} MiB / {va_cpu:.2} s"),
        ]);
        rep.headline(
            format!("controller: {n} VMs Running after one `kubectl apply`, {mode} mode"),
            format!("{:.1} s", all.as_secs_f64()),
        );
        let _ = ctl.kill();
        let _ = ctl.wait();
        drop(sidecar);
    }
    rep.note(format!(
        "`cargo bench -p virtualization-controller --bench vm200` ({} build), {n} `AlwaysOn` VMs through real virt-controller and virt-api {} (kwok's Nodes, a virt-handler double); the KubeVirt sidecars' CPU is what each mode cost them, their peak RSS for the whole run so far.",
        if cfg!(debug_assertions) { "debug" } else { "release" },
        kubevirt.get("KUBEVIRT_VERSION")
    ));
    rep.print();
}
