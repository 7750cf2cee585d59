//! The virtualization-controller end to end, on the real local control plane
//! (`scripts/control-plane.sh`), in both rewriter modes: the `virtualization-controller` binary behind
//! its own `kube-api-rewriter` sidecar, then the binary with the rewriter's Layer embedded in its
//! client (`--embedded-rewriter`, talking to kube-apiserver directly). The fake virt-controller
//! (test double, see `fake_virt_controller/`) runs behind another sidecar throughout. Users' objects are written with kubectl straight to
//! kube-apiserver; what KubeVirt objects became is checked straight against kube-apiserver,
//! where they exist only under `internal.virtualization.deckhouse.io` names.
//!
//! One control plane, one fake virt-controller and the CRDs for the file; the cases run one
//! after the other, once per mode, each in its own namespace (suffixed with the mode), and poll
//! with deadlines.

mod fake_virt_controller;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube_api_rewriter_testkit::*;
use serde_json::{Value, json};
use virtualization_controller::reconcile::{Context, vm};
use virtualization_controller::resources::VirtualMachine;

const VM: &str = "virtualmachines.virtualization.deckhouse.io";
const VMOP: &str = "virtualmachineoperations.virtualization.deckhouse.io";
const VMC: &str = "virtualmachineclasses.virtualization.deckhouse.io";
const VD: &str = "virtualdisks.virtualization.deckhouse.io";
const UP_KVVM: &str = "internalvirtualizationvirtualmachines.internal.virtualization.deckhouse.io";
const UP_VMI: &str = "internalvirtualizationvirtualmachineinstances.internal.virtualization.deckhouse.io";
const UP_NAME_LABEL: &str = "vm.kubevirt.internal.virtualization.deckhouse.io/name";
const UP_KV_FINALIZER: &str =
    "kubevirt.internal.virtualization.deckhouse.io/virtualMachineControllerFinalize";
/// The longest any state is waited for: far beyond what a passing run needs (seconds), so a
/// loaded machine does not fail the test.
const WAIT: Duration = Duration::from_secs(90);

/// The controller binary as a child process; killed on drop.
struct ControllerProc {
    child: Child,
    log: PathBuf,
    health_port: u16,
    metrics_port: u16,
    webhook_port: u16,
}

/// Where the controller under test has KubeVirt's groups renamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Behind its own `kube-api-rewriter` sidecar.
    Sidecar,
    /// `--embedded-rewriter`: the Layer in its own client, straight to kube-apiserver.
    Embedded,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Sidecar => "sidecar",
            Mode::Embedded => "embedded",
        }
    }
}

impl ControllerProc {
    /// Starts the controller in `mode`; `kubeconfig` points at its sidecar or at kube-apiserver.
    fn start(dir: &std::path::Path, kubeconfig: &std::path::Path, mode: Mode) -> ControllerProc {
        let health_port = free_port();
        let metrics_port = free_port();
        let webhook_port = free_port();
        let log = dir.join(format!("controller-{}.log", mode.name()));
        let f = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_virtualization-controller"))
            .env("KUBECONFIG", kubeconfig)
            .env("EMBEDDED_REWRITER", (mode == Mode::Embedded).to_string())
            .env("HEALTH_PROBE_BIND_ADDRESS", format!("127.0.0.1:{health_port}"))
            .env("METRICS_BIND_ADDRESS", format!("127.0.0.1:{metrics_port}"))
            .env("WEBHOOK_BIND_ADDRESS", format!("127.0.0.1:{webhook_port}"))
            .env("WEBHOOK_CERT_FILE", dir.join("webhook.crt"))
            .env("WEBHOOK_KEY_FILE", dir.join("webhook.key"))
            .env("LOG_LEVEL", "info,virtualization_controller=debug")
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("dup"))
            .stderr(f)
            .spawn()
            .expect("controller starts");
        ControllerProc {
            child,
            log,
            health_port,
            metrics_port,
            webhook_port,
        }
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The status code of a GET, `000` when nothing answers (yet): curl then exits non-zero
    /// but still prints the code, which readiness waits retry on.
    fn get(&self, port: u16, path: &str) -> String {
        let o = curl(&[
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("http://127.0.0.1:{port}{path}"),
        ]);
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for ControllerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Env {
    cp: ControlPlane,
    /// The controller's sidecar.
    sidecar: ProxyProc,
    /// The fake virt-controller's sidecar.
    kv_sidecar: ProxyProc,
    /// The controller under test, replaced when the mode changes.
    ctl: std::sync::Mutex<ControllerProc>,
    mode: std::sync::Mutex<Mode>,
    rt: tokio::runtime::Runtime,
}

impl Env {
    fn logs(&self) -> String {
        self.ctl.lock().map(|c| c.logs()).unwrap_or_default()
    }

    /// The controller's `/metrics` text.
    fn metrics(&self) -> String {
        let port = self.ctl.lock().expect("lock").metrics_port;
        ok(&curl(&["-s", &format!("http://127.0.0.1:{port}/metrics")]))
    }

    /// Polls `f` every 100 ms until it gives a value; panics after `limit` with the last
    /// value seen and the controller's log.
    fn wait<T: std::fmt::Debug>(&self, what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
        let t = Instant::now();
        let mut last = String::new();
        while t.elapsed() < WAIT {
            match f() {
                Ok(v) => return v,
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let logs = self.logs();
        let tail: Vec<&str> = logs.lines().rev().take(60).collect();
        panic!(
            "{what}: not within {WAIT:?}; last: {last}\ncontroller log (newest first):\n{}",
            tail.join("\n")
        );
    }

    /// An object straight from kube-apiserver, or `None` when it does not exist.
    fn get(&self, resource: &str, ns: &str, name: &str) -> Option<Value> {
        let o = self.cp.kubectl(&["get", resource, name, "-n", ns, "-o", "json"]);
        if o.status.success() {
            return Some(parse_json(&String::from_utf8_lossy(&o.stdout)));
        }
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("NotFound"), "kubectl get {resource} {name}: {err}");
        None
    }

    fn apply(&self, yaml: &str) {
        ok(&kubectl_in(self.cp.kubeconfig(), &["apply", "-f", "-"], yaml));
    }

    fn patch(&self, resource: &str, ns: &str, name: &str, merge: Value) {
        ok(&self.cp.kubectl(&[
            "patch",
            resource,
            name,
            "-n",
            ns,
            "--type",
            "merge",
            "-p",
            &merge.to_string(),
        ]));
    }

    /// Creates the namespace `{base}-{mode}` and returns its name.
    fn namespace(&self, base: &str) -> String {
        let ns = format!("{base}-{}", self.mode().name());
        ok(&self.cp.kubectl(&["create", "namespace", &ns]));
        ns
    }

    fn mode(&self) -> Mode {
        *self.mode.lock().expect("lock")
    }

    /// Waits until the VM's status satisfies `f` (given the status and the VM).
    fn wait_vm(&self, ns: &str, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        self.wait(&format!("VM {ns}/{name}: {what}"), || {
            let vm = self.get(VM, ns, name).ok_or_else(|| "no VM".to_owned())?;
            if f(&vm) {
                Ok(vm)
            } else {
                Err(vm["status"].to_string())
            }
        })
    }

    /// Waits until the operation is finished (Completed or Failed).
    fn wait_op(&self, ns: &str, name: &str) -> Value {
        self.wait(&format!("VMOP {ns}/{name} finished"), || {
            let op = self.get(VMOP, ns, name).ok_or_else(|| "no VMOP".to_owned())?;
            if op["status"]["phase"] == "Completed" || op["status"]["phase"] == "Failed" {
                Ok(op)
            } else {
                Err(op["status"].to_string())
            }
        })
    }

    /// Creates an operation and waits until it is finished; returns it.
    fn operation(&self, ns: &str, name: &str, t: &str, vm: &str) -> Value {
        self.apply(&format!(
            "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualMachineOperation\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{type: {t}, virtualMachineName: {vm}}}\n"
        ));
        self.wait_op(ns, name)
    }

    /// An operation that must complete.
    fn completes(&self, ns: &str, name: &str, t: &str, vm: &str) -> Value {
        let op = self.operation(ns, name, t, vm);
        assert_eq!(op["status"]["phase"], "Completed", "{op}");
        assert!(cond_is(&op, "Completed", "True"), "{op}");
        op
    }
}

fn vm_yaml(ns: &str, name: &str, run_policy: &str, memory: &str) -> String {
    format!(
        r#"apiVersion: virtualization.deckhouse.io/v1alpha2
kind: VirtualMachine
metadata:
  name: {name}
  namespace: {ns}
  labels: {{app: shop}}
spec:
  runPolicy: {run_policy}
  cpu: {{cores: 1, coreFraction: "50%"}}
  memory: {{size: {memory}}}
  provisioning:
    userData: |
      #cloud-config
      hostname: {name}
  nodeSelector: {{disk: ssd}}
  tolerations: [{{key: dedicated, operator: Exists, effect: NoSchedule}}]
"#
    )
}

/// A condition of a VM or VMOP: (status, reason, message).
fn cond(obj: &Value, type_: &str) -> Option<(String, String, String)> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (s("status"), s("reason"), s("message"))
        })
}

fn cond_is(obj: &Value, type_: &str, status: &str) -> bool {
    cond(obj, type_).is_some_and(|c| c.0 == status)
}

fn phase_is(vm: &Value, phase: &str) -> bool {
    vm["status"]["phase"] == phase && vm["status"]["observedGeneration"] == vm["metadata"]["generation"]
}

/// Running and applied, in the current generation.
fn running(vm: &Value) -> bool {
    phase_is(vm, "Running")
        && cond_is(vm, "Running", "True")
        && cond_is(vm, "ConfigurationApplied", "True")
        && vm["status"]["nodeName"] == fake_virt_controller::NODE
}

fn stopped(vm: &Value) -> bool {
    phase_is(vm, "Stopped") && cond_is(vm, "Running", "False") && vm["status"].get("nodeName").is_none()
}

#[test]
fn controller_end_to_end() {
    let t = Instant::now();
    let cp = ControlPlane::up();
    // KubeVirt's CRDs go in through a rewriter, so kube-apiserver stores them renamed.
    let kv_sidecar = ProxyProc::start(&cp.dir, &[("KUBECONFIG", cp.kubeconfig())]);
    kv_sidecar.apply_vm_crd();
    let vmi_crd = crd_fixtures().join("original/virtualmachineinstances.yaml");
    ok(&kv_sidecar.kubectl(&["apply", "-f", vmi_crd.to_str().expect("utf-8")]));
    for crd in [
        "virtualmachines.kubevirt.io",
        "virtualmachineinstances.kubevirt.io",
    ] {
        if let Some(err) = wait_crd_established(&kv_sidecar, crd) {
            panic!("{crd}: {err}");
        }
    }
    // Ours are not renamed: straight to kube-apiserver, as a cluster admin would.
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    ok(&cp.kubectl(&["apply", "-f", crds.to_str().expect("utf-8")]));
    let sidecar = ProxyProc::start(&cp.dir, &[("KUBECONFIG", cp.kubeconfig())]);
    for crd in [VM, VMOP, VMC, VD] {
        if let Some(err) = wait_crd_established(&sidecar, crd) {
            panic!("{crd}: {err}");
        }
    }
    // The webhook's serving certificate, for 127.0.0.1, from a CA kube-apiserver is given in the
    // webhook configuration's caBundle.
    let (ca_crt, ca_key) = make_ca(&cp.dir, "webhook-ca");
    signed_cert(
        &cp.dir,
        "webhook",
        "virtualization-controller",
        Some("IP:127.0.0.1"),
        &ca_crt,
        &ca_key,
    );
    let ctl = ControllerProc::start(&cp.dir, &sidecar.kubeconfig, Mode::Sidecar);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    virtualization_controller::install_crypto_provider();
    let kv_client = {
        let url = format!("http://127.0.0.1:{}", kv_sidecar.port)
            .parse()
            .expect("url");
        let _guard = rt.enter();
        let mut config = kube::Config::new(url);
        // As the controller: no client-side retries of 503s, the watches back off instead.
        config.default_retry = false;
        kube::Client::try_from(config).expect("client")
    };
    rt.spawn(fake_virt_controller::run(kv_client));
    let env = Env {
        cp,
        sidecar,
        kv_sidecar,
        ctl: std::sync::Mutex::new(ctl),
        mode: std::sync::Mutex::new(Mode::Sidecar),
        rt,
    };
    let mut failed = Vec::new();
    for mode in [Mode::Sidecar, Mode::Embedded] {
        if mode == Mode::Embedded {
            let kubeconfig = std::path::Path::new(env.cp.kubeconfig()).to_owned();
            *env.ctl.lock().expect("lock") = ControllerProc::start(&env.cp.dir, &kubeconfig, mode);
            *env.mode.lock().expect("lock") = mode;
        }
        eprintln!("--- mode {}", mode.name());
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cases(&env)));
        if run.is_err() {
            failed.push(mode.name());
        }
    }
    // Once, not per mode: the manifests do not depend on it.
    let manifests = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_cases(&[("deploy_manifests", &|| deploy_manifests(&env))])
    }));
    if manifests.is_err() {
        failed.push("deploy_manifests");
    }
    eprintln!("--- both modes in {:?}", t.elapsed());
    assert!(failed.is_empty(), "failed in mode(s) {failed:?}");
}

/// Waits for the controller of the current mode to be ready, then runs every case.
fn cases(env: &Env) {
    let t = Instant::now();
    env.wait("controller /readyz 200", || {
        let mut c = env.ctl.lock().expect("lock");
        if !c.alive() {
            panic!("controller exited:\n{}", c.logs());
        }
        let code = c.get(c.health_port, "/readyz");
        if code == "200" { Ok(()) } else { Err(code) }
    });
    eprintln!("--- {} controller ready in {:?}", env.mode().name(), t.elapsed());

    run_cases(&[
        ("probes", &|| probes(env)),
        ("lifecycle", &|| lifecycle(env)),
        ("run_policy", &|| run_policy(env)),
        ("operations", &|| operations(env)),
        ("spec_change", &|| spec_change(env)),
        ("invalid_spec", &|| invalid_spec(env)),
        ("hand_edit", &|| hand_edit(env)),
        ("bad_operations", &|| bad_operations(env)),
        ("conflict", &|| conflict(env)),
        ("apiserver_restart", &|| apiserver_restart(env)),
        ("class", &|| class(env)),
        ("disks", &|| disks(env)),
        ("webhook", &|| webhook(env)),
        // Last: stops the controller.
        ("sigterm", &|| sigterm(env)),
    ]);
    eprintln!("--- {} cases in {:?}", env.mode().name(), t.elapsed());
}

fn probes(env: &Env) {
    let c = env.ctl.lock().expect("lock");
    assert_eq!(c.get(c.health_port, "/healthz"), "200");
    assert_eq!(c.get(c.health_port, "/readyz"), "200");
    assert_eq!(c.get(c.health_port, "/nothing"), "404");
    assert_eq!(c.get(c.metrics_port, "/metrics"), "200");
}

/// Create, look upstream, delete.
fn lifecycle(env: &Env) {
    let ns = env.namespace("life");
    let ns = ns.as_str();
    // The default runPolicy, AlwaysOnUnlessStoppedManually: Manual, and a Start on creation.
    let yaml = vm_yaml(ns, "web", "AlwaysOnUnlessStoppedManually", "256Mi")
        .replace("  runPolicy: AlwaysOnUnlessStoppedManually\n", "");
    env.apply(&yaml);
    let vm = env.wait_vm(ns, "web", "Running", running);
    assert!(
        vm["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.contains(&json!("virtualization.deckhouse.io/vm-cleanup"))),
        "{vm}"
    );
    let uid = vm["metadata"]["uid"].clone();
    // The phase metric: one series per phase, 1 for Running.
    let want = format!(
        r#"d8_virtualization_virtualmachine_status_phase{{name="web",namespace="{ns}",uid="{}",node="{}",phase="Running"}} 1"#,
        uid.as_str().unwrap_or_default(),
        fake_virt_controller::NODE
    );
    env.wait("phase metric", || {
        let body = env.metrics();
        if body.lines().any(|l| l == want) {
            Ok(())
        } else {
            Err(body)
        }
    });

    // Upstream: the KubeVirt VM exists only under the renamed group, with renamed labels and
    // finalizer, and the controller ownerReference to the VM.
    let up = env.get(UP_KVVM, ns, "web").expect("KubeVirt VM upstream");
    assert_eq!(
        up["apiVersion"], "internal.virtualization.deckhouse.io/v1",
        "{up}"
    );
    assert_eq!(up["kind"], "InternalVirtualizationVirtualMachine", "{up}");
    let labels = &up["metadata"]["labels"];
    assert_eq!(labels[UP_NAME_LABEL], "web", "{up}");
    assert_eq!(labels["app"], "shop", "{up}");
    assert!(labels.get("vm.kubevirt.io/name").is_none(), "{up}");
    // (The template's labels are stored as written: the built-in rules do not rename
    // `spec.template.metadata` of a KubeVirt VM. The instance made from them is renamed.)
    let fins = up["metadata"]["finalizers"].to_string();
    assert!(
        fins.contains(UP_KV_FINALIZER) && !fins.contains("\"kubevirt.io/"),
        "{up}"
    );
    let owner = &up["metadata"]["ownerReferences"][0];
    assert_eq!(
        owner["apiVersion"], "virtualization.deckhouse.io/v1alpha2",
        "{up}"
    );
    assert_eq!(owner["kind"], "VirtualMachine", "{up}");
    assert_eq!(owner["uid"], uid, "{up}");
    assert_eq!(owner["controller"], true, "{up}");
    assert_eq!(up["spec"]["runStrategy"], "Manual", "{up}");
    let t = &up["spec"]["template"]["spec"];
    assert_eq!(t["domain"]["cpu"]["cores"], 1, "{up}");
    assert_eq!(t["domain"]["memory"]["guest"], "256Mi", "{up}");
    assert_eq!(t["domain"]["resources"]["requests"]["cpu"], "500m", "{up}");
    assert!(
        t["volumes"][0]["cloudInitNoCloud"]["userData"]
            .as_str()
            .is_some_and(|u| u.contains("hostname: web")),
        "{up}"
    );
    assert_eq!(t["nodeSelector"]["disk"], "ssd", "{up}");
    assert_eq!(t["tolerations"][0]["key"], "dedicated", "{up}");
    // The instance: renamed labels, and its ownerReference to the KubeVirt VM renamed too.
    let vmi = env.get(UP_VMI, ns, "web").expect("instance upstream");
    assert_eq!(
        vmi["kind"], "InternalVirtualizationVirtualMachineInstance",
        "{vmi}"
    );
    assert_eq!(vmi["metadata"]["labels"][UP_NAME_LABEL], "web", "{vmi}");
    let owner = &vmi["metadata"]["ownerReferences"][0];
    assert_eq!(
        owner["apiVersion"], "internal.virtualization.deckhouse.io/v1",
        "{vmi}"
    );
    assert_eq!(owner["kind"], "InternalVirtualizationVirtualMachine", "{vmi}");
    assert_eq!(owner["uid"], up["metadata"]["uid"], "{vmi}");
    // Nothing upstream under KubeVirt's own names.
    fails(&env.cp.kubectl(&["get", "crd", "virtualmachines.kubevirt.io"]));
    fails(&env.cp.kubectl(&["get", "virtualmachines.kubevirt.io", "-n", ns]));
    // Through the rewriter, KubeVirt's names.
    let through = parse_json(&ok(&env.kv_sidecar.kubectl(&[
        "get",
        "virtualmachines.kubevirt.io",
        "web",
        "-n",
        ns,
        "-o",
        "json",
    ])));
    assert_eq!(
        through["metadata"]["labels"]["vm.kubevirt.io/name"], "web",
        "{through}"
    );
    // Printer columns.
    let table = ok(&env.cp.kubectl(&["get", VM, "web", "-n", ns]));
    let mut lines = table.lines();
    let head: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(head, ["NAME", "PHASE", "NODE", "AGE"], "{table}");
    let row: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(
        row[..3],
        ["web", "Running", fake_virt_controller::NODE],
        "{table}"
    );

    // Deletion waits for the KubeVirt VM and its instance. An extra finalizer on the instance
    // holds it (and so the KubeVirt VM, whose fake virt-controller waits for it).
    ok(&env.cp.kubectl(&[
        "patch",
        UP_VMI,
        "web",
        "-n",
        ns,
        "--type",
        "json",
        "-p",
        r#"[{"op":"add","path":"/metadata/finalizers","value":["test.example/hold"]}]"#,
    ]));
    ok(&env.cp.kubectl(&["delete", VM, "web", "-n", ns, "--wait=false"]));
    env.wait("instance and KubeVirt VM deleting", || {
        let vmi = env.get(UP_VMI, ns, "web").ok_or("no instance")?;
        let kvvm = env.get(UP_KVVM, ns, "web").ok_or("no KubeVirt VM")?;
        if vmi["metadata"]["deletionTimestamp"].is_string()
            && kvvm["metadata"]["deletionTimestamp"].is_string()
        {
            Ok(())
        } else {
            Err("not deleting yet".to_owned())
        }
    });
    let vm = env.wait_vm(ns, "web", "Terminating", |vm| {
        vm["status"]["phase"] == "Terminating"
    });
    assert!(
        vm["metadata"]["finalizers"].to_string().contains("vm-cleanup"),
        "{vm}"
    );
    ok(&env.cp.kubectl(&[
        "patch",
        UP_VMI,
        "web",
        "-n",
        ns,
        "--type",
        "json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]));
    env.wait("VM, KubeVirt VM and instance gone", || {
        for r in [VM, UP_KVVM, UP_VMI] {
            if env.get(r, ns, "web").is_some() {
                return Err(format!("{r} still there"));
            }
        }
        Ok(())
    });
}

/// runPolicy changes start and stop the VM.
fn run_policy(env: &Env) {
    let ns = env.namespace("policy");
    let ns = ns.as_str();
    env.apply(&vm_yaml(ns, "p", "AlwaysOff", "256Mi"));
    env.wait_vm(ns, "p", "Stopped", stopped);
    let strategy = || env.get(UP_KVVM, ns, "p").expect("KubeVirt VM")["spec"]["runStrategy"].clone();
    assert_eq!(strategy(), "Halted");
    assert!(env.get(UP_VMI, ns, "p").is_none());
    for (policy, strategy_want, want_running) in [
        ("AlwaysOn", "Always", true),
        ("Manual", "Manual", true),
        ("AlwaysOff", "Halted", false),
        ("AlwaysOnUnlessStoppedManually", "Manual", true),
    ] {
        env.patch(VM, ns, "p", json!({"spec": {"runPolicy": policy}}));
        if want_running {
            env.wait_vm(ns, "p", &format!("{policy}: Running"), running);
        } else {
            env.wait_vm(ns, "p", &format!("{policy}: Stopped"), stopped);
        }
        assert_eq!(strategy(), strategy_want, "{policy}");
        assert_eq!(env.get(UP_VMI, ns, "p").is_some(), want_running, "{policy}");
    }
}

/// VirtualMachineOperations start, stop and restart.
fn operations(env: &Env) {
    let ns = env.namespace("ops");
    let ns = ns.as_str();
    env.apply(&vm_yaml(ns, "o", "Manual", "256Mi"));
    // Manual: created stopped.
    env.wait_vm(ns, "o", "Stopped", stopped);
    let op = env.completes(ns, "start-1", "Start", "o");
    assert!(cond_is(&op, "Completed", "True"), "{op}");
    env.wait_vm(ns, "o", "Running", running);
    env.completes(ns, "stop-1", "Stop", "o");
    env.wait_vm(ns, "o", "Stopped", stopped);
    assert!(env.get(UP_VMI, ns, "o").is_none());
    env.completes(ns, "start-2", "Start", "o");
    env.wait_vm(ns, "o", "Running", running);
    let before = env.get(UP_VMI, ns, "o").expect("instance")["metadata"]["uid"].clone();
    let op = env.completes(ns, "restart-1", "Restart", "o");
    assert_eq!(op["status"]["stoppedInstanceUID"], before, "{op}");
    env.wait_vm(ns, "o", "Running", running);
    let after = env.get(UP_VMI, ns, "o").expect("instance")["metadata"]["uid"].clone();
    assert_ne!(before, after, "a restart makes a new instance");
}

/// A spec change is applied at once to a stopped VM and awaits a restart on a running one.
fn spec_change(env: &Env) {
    let ns = env.namespace("change");
    let ns = ns.as_str();
    env.apply(&vm_yaml(ns, "c", "Manual", "256Mi"));
    env.wait_vm(ns, "c", "Stopped", stopped);
    env.patch(VM, ns, "c", json!({"spec": {"cpu": {"cores": 2}}}));
    let vm = env.wait_vm(ns, "c", "Stopped, applied", |vm| {
        stopped(vm) && cond_is(vm, "ConfigurationApplied", "True")
    });
    assert!(cond(&vm, "AwaitingRestartToApplyConfiguration").is_none(), "{vm}");
    let up = env.get(UP_KVVM, ns, "c").expect("KubeVirt VM");
    assert_eq!(
        up["spec"]["template"]["spec"]["domain"]["cpu"]["cores"], 2,
        "{up}"
    );

    env.completes(ns, "start", "Start", "c");
    env.wait_vm(ns, "c", "Running", running);
    env.patch(
        VM,
        ns,
        "c",
        json!({"spec": {"memory": {"size": "512Mi"}}, "metadata": {"labels": {"tier": "gold"}}}),
    );
    let vm = env.wait_vm(ns, "c", "awaiting restart", |vm| {
        phase_is(vm, "Running") && cond_is(vm, "AwaitingRestartToApplyConfiguration", "True")
    });
    let (_, reason, message) = cond(&vm, "ConfigurationApplied").expect("ConfigurationApplied");
    assert_eq!(reason, "RestartAwaitingChanges", "{vm}");
    assert!(message.contains("domain"), "{vm}");
    assert!(cond_is(&vm, "ConfigurationApplied", "False"), "{vm}");
    let up = env.get(UP_KVVM, ns, "c").expect("KubeVirt VM");
    assert_eq!(
        up["spec"]["template"]["spec"]["domain"]["memory"]["guest"], "512Mi",
        "{up}"
    );
    assert_eq!(up["metadata"]["labels"]["tier"], "gold", "{up}");
    let vmi = env.get(UP_VMI, ns, "c").expect("instance");
    assert_eq!(vmi["spec"]["domain"]["memory"]["guest"], "256Mi", "{vmi}");

    env.completes(ns, "restart", "Restart", "c");
    let vm = env.wait_vm(ns, "c", "restarted, applied", running);
    assert!(cond(&vm, "AwaitingRestartToApplyConfiguration").is_none(), "{vm}");
    let vmi = env.get(UP_VMI, ns, "c").expect("instance");
    assert_eq!(vmi["spec"]["domain"]["memory"]["guest"], "512Mi", "{vmi}");
}

/// An invalid spec gets a condition naming the problem, not a crash loop; fixed, it goes on.
fn invalid_spec(env: &Env) {
    let ns = env.namespace("bad");
    let ns = ns.as_str();
    env.apply(&vm_yaml(ns, "mem", "AlwaysOn", "lots"));
    env.apply(&vm_yaml(ns, "frac", "AlwaysOn", "256Mi").replace("50%", "150%"));
    for (name, field) in [("mem", "spec.memory.size"), ("frac", "spec.cpu.coreFraction")] {
        let vm = env.wait_vm(ns, name, "InvalidSpec", |vm| {
            cond(vm, "ConfigurationApplied").is_some_and(|c| c.0 == "False" && c.1 == "InvalidSpec")
                && vm["status"]["observedGeneration"] == vm["metadata"]["generation"]
        });
        let (_, _, message) = cond(&vm, "ConfigurationApplied").expect("condition");
        assert!(message.contains(field), "{vm}");
        assert_eq!(vm["status"]["phase"], "Pending", "{vm}");
        assert!(
            env.get(UP_KVVM, ns, name).is_none(),
            "nothing rendered from an invalid spec"
        );
    }
    assert!(env.ctl.lock().expect("lock").alive(), "controller exited");
    env.patch(VM, ns, "mem", json!({"spec": {"memory": {"size": "256Mi"}}}));
    env.wait_vm(ns, "mem", "Running once fixed", running);
}

/// A KubeVirt VM edited by hand upstream is put back.
fn hand_edit(env: &Env) {
    let ns = env.namespace("hand");
    let ns = ns.as_str();
    env.apply(&vm_yaml(ns, "h", "AlwaysOff", "256Mi"));
    env.wait_vm(ns, "h", "Stopped", stopped);
    // The spec, then a label: each is put back on its own.
    let put_back = |what: &str| {
        env.wait(
            &format!("KubeVirt VM put back after a hand edit of {what}"),
            || {
                let up = env.get(UP_KVVM, ns, "h").ok_or("no KubeVirt VM")?;
                let back = up["metadata"]["labels"][UP_NAME_LABEL] == "h"
                    && up["spec"]["runStrategy"] == "Halted"
                    && up["spec"]["template"]["spec"]["domain"]["cpu"]["cores"] == 1;
                if back { Ok(()) } else { Err(up.to_string()) }
            },
        )
    };
    env.patch(
        UP_KVVM,
        ns,
        "h",
        json!({"spec": {"runStrategy": "Always", "template": {"spec": {"domain": {"cpu": {"cores": 8}}}}}}),
    );
    put_back("the spec");
    env.patch(
        UP_KVVM,
        ns,
        "h",
        json!({"metadata": {"labels": {UP_NAME_LABEL: "other"}}}),
    );
    put_back("a label");
    env.wait("no instance", || match env.get(UP_VMI, ns, "h") {
        None => Ok(()),
        Some(_) => Err("instance still there".to_owned()),
    });
    env.wait_vm(ns, "h", "Stopped", stopped);
}

/// Operations that cannot be done fail with a condition saying why.
fn bad_operations(env: &Env) {
    let ns = env.namespace("nop");
    let ns = ns.as_str();
    let op = env.operation(ns, "ghost-start", "Start", "ghost");
    assert_eq!(op["status"]["phase"], "Failed", "{op}");
    let (status, reason, message) = cond(&op, "Completed").expect("Completed");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "VirtualMachineNotFound"),
        "{op}"
    );
    assert!(message.contains("ghost"), "{op}");

    env.apply(&vm_yaml(ns, "always-on", "AlwaysOn", "256Mi"));
    env.wait_vm(ns, "always-on", "Running", running);
    let op = env.operation(ns, "stop-always-on", "Stop", "always-on");
    assert_eq!(op["status"]["phase"], "Failed", "{op}");
    assert_eq!(
        cond(&op, "Completed").expect("Completed").1,
        "NotAllowedByRunPolicy",
        "{op}"
    );
    env.wait_vm(ns, "always-on", "still Running", running);
}

/// A VM naming an absent class waits, Pending, with a condition saying so; once the class
/// exists its nodeSelector and tolerations reach the KubeVirt VM; a core count the class does
/// not allow is reported.
fn class(env: &Env) {
    let ns = env.namespace("class");
    let ns = ns.as_str();
    let class = format!("gold-{}", env.mode().name());
    env.apply(&(vm_yaml(ns, "c", "AlwaysOn", "256Mi") + &format!("  virtualMachineClassName: {class}\n")));
    let vm = env.wait_vm(ns, "c", "Pending, class not found", |vm| {
        cond(vm, "ClassReady").is_some_and(|c| c.0 == "False" && c.1 == "VirtualMachineClassNotFound")
    });
    assert_eq!(vm["status"]["phase"], "Pending", "{vm}");
    let (_, _, message) = cond(&vm, "ClassReady").expect("ClassReady");
    assert!(message.contains(&class), "{vm}");
    assert!(env.get(UP_KVVM, ns, "c").is_none(), "rendered without its class");

    env.apply(&format!(
        r#"apiVersion: virtualization.deckhouse.io/v1alpha2
kind: VirtualMachineClass
metadata: {{name: {class}}}
spec:
  cpu: {{cores: [1, 2]}}
  nodeSelector: {{disk: nvme, zone: a}}
  tolerations: [{{key: gold, operator: Exists, effect: NoSchedule}}]
"#
    ));
    env.wait_vm(ns, "c", "Running with its class", |vm| {
        running(vm) && cond_is(vm, "ClassReady", "True")
    });
    let up = env.get(UP_KVVM, ns, "c").expect("KubeVirt VM");
    let t = &up["spec"]["template"]["spec"];
    // The VM's own `disk: ssd` is overridden by the class; `zone` comes from the class.
    assert_eq!(t["nodeSelector"], json!({"disk": "nvme", "zone": "a"}), "{up}");
    let keys: Vec<&str> = t["tolerations"]
        .as_array()
        .expect("tolerations")
        .iter()
        .filter_map(|t| t["key"].as_str())
        .collect();
    assert_eq!(keys, ["dedicated", "gold"], "{up}");

    env.patch(VM, ns, "c", json!({"spec": {"cpu": {"cores": 3}}}));
    let vm = env.wait_vm(ns, "c", "cores not allowed by the class", |vm| {
        cond(vm, "ClassReady").is_some_and(|c| c.0 == "False" && c.1 == "NotAllowedByClass")
            && vm["status"]["observedGeneration"] == vm["metadata"]["generation"]
    });
    let (_, _, message) = cond(&vm, "ClassReady").expect("ClassReady");
    assert!(message.contains("spec.cpu.cores 3"), "{vm}");
    ok(&env.cp.kubectl(&["delete", VM, "c", "-n", ns, "--wait=false"]));
    env.wait("VM gone", || match env.get(VM, ns, "c") {
        None => Ok(()),
        Some(_) => Err("VM still there".to_owned()),
    });
    ok(&env.cp.kubectl(&["delete", VMC, &class]));
}

fn vd_yaml(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualDisk\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  persistentVolumeClaim: {{size: 1Gi, storageClassName: local}}\n"
    )
}

/// Waits until disk `name` has a claim and `phase`; returns the disk.
fn wait_disk(env: &Env, ns: &str, name: &str, phase: &str) -> Value {
    env.wait(&format!("VirtualDisk {ns}/{name} {phase}"), || {
        let vd = env.get(VD, ns, name).ok_or("no VirtualDisk")?;
        let st = &vd["status"];
        if st["phase"] == phase && st["target"]["persistentVolumeClaimName"].is_string() {
            Ok(vd)
        } else {
            Err(st.to_string())
        }
    })
}

/// A disk's claim is created and reported; a VM waits for its disks, then gets them as disks
/// and volumes; deleting a disk deletes its claim.
fn disks(env: &Env) {
    let ns = env.namespace("disk");
    let ns = ns.as_str();
    env.apply(&vd_yaml(ns, "root"));
    let vd = wait_disk(env, ns, "root", "WaitForFirstConsumer");
    let root_claim = vd["status"]["target"]["persistentVolumeClaimName"]
        .as_str()
        .expect("claim name")
        .to_owned();
    let pvc = env.get("pvc", ns, &root_claim).expect("claim");
    assert_eq!(pvc["spec"]["resources"]["requests"]["storage"], "1Gi", "{pvc}");
    assert_eq!(pvc["spec"]["storageClassName"], "local", "{pvc}");
    assert_eq!(
        pvc["metadata"]["ownerReferences"][0]["kind"], "VirtualDisk",
        "{pvc}"
    );

    env.apply(
        &(vm_yaml(ns, "d", "AlwaysOn", "256Mi")
            + "  blockDeviceRefs:\n  - {kind: VirtualDisk, name: root}\n  - {kind: VirtualDisk, name: data}\n"),
    );
    let vm = env.wait_vm(ns, "d", "waiting for its disks", |vm| {
        cond(vm, "BlockDevicesReady").is_some_and(|c| c.0 == "False" && c.2.contains("data not found"))
    });
    let (_, _, message) = cond(&vm, "BlockDevicesReady").expect("BlockDevicesReady");
    assert!(message.contains("root is WaitForFirstConsumer"), "{vm}");
    assert_eq!(vm["status"]["phase"], "Pending", "{vm}");
    assert!(env.get(UP_KVVM, ns, "d").is_none(), "rendered before its disks");

    env.apply(&vd_yaml(ns, "data"));
    let data_claim =
        wait_disk(env, ns, "data", "WaitForFirstConsumer")["status"]["target"]["persistentVolumeClaimName"]
            .as_str()
            .expect("claim name")
            .to_owned();
    // TEST DOUBLE of a storage provisioner: none runs here, so the test binds each claim by
    // writing its status.
    for claim in [&root_claim, &data_claim] {
        ok(&env.cp.kubectl(&[
            "patch",
            "pvc",
            claim,
            "-n",
            ns,
            "--subresource=status",
            "--type",
            "merge",
            "-p",
            r#"{"status":{"phase":"Bound","accessModes":["ReadWriteOnce"],"capacity":{"storage":"1Gi"}}}"#,
        ]));
    }
    let vd = wait_disk(env, ns, "root", "Ready");
    assert_eq!(vd["status"]["capacity"], "1Gi", "{vd}");
    env.wait_vm(ns, "d", "Running with its disks", |vm| {
        running(vm) && cond_is(vm, "BlockDevicesReady", "True")
    });
    let up = env.get(UP_KVVM, ns, "d").expect("KubeVirt VM");
    let t = &up["spec"]["template"]["spec"];
    let disks: Vec<&str> = t["domain"]["devices"]["disks"]
        .as_array()
        .expect("disks")
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    assert_eq!(disks, ["vd-root", "vd-data", "cloudinit"], "{up}");
    assert_eq!(
        t["volumes"][0]["persistentVolumeClaim"]["claimName"],
        root_claim.as_str(),
        "{up}"
    );
    assert_eq!(
        t["volumes"][1]["persistentVolumeClaim"]["claimName"],
        data_claim.as_str(),
        "{up}"
    );

    ok(&env.cp.kubectl(&["delete", VM, "d", "-n", ns, "--wait=false"]));
    env.wait("VM gone", || match env.get(VM, ns, "d") {
        None => Ok(()),
        Some(_) => Err("VM still there".to_owned()),
    });
    ok(&env.cp.kubectl(&["delete", VD, "root", "-n", ns, "--wait=false"]));
    env.wait("disk gone, its claim deleted", || {
        if env.get(VD, ns, "root").is_some() {
            return Err("disk still there".to_owned());
        }
        // Gone once the controller-manager's pvc-protection controller has seen that no pod
        // uses it and removed its `kubernetes.io/pvc-protection` finalizer.
        match env.get("pvc", ns, &root_claim) {
            None => Ok(()),
            Some(pvc) if pvc["metadata"]["deletionTimestamp"].is_string() => {
                Err("claim deleted, its finalizer not yet removed".to_owned())
            }
            Some(_) => Err("claim not deleted".to_owned()),
        }
    });
}

/// kube-apiserver calls the webhook (registered for this mode's namespace only) and kubectl
/// shows each denial's message; a good VM is admitted, and a bad update of it denied.
fn webhook(env: &Env) {
    use virtualization_controller::webhook::{KUBEVIRT_KEY_MESSAGE, PATH};
    let ns = env.namespace("webhook");
    let ns = ns.as_str();
    let mode = env.mode().name();
    ok(&env
        .cp
        .kubectl(&["label", "namespace", ns, &format!("webhook-test={mode}")]));
    let port = env.ctl.lock().expect("lock").webhook_port;
    let ca = ok(&Command::new("base64")
        .arg("-w0")
        .arg(env.cp.dir.join("webhook-ca.crt"))
        .output()
        .expect("base64"));
    assert!(!ca.is_empty());
    let config = format!("vm-validation-{mode}");
    env.apply(&format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: {config}}}
webhooks:
- name: vm.validate.virtualization.deckhouse.io
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: 10
  clientConfig:
    url: https://127.0.0.1:{port}{PATH}
    caBundle: {ca}
  namespaceSelector: {{matchLabels: {{webhook-test: {mode}}}}}
  rules:
  - apiGroups: [virtualization.deckhouse.io]
    apiVersions: [v1alpha2]
    operations: [CREATE, UPDATE]
    resources: [virtualmachines]
"#
    ));
    let apply = |yaml: &str| kubectl_in(env.cp.kubeconfig(), &["apply", "-f", "-"], yaml);
    let labelled =
        vm_yaml(ns, "bad", "AlwaysOff", "256Mi").replace("{app: shop}", "{app: shop, kubevirt.io/evil: x}");
    // kube-apiserver picks the configuration up from its own watch: probe with server-side
    // dry runs (the webhook has no side effects, so it is called for them) until it is in force.
    let denied = env.wait("the webhook in force", || {
        let o = kubectl_in(
            env.cp.kubeconfig(),
            &["apply", "--dry-run=server", "-f", "-"],
            &labelled,
        );
        if o.status.success() {
            Err("admitted".to_owned())
        } else {
            Ok(String::from_utf8_lossy(&o.stderr).into_owned())
        }
    });
    assert!(denied.contains(KUBEVIRT_KEY_MESSAGE), "{denied}");

    env.apply(&format!(
        "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualMachineClass\nmetadata: {{name: small-{mode}}}\nspec:\n  cpu: {{cores: [1]}}\n"
    ));
    let long = "l".repeat(64);
    for (what, yaml, message) in [
        (
            "a kubevirt.io label",
            labelled.clone(),
            KUBEVIRT_KEY_MESSAGE.to_owned(),
        ),
        (
            "a kubevirt.io annotation",
            vm_yaml(ns, "bad", "AlwaysOff", "256Mi").replace(
                "  labels: {app: shop}\n",
                "  annotations: {kubevirt.io/allow-pod-bridge-network-live-migration: x}\n",
            ),
            KUBEVIRT_KEY_MESSAGE.to_owned(),
        ),
        (
            "a name over 63 characters",
            vm_yaml(ns, &long, "AlwaysOff", "256Mi"),
            "longer than 63".to_owned(),
        ),
        (
            "duplicate blockDeviceRefs",
            vm_yaml(ns, "bad", "AlwaysOff", "256Mi")
                + "  blockDeviceRefs:\n  - {kind: VirtualDisk, name: a}\n  - {kind: VirtualDisk, name: a}\n",
            "VirtualDisk a is referred to more than once".to_owned(),
        ),
        (
            "zero cores",
            vm_yaml(ns, "bad", "AlwaysOff", "256Mi").replace("cores: 1", "cores: 0"),
            "spec.cpu.cores must be at least 1".to_owned(),
        ),
        (
            "cores the class does not allow",
            vm_yaml(ns, "bad", "AlwaysOff", "256Mi").replace("cores: 1", "cores: 2")
                + &format!("  virtualMachineClassName: small-{mode}\n"),
            format!("spec.cpu.cores 2 is not allowed by VirtualMachineClass small-{mode}"),
        ),
    ] {
        let err = fails(&apply(&yaml));
        assert!(
            err.contains("denied the request") && err.contains(&message),
            "{what}: {err}"
        );
    }
    assert!(env.get(VM, ns, "bad").is_none(), "a denied VM was stored");

    env.apply(&vm_yaml(ns, "good", "AlwaysOff", "256Mi"));
    env.wait_vm(ns, "good", "Stopped", stopped);
    let err = fails(
        &env.cp
            .kubectl(&["label", VM, "good", "-n", ns, "kubevirt.io/evil=x"]),
    );
    assert!(err.contains(KUBEVIRT_KEY_MESSAGE), "{err}");
    ok(&env
        .cp
        .kubectl(&["delete", "validatingwebhookconfiguration", &config]));
    ok(&env.cp.kubectl(&["delete", VMC, &format!("small-{mode}")]));
}

/// The manifests under `controller/deploy/` pass a server-side dry run: the namespace is
/// created first (a dry run cannot see a namespace created in the same dry run), then everything
/// is applied with `--dry-run=server`, and nothing but the namespace exists afterwards.
fn deploy_manifests(env: &Env) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let file = |f: &str| dir.join(f).to_str().expect("utf-8").to_owned();
    ok(&env.cp.kubectl(&["apply", "-f", &file("namespace.yaml")]));
    let out = ok(&env.cp.kubectl(&["apply", "--dry-run=server", "-f", &file("")]));
    for obj in [
        "serviceaccount/virtualization-controller",
        "clusterrole.rbac.authorization.k8s.io/d8:virtualization:virtualization-controller",
        "clusterrolebinding.rbac.authorization.k8s.io/d8:virtualization:virtualization-controller",
        "configmap/kube-api-rewriter-kubeconfig",
        "deployment.apps/virtualization-controller",
        "service/virtualization-controller",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/virtualization-controller",
    ] {
        assert!(
            out.contains(&format!("{obj} created (server dry run)")),
            "{obj}:\n{out}"
        );
    }
    let ns = "d8-virtualization";
    fails(
        &env.cp
            .kubectl(&["get", "deployment", "virtualization-controller", "-n", ns]),
    );
    fails(&env.cp.kubectl(&[
        "get",
        "validatingwebhookconfiguration",
        "virtualization-controller",
    ]));
    // The sidecar is the first container, with the env Deckhouse gives it.
    let dep = parse_json(&ok(&env.cp.kubectl(&[
        "create",
        "--dry-run=server",
        "-o",
        "json",
        "-f",
        &file("deployment.yaml"),
    ])));
    let containers = &dep["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers[0]["name"], "proxy", "{dep}");
    assert_eq!(
        containers[0]["env"][0],
        json!({"name": "CLIENT_PROXY_PORT", "value": "23915"}),
        "{dep}"
    );
    assert_eq!(containers[1]["name"], "virtualization-controller", "{dep}");
}

/// A status write from a stale copy of a VM gets a 409 Conflict; the reconcile reads the VM
/// again and succeeds.
fn conflict(env: &Env) {
    let ns = env.namespace("conflict");
    let ns = ns.as_str();
    env.apply(&vm_yaml(ns, "x", "AlwaysOff", "256Mi"));
    env.wait_vm(ns, "x", "Stopped", stopped);
    env.rt.block_on(async {
        let url = format!("http://127.0.0.1:{}", env.sidecar.port)
            .parse()
            .expect("url");
        let client = kube::Client::try_from(kube::Config::new(url)).expect("client");
        let api: kube::Api<VirtualMachine> = kube::Api::namespaced(client.clone(), ns);
        let mut stale = api.get("x").await.expect("get VM");
        // Someone else writes the VM: the copy is stale now.
        tokio::task::block_in_place(|| {
            ok(&env.cp.kubectl(&["annotate", VM, "x", "-n", ns, "touched=yes"]));
        });
        // A copy whose status differs from what the reconcile computes, so it writes.
        stale.status = None;
        let direct = api
            .replace_status("x", &Default::default(), &stale)
            .await
            .expect_err("a write from the stale copy conflicts");
        assert!(
            matches!(&direct, kube::Error::Api(s) if s.code == 409),
            "{direct}"
        );
        let action = vm::reconcile(std::sync::Arc::new(stale), Context::new(client))
            .await
            .unwrap_or_else(|e| panic!("reconcile from a stale copy: {e}"));
        eprintln!("reconcile from a stale copy: {action:?}");
    });
    env.wait_vm(ns, "x", "Stopped", stopped);
}

/// kube-apiserver restarts under the controller and both sidecars; none of them restarts and
/// changes made afterwards are reconciled.
fn apiserver_restart(env: &Env) {
    let ns = env.namespace("restart");
    let ns = ns.as_str();
    env.apply(&vm_yaml(ns, "r", "AlwaysOff", "256Mi"));
    env.wait_vm(ns, "r", "Stopped", stopped);
    let t = Instant::now();
    ok(&env.cp.script("restart-apiserver"));
    eprintln!("kube-apiserver restarted in {:?}", t.elapsed());
    env.wait("kube-apiserver back", || {
        let o = env.cp.kubectl(&["get", VM, "r", "-n", ns]);
        if o.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&o.stderr).into_owned())
        }
    });
    let t = Instant::now();
    env.patch(VM, ns, "r", json!({"spec": {"runPolicy": "Manual"}}));
    env.completes(ns, "start", "Start", "r");
    env.wait_vm(ns, "r", "Running after the restart", running);
    env.patch(VM, ns, "r", json!({"spec": {"runPolicy": "AlwaysOff"}}));
    env.wait_vm(ns, "r", "Stopped after the restart", stopped);
    eprintln!("reconciled after the restart in {:?}", t.elapsed());
    assert!(env.ctl.lock().expect("lock").alive(), "controller exited");
    for p in [&env.sidecar, &env.kv_sidecar] {
        assert_eq!(
            ok(&curl(&[
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &p.mon("/healthz")
            ])),
            "200",
            "a sidecar stopped"
        );
    }
}

/// SIGTERM stops the controller cleanly; its log is JSON and holds no credentials.
fn sigterm(env: &Env) {
    let mut c = env.ctl.lock().expect("lock");
    let pid = c.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success()
    );
    let t = Instant::now();
    let code = loop {
        if let Ok(Some(st)) = c.child.try_wait() {
            break st.code();
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no exit after SIGTERM:\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(0), "{}", c.logs());
    let logs = c.logs();
    for line in logs.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["level"].is_string(), "{line}");
    }
    assert!(logs.contains("\"stopped\""), "{logs}");
    for secret in ["Bearer", "admintoken", "Authorization"] {
        assert!(!logs.contains(secret), "{secret} in the log");
    }
}
