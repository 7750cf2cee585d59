//! The local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) of
//! `kube-api-rewriter-env`, the library behind `kar-env` and `scripts/control-plane.sh`,
//! brought up for a test and down on drop.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Output};

use kube_api_rewriter_env::{Command, Config};

use crate::{kube_bin_dir, kubectl, temp_dir};

/// etcd + kube-apiserver + controller-manager + scheduler; `down` on drop.
pub struct ControlPlane {
    pub dir: PathBuf,
    pub env: HashMap<String, String>,
}

impl ControlPlane {
    pub fn up() -> ControlPlane {
        Self::up_in(temp_dir("cp"), &[])
    }

    fn up_in(dir: PathBuf, env: &[(&str, &str)]) -> ControlPlane {
        let mut cp = ControlPlane {
            dir,
            env: HashMap::new(),
        };
        let out = cp.script_env("up", env);
        assert!(
            out.status.success(),
            "control plane up failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        cp.env = cp.inner(&[]).env().expect("env file").into_iter().collect();
        cp
    }

    fn inner(&self, env: &[(&str, &str)]) -> kube_api_rewriter_env::ControlPlane {
        let config = Config::from_vars(|k| {
            if let Some((_, v)) = env.iter().find(|(n, _)| *n == k) {
                return Some((*v).to_owned());
            }
            if k == "KUBE_BIN_DIR" {
                return Some(kube_bin_dir().display().to_string());
            }
            std::env::var(k).ok()
        })
        .expect("control plane configuration");
        kube_api_rewriter_env::ControlPlane::new(&self.dir, config)
    }

    pub fn script(&self, cmd: &str) -> Output {
        self.script_env(cmd, &[])
    }

    /// `kar-env CMD DIR` (as `scripts/control-plane.sh CMD DIR`) in this process, with extra
    /// environment (e.g. `KAR_STOP_TIMEOUT`); its log is the output's stderr.
    pub fn script_env(&self, cmd: &str, env: &[(&str, &str)]) -> Output {
        let command = Command::from_name(cmd).unwrap_or_else(|| panic!("no command {cmd}"));
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let code = match kube_api_rewriter_env::run(command, &self.inner(env), &mut stdout, &mut stderr) {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(e) => {
                stderr.extend_from_slice(format!("ERROR: {e}\n").as_bytes());
                1
            }
        };
        Output {
            status: ExitStatus::from_raw(code << 8),
            stdout,
            stderr,
        }
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
        Self::up_in(dir, &[("KAR_APISERVER_EXTRA_ARGS", &extra)])
    }
}
