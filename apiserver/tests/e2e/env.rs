//! The environment every case shares: the control plane with the deploy manifests' identity
//! and RBAC, the VM CRD and three VMs, the certificates, the fake virt-api, real KubeVirt
//! (`scripts/kubevirt.sh`: virt-api and virt-controller behind their sidecars), and one mode's
//! three servers (and their sidecars) registered with the aggregator.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube_api_rewriter_testkit as tk;

use crate::fake_virtapi;

pub const GROUP_PATH: &str = tk::SUBRESOURCES_PATH;
pub const NS: &str = "demo";
pub const SA: &str = "system:serviceaccount:d8-virtualization:virtualization-api";

/// Polls `f` every 200 ms until it is true; panics naming `what` after `limit`.
pub fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{what}: not within {limit:?}");
}

/// A virtualization-api child process; killed on drop.
pub struct Server {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Server {
    fn start(dir: &Path, name: &str, kubeconfig: &Path, args: &[String]) -> Server {
        let port = tk::free_port();
        let log = dir.join(format!("{name}.log"));
        let f = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_virtualization-api"))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info")
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("virtualization-api starts");
        let mut s = Server { child, port, log };
        let url = s.url("/readyz");
        let t = Instant::now();
        loop {
            if tk::curl(&["-sk", "--max-time", "2", &url]).stdout == b"ok" {
                break;
            }
            if let Ok(Some(st)) = s.child.try_wait() {
                panic!("{name} exited ({st}):\n{}", s.logs());
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{name} not ready:\n{}",
                s.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        s
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn sockets(&self) -> usize {
        tk::open_sockets(self.child.id())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How virtualization-api reaches virt-api.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Mutual TLS straight to virt-api.
    Direct,
    /// Plain HTTP to a rewriter sidecar, which opens the mutual TLS.
    Sidecar,
    /// As `Sidecar`, the sidecar of the main server reaching KubeVirt's own virt-api.
    KubeVirt,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Direct => "direct",
            Mode::Sidecar => "sidecar",
            Mode::KubeVirt => "kubevirt",
        }
    }
}

/// Everything the cases use.
pub struct Env {
    pub cp: tk::ControlPlane,
    pub dir: PathBuf,
    pub mode: Mode,
    /// The rewriter sidecars of the servers (sidecar mode): to the fake, to a closed port, with
    /// a refused certificate.
    pub sidecars: Vec<tk::ProxyProc>,
    sa_kubeconfig: PathBuf,
    kv_ca: PathBuf,
    serving: (PathBuf, PathBuf),
    pub server: Server,
    /// Points at a closed port (virt-api down).
    pub server_down: Server,
    /// Presents a client certificate virt-api does not trust.
    pub server_refused: Server,
    pub fake: fake_virtapi::FakeVirtApi,
    /// Real KubeVirt: virt-api for the `kubevirt` mode; its admin sidecar for KubeVirt's objects.
    pub kubevirt: tk::KubeVirt,
    pub echo_port: u16,
    pub module_ca: PathBuf,
    pub rt: tokio::runtime::Runtime,
}

pub fn apply(cp: &tk::ControlPlane, yaml: &str) {
    tk::ok(&tk::kubectl_in(cp.kubeconfig(), &["apply", "-f", "-"], yaml));
}

pub fn set_phase(cp: &tk::ControlPlane, vm: &str, phase: &str) {
    tk::ok(&cp.kubectl(&[
        "-n",
        NS,
        "patch",
        "virtualmachine.virtualization.deckhouse.io",
        vm,
        "--subresource=status",
        "--type=merge",
        "-p",
        &format!(r#"{{"status":{{"phase":"{phase}"}}}}"#),
    ]));
}

/// A kubeconfig with a token of the `virtualization-api` service account (the deploy
/// manifests' RBAC is what lets it work).
fn service_account_kubeconfig(cp: &tk::ControlPlane, dir: &Path) -> PathBuf {
    let token = tk::ok(&cp.kubectl(&[
        "-n",
        "d8-virtualization",
        "create",
        "token",
        "virtualization-api",
        "--duration=2h",
    ]));
    let ca = std::fs::read(cp.get("KUBE_CA_FILE")).unwrap();
    let ca = base64_encode(&ca);
    let kc = dir.join("sa.kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: sa\n  user:\n    token: {}\ncontexts:\n- name: c\n  context: {{cluster: c, user: sa}}\ncurrent-context: c\n",
            cp.get("KUBE_APISERVER_URL"),
            token.trim()
        ),
    )
    .unwrap();
    kc
}

fn base64_encode(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// Writes `crt`/`key` as `tls.crt`/`tls.key` into `dir/version` and points `dir/..data` at it
/// (atomically, by renaming a new symlink over the old one), as the kubelet updates a Secret
/// volume; `dir/tls.crt` and `dir/tls.key` link through `..data`.
pub fn secret_volume(dir: &Path, version: &str, crt: &Path, key: &Path) {
    let v = dir.join(version);
    std::fs::create_dir_all(&v).unwrap();
    std::fs::copy(crt, v.join("tls.crt")).unwrap();
    std::fs::copy(key, v.join("tls.key")).unwrap();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(version, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    for f in ["tls.crt", "tls.key"] {
        if std::fs::symlink_metadata(dir.join(f)).is_err() {
            std::os::unix::fs::symlink(format!("..data/{f}"), dir.join(f)).unwrap();
        }
    }
}

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// A kubeconfig of virt-api (the fake at `port`) with the client certificate `cert`/`key`:
/// what a rewriter sidecar in front of virt-api is given.
fn virt_api_kubeconfig(dir: &Path, name: &str, port: u16, ca: &Path, cert: &Path, key: &Path) -> PathBuf {
    let kc = dir.join(format!("{name}.kubeconfig"));
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: virt-api\n  cluster:\n    server: https://localhost:{port}\n    certificate-authority: {}\nusers:\n- name: proxy\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: c\n  context: {{cluster: virt-api, user: proxy}}\ncurrent-context: c\n",
            ca.display(),
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
    kc
}

/// A rewriter sidecar in front of virt-api: the subresources rules, the service account's
/// identity.
fn sidecar(dir: &Path, kubeconfig: &Path) -> tk::ProxyProc {
    let rules = tk::workspace().join("rules/virtualization-api.yaml");
    tk::ProxyProc::start(
        dir,
        &[
            ("KUBECONFIG", kubeconfig.to_str().unwrap()),
            ("RULES_PATH", rules.to_str().unwrap()),
            ("REMOTE_USER", SA),
            ("REMOTE_GROUPS", "system:serviceaccounts"),
        ],
    )
}

/// The three servers of a mode: to the fake, to a closed port (virt-api down), and with a
/// client certificate virt-api refuses; in sidecar mode each behind its own sidecar.
fn start_servers(
    mode: Mode,
    dir: &Path,
    sa_kubeconfig: &Path,
    kv_ca: &Path,
    (serving, serving_key): (&Path, &Path),
    fake_port: u16,
    kubevirt: &tk::KubeVirt,
) -> (Server, Server, Server, Vec<tk::ProxyProc>) {
    let p = |x: &Path| x.to_str().unwrap().to_owned();
    let args = |endpoint: String, cert: &Path, key: &Path| {
        let mut a = vec![
            format!("--tls-cert-file={}", p(serving)),
            format!("--tls-private-key-file={}", p(serving_key)),
            format!("--kubevirt-endpoint={endpoint}"),
            "--service-account-name=virtualization-api".into(),
            "--service-account-namespace=d8-virtualization".into(),
        ];
        if mode == Mode::Direct {
            a.extend([
                format!("--kubevirt-cabundle={}", p(kv_ca)),
                format!("--proxy-client-cert-file={}", p(cert)),
                format!("--proxy-client-key-file={}", p(key)),
            ]);
        }
        a
    };
    let (proxy, proxy_key) = (dir.join("proxy.crt"), dir.join("proxy.key"));
    let refused = dir.join("refused-proxy-secret");
    let (refused_crt, refused_key) = (refused.join("tls.crt"), refused.join("tls.key"));
    let closed = tk::free_port();
    let mut sidecars = Vec::new();
    let mut endpoint = |name: &str, port: u16, ca: &Path, cert: &Path, key: &Path| match mode {
        Mode::Direct => format!("localhost:{port}"),
        Mode::Sidecar | Mode::KubeVirt => {
            let kc = virt_api_kubeconfig(dir, name, port, ca, cert, key);
            let s = sidecar(dir, &kc);
            let url = format!("http://127.0.0.1:{}", s.port);
            sidecars.push(s);
            url
        }
    };
    let m = mode.name();
    let ep = if mode == Mode::KubeVirt {
        // virt-api trusts the requestheader CA's client certificates (with an allowed name).
        endpoint(
            "virt-api-real",
            kubevirt.get("VIRT_API_PORT").parse().expect("port"),
            Path::new(kubevirt.get("VIRT_API_CA_FILE")),
            Path::new(kubevirt.get("VIRT_API_CLIENT_CERT")),
            Path::new(kubevirt.get("VIRT_API_CLIENT_KEY")),
        )
    } else {
        endpoint("virt-api", fake_port, kv_ca, &proxy, &proxy_key)
    };
    let server = Server::start(
        dir,
        &format!("server-{m}"),
        sa_kubeconfig,
        &args(ep, &proxy, &proxy_key),
    );
    let ep = match mode {
        Mode::Direct => format!("127.0.0.1:{closed}"),
        Mode::Sidecar | Mode::KubeVirt => endpoint("virt-api-down", closed, kv_ca, &proxy, &proxy_key),
    };
    let server_down = Server::start(
        dir,
        &format!("server-down-{m}"),
        sa_kubeconfig,
        &args(ep, &proxy, &proxy_key),
    );
    // The sidecar reads its certificate once: it gets the rogue one itself.
    let (rc, rk) = match mode {
        Mode::Direct => (refused_crt, refused_key),
        Mode::Sidecar | Mode::KubeVirt => (dir.join("rogue.crt"), dir.join("rogue.key")),
    };
    let ep = endpoint("virt-api-refused", fake_port, kv_ca, &rc, &rk);
    let server_refused = Server::start(
        dir,
        &format!("server-refused-{m}"),
        sa_kubeconfig,
        &args(ep, &rc, &rk),
    );
    (server, server_down, server_refused, sidecars)
}

impl Env {
    /// Stops this mode's servers and sidecars, starts `mode`'s and registers them.
    pub fn switch(&mut self, mode: Mode) {
        let (server, down, refused, sidecars) = start_servers(
            mode,
            &self.dir,
            &self.sa_kubeconfig,
            &self.kv_ca,
            (&self.serving.0, &self.serving.1),
            self.fake.port,
            &self.kubevirt,
        );
        self.server = server;
        self.server_down = down;
        self.server_refused = refused;
        self.sidecars = sidecars;
        self.mode = mode;
        tk::register_apiservice(&self.cp, &self.module_ca, self.server.port);
    }

    /// Stops the servers, the sidecars and the control plane. With `keep_logs` (a case failed)
    /// the directories with their logs stay and are named; else they are removed.
    pub fn finish(self, keep_logs: bool) {
        let Env {
            cp,
            dir,
            sidecars,
            server,
            server_down,
            server_refused,
            rt,
            kubevirt,
            ..
        } = self;
        drop((server, server_down, server_refused, sidecars, rt, kubevirt));
        if keep_logs {
            // `ControlPlane`'s drop would remove its directory too.
            let _ = cp.script("down");
            eprintln!("logs kept in {} and {}", dir.display(), cp.dir.display());
            std::mem::forget(cp);
        } else {
            drop(cp);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// Builds the environment, its servers in direct mode.
pub fn setup() -> Env {
    let cp = tk::ControlPlane::up();
    let dir = tk::temp_dir("virtualization-api");
    // Certificates: the module CA signs our serving and proxy-client certificates; KubeVirt's
    // CA signs virt-api's serving certificate.
    let (module_ca, module_key) = tk::make_ca(&dir, "virtualization-ca");
    let (kv_ca, kv_key) = tk::make_ca(&dir, "kubevirt-ca");
    let (serving, serving_key) = tk::signed_cert(
        &dir,
        "serving",
        "virtualization-api",
        Some("DNS:virtualization-api.d8-virtualization.svc,DNS:localhost,IP:127.0.0.1"),
        &module_ca,
        &module_key,
    );
    let (proxy, proxy_key) = tk::signed_cert(
        &dir,
        "proxy",
        "virtualization-api-proxy",
        None,
        &module_ca,
        &module_key,
    );
    let (va, va_key) = tk::signed_cert(
        &dir,
        "virt-api",
        "virt-api",
        Some("DNS:localhost,IP:127.0.0.1"),
        &kv_ca,
        &kv_key,
    );
    let (rogue, rogue_key) = (dir.join("rogue.crt"), dir.join("rogue.key"));
    tk::self_signed_cert(&rogue, &rogue_key, "virtualization-api-proxy");
    // The refused server's client certificate, in a Secret-volume layout (swapped later).
    let refused_proxy = dir.join("refused-proxy-secret");
    secret_volume(&refused_proxy, "..v1", &rogue, &rogue_key);

    let fake = fake_virtapi::start(&va, &va_key, &module_ca, SA);
    let echo_port = fake_virtapi::echo_server();
    // The double answers /readyz to our client certificate.
    let ready = tk::curl(&[
        "-sS",
        "--cacert",
        kv_ca.to_str().unwrap(),
        "--cert",
        proxy.to_str().unwrap(),
        "--key",
        proxy_key.to_str().unwrap(),
        &format!("https://localhost:{}/readyz", fake.port),
    ]);
    assert_eq!(tk::ok(&ready), "ok");
    // The serving certificate as a Secret volume lays it out: files behind a `..data` symlink.
    let secret = dir.join("serving-secret");
    secret_volume(&secret, "..v1", &serving, &serving_key);
    let (serving, serving_key) = (secret.join("tls.crt"), secret.join("tls.key"));

    // The namespace, then the deploy manifests, server-side dry run.
    tk::ok(&cp.kubectl(&["create", "namespace", "d8-virtualization"]));
    let out = tk::ok(&cp.kubectl(&["apply", "--dry-run=server", "-f", deploy_dir().to_str().unwrap()]));
    let mut objects: Vec<&str> = out.lines().collect();
    objects.sort_unstable();
    assert_eq!(
        objects,
        [
            "apiservice.apiregistration.k8s.io/v1alpha2.subresources.virtualization.deckhouse.io created (server dry run)",
            "clusterrole.rbac.authorization.k8s.io/virtualization-api created (server dry run)",
            "clusterrole.rbac.authorization.k8s.io/virtualization:vm-user created (server dry run)",
            "clusterrolebinding.rbac.authorization.k8s.io/virtualization-api created (server dry run)",
            "deployment.apps/virtualization-api created (server dry run)",
            "rolebinding.rbac.authorization.k8s.io/virtualization-api:extension-apiserver-authentication-reader created (server dry run)",
            "service/virtualization-api created (server dry run)",
            "serviceaccount/virtualization-api created (server dry run)",
        ],
        "{out}"
    );
    // The server's own identity and RBAC, for real, from the same manifests.
    for f in ["serviceaccount.yaml", "rbac.yaml"] {
        tk::ok(&cp.kubectl(&["apply", "-f", deploy_dir().join(f).to_str().unwrap()]));
    }
    let sa_kubeconfig = service_account_kubeconfig(&cp, &dir);

    // The VM CRD (the controller's is not available here) and VMs in three phases.
    let crd = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/vm-crd.yaml");
    tk::ok(&cp.kubectl(&["apply", "-f", crd.to_str().unwrap()]));
    wait_for("VM CRD established", Duration::from_secs(30), || {
        cp.kubectl(&["get", "virtualmachines.virtualization.deckhouse.io", "-A"])
            .status
            .success()
    });
    tk::ok(&cp.kubectl(&["create", "namespace", NS]));
    for vm in ["vm-running", "vm-stopped", "vm-migrating"] {
        apply(
            &cp,
            &format!(
                "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualMachine\nmetadata: {{name: {vm}, namespace: {NS}}}\nspec: {{}}\n"
            ),
        );
    }
    set_phase(&cp, "vm-running", "Running");
    set_phase(&cp, "vm-stopped", "Stopped");
    set_phase(&cp, "vm-migrating", "Migrating");
    let kubevirt = tk::KubeVirt::up(&cp, &[]);

    let (server, server_down, server_refused, sidecars) = start_servers(
        Mode::Direct,
        &dir,
        &sa_kubeconfig,
        &kv_ca,
        (&serving, &serving_key),
        fake.port,
        &kubevirt,
    );
    tk::register_apiservice(&cp, &module_ca, server.port);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    Env {
        cp,
        dir,
        mode: Mode::Direct,
        sidecars,
        sa_kubeconfig,
        kv_ca,
        serving: (serving, serving_key),
        server,
        server_down,
        server_refused,
        fake,
        kubevirt,
        echo_port,
        module_ca,
        rt,
    }
}
