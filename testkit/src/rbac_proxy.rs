//! kube-rbac-proxy (`tools/go/kube-rbac-proxy/`) as a child process in front of a plain HTTP
//! upstream on loopback: HTTPS with a certificate of its own, a caller's bearer token checked
//! with a TokenReview and its access with a SubjectAccessReview, both against the kube-apiserver
//! of the kubeconfig it is given; killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::{curl, free_port, self_signed_cert, workspace};

/// The kube-rbac-proxy binary: `$KUBE_RBAC_PROXY_BIN`, else the one `scripts/go-build.sh
/// kube-rbac-proxy` builds (once; later calls answer from its cache).
pub fn kube_rbac_proxy_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("KUBE_RBAC_PROXY_BIN") {
            return PathBuf::from(p);
        }
        let o = Command::new(workspace().join("scripts/go-build.sh"))
            .arg("kube-rbac-proxy")
            .stderr(Stdio::inherit())
            .output()
            .expect("scripts/go-build.sh runs");
        assert!(o.status.success(), "scripts/go-build.sh kube-rbac-proxy failed");
        let dir = String::from_utf8(o.stdout).expect("utf-8 path");
        Path::new(dir.trim()).join("kube-rbac-proxy")
    })
}

/// A kube-rbac-proxy child process; killed on drop.
pub struct KubeRbacProxy {
    pub child: Child,
    /// Its HTTPS port on 127.0.0.1.
    pub port: u16,
    /// Its serving certificate (self-signed, for 127.0.0.1): what clients trust.
    pub ca: PathBuf,
    /// Its stdout and stderr.
    pub log: PathBuf,
}

impl KubeRbacProxy {
    /// Starts kube-rbac-proxy in `dir` in front of `upstream` (`http://127.0.0.1:PORT/`), with
    /// `config_yaml` as its `--config-file` (the `authorization` it asks kube-apiserver about),
    /// kube-apiserver reached with `kubeconfig`, and `args` besides (`--ignore-paths=...`);
    /// waits until it answers HTTPS.
    pub fn start(
        dir: &Path,
        kubeconfig: &str,
        upstream: &str,
        config_yaml: &str,
        args: &[&str],
    ) -> KubeRbacProxy {
        let port = free_port();
        let file = |ext: &str| dir.join(format!("kube-rbac-proxy-{port}.{ext}"));
        let (ca, key, config, log) = (file("crt"), file("key"), file("yaml"), file("log"));
        self_signed_cert(&ca, &key, "kube-rbac-proxy");
        std::fs::write(&config, config_yaml).expect("write kube-rbac-proxy config");
        let f = std::fs::File::create(&log).expect("log file");
        let arg = |flag: &str, p: &Path| format!("--{flag}={}", p.display());
        let child = Command::new(kube_rbac_proxy_bin())
            // Not the in-cluster config: the kubeconfig given.
            .env_remove("KUBERNETES_SERVICE_HOST")
            .arg(format!("--secure-listen-address=127.0.0.1:{port}"))
            .arg(format!("--upstream={upstream}"))
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg(arg("config-file", &config))
            .arg(arg("tls-cert-file", &ca))
            .arg(arg("tls-private-key-file", &key))
            .args(args)
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("dup"))
            .stderr(f)
            .spawn()
            .expect("kube-rbac-proxy starts");
        let mut p = KubeRbacProxy { child, port, ca, log };
        p.wait_listening(Duration::from_secs(30));
        p
    }

    /// `https://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// A GET of `path` with `token` as the bearer token (none when `None`): the HTTP status
    /// code (`"000"` when no answer came) and the body.
    pub fn get(&self, path: &str, token: Option<&str>) -> (String, String) {
        let ca = self.ca.to_str().expect("utf-8 path");
        let url = self.url(path);
        let auth = token.map(|t| format!("Authorization: Bearer {t}"));
        // The status goes last, on a line of its own, so it is split from the body.
        let mut args = vec!["-s", "--max-time", "20", "--cacert", ca, "-w", "\n%{http_code}"];
        if let Some(h) = &auth {
            args.extend(["-H", h]);
        }
        args.push(&url);
        let out = String::from_utf8_lossy(&curl(&args).stdout).into_owned();
        match out.rsplit_once('\n') {
            Some((body, code)) => (code.to_owned(), body.to_owned()),
            None => (out, String::new()),
        }
    }

    /// Only the status code of [`KubeRbacProxy::get`].
    pub fn status(&self, path: &str, token: Option<&str>) -> String {
        self.get(path, token).0
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until any HTTPS answer comes (a 401 without a token, typically); panics with the
    /// log if the process exits or `limit` passes first.
    fn wait_listening(&mut self, limit: Duration) {
        let t = Instant::now();
        while t.elapsed() < limit {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("kube-rbac-proxy exited ({st}):\n{}", self.logs());
            }
            if self.status("/", None) != "000" {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("kube-rbac-proxy not answering within {limit:?}:\n{}", self.logs());
    }
}

impl Drop for KubeRbacProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
