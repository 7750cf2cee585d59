//! virtualization-api end to end on the real local control plane (`scripts/control-plane.sh`):
//! the APIService routed by kube-apiserver's aggregator to the server on loopback, real
//! kubectl, real RBAC and SubjectAccessReviews, a tokio-tungstenite WebSocket client, and a
//! fake virt-api (the only test double). One control plane; the cases run one after another
//! (one APIService per group/version exists in a cluster), once per mode: straight to virt-api
//! (mutual TLS), then through a kube-api-rewriter sidecar (`rules/virtualization-api.yaml`,
//! plain HTTP on loopback) that renames the group and holds the certificate and the identity.

mod fake_virtapi;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{SinkExt as _, StreamExt as _};
use kube_api_rewriter_testkit as tk;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

const GROUP_PATH: &str = "/apis/subresources.virtualization.deckhouse.io/v1alpha2";
const NS: &str = "demo";
const SA: &str = "system:serviceaccount:d8-virtualization:virtualization-api";

fn vm_path(name: &str, sub: &str) -> String {
    format!("{GROUP_PATH}/namespaces/{NS}/virtualmachines/{name}/{sub}")
}

/// Polls `f` every 200 ms until it is true; panics naming `what` after `limit`.
fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
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
struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
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

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn sockets(&self) -> usize {
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
enum Mode {
    /// Mutual TLS straight to virt-api.
    Direct,
    /// Plain HTTP to a rewriter sidecar, which opens the mutual TLS.
    Sidecar,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Direct => "direct",
            Mode::Sidecar => "sidecar",
        }
    }
}

/// Everything the cases use.
struct Env {
    cp: tk::ControlPlane,
    dir: PathBuf,
    mode: Mode,
    /// The rewriter sidecars of the servers (sidecar mode): to the fake, to a closed port, with
    /// a refused certificate.
    sidecars: Vec<tk::ProxyProc>,
    sa_kubeconfig: PathBuf,
    kv_ca: PathBuf,
    serving: (PathBuf, PathBuf),
    server: Server,
    /// Points at a closed port (virt-api down).
    server_down: Server,
    /// Presents a client certificate virt-api does not trust.
    server_refused: Server,
    fake: fake_virtapi::FakeVirtApi,
    echo_port: u16,
    module_ca: PathBuf,
    rt: tokio::runtime::Runtime,
}

/// curl straight to a virtualization-api: `-w` code after the body.
fn direct(
    s: &Server,
    env: &Env,
    cert: Option<(&str, &str)>,
    headers: &[&str],
    args: &[&str],
    path: &str,
) -> (u16, String) {
    let mut a: Vec<String> = vec![
        "-sS".into(),
        "--max-time".into(),
        "20".into(),
        "--cacert".into(),
        env.module_ca.to_str().unwrap().into(),
        "-w".into(),
        "\n%{http_code}".into(),
    ];
    if let Some((c, k)) = cert {
        a.extend(["--cert".into(), c.into(), "--key".into(), k.into()]);
    }
    for h in headers {
        a.extend(["-H".into(), (*h).into()]);
    }
    a.extend(args.iter().map(|x| (*x).to_owned()));
    a.push(s.url(path));
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    let out = tk::curl(&refs);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.parse().unwrap_or(0), body.to_owned())
}

impl Env {
    fn front_proxy(&self) -> (&str, &str) {
        (
            self.cp.get("FRONT_PROXY_CLIENT_CERT"),
            self.cp.get("FRONT_PROXY_CLIENT_KEY"),
        )
    }

    /// A request as the aggregator would send it for `user` (in `groups`).
    fn as_user(&self, s: &Server, user: &str, groups: &[&str], args: &[&str], path: &str) -> (u16, String) {
        let mut h = vec![format!("X-Remote-User: {user}")];
        h.extend(groups.iter().map(|g| format!("X-Remote-Group: {g}")));
        let h: Vec<&str> = h.iter().map(String::as_str).collect();
        direct(s, self, Some(self.front_proxy()), &h, args, path)
    }

    fn admin(&self, s: &Server, args: &[&str], path: &str) -> (u16, String) {
        self.as_user(s, "admin", &["system:masters"], args, path)
    }

    fn kubectl(&self, args: &[&str]) -> std::process::Output {
        self.cp.kubectl(args)
    }

    fn user1(&self, args: &[&str]) -> std::process::Output {
        tk::kubectl(self.cp.get("USER1_KUBECONFIG"), args)
    }

    /// `kubectl replace --raw PATH` with `body` (a PUT through kube-apiserver).
    fn put(&self, path: &str, body: &str) -> std::process::Output {
        let f = self.dir.join("body.json");
        std::fs::write(&f, body).unwrap();
        self.kubectl(&["replace", "--raw", path, "-f", f.to_str().unwrap()])
    }

    /// Opens a WebSocket through kube-apiserver (bearer `token`) to `path`.
    async fn ws(
        &self,
        path: &str,
        token: &str,
    ) -> Result<
        (
            tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
            http::Response<Option<Vec<u8>>>,
        ),
        tokio_tungstenite::tungstenite::Error,
    > {
        let port: u16 = self.cp.get("APISERVER_PORT").parse().unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(self.cp.get("KUBE_CA_FILE")).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let mut cfg =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
            .await
            .unwrap();
        let mut req = format!("wss://127.0.0.1:{port}{path}")
            .into_client_request()
            .unwrap();
        req.headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        req.headers_mut()
            .insert("sec-websocket-protocol", "plain.kubevirt.io".parse().unwrap());
        tokio_tungstenite::client_async(req, tls).await
    }
}

/// Reads the next binary message (skipping pings), with a deadline.
async fn next_binary<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>) -> Vec<u8>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let read = async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => return b.to_vec(),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                other => panic!("expected a binary message, got {other:?}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("a message within 20 s")
}

fn apply(cp: &tk::ControlPlane, yaml: &str) {
    tk::ok(&tk::kubectl_in(cp.kubeconfig(), &["apply", "-f", "-"], yaml));
}

fn set_phase(cp: &tk::ControlPlane, vm: &str, phase: &str) {
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
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// Writes `crt`/`key` as `tls.crt`/`tls.key` into `dir/version` and points `dir/..data` at it
/// (atomically, by renaming a new symlink over the old one), as the kubelet updates a Secret
/// volume; `dir/tls.crt` and `dir/tls.key` link through `..data`.
fn secret_volume(dir: &Path, version: &str, crt: &Path, key: &Path) {
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

/// The subject of the certificate `port` serves now (a new connection).
fn served_subject(port: u16) -> String {
    let o = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{port}"),
            "-servername",
            "localhost",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("openssl runs");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    text.lines()
        .find(|l| l.starts_with("subject="))
        .unwrap_or("")
        .to_owned()
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
    let mut endpoint = |name: &str, port: u16, cert: &Path, key: &Path| match mode {
        Mode::Direct => format!("localhost:{port}"),
        Mode::Sidecar => {
            let kc = virt_api_kubeconfig(dir, name, port, kv_ca, cert, key);
            let s = sidecar(dir, &kc);
            let url = format!("http://127.0.0.1:{}", s.port);
            sidecars.push(s);
            url
        }
    };
    let m = mode.name();
    let ep = endpoint("virt-api", fake_port, &proxy, &proxy_key);
    let server = Server::start(
        dir,
        &format!("server-{m}"),
        sa_kubeconfig,
        &args(ep, &proxy, &proxy_key),
    );
    let ep = match mode {
        Mode::Direct => format!("127.0.0.1:{closed}"),
        Mode::Sidecar => endpoint("virt-api-down", closed, &proxy, &proxy_key),
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
        Mode::Sidecar => (dir.join("rogue.crt"), dir.join("rogue.key")),
    };
    let ep = endpoint("virt-api-refused", fake_port, &rc, &rk);
    let server_refused = Server::start(
        dir,
        &format!("server-refused-{m}"),
        sa_kubeconfig,
        &args(ep, &rc, &rk),
    );
    (server, server_down, server_refused, sidecars)
}

/// Registers the server on `port` with the aggregator (ExternalName Service on loopback +
/// APIService, the verified local recipe; a previous registration is replaced) and waits until
/// the aggregator serves the group from it.
fn register(cp: &tk::ControlPlane, module_ca: &Path, port: u16) {
    let _ = cp.kubectl(&[
        "delete",
        "apiservice",
        "v1alpha2.subresources.virtualization.deckhouse.io",
        "--ignore-not-found",
    ]);
    let ca_bundle = base64_encode(&std::fs::read(module_ca).unwrap());
    apply(
        cp,
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: virtualization-api, namespace: d8-virtualization}}\nspec:\n  type: ExternalName\n  externalName: localhost\n  ports: [{{name: https, port: {port}, protocol: TCP, targetPort: {port}}}]\n---\napiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {{name: v1alpha2.subresources.virtualization.deckhouse.io}}\nspec:\n  group: subresources.virtualization.deckhouse.io\n  version: v1alpha2\n  groupPriorityMinimum: 999\n  versionPriority: 15\n  service: {{name: virtualization-api, namespace: d8-virtualization, port: {port}}}\n  caBundle: {ca_bundle}\n"
        ),
    );
    wait_for("APIService Available", Duration::from_secs(60), || {
        let o = cp.kubectl(&[
            "get",
            "apiservice",
            "v1alpha2.subresources.virtualization.deckhouse.io",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
        ]);
        o.stdout == b"True"
    });
    // Available is reported before the aggregator's proxy handler serves the group.
    wait_for("the aggregator serves the group", Duration::from_secs(30), || {
        cp.kubectl(&["get", "--raw", GROUP_PATH]).status.success()
    });
}

impl Env {
    /// Stops this mode's servers and sidecars, starts `mode`'s and registers them.
    fn switch(&mut self, mode: Mode) {
        let (server, down, refused, sidecars) = start_servers(
            mode,
            &self.dir,
            &self.sa_kubeconfig,
            &self.kv_ca,
            (&self.serving.0, &self.serving.1),
            self.fake.port,
        );
        self.server = server;
        self.server_down = down;
        self.server_refused = refused;
        self.sidecars = sidecars;
        self.mode = mode;
        register(&self.cp, &self.module_ca, self.server.port);
    }
}

fn setup() -> Env {
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

    let (server, server_down, server_refused, sidecars) = start_servers(
        Mode::Direct,
        &dir,
        &sa_kubeconfig,
        &kv_ca,
        (&serving, &serving_key),
        fake.port,
    );
    register(&cp, &module_ca, server.port);
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
        echo_port,
        module_ca,
        rt,
    }
}

#[test]
fn virtualization_api_end_to_end() {
    let t0 = Instant::now();
    let mut env = setup();
    eprintln!("setup took {:?}", t0.elapsed());
    for mode in [Mode::Direct, Mode::Sidecar] {
        let t = Instant::now();
        if env.mode != mode {
            env.switch(mode);
        }
        eprintln!("--- mode {} (servers up in {:?})", mode.name(), t.elapsed());
        run_mode(&env);
        eprintln!("--- mode {} took {:?}", mode.name(), t.elapsed());
    }
    eprintln!("whole test took {:?}", t0.elapsed());
    let _ = std::fs::remove_dir_all(&env.dir);
}

fn run_mode(e: &Env) {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tk::run_cases(&[
            ("discovery through kube-apiserver", &|| discovery(e)),
            ("openapi v2 merged by the aggregator, v3 direct", &|| openapi(e)),
            ("health and version", &|| health(e)),
            ("console over WebSocket", &|| console(e)),
            ("vnc over WebSocket", &|| vnc(e)),
            ("portforward to the echo port", &|| portforward(e)),
            ("freeze, unfreeze, addvolume, removevolume", &|| puts(e)),
            ("virt-api's errors come back in our group", &|| virt_api_errors(e)),
            ("GET virtualmachines/{name}", &|| get_vm(e)),
            ("403 from kube-apiserver for a user without RBAC", &|| {
                forbidden_by_kube_apiserver(e)
            }),
            ("403 from our own SubjectAccessReview", &|| forbidden_by_us(e)),
            ("409 for a VM in the wrong phase", &|| wrong_phase(e)),
            ("401 without the front-proxy certificate", &|| unauthorized(e)),
            ("serving certificate reloaded on a ..data swap", &|| reload(e)),
            ("slow clients are cut off", &|| slow_clients(e)),
            ("bad input, no leaked connection", &|| bad_input(e)),
            ("proxy client certificate reloaded", &|| proxy_cert_reload(e)),
            ("only the configured identity reaches virt-api", &|| identity(e)),
        ]);
    }));
    if let Err(panic) = result {
        eprintln!("===== mode {}", e.mode.name());
        for s in [&e.server, &e.server_down, &e.server_refused] {
            eprintln!("===== {}\n{}", s.log.display(), s.logs());
        }
        for s in &e.sidecars {
            eprintln!("===== {}\n{}", s.log.display(), s.logs());
        }
        std::panic::resume_unwind(panic);
    }
}

fn discovery(e: &Env) {
    let list: Value = tk::parse_json(&tk::ok(&e.kubectl(&["get", "--raw", GROUP_PATH])));
    assert_eq!(list["kind"], "APIResourceList");
    let names: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    for n in [
        "virtualmachines",
        "virtualmachines/console",
        "virtualmachines/vnc",
        "virtualmachines/portforward",
        "virtualmachines/freeze",
        "virtualmachines/addvolume",
    ] {
        assert!(names.contains(&n), "{n} in {names:?}");
    }
    let group: Value = tk::parse_json(&tk::ok(&e.kubectl(&[
        "get",
        "--raw",
        "/apis/subresources.virtualization.deckhouse.io",
    ])));
    assert_eq!(group["preferredVersion"]["version"], "v1alpha2");
    let apis: Value = tk::parse_json(&tk::ok(&e.kubectl(&["get", "--raw", "/apis"])));
    assert!(
        apis["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "subresources.virtualization.deckhouse.io"),
        "{apis}"
    );
    let out = tk::ok(&e.kubectl(&[
        "api-resources",
        "--api-group=subresources.virtualization.deckhouse.io",
    ]));
    assert!(
        out.contains("virtualmachines") && out.contains("VirtualMachine"),
        "{out}"
    );
    // The aggregator's availability probe reached us with its own identity.
    assert!(
        e.server.logs().contains("user=system:kube-aggregator"),
        "{}",
        e.server.logs()
    );
}

fn openapi(e: &Env) {
    let def = "io.deckhouse.virtualization.subresources.v1alpha2.VirtualMachineConsole";
    wait_for(
        "the aggregator merged our OpenAPI v2",
        Duration::from_secs(90),
        || {
            let o = e.kubectl(&["get", "--raw", "/openapi/v2"]);
            o.status.success() && String::from_utf8_lossy(&o.stdout).contains(def)
        },
    );
    assert!(
        e.server
            .logs()
            .contains("path=/openapi/v2 user=system:aggregator code=200"),
        "{}",
        e.server.logs()
    );
    // The aggregator fetches v3 when it chooses to: ask the server straight, as the aggregator does.
    let (code, body) = e.as_user(&e.server, "system:aggregator", &[], &[], "/openapi/v3");
    assert_eq!(code, 200, "{body}");
    let idx = tk::parse_json(&body);
    let url = idx["paths"]["apis/subresources.virtualization.deckhouse.io/v1alpha2"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_owned();
    let (code, body) = e.as_user(&e.server, "system:aggregator", &[], &[], &url);
    assert_eq!(code, 200, "{body}");
    let doc = tk::parse_json(&body);
    assert_eq!(doc["openapi"], "3.0.0");
    assert!(doc["components"]["schemas"][def].is_object(), "{doc}");
}

fn health(e: &Env) {
    for p in ["/healthz", "/livez", "/readyz"] {
        // No client certificate at all: still ok.
        let (code, body) = direct(&e.server, e, None, &[], &[], p);
        assert_eq!((code, body.as_str()), (200, "ok"), "{p}");
    }
    let (code, body) = e.admin(&e.server, &[], "/version");
    assert_eq!(code, 200, "{body}");
    assert_eq!(tk::parse_json(&body)["gitVersion"], "v0.1.0");
}

fn console(e: &Env) {
    e.rt.block_on(async {
        let (mut ws, resp) = e
            .ws(&vm_path("vm-running", "console"), e.cp.get("ADMIN_TOKEN"))
            .await
            .expect("WebSocket opens");
        assert_eq!(resp.status(), 101);
        // Negotiated end to end with the fake virt-api.
        assert_eq!(resp.headers()["sec-websocket-protocol"], "plain.kubevirt.io");
        for line in [&b"hello console\r\n"[..], b"second line", &[0u8, 255, 10, 13][..]] {
            ws.send(Message::Binary(Bytes::copy_from_slice(line)))
                .await
                .unwrap();
            assert_eq!(next_binary(&mut ws).await, line);
        }
        ws.close(None).await.unwrap();
    });
    // The fake saw our service account, never the end user.
    let seen = e.fake.all();
    let c = seen
        .iter()
        .rev()
        .find(|s| s.path.ends_with("/virtualmachineinstances/vm-running/console"))
        .expect("console reached virt-api");
    assert_eq!(
        c.path,
        "/apis/subresources.kubevirt.io/v1/namespaces/demo/virtualmachineinstances/vm-running/console"
    );
    assert_eq!(
        (c.user.as_str(), c.groups.clone()),
        (SA, vec!["system:serviceaccounts".to_owned()])
    );
}

fn vnc(e: &Env) {
    e.rt.block_on(async {
        // Migrating is allowed for streams.
        let (mut ws, _) = e
            .ws(&vm_path("vm-migrating", "vnc"), e.cp.get("ADMIN_TOKEN"))
            .await
            .expect("WebSocket opens");
        assert_eq!(next_binary(&mut ws).await, b"RFB 003.008\n");
        ws.send(Message::Binary(Bytes::from_static(b"RFB 003.008\n")))
            .await
            .unwrap();
        assert_eq!(next_binary(&mut ws).await, b"RFB 003.008\n");
        ws.close(None).await.unwrap();
    });
}

fn portforward(e: &Env) {
    e.rt.block_on(async {
        let path = format!(
            "{}?port={}&protocol=tcp",
            vm_path("vm-running", "portforward"),
            e.echo_port
        );
        let (mut ws, _) = e
            .ws(&path, e.cp.get("ADMIN_TOKEN"))
            .await
            .expect("WebSocket opens");
        let payload: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
        ws.send(Message::Binary(Bytes::from(payload.clone())))
            .await
            .unwrap();
        let mut got = Vec::new();
        while got.len() < payload.len() {
            got.extend(next_binary(&mut ws).await);
        }
        assert_eq!(got, payload);
        ws.close(None).await.unwrap();
    });
    let seen = e.fake.all();
    assert!(
        seen.iter().any(|s| s.path == format!("/apis/subresources.kubevirt.io/v1/namespaces/demo/virtualmachineinstances/vm-running/portforward/{}/tcp", e.echo_port)),
        "{seen:?}"
    );
}

fn puts(e: &Env) {
    let before = e.fake.puts().len();
    tk::ok(&e.put(
        &format!("{}?unfreezeTimeout=5m", vm_path("vm-running", "freeze")),
        "{}",
    ));
    tk::ok(&e.put(&vm_path("vm-running", "unfreeze"), "{}"));
    tk::ok(&e.put(
        &format!(
            "{}?name=disk1&volumeKind=VirtualDisk&pvcName=pvc-disk1&serial=s1",
            vm_path("vm-running", "addvolume")
        ),
        "{}",
    ));
    tk::ok(&e.put(
        &format!("{}?name=disk1", vm_path("vm-running", "removevolume")),
        "{}",
    ));
    let puts = e.fake.puts();
    let got: Vec<(String, Value)> = puts[before..]
        .iter()
        .map(|s| {
            (
                s.path.clone(),
                serde_json::from_str(&s.body).unwrap_or(Value::Null),
            )
        })
        .collect();
    let vmi = "/apis/subresources.kubevirt.io/v1/namespaces/demo/virtualmachineinstances/vm-running";
    let vm = "/apis/subresources.kubevirt.io/v1/namespaces/demo/virtualmachines/vm-running";
    let want = vec![
        (
            format!("{vmi}/freeze"),
            serde_json::json!({"unfreezeTimeout": "5m"}),
        ),
        (format!("{vmi}/unfreeze"), serde_json::json!({})),
        (
            format!("{vm}/addvolume"),
            serde_json::json!({"name": "disk1",
                "disk": {"name": "disk1", "errorPolicy": "report", "disk": {"bus": "scsi"}, "serial": "s1"},
                "volumeSource": {"persistentVolumeClaim": {"claimName": "pvc-disk1", "hotpluggable": true}}}),
        ),
        (format!("{vm}/removevolume"), serde_json::json!({"name": "disk1"})),
    ];
    assert_eq!(got, want);
    // The query string of a plain request is passed on too (as UpgradeAwareHandler does).
    assert_eq!(puts[before].query, "unfreezeTimeout=5m");
    assert!(
        puts[before..]
            .iter()
            .all(|s| s.user == SA && s.groups == ["system:serviceaccounts"])
    );
}

fn get_vm(e: &Env) {
    let vm = tk::parse_json(&tk::ok(&e.kubectl(&[
        "get",
        "--raw",
        &format!("{GROUP_PATH}/namespaces/{NS}/virtualmachines/vm-running"),
    ])));
    assert_eq!(vm["kind"], "VirtualMachine");
    assert_eq!(
        vm["apiVersion"],
        "subresources.virtualization.deckhouse.io/v1alpha2"
    );
    assert_eq!(vm["metadata"]["name"], "vm-running");
    let err = tk::fails(&e.kubectl(&[
        "get",
        "--raw",
        &format!("{GROUP_PATH}/namespaces/{NS}/virtualmachines/nope"),
    ]));
    assert!(err.contains("NotFound") || err.contains("not found"), "{err}");
}

fn forbidden_by_kube_apiserver(e: &Env) {
    let before = e.server.logs().matches("user=user1").count();
    let err = tk::fails(&e.user1(&["get", "--raw", &vm_path("vm-running", "console")]));
    assert!(err.contains("Forbidden"), "{err}");
    assert!(err.contains(r#"User "user1" cannot get resource "virtualmachines/console" in API group "subresources.virtualization.deckhouse.io""#), "{err}");
    // Denied by kube-apiserver: nothing reached us.
    assert_eq!(e.server.logs().matches("user=user1").count(), before);
    e.rt.block_on(async {
        match e
            .ws(&vm_path("vm-running", "console"), e.cp.get("USER1_TOKEN"))
            .await
        {
            Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 403),
            other => panic!("expected 403, got {:?}", other.map(|x| x.1)),
        }
    });
}

fn forbidden_by_us(e: &Env) {
    let (code, body) = e.as_user(
        &e.server,
        "user1",
        &[],
        &["-X", "PUT", "-d", "{}"],
        &vm_path("vm-running", "freeze"),
    );
    assert_eq!(code, 403, "{body}");
    let s = tk::parse_json(&body);
    assert_eq!(s["kind"], "Status");
    assert_eq!(s["reason"], "Forbidden");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains(r#"User "user1" cannot update resource "virtualmachines/freeze""#),
        "{s}"
    );
    assert!(e.server.logs().contains("user=user1 code=403"));
    // Granted by RBAC (a real SubjectAccessReview allows it): past authorization to the
    // upgrade check.
    apply(
        &e.cp,
        &format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: vnc, namespace: {NS}}}\nrules:\n- apiGroups: [subresources.virtualization.deckhouse.io]\n  resources: [virtualmachines/vnc]\n  verbs: [get]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: vnc-user1, namespace: {NS}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: vnc}}\nsubjects: [{{kind: User, name: user1, apiGroup: rbac.authorization.k8s.io}}]\n"
        ),
    );
    let (code, body) = e.as_user(&e.server, "user1", &[], &[], &vm_path("vm-running", "vnc"));
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("Upgrade request required"), "{body}");
}

fn wrong_phase(e: &Env) {
    let err = tk::fails(&e.kubectl(&["get", "--raw", &vm_path("vm-stopped", "console")]));
    assert!(
        err.contains("VirtualMachine is not Running or Migrating"),
        "{err}"
    );
    e.rt.block_on(async {
        match e.ws(&vm_path("vm-stopped", "vnc"), e.cp.get("ADMIN_TOKEN")).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 409),
            other => panic!("expected 409, got {:?}", other.map(|x| x.1)),
        }
    });
    let err = tk::fails(&e.put(&vm_path("vm-migrating", "freeze"), "{}"));
    assert!(err.contains("VirtualMachine is not Running"), "{err}");
    let (code, body) = e.admin(
        &e.server,
        &["-X", "PUT", "-d", "{}"],
        &vm_path("vm-stopped", "unfreeze"),
    );
    assert_eq!(code, 409, "{body}");
    assert_eq!(tk::parse_json(&body)["reason"], "Conflict");
    // The watch cache follows the phase.
    set_phase(&e.cp, "vm-stopped", "Running");
    wait_for("the cache sees Running", Duration::from_secs(20), || {
        e.admin(&e.server, &[], &vm_path("vm-stopped", "console")).0 == 400
    });
    set_phase(&e.cp, "vm-stopped", "Stopped");
    wait_for("the cache sees Stopped", Duration::from_secs(20), || {
        e.admin(&e.server, &[], &vm_path("vm-stopped", "console")).0 == 409
    });
}

fn unauthorized(e: &Env) {
    // Identity headers without a certificate are not trusted.
    let (code, body) = direct(
        &e.server,
        e,
        None,
        &["X-Remote-User: admin", "X-Remote-Group: system:masters"],
        &[],
        GROUP_PATH,
    );
    assert_eq!(code, 401, "{body}");
    let s = tk::parse_json(&body);
    assert_eq!(
        (s["kind"].as_str(), s["reason"].as_str()),
        (Some("Status"), Some("Unauthorized"))
    );
    // A certificate of the front-proxy CA with a name not in requestheader-allowed-names.
    let (c, k) = tk::signed_cert(
        &e.dir,
        "not-front-proxy",
        "someone-else",
        None,
        Path::new(e.cp.get("FRONT_PROXY_CA_FILE")),
        Path::new(e.cp.get("FRONT_PROXY_CA_KEY")),
    );
    let (code, body) = direct(
        &e.server,
        e,
        Some((c.to_str().unwrap(), k.to_str().unwrap())),
        &["X-Remote-User: admin", "X-Remote-Group: system:masters"],
        &[],
        GROUP_PATH,
    );
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("not an allowed requestheader name"), "{body}");
}

fn reload(e: &Env) {
    let subject = format!("virtualization-api-rotated-{}", e.mode.name());
    let before = served_subject(e.server.port);
    assert!(
        before.contains("virtualization-api") && !before.contains(&subject),
        "{before}"
    );
    let module_key = e.dir.join("virtualization-ca.key");
    let (crt, key) = tk::signed_cert(
        &e.dir,
        &subject,
        &subject,
        Some("DNS:virtualization-api.d8-virtualization.svc,DNS:localhost,IP:127.0.0.1"),
        &e.module_ca,
        &module_key,
    );
    secret_volume(
        &e.dir.join("serving-secret"),
        &format!("..{}", e.mode.name()),
        &crt,
        &key,
    );
    wait_for(
        "the rotated certificate is served",
        Duration::from_secs(20),
        || served_subject(e.server.port).contains(&subject),
    );
    assert!(
        e.server.logs().contains("certificate reloaded"),
        "{}",
        e.server.logs()
    );
    // The aggregator keeps reaching us with the new certificate (same CA).
    let out = tk::ok(&e.kubectl(&["get", "--raw", GROUP_PATH]));
    assert!(out.contains("virtualmachines/console"), "{out}");
}

/// The refused server gets the right client certificate (a ..data swap) and reaches virt-api.
/// Direct mode only: in sidecar mode the sidecar holds the certificate.
fn proxy_cert_reload(e: &Env) {
    if e.mode == Mode::Sidecar {
        eprintln!("    (the sidecar holds the client certificate: nothing to reload here)");
        return;
    }
    let put = || {
        e.admin(
            &e.server_refused,
            &["-X", "PUT", "-d", "{}"],
            &vm_path("vm-running", "unfreeze"),
        )
    };
    assert_eq!(put().0, 503);
    secret_volume(
        &e.dir.join("refused-proxy-secret"),
        "..v2",
        &e.dir.join("proxy.crt"),
        &e.dir.join("proxy.key"),
    );
    wait_for(
        "virt-api accepts the new client certificate",
        Duration::from_secs(20),
        || put().0 == 200,
    );
    assert!(e.server_refused.logs().contains("certificate reloaded"));
}

/// The bad-input requests.
fn bad_batch(e: &Env) {
    // What the server relays when virt-api is down or refuses the certificate: its own
    // message (direct), or the sidecar's `Status`.
    let unavailable = |direct: &'static str| match e.mode {
        Mode::Direct => direct,
        Mode::Sidecar => "upstream is unavailable",
    };
    let cases: Vec<(&Server, Vec<&str>, String, u16, &str)> = vec![
        (
            &e.server,
            vec![],
            vm_path("vm-running", "console"),
            400,
            "Upgrade request required",
        ),
        (
            &e.server,
            vec![],
            vm_path("vm-running", "migrate"),
            404,
            "could not find the requested resource",
        ),
        (
            &e.server,
            vec![],
            format!("{}?port=abc", vm_path("vm-running", "portforward")),
            400,
            "invalid port \\\"abc\\\"",
        ),
        (
            &e.server,
            vec![],
            vm_path("vm-running", "portforward"),
            400,
            "port is required",
        ),
        (
            &e.server,
            vec![],
            vm_path("no-such-vm", "console"),
            404,
            "virtualmachines.virtualization.deckhouse.io \\\"no-such-vm\\\" not found",
        ),
        (
            &e.server,
            vec![],
            vm_path("vm-stopped", "vnc"),
            409,
            "VirtualMachine is not Running or Migrating",
        ),
        (
            &e.server,
            vec!["-X", "PUT", "-d", "{}"],
            vm_path("vm-running", "console"),
            405,
            "does not allow this method",
        ),
        (
            &e.server,
            vec!["-X", "PUT", "-d", "{}"],
            format!("{}?volumeKind=Blob&name=x", vm_path("vm-running", "addvolume")),
            400,
            "invalid volume kind",
        ),
        (
            &e.server,
            vec!["-X", "PUT", "-d", "{}"],
            format!("{}?unfreezeTimeout=soon", vm_path("vm-running", "freeze")),
            400,
            "invalid unfreezeTimeout",
        ),
        (
            &e.server,
            vec!["--http1.1", "-X", "PUT", "--data-binary", "@BIG"],
            vm_path("vm-running", "unfreeze"),
            413,
            "larger than",
        ),
        (
            &e.server,
            vec![],
            format!("{GROUP_PATH}/namespaces/{NS}/virtualmachines"),
            405,
            "does not allow this method",
        ),
        (
            &e.server_down,
            vec!["-X", "PUT", "-d", "{}"],
            vm_path("vm-running", "unfreeze"),
            503,
            unavailable("error trying to reach service: dial tcp"),
        ),
        (
            &e.server_down,
            vec![
                "--http1.1",
                "-H",
                "Connection: Upgrade",
                "-H",
                "Upgrade: websocket",
            ],
            vm_path("vm-running", "console"),
            503,
            unavailable("error trying to reach service"),
        ),
        (
            &e.server_refused,
            vec!["-X", "PUT", "-d", "{}"],
            vm_path("vm-running", "unfreeze"),
            503,
            unavailable("error trying to reach service: connection error: received fatal alert"),
        ),
    ];
    let big = e.dir.join("big.json");
    if !big.exists() {
        std::fs::write(&big, vec![b' '; 2 << 20]).unwrap();
    }
    let big_arg = format!("@{}", big.display());
    for (s, args, path, want, msg) in cases {
        let args: Vec<&str> = args
            .iter()
            .map(|a| if *a == "@BIG" { big_arg.as_str() } else { a })
            .collect();
        let (code, body) = e.admin(s, &args, &path);
        assert_eq!(code, want, "{path} {args:?}: {body}");
        let st = tk::parse_json(&body);
        assert_eq!(st["kind"], "Status", "{body}");
        assert_eq!(st["code"], want, "{body}");
        assert!(body.contains(msg), "{path}: want {msg:?} in {body}");
    }
    // A user without RBAC (our SubjectAccessReview), and a stream opened and closed through
    // kube-apiserver (the spliced connections must go away with it).
    let (code, body) = e.as_user(&e.server, "user1", &[], &[], &vm_path("vm-running", "console"));
    assert_eq!(code, 403, "{body}");
    e.rt.block_on(async {
        let (mut ws, _) = e
            .ws(&vm_path("vm-running", "console"), e.cp.get("ADMIN_TOKEN"))
            .await
            .expect("WebSocket opens");
        ws.send(Message::Binary(Bytes::from_static(b"ping")))
            .await
            .unwrap();
        assert_eq!(next_binary(&mut ws).await, b"ping");
        ws.close(None).await.unwrap();
        // Wait for the close to come back, so the connection is really over.
        while let Some(Ok(_)) = ws.next().await {}
    });
    // Without the front-proxy certificate, and with a certificate of an unknown CA (the
    // handshake is refused).
    let (code, _) = direct(
        &e.server,
        e,
        None,
        &["X-Remote-User: admin"],
        &[],
        &vm_path("vm-running", "console"),
    );
    assert_eq!(code, 401);
    let rogue = e.dir.join("rogue.crt");
    let rogue_key = e.dir.join("rogue.key");
    let (code, _) = direct(
        &e.server,
        e,
        Some((rogue.to_str().unwrap(), rogue_key.to_str().unwrap())),
        &["X-Remote-User: admin"],
        &[],
        GROUP_PATH,
    );
    assert_eq!(code, 0, "no HTTP answer without a TLS session");
}

/// A client that never finishes the TLS handshake, and one that never finishes its request
/// headers: the server closes both (its handshake and header read deadlines).
fn slow_clients(e: &Env) {
    let before = e.server.sockets();
    e.rt.block_on(async {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let addr = ("127.0.0.1", e.server.port);
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&e.module_ca).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let mut cfg =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut partial = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        partial
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
            .await
            .unwrap();
        partial.flush().await.unwrap();
        let mut buf = [0u8; 1024];
        // The deadlines are 10 s; 40 s allows for a loaded machine.
        let limit = Duration::from_secs(40);
        let a = tokio::time::timeout(limit, silent.read(&mut buf)).await;
        assert!(matches!(a, Ok(Ok(0) | Err(_))), "handshake never finished: {a:?}");
        let mut rest = Vec::new();
        let b = tokio::time::timeout(limit, partial.read_to_end(&mut rest)).await;
        assert!(b.is_ok(), "the half-sent request is still open");
        // hyper answers an expired header read with 408 or just closes.
        let text = String::from_utf8_lossy(&rest);
        assert!(text.is_empty() || text.starts_with("HTTP/1.1 408"), "{text}");
    });
    wait_for("sockets back", Duration::from_secs(10), || {
        e.server.sockets() <= before
    });
}

fn bad_input(e: &Env) {
    // The first round warms pooled connections (SubjectAccessReviews, virt-api is dialed per
    // request); later rounds must not add sockets.
    bad_batch(e);
    let servers = [&e.server, &e.server_down, &e.server_refused];
    let settle = |s: &Server| {
        // Sockets closed by the peer go away once the server's tasks notice.
        let mut last = s.sockets();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(200));
            let n = s.sockets();
            if n == last {
                break;
            }
            last = n;
        }
        last
    };
    let base: Vec<usize> = servers.iter().map(|s| settle(s)).collect();
    for _ in 0..3 {
        bad_batch(e);
    }
    for (s, b) in servers.iter().zip(&base) {
        wait_for(
            &format!("{} back to {b} sockets", s.log.display()),
            Duration::from_secs(15),
            || s.sockets() <= *b,
        );
    }
    for s in servers {
        assert!(s.logs().matches("panicked").count() == 0, "{}", s.logs());
    }
    eprintln!(
        "open sockets after the bad input: {:?} (baseline {base:?})",
        servers.iter().map(|s| s.sockets()).collect::<Vec<_>>()
    );
}

/// Whatever identity the caller claims, virt-api sees only the service account: the server
/// replaces the aggregator's `X-Remote-*`; in sidecar mode a process that reaches the sidecar
/// itself with forged headers gets the same.
fn identity(e: &Env) {
    let last = || e.fake.all().last().cloned().expect("a request reached virt-api");
    let (code, body) = e.as_user(
        &e.server,
        "admin",
        &["system:masters", "system:authenticated"],
        &["-X", "PUT", "-d", "{}", "-H", "X-Remote-Extra-Scopes: all"],
        &vm_path("vm-running", "unfreeze"),
    );
    assert_eq!(code, 200, "{body}");
    let seen = last();
    assert!(
        seen.path.starts_with("/apis/subresources.kubevirt.io/v1/"),
        "{seen:?}"
    );
    assert_eq!(
        (seen.user.as_str(), seen.groups.clone()),
        (SA, vec!["system:serviceaccounts".to_owned()])
    );
    if e.mode == Mode::Direct {
        return;
    }
    let sidecar = &e.sidecars[0];
    let url = sidecar.url(
        "/apis/subresources.virtualization.deckhouse.io/v1alpha2/namespaces/demo/virtualmachineinstances/vm-running/unfreeze",
    );
    let out = tk::ok(&tk::curl(&[
        "-sS",
        "-X",
        "PUT",
        "-d",
        "{}",
        "-H",
        "X-Remote-User: system:admin",
        "-H",
        "X-Remote-Group: system:masters",
        "-H",
        "X-Remote-Extra-Scopes: all",
        "-w",
        "%{http_code}",
        &url,
    ]));
    assert_eq!(out, "200");
    let seen = last();
    assert_eq!(
        seen.path,
        "/apis/subresources.kubevirt.io/v1/namespaces/demo/virtualmachineinstances/vm-running/unfreeze"
    );
    assert_eq!(
        (seen.user.as_str(), seen.groups.clone()),
        (SA, vec!["system:serviceaccounts".to_owned()])
    );
    assert!(!seen.extra, "{seen:?}");
    // The sidecar is ready while virt-api answers its /readyz; the one in front of a closed
    // port is not.
    assert_eq!(sidecar.readyz(), "200");
    assert_ne!(e.sidecars[1].readyz(), "200");
}

/// A `Status` error from virt-api reaches the client: in direct mode as virt-api wrote it, in
/// sidecar mode with the group renamed back to ours.
fn virt_api_errors(e: &Env) {
    let (code, body) = e.admin(
        &e.server,
        &["-X", "PUT", "-d", "{}"],
        &vm_path("vm-stopped", "removevolume"),
    );
    assert_eq!(code, 404, "{body}");
    let st = tk::parse_json(&body);
    assert_eq!(
        (st["kind"].as_str(), st["reason"].as_str()),
        (Some("Status"), Some("NotFound")),
        "{body}"
    );
    let group = match e.mode {
        Mode::Direct => "subresources.kubevirt.io",
        Mode::Sidecar => "subresources.virtualization.deckhouse.io",
    };
    assert_eq!(st["details"]["group"], group, "{body}");
    assert_eq!(st["details"]["kind"], "virtualmachineinstances", "{body}");
}
