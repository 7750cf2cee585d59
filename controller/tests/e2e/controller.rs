//! The controller binary as a child process, in either rewriter mode, and the cases about the
//! process itself: its probe and metrics endpoints, and its clean stop on SIGTERM.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube_api_rewriter_testkit::{free_port, http_status};
use serde_json::Value;

use crate::env::Env;

/// Where the controller under test has KubeVirt's groups renamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Behind its own `kube-api-rewriter` sidecar.
    Sidecar,
    /// `--embedded-rewriter`: the Layer in its own client, straight to kube-apiserver.
    Embedded,
}

impl Mode {
    /// The mode's name: the trials' prefix and the suffix of the cases' namespaces.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sidecar => "sidecar",
            Mode::Embedded => "embedded",
        }
    }
}

/// The controller binary as a child process; killed on drop.
pub struct ControllerProc {
    /// The process.
    pub child: Child,
    /// Its stdout and stderr.
    pub log: PathBuf,
    /// `/healthz` and `/readyz`.
    pub health_port: u16,
    /// `/metrics`.
    pub metrics_port: u16,
    /// The validating webhook (HTTPS).
    pub webhook_port: u16,
}

impl ControllerProc {
    /// Starts the controller in `mode`; `kubeconfig` points at its sidecar or at kube-apiserver.
    /// `data` is the environment of its data settings (DVCR, the data Pods' Node).
    pub fn start(dir: &Path, kubeconfig: &Path, mode: Mode, data: &[(&str, String)]) -> ControllerProc {
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
            .envs(data.iter().map(|(k, v)| (*k, v.as_str())))
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

    /// Its log so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The status code of a GET, `000` when nothing answers (yet): curl then exits non-zero
    /// but still prints the code, which readiness waits retry on.
    pub fn get(&self, port: u16, path: &str) -> String {
        http_status(&[&format!("http://127.0.0.1:{port}{path}")])
    }

    /// Whether the process has not exited.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for ControllerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The probes answer, and nothing else does; `/metrics` answers.
pub fn probes(env: &Env) {
    let c = env.ctl();
    assert_eq!(c.get(c.health_port, "/healthz"), "200");
    assert_eq!(c.get(c.health_port, "/readyz"), "200");
    assert_eq!(c.get(c.health_port, "/nothing"), "404");
    assert_eq!(c.get(c.metrics_port, "/metrics"), "200");
}

/// SIGTERM stops the controller cleanly; its log is JSON and holds no credentials.
pub fn sigterm(env: &Env) {
    let mut c = env.ctl();
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
