//! KubeVirt's own components behind kube-api-rewriter sidecars on a [`ControlPlane`], with kwok
//! simulating the Nodes (`scripts/kubevirt.sh`); stopped on drop.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::{ControlPlane, kube_bin_dir, rewriter_bin, workspace};

/// What `scripts/kubevirt.sh up` started: the admin sidecar its CRDs went through, kwok and its
/// Nodes, virt-api and its webhook-mode sidecar, virt-controller and its sidecar.
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
        KubeVirt::run("up", cp, node_labels)
    }

    /// Runs `scripts/kubevirt.sh install` on `cp`: virt-operator behind its sidecar installs
    /// KubeVirt from a KubeVirt CR; returns once the CR reports `Deployed`.
    pub fn install(cp: &ControlPlane) -> KubeVirt {
        KubeVirt::run("install", cp, &[])
    }

    fn run(cmd: &str, cp: &ControlPlane, node_labels: &[&str]) -> KubeVirt {
        let out = script(cmd, cp)
            .env("KUBE_API_REWRITER_BIN", rewriter_bin())
            .env("KUBEVIRT_NODE_LABELS", node_labels.join(","))
            .output()
            .expect("kubevirt.sh runs");
        assert!(
            out.status.success(),
            "scripts/kubevirt.sh {cmd} failed:\n{}",
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
        (
            self.log("VIRT_CONTROLLER_LOG"),
            self.log("VIRT_CONTROLLER_SIDECAR_LOG"),
        )
    }

    /// Prints the last 40 lines of each log the script exported as `keys`: what a suite shows
    /// when a case fails.
    pub fn print_log_tails(&self, keys: &[&str]) {
        for k in keys {
            let log = self.log(k);
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("{k} (last lines):");
            for l in tail.iter().rev() {
                eprintln!("  {l}");
            }
        }
    }

    /// The log file the script exported as `key` (`VIRT_API_SIDECAR_LOG`, ...); empty if unread.
    pub fn log(&self, key: &str) -> String {
        std::fs::read_to_string(self.get(key)).unwrap_or_default()
    }

    /// A PUT of `body` to virt-api's `path` (`/apis/subresources.kubevirt.io/v1/...`), sent
    /// straight to virt-api the way an authenticating front proxy does: the requestheader
    /// client certificate, `X-Remote-User: user` and `X-Remote-Group` for each of `groups`.
    /// Returns the status code and the body.
    pub fn virt_api_put(&self, path: &str, body: &str, user: &str, groups: &[&str]) -> (String, String) {
        let url = format!("https://127.0.0.1:{}{path}", self.get("VIRT_API_PORT"));
        let user = format!("X-Remote-User: {user}");
        let groups: Vec<String> = groups.iter().map(|g| format!("X-Remote-Group: {g}")).collect();
        let mut args = vec![
            "-s",
            "-w",
            "\n%{http_code}",
            "--max-time",
            "30",
            "-X",
            "PUT",
            "--cacert",
            self.get("VIRT_API_CA_FILE"),
            "--cert",
            self.get("VIRT_API_CLIENT_CERT"),
            "--key",
            self.get("VIRT_API_CLIENT_KEY"),
            "-H",
            "Content-Type: application/json",
            "-H",
            &user,
            "--data-binary",
            body,
        ];
        for g in &groups {
            args.extend(["-H", g.as_str()]);
        }
        args.push(&url);
        let out = String::from_utf8_lossy(&crate::curl(&args).stdout).into_owned();
        let (body, code) = out.rsplit_once('\n').unwrap_or(("", &out));
        (code.to_owned(), body.to_owned())
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
