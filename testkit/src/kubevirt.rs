//! KubeVirt's own components behind kube-api-rewriter sidecars on a [`ControlPlane`], with kwok
//! simulating the Nodes (`scripts/kubevirt.sh`); stopped on drop.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::{ControlPlane, kube_bin_dir, rewriter_bin, workspace};

/// What `scripts/kubevirt.sh up` started: the admin sidecar its CRDs went through, kwok and its
/// Nodes, virt-controller and its sidecar.
pub struct KubeVirt {
    /// The control plane's directory (the script's state is in `DIR/kubevirt`).
    pub cp_dir: PathBuf,
    /// What `DIR/kubevirt/env` exports.
    pub env: HashMap<String, String>,
}

impl KubeVirt {
    /// Runs `scripts/kubevirt.sh up` on `cp`, with the proxy binary of this build as the
    /// sidecars and `node_labels` (`KEY=VALUE`) on kwok's Nodes besides their own; panics with
    /// the script's output when it fails.
    pub fn up(cp: &ControlPlane, node_labels: &[&str]) -> KubeVirt {
        let out = script("up", cp)
            .env("KUBE_API_REWRITER_BIN", rewriter_bin())
            .env("KUBEVIRT_NODE_LABELS", node_labels.join(","))
            .output()
            .expect("kubevirt.sh runs");
        assert!(
            out.status.success(),
            "scripts/kubevirt.sh up failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(cp.dir.join("kubevirt/env")).expect("kubevirt env file");
        let env = text
            .lines()
            .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.trim_matches('\'').to_owned()))
            .collect();
        KubeVirt {
            cp_dir: cp.dir.clone(),
            env,
        }
    }

    /// A value the script exported; panics naming it when missing.
    pub fn get(&self, k: &str) -> &str {
        self.env
            .get(k)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("{k} not in kubevirt/env"))
    }

    /// kwok's Nodes, where virt-launcher Pods are scheduled.
    pub fn nodes(&self) -> Vec<String> {
        self.get("KUBEVIRT_NODES")
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    /// virt-controller's log, then its sidecar's.
    pub fn logs(&self) -> (String, String) {
        let read = |k: &str| std::fs::read_to_string(self.get(k)).unwrap_or_default();
        (read("VIRT_CONTROLLER_LOG"), read("VIRT_CONTROLLER_SIDECAR_LOG"))
    }
}

fn script(cmd: &str, cp: &ControlPlane) -> Command {
    let mut c = Command::new("bash");
    c.arg(workspace().join("scripts/kubevirt.sh"))
        .arg(cmd)
        .arg(&cp.dir)
        .env("KUBE_BIN_DIR", kube_bin_dir())
        .stdin(Stdio::null());
    c
}

impl Drop for KubeVirt {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(workspace().join("scripts/kubevirt.sh"))
            .arg("down")
            .arg(&self.cp_dir)
            .stdin(Stdio::null())
            .output();
    }
}
