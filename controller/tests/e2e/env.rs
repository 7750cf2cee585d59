//! The environment the cases share, and the helpers they use: the control plane, real KubeVirt
//! (`scripts/kubevirt.sh`: its CRDs stored renamed, virt-controller behind its own sidecar, kwok's
//! Nodes), our CRDs, the controller's sidecar, the virt-handler double, the webhook's
//! certificate, the controller of the current mode; polling with deadlines, kubectl shorthands, a
//! VM's manifest and what its status says.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kube_api_rewriter_testkit::*;
use serde_json::Value;

use crate::controller::{ControllerProc, Mode};
use crate::kubelet_double::KubeletDouble;
use crate::support;
pub use crate::support::vm_yaml;
use crate::{csi_double, virt_handler_double};

/// Our VirtualMachines.
pub const VM: &str = "virtualmachines.virtualization.deckhouse.io";
/// Our VirtualMachineOperations.
pub const VMOP: &str = "virtualmachineoperations.virtualization.deckhouse.io";
/// Our VirtualMachineClasses (cluster-scoped).
pub const VMC: &str = "virtualmachineclasses.virtualization.deckhouse.io";
/// Our VirtualDisks.
pub const VD: &str = "virtualdisks.virtualization.deckhouse.io";
/// Our VirtualMachinePools.
pub const VMPOOL: &str = "virtualmachinepools.virtualization.deckhouse.io";
/// Our VirtualDiskSnapshots.
pub const VDSNAPSHOT: &str = "virtualdisksnapshots.virtualization.deckhouse.io";
/// Our VirtualMachineSnapshots.
pub const VMSNAPSHOT: &str = "virtualmachinesnapshots.virtualization.deckhouse.io";
/// Our VirtualMachineBlockDeviceAttachments.
pub const VMBDA: &str = "virtualmachineblockdeviceattachments.virtualization.deckhouse.io";
/// The storage's VolumeSnapshots.
pub const VOLUME_SNAPSHOT: &str = "volumesnapshots.snapshot.storage.k8s.io";
/// KubeVirt's VirtualMachines as kube-apiserver stores them.
pub const UP_KVVM: &str = "internalvirtualizationvirtualmachines.internal.virtualization.deckhouse.io";
/// KubeVirt's VirtualMachineInstances as kube-apiserver stores them.
pub const UP_VMI: &str = "internalvirtualizationvirtualmachineinstances.internal.virtualization.deckhouse.io";
/// KubeVirt's `vm.kubevirt.io/name` label as kube-apiserver stores it.
pub const UP_NAME_LABEL: &str = "vm.kubevirt.internal.virtualization.deckhouse.io/name";
/// KubeVirt's migrations as kube-apiserver stores them.
pub const UP_VMIM: &str =
    "internalvirtualizationvirtualmachineinstancemigrations.internal.virtualization.deckhouse.io";
/// The label virt-controller puts on a migration's target Pod, as stored.
pub const UP_MIGRATION_LABEL: &str = "kubevirt.internal.virtualization.deckhouse.io/migrationJobUID";
/// The longest any state is waited for: far beyond what a passing run needs (seconds), so a
/// loaded machine does not fail the test.
const WAIT: Duration = Duration::from_secs(90);

/// The controller's snapshot ready timeout in the tests.
pub const SNAPSHOT_READY_TIMEOUT: &str = "20s";

/// The controller's namespace, with DVCR's credentials and the uploader's certificate.
pub const CONTROLLER_NS: &str = "d8-virtualization";
/// The label of the Node the data Pods run on.
pub const DATA_NODE_LABEL: &str = "virtualization.deckhouse.io/data-node";

/// DVCR with the Secrets the controller copies to its data Pods (DVCR's credentials and CA,
/// the uploader's certificate for 127.0.0.1 from the CA `ca_crt`/`ca_key`), the kubelet double
/// running the data Pods with `virtualization-dvcr`, and the file server they download from.
fn data_path(
    cp: &ControlPlane,
    rt: &tokio::runtime::Runtime,
    ca_crt: &Path,
    ca_key: &Path,
) -> (Dvcr, KubeletDouble, FileServer) {
    let dvcr = Dvcr::up(&cp.dir);
    ok(&cp.kubectl(&["create", "namespace", CONTROLLER_NS]));
    ok(&cp.kubectl(&[
        "create",
        "secret",
        "generic",
        "dvcr-credentials",
        "-n",
        CONTROLLER_NS,
        &format!("--from-file=.dockerconfigjson={}", dvcr.auth_file.display()),
        &format!("--from-file=ca.crt={}", dvcr.ca_file.display()),
    ]));
    signed_cert(
        &cp.dir,
        "uploader",
        "uploader",
        Some("IP:127.0.0.1,DNS:localhost"),
        ca_crt,
        ca_key,
    );
    ok(&cp.kubectl(&[
        "create",
        "secret",
        "tls",
        "virtualization-uploader-tls",
        "-n",
        CONTROLLER_NS,
        &format!("--cert={}", cp.dir.join("uploader.crt").display()),
        &format!("--key={}", cp.dir.join("uploader.key").display()),
    ]));
    let bin = workspace_bin("virtualization-dvcr", "virtualization-dvcr");
    let admin = support::admin_client(rt, cp.kubeconfig());
    let kubelet = rt.block_on(KubeletDouble::start(
        admin,
        "data-node",
        &[(DATA_NODE_LABEL, "true")],
        vec![("virtualization-dvcr".to_owned(), bin)],
        cp.dir.join("kubelet"),
    ));
    let files = FileServer::start(&cp.dir.join("files"));
    (dvcr, kubelet, files)
}

/// What the cases of a run share; dropped in the order of its fields.
pub struct Env {
    /// The controller under test: none before the first case of a mode, replaced when the mode
    /// changes.
    ctl: Mutex<Option<ControllerProc>>,
    /// The controller's sidecar.
    pub sidecar: ProxyProc,
    /// A sidecar with admin's credentials that the virt-handler double and the cases use to
    /// read KubeVirt's objects with their original names.
    pub kv_sidecar: ProxyProc,
    /// virtualization-api behind its sidecar to KubeVirt's virt-api, registered with the
    /// aggregator: where the controller freezes guests and hot-plugs disks.
    pub subresources: VirtualizationApi,
    /// What virt-api handed to the virt-handler double (freezes, unfreezes).
    pub handler: Arc<virt_handler_double::api::Handler>,
    /// The CSI double, which makes VolumeSnapshots ready to use.
    pub csi: Arc<csi_double::Csi>,
    /// Real KubeVirt: virt-controller behind its sidecar, kwok's Nodes.
    pub kubevirt: KubeVirt,
    /// DVCR: a real registry, where images are imported.
    pub dvcr: Dvcr,
    /// The Node where the importer and uploader Pods run, as local processes.
    pub kubelet: KubeletDouble,
    /// What the importers download.
    pub files: FileServer,
    /// etcd, kube-apiserver and the rest of the control plane.
    pub cp: ControlPlane,
    mode: Mutex<Mode>,
    /// The modes whose controller did not start, with why.
    failed_modes: Mutex<Vec<(Mode, String)>>,
    /// Runs the virt-handler double, and the cases' own kube-rs clients.
    pub rt: tokio::runtime::Runtime,
}

/// The running controller, locked (see [`Env::ctl`]).
pub struct Ctl<'a>(MutexGuard<'a, Option<ControllerProc>>);

impl std::ops::Deref for Ctl<'_> {
    type Target = ControllerProc;

    fn deref(&self) -> &ControllerProc {
        self.0.as_ref().expect("a controller started")
    }
}

impl std::ops::DerefMut for Ctl<'_> {
    fn deref_mut(&mut self) -> &mut ControllerProc {
        self.0.as_mut().expect("a controller started")
    }
}

impl Env {
    /// Starts the control plane and KubeVirt, applies our CRDs, starts both sidecars and the
    /// virt-handler double, and makes the webhook's certificate. No controller yet: see
    /// [`Env::enter`].
    fn setup() -> Env {
        let t = Instant::now();
        let cp = ControlPlane::up();
        // KubeVirt's CRDs go in through a rewriter, so kube-apiserver stores them renamed.
        let kubevirt = KubeVirt::up(&cp, &["disk=ssd"]);
        // Where virt-api calls virt-handler (the Nodes' virt-handler Pods are at 127.0.0.1):
        // bound before any other port is picked.
        let handler_listener =
            virt_handler_double::api::bind(kubevirt.get("VIRT_HANDLER_PORT").parse().expect("port"));
        let kv_sidecar = ProxyProc::start(&cp.dir, &[("KUBECONFIG", cp.kubeconfig())]);
        // Ours are not renamed: straight to kube-apiserver, as a cluster admin would.
        let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
        ok(&cp.kubectl(&["apply", "-f", crds.to_str().expect("utf-8")]));
        // The snapshot CRDs, as a cluster's snapshot-controller deployment installs them.
        let snapshot_crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/snapshot-crds");
        ok(&cp.kubectl(&["apply", "-f", snapshot_crds.to_str().expect("utf-8")]));
        let sidecar = ProxyProc::start(&cp.dir, &[("KUBECONFIG", cp.kubeconfig())]);
        for crd in [
            VM,
            VMOP,
            VMC,
            VD,
            VMPOOL,
            VDSNAPSHOT,
            VMSNAPSHOT,
            VMBDA,
            VOLUME_SNAPSHOT,
        ] {
            if let Some(err) = wait_crd_established(&sidecar, crd) {
                panic!("{crd}: {err}");
            }
        }
        // The webhook's serving certificate, for 127.0.0.1, from a CA kube-apiserver is given in
        // the webhook configuration's caBundle.
        let (ca_crt, ca_key) = make_ca(&cp.dir, "webhook-ca");
        signed_cert(
            &cp.dir,
            "webhook",
            "virtualization-controller",
            Some("IP:127.0.0.1"),
            &ca_crt,
            &ca_key,
        );
        let rt = support::runtime();
        let (dvcr, kubelet, files) = data_path(&cp, &rt, &ca_crt, &ca_key);
        // As kubevirt-handler, through its own sidecar: virt-api puts back a VMI status anyone
        // else writes.
        let handler_port = kubevirt.get("VIRT_HANDLER_SIDECAR_PORT").parse().expect("port");
        let handler_client = support::sidecar_client(&rt, handler_port);
        let handler = Arc::new(virt_handler_double::api::Handler::default());
        rt.spawn(virt_handler_double::run(handler_client.clone(), handler.clone()));
        rt.spawn({
            let (kv, handler) = (&kubevirt, handler.clone());
            let file = |k: &str| PathBuf::from(kv.get(k));
            let (cert, key, ca) = (
                file("VIRT_HANDLER_CERT"),
                file("VIRT_HANDLER_KEY"),
                file("VIRT_API_CA_FILE"),
            );
            async move {
                virt_handler_double::api::serve(handler_listener, &cert, &key, &ca, handler_client, handler)
                    .await
            }
        });
        let subresources = VirtualizationApi::start(&cp, &kubevirt, &cp.dir.join("virtualization-api"));
        let csi = Arc::new(csi_double::Csi::default());
        rt.spawn(csi_double::run(
            support::admin_client(&rt, cp.kubeconfig()),
            csi.clone(),
        ));
        eprintln!("--- environment up in {:?}", t.elapsed());
        Env {
            ctl: Mutex::new(None),
            sidecar,
            kv_sidecar,
            kubevirt,
            subresources,
            handler,
            csi,
            dvcr,
            kubelet,
            files,
            cp,
            mode: Mutex::new(Mode::Sidecar),
            failed_modes: Mutex::new(Vec::new()),
            rt,
        }
    }

    /// Makes the controller run in `mode` and waits for it to be ready: the one already running
    /// if it is of `mode`, else the other mode's is stopped and a new one started. `Err` when
    /// it does not get ready (then at once for every later case of the mode).
    pub fn enter(&self, mode: Mode) -> Result<(), String> {
        let failed = lock(&self.failed_modes);
        if let Some((_, why)) = failed.iter().find(|(m, _)| *m == mode) {
            return Err(format!("the {} controller did not start: {why}", mode.name()));
        }
        drop(failed);
        {
            let mut ctl = lock(&self.ctl);
            if ctl.is_some() && self.mode() == mode {
                return Ok(());
            }
            // The other mode's controller stops before this one starts.
            *ctl = None;
        }
        *lock(&self.mode) = mode;
        eprintln!("--- mode {}", mode.name());
        let t = Instant::now();
        let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.start_controller(mode);
            self.wait_ready();
        }));
        if let Err(e) = started {
            let why = panic_message(&*e);
            lock(&self.failed_modes).push((mode, why.clone()));
            return Err(format!("the {} controller did not start: {why}", mode.name()));
        }
        eprintln!("--- {} controller ready in {:?}", mode.name(), t.elapsed());
        Ok(())
    }

    /// Stops the controller and starts a new one in `mode`, without waiting for it to be ready.
    pub fn restart_unready(&self, mode: Mode) {
        *lock(&self.ctl) = None;
        *lock(&self.mode) = mode;
        self.start_controller(mode);
    }

    /// Starts the controller in `mode` (none may run).
    fn start_controller(&self, mode: Mode) {
        let kubeconfig = match mode {
            Mode::Sidecar => self.sidecar.kubeconfig.clone(),
            Mode::Embedded => PathBuf::from(self.cp.kubeconfig()),
        };
        let data = [
            ("POD_NAMESPACE", CONTROLLER_NS.to_owned()),
            ("DVCR_ADDRESS", self.dvcr.address.clone()),
            ("DATA_POD_NODE_SELECTOR", format!("{DATA_NODE_LABEL}=true")),
            ("DATA_POD_IMAGE", "virtualization-dvcr:dev".to_owned()),
            // Short, so the case of a snapshot that never gets ready ends soon.
            ("SNAPSHOT_READY_TIMEOUT", SNAPSHOT_READY_TIMEOUT.to_owned()),
        ];
        *lock(&self.ctl) = Some(ControllerProc::start(&self.cp.dir, &kubeconfig, mode, &data));
    }

    /// Waits until the controller answers `/readyz` with 200; panics when it exits.
    pub fn wait_ready(&self) {
        self.wait("controller /readyz 200", || {
            let mut c = self.ctl();
            if !c.alive() {
                panic!("controller exited:\n{}", c.logs());
            }
            let code = c.get(c.health_port, "/readyz");
            if code == "200" { Ok(()) } else { Err(code) }
        });
    }

    /// The controller's `/readyz` body.
    pub fn readyz(&self) -> String {
        let port = self.ctl().health_port;
        String::from_utf8_lossy(&curl(&["-s", &format!("http://127.0.0.1:{port}/readyz")]).stdout)
            .into_owned()
    }

    /// The controller of the current mode, locked until the value is dropped.
    pub fn ctl(&self) -> Ctl<'_> {
        Ctl(lock(&self.ctl))
    }

    /// The controller's log so far (empty when none runs).
    pub fn logs(&self) -> String {
        lock(&self.ctl)
            .as_ref()
            .map(ControllerProc::logs)
            .unwrap_or_default()
    }

    /// The controller's `/metrics` text.
    pub fn metrics(&self) -> String {
        let port = self.ctl().metrics_port;
        ok(&curl(&["-s", &format!("http://127.0.0.1:{port}/metrics")]))
    }

    /// Polls `f` every 100 ms until it gives a value; panics after `limit` with the last
    /// value seen and the controller's log.
    pub fn wait<T: std::fmt::Debug>(&self, what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
        let t = Instant::now();
        let mut last = String::new();
        while t.elapsed() < WAIT {
            match f() {
                Ok(v) => return v,
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let tail = |logs: String, n: usize| logs.lines().rev().take(n).collect::<Vec<_>>().join("\n");
        let (vc, vc_sidecar) = self.kubevirt.logs();
        panic!(
            "{what}: not within {WAIT:?}; last: {last}\ncontroller log (newest first):\n{}\n\
             virt-controller log (newest first):\n{}\nvirt-controller's sidecar (newest first):\n{}",
            tail(self.logs(), 60),
            tail(vc, 30),
            tail(vc_sidecar, 20),
        );
    }

    /// An object straight from kube-apiserver, or `None` when it does not exist.
    pub fn get(&self, resource: &str, ns: &str, name: &str) -> Option<Value> {
        let o = self.cp.kubectl(&["get", resource, name, "-n", ns, "-o", "json"]);
        if o.status.success() {
            return Some(parse_json(&String::from_utf8_lossy(&o.stdout)));
        }
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("NotFound"), "kubectl get {resource} {name}: {err}");
        None
    }

    /// `kubectl apply` of `yaml`, straight to kube-apiserver.
    pub fn apply(&self, yaml: &str) {
        ok(&kubectl_in(self.cp.kubeconfig(), &["apply", "-f", "-"], yaml));
    }

    /// A merge patch, straight to kube-apiserver.
    pub fn patch(&self, resource: &str, ns: &str, name: &str, merge: Value) {
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

    /// What a storage provisioner would do (no CSI driver runs here): a volume bound to claim
    /// `ns/claim` (1Gi, storage class `local`), which kube-controller-manager's volume binder
    /// binds, so the scheduler can place the Pods that use it.
    pub fn provision(&self, ns: &str, claim: &str) {
        self.apply(&format!(
            "apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: pv-{ns}-{claim}}}\nspec:\n  capacity: {{storage: 1Gi}}\n  accessModes: [ReadWriteOnce]\n  storageClassName: local\n  persistentVolumeReclaimPolicy: Retain\n  hostPath: {{path: /var/lib/simulated/{claim}}}\n  claimRef: {{namespace: {ns}, name: {claim}}}\n"
        ));
    }

    /// Creates the namespace `{base}-{mode}` and returns its name.
    pub fn namespace(&self, base: &str) -> String {
        let ns = format!("{base}-{}", self.mode().name());
        ok(&self.cp.kubectl(&["create", "namespace", &ns]));
        ns
    }

    /// The mode of the controller under test.
    pub fn mode(&self) -> Mode {
        *lock(&self.mode)
    }

    /// Waits until the VM's status satisfies `f` (given the status and the VM).
    pub fn wait_vm(&self, ns: &str, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
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
    pub fn wait_op(&self, ns: &str, name: &str) -> Value {
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
    pub fn operation(&self, ns: &str, name: &str, t: &str, vm: &str) -> Value {
        self.apply(&format!(
            "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualMachineOperation\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{type: {t}, virtualMachineName: {vm}}}\n"
        ));
        self.wait_op(ns, name)
    }

    /// An operation that must complete.
    pub fn completes(&self, ns: &str, name: &str, t: &str, vm: &str) -> Value {
        let op = self.operation(ns, name, t, vm);
        assert_eq!(op["status"]["phase"], "Completed", "{op}");
        assert!(cond_is(&op, "Completed", "True"), "{op}");
        op
    }
}

/// The environment, made by the first trial that runs and shared by the later ones; a setup
/// that failed fails them at once.
#[derive(Default)]
pub struct Lazy(Mutex<Option<Result<Arc<Env>, String>>>);

impl Lazy {
    /// The environment, made now if no trial has asked for it yet.
    pub fn get(&self) -> Result<Arc<Env>, String> {
        let mut slot = lock(&self.0);
        slot.get_or_insert_with(|| {
            std::panic::catch_unwind(Env::setup)
                .map(Arc::new)
                .map_err(|e| panic_message(&*e))
        })
        .clone()
        .map_err(|why| format!("the environment did not come up: {why}"))
    }

    /// The environment, if a trial made it; dropping it stops everything it started.
    pub fn take(&self) -> Option<Arc<Env>> {
        lock(&self.0).take().and_then(Result::ok)
    }
}

/// A lock that a case's panic does not spoil for the cases after it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A condition of a VM or VMOP: (status, reason, message).
pub fn cond(obj: &Value, type_: &str) -> Option<(String, String, String)> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (s("status"), s("reason"), s("message"))
        })
}

/// Whether the condition `type_` has `status`.
pub fn cond_is(obj: &Value, type_: &str, status: &str) -> bool {
    cond(obj, type_).is_some_and(|c| c.0 == status)
}

/// In `phase`, in the current generation.
pub fn phase_is(vm: &Value, phase: &str) -> bool {
    vm["status"]["phase"] == phase && vm["status"]["observedGeneration"] == vm["metadata"]["generation"]
}

/// Running and applied, in the current generation.
pub fn running(vm: &Value) -> bool {
    phase_is(vm, "Running")
        && cond_is(vm, "Running", "True")
        && cond_is(vm, "ConfigurationApplied", "True")
        && vm["status"]["nodeName"]
            .as_str()
            .is_some_and(|n| KUBEVIRT_NODES.contains(&n))
}

/// kwok's Nodes (`scripts/kubevirt.sh`), where virt-launcher Pods run.
pub const KUBEVIRT_NODES: [&str; 2] = ["node-a", "node-b"];

/// Stopped, in the current generation, on no node.
pub fn stopped(vm: &Value) -> bool {
    phase_is(vm, "Stopped") && cond_is(vm, "Running", "False") && vm["status"].get("nodeName").is_none()
}
