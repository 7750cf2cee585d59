//! The `kube-api-rewriter` binary as a child process: started on loopback ports with a
//! kubeconfig for clients, signalled, waited for, killed on drop.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::{crd_fixtures, free_port, http_status, kubectl, ok, rewriter_bin};

/// A proxy child process; killed on drop.
pub struct ProxyProc {
    pub child: Child,
    pub port: u16,
    pub mon_port: u16,
    pub log: PathBuf,
    pub kubeconfig: PathBuf,
}

impl ProxyProc {
    /// Starts the proxy with `env` on top of loopback ports and text logs; waits for `/healthz`.
    pub fn start(dir: &Path, env: &[(&str, &str)]) -> ProxyProc {
        Self::start_bin(&rewriter_bin(), dir, env)
    }

    /// Like [`ProxyProc::start`], with another sidecar binary: anything that reads the
    /// sidecar's environment (`CLIENT_PROXY_*`, `MONITORING_BIND_ADDRESS`, `LOG_*`, ...).
    pub fn start_bin(bin: &Path, dir: &Path, env: &[(&str, &str)]) -> ProxyProc {
        let port = free_port();
        let mon_port = free_port();
        let log = dir.join(format!("proxy-{port}.log"));
        let mut cmd = Command::new(bin);
        cmd.env_remove("KUBERNETES_SERVICE_HOST")
            .env("CLIENT_PROXY_ADDRESS", "127.0.0.1")
            .env("CLIENT_PROXY_PORT", port.to_string())
            .env("MONITORING_BIND_ADDRESS", format!("127.0.0.1:{mon_port}"))
            .env("LOG_FORMAT", "text")
            .env("LOG_LEVEL", "debug")
            .env("READYZ_POLL_INTERVAL", "300ms")
            .env("READYZ_STALE_AFTER", "2s");
        for (k, v) in env {
            cmd.env(k, v);
        }
        // A whole suite at another level, e.g. `KAR_TEST_LOG_LEVEL=trace` to check that no
        // secret reaches the log even there (see `KAR_TEST_LOG_SINK`).
        if let Some(level) = std::env::var_os("KAR_TEST_LOG_LEVEL") {
            cmd.env("LOG_LEVEL", level);
        }
        let f = std::fs::File::create(&log).expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("dup"))
            .stderr(f)
            .spawn()
            .expect("proxy starts");
        let kubeconfig = dir.join(format!("proxy-{port}.kubeconfig"));
        let mut kc = std::fs::File::create(&kubeconfig).expect("kubeconfig");
        write!(
            kc,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: p\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: p\n  context: {{cluster: p, user: u}}\ncurrent-context: p\n"
        )
        .expect("write kubeconfig");
        let p = ProxyProc {
            child,
            port,
            mon_port,
            log,
            kubeconfig,
        };
        p.wait_until(Duration::from_secs(20), |p| {
            http_status(&[&p.mon("/healthz")]) == "200"
        });
        p
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn mon(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.mon_port)
    }

    /// The HTTP status code of the monitoring listener's `/readyz`.
    pub fn readyz(&self) -> String {
        http_status(&[&self.mon("/readyz")])
    }

    /// Applies KubeVirt's VirtualMachine CRD (original names) through the proxy.
    pub fn apply_vm_crd(&self) {
        let crd = crd_fixtures().join("original/virtualmachines.yaml");
        ok(&self.kubectl(&["apply", "-f", crd.to_str().expect("utf-8 path")]));
    }

    pub fn kubectl(&self, args: &[&str]) -> Output {
        kubectl(self.kubeconfig.to_str().expect("utf-8 path"), args)
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Polls `f` every 100 ms until true; panics with the log after `limit`.
    pub fn wait_until(&self, limit: Duration, mut f: impl FnMut(&Self) -> bool) {
        let t = Instant::now();
        while t.elapsed() < limit {
            if f(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("condition not met within {limit:?}; proxy log:\n{}", self.logs());
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(ok.success());
    }

    /// Waits for the process to exit; returns its exit code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let t = Instant::now();
        while t.elapsed() < limit {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for ProxyProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // `KAR_TEST_LOG_SINK=FILE`: every proxy's log is appended there before its directory
        // goes, to be searched after the suite (for tokens, keys, Secret data).
        if let Some(sink) = std::env::var_os("KAR_TEST_LOG_SINK")
            && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(sink)
            && let Ok(mut log) = std::fs::File::open(&self.log)
        {
            let _ = std::io::copy(&mut log, &mut f);
        }
    }
}

/// `kubectl wait --for condition=established crd/NAME` through the proxy: `None` when it
/// worked, else kubectl's error.
pub fn wait_crd_established(p: &ProxyProc, crd: &str) -> Option<String> {
    let o = p.kubectl(&[
        "wait",
        "--for",
        "condition=established",
        "--timeout=15s",
        &format!("crd/{crd}"),
    ]);
    if o.status.success() {
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains(crd) && out.contains("condition met"), "{out}");
        return None;
    }
    Some(String::from_utf8_lossy(&o.stderr).trim().to_owned())
}
