//! The local control plane of `scripts/control-plane.sh` (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler), brought up for a test and down on drop.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::{kube_bin_dir, kubectl, temp_dir, workspace};

/// etcd + kube-apiserver from `scripts/control-plane.sh`; `down` on drop.
pub struct ControlPlane {
    pub dir: PathBuf,
    pub env: HashMap<String, String>,
}

impl ControlPlane {
    pub fn up() -> ControlPlane {
        let dir = temp_dir("cp");
        let mut cp = ControlPlane {
            dir,
            env: HashMap::new(),
        };
        let out = cp.script("up");
        assert!(
            out.status.success(),
            "control plane up failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(cp.dir.join("env")).expect("env file");
        let mut env = HashMap::new();
        for line in text.lines() {
            if let Some((k, v)) = line.strip_prefix("export ").and_then(|l| l.split_once('=')) {
                env.insert(k.to_owned(), v.trim_matches('\'').to_owned());
            }
        }
        cp.env = env;
        cp
    }

    pub fn script(&self, cmd: &str) -> Output {
        self.script_env(cmd, &[])
    }

    /// `control-plane.sh CMD DIR` with extra environment (e.g. `KAR_STOP_TIMEOUT`).
    pub fn script_env(&self, cmd: &str, env: &[(&str, &str)]) -> Output {
        let mut c = Command::new("bash");
        c.arg(workspace().join("scripts/control-plane.sh"))
            .arg(cmd)
            .arg(&self.dir)
            .env("KUBE_BIN_DIR", kube_bin_dir())
            .stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().expect("control-plane.sh runs")
    }

    pub fn get(&self, k: &str) -> &str {
        self.env
            .get(k)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("{k} not in env"))
    }

    pub fn kubeconfig(&self) -> &str {
        self.get("KUBECONFIG")
    }

    /// kubectl straight to kube-apiserver (admin).
    pub fn kubectl(&self, args: &[&str]) -> Output {
        kubectl(self.kubeconfig(), args)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = self.script("down");
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl ControlPlane {
    /// Like [`ControlPlane::up`], with extra kube-apiserver flags (`KAR_APISERVER_EXTRA_ARGS`);
    /// `args` gets the control plane's directory, for paths such as `DIR/pki/ca.crt`.
    pub fn up_with_apiserver_args(args: impl FnOnce(&Path) -> String) -> ControlPlane {
        let dir = temp_dir("cp");
        let extra = args(&dir);
        let mut cp = ControlPlane {
            dir,
            env: HashMap::new(),
        };
        let out = Command::new("bash")
            .arg(workspace().join("scripts/control-plane.sh"))
            .arg("up")
            .arg(&cp.dir)
            .env("KUBE_BIN_DIR", kube_bin_dir())
            .env("KAR_APISERVER_EXTRA_ARGS", extra)
            .stdin(Stdio::null())
            .output()
            .expect("control-plane.sh runs");
        assert!(
            out.status.success(),
            "control plane up failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(cp.dir.join("env")).expect("env file");
        for line in text.lines() {
            if let Some((k, v)) = line.strip_prefix("export ").and_then(|l| l.split_once('=')) {
                cp.env.insert(k.to_owned(), v.trim_matches('\'').to_owned());
            }
        }
        cp
    }
}
