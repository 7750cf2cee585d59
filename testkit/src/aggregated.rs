//! virtualization-api (the aggregated API of VM subresources) as the cluster runs it, for the
//! tests of its callers: the binary on loopback with the deploy manifests' identity and RBAC,
//! behind a rewriter sidecar to KubeVirt's own virt-api, registered with kube-apiserver's
//! aggregator. Killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{
    ControlPlane, KubeVirt, ProxyProc, curl, free_port, kubectl_in, make_ca, ok, signed_cert, workspace,
};

/// The group/version virtualization-api serves.
pub const SUBRESOURCES_PATH: &str = "/apis/subresources.virtualization.deckhouse.io/v1alpha2";
/// The APIService of that group/version.
pub const APISERVICE: &str = "v1alpha2.subresources.virtualization.deckhouse.io";
/// The identity virtualization-api runs as.
pub const SERVICE_ACCOUNT: &str = "system:serviceaccount:d8-virtualization:virtualization-api";

/// A running virtualization-api and its sidecar.
pub struct VirtualizationApi {
    child: Child,
    /// Its HTTPS port on 127.0.0.1.
    pub port: u16,
    /// Its log.
    pub log: PathBuf,
    /// The sidecar in front of virt-api.
    pub sidecar: ProxyProc,
}

impl VirtualizationApi {
    /// Starts virtualization-api in `dir` (certificates, kubeconfigs, logs) with the manifests
    /// of `apiserver/deploy/` (its ServiceAccount and RBAC, applied for real), behind a sidecar
    /// to `kubevirt`'s virt-api, and registers it; returns once the aggregator serves the group.
    pub fn start(cp: &ControlPlane, kubevirt: &KubeVirt, dir: &Path) -> VirtualizationApi {
        std::fs::create_dir_all(dir).expect("directory");
        let apply = |yaml: &str| ok(&kubectl_in(cp.kubeconfig(), &["apply", "-f", "-"], yaml));
        apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: d8-virtualization}\n");
        let deploy = workspace().join("apiserver/deploy");
        for f in ["serviceaccount.yaml", "rbac.yaml"] {
            ok(&cp.kubectl(&["apply", "-f", deploy.join(f).to_str().expect("utf-8")]));
        }
        let kubeconfig = token_kubeconfig(cp, dir);
        let (ca, ca_key) = make_ca(dir, "virtualization-ca");
        let (serving, serving_key) = signed_cert(
            dir,
            "virtualization-api",
            "virtualization-api",
            Some("DNS:virtualization-api.d8-virtualization.svc,DNS:localhost,IP:127.0.0.1"),
            &ca,
            &ca_key,
        );
        let sidecar = virt_api_sidecar(kubevirt, dir);
        let port = free_port();
        let log = dir.join("virtualization-api.log");
        let f = std::fs::File::create(&log).expect("log file");
        let p = |x: &Path| x.to_str().expect("utf-8").to_owned();
        let child = Command::new(crate::workspace_bin("virtualization-api", "virtualization-api"))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "info")
            .args([
                "--bind-address=127.0.0.1".to_owned(),
                format!("--secure-port={port}"),
                format!("--tls-cert-file={}", p(&serving)),
                format!("--tls-private-key-file={}", p(&serving_key)),
                format!("--kubevirt-endpoint=http://127.0.0.1:{}", sidecar.port),
                "--service-account-name=virtualization-api".to_owned(),
                "--service-account-namespace=d8-virtualization".to_owned(),
            ])
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("dup"))
            .stderr(f)
            .spawn()
            .expect("virtualization-api starts");
        let mut api = VirtualizationApi {
            child,
            port,
            log,
            sidecar,
        };
        let t = Instant::now();
        while curl(&[
            "-sk",
            "--max-time",
            "2",
            &format!("https://127.0.0.1:{port}/readyz"),
        ])
        .stdout
            != b"ok"
        {
            if let Ok(Some(st)) = api.child.try_wait() {
                panic!("virtualization-api exited ({st}):\n{}", api.logs());
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "virtualization-api not ready:\n{}",
                api.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        register_apiservice(cp, &ca, port);
        api
    }

    /// Its log so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for VirtualizationApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A kubeconfig in `dir` with a token of the `virtualization-api` ServiceAccount: the deploy
/// manifests' RBAC is what lets it work.
fn token_kubeconfig(cp: &ControlPlane, dir: &Path) -> PathBuf {
    use base64::Engine as _;
    let token = ok(&cp.kubectl(&[
        "-n",
        "d8-virtualization",
        "create",
        "token",
        "virtualization-api",
        "--duration=24h",
    ]));
    let ca = std::fs::read(cp.get("KUBE_CA_FILE")).expect("kube-apiserver's CA");
    let ca = base64::engine::general_purpose::STANDARD.encode(ca);
    let kc = dir.join("virtualization-api.kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: sa\n  user:\n    token: {}\ncontexts:\n- name: c\n  context: {{cluster: c, user: sa}}\ncurrent-context: c\n",
            cp.get("KUBE_APISERVER_URL"),
            token.trim()
        ),
    )
    .expect("write kubeconfig");
    kc
}

/// The rewriter sidecar in front of `kubevirt`'s virt-api, with the subresources rules and
/// virtualization-api's identity, holding a client certificate virt-api trusts.
fn virt_api_sidecar(kubevirt: &KubeVirt, dir: &Path) -> ProxyProc {
    let kc = dir.join("virt-api.kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: virt-api\n  cluster:\n    server: https://localhost:{}\n    certificate-authority: {}\nusers:\n- name: proxy\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: c\n  context: {{cluster: virt-api, user: proxy}}\ncurrent-context: c\n",
            kubevirt.get("VIRT_API_PORT"),
            kubevirt.get("VIRT_API_CA_FILE"),
            kubevirt.get("VIRT_API_CLIENT_CERT"),
            kubevirt.get("VIRT_API_CLIENT_KEY"),
        ),
    )
    .expect("write kubeconfig");
    let rules = workspace().join("rules/virtualization-api.yaml");
    ProxyProc::start(
        dir,
        &[
            ("KUBECONFIG", kc.to_str().expect("utf-8")),
            ("RULES_PATH", rules.to_str().expect("utf-8")),
            ("REMOTE_USER", SERVICE_ACCOUNT),
            ("REMOTE_GROUPS", "system:serviceaccounts"),
        ],
    )
}

/// Registers the server on 127.0.0.1:`port`, serving with a certificate of `ca`, with the
/// aggregator (an ExternalName Service on loopback and the APIService; a previous registration
/// is replaced) and waits until the aggregator serves the group from it.
pub fn register_apiservice(cp: &ControlPlane, ca: &Path, port: u16) {
    use base64::Engine as _;
    let _ = cp.kubectl(&["delete", "apiservice", APISERVICE, "--ignore-not-found"]);
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(std::fs::read(ca).expect("CA"));
    ok(&kubectl_in(
        cp.kubeconfig(),
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: virtualization-api, namespace: d8-virtualization}}\nspec:\n  type: ExternalName\n  externalName: localhost\n  ports: [{{name: https, port: {port}, protocol: TCP, targetPort: {port}}}]\n---\napiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {{name: {APISERVICE}}}\nspec:\n  group: subresources.virtualization.deckhouse.io\n  version: v1alpha2\n  groupPriorityMinimum: 999\n  versionPriority: 15\n  service: {{name: virtualization-api, namespace: d8-virtualization, port: {port}}}\n  caBundle: {ca_bundle}\n"
        ),
    ));
    let until = |what: &str, limit: Duration, f: &dyn Fn() -> bool| {
        let t = Instant::now();
        while !f() {
            assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    until("APIService Available", Duration::from_secs(60), &|| {
        cp.kubectl(&[
            "get",
            "apiservice",
            APISERVICE,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
        ])
        .stdout
            == b"True"
    });
    // Available is reported before the aggregator's proxy handler serves the group.
    until(
        "the aggregator serves the group",
        Duration::from_secs(30),
        &|| cp.kubectl(&["get", "--raw", SUBRESOURCES_PATH]).status.success(),
    );
}
