//! kubectl through the proxy against the real local kube-apiserver (scripts/control-plane.sh):
//! what users of `kubevirt.io` rely on, each case checked against what kube-apiserver holds
//! (read directly with the admin kubeconfig).
//!
//! One control plane and one proxy (API proxy + webhook proxy in front of `webhook_double`),
//! with KubeVirt's CRDs applied through it, are shared by the cases of this test binary that
//! run at the same time (`kube_api_rewriter_testkit::shared`), and stopped when the last of
//! them ends. Each case makes the namespaces and objects it reads, so any one runs alone
//! (`cargo test -p kube-api-rewriter-proxy --test kubectl NAME`) or beside the others.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use kube_api_rewriter_testkit::*;
use serde_json::Value;

mod admission;
mod apply;
mod assertions;
mod core_objects;
mod delete;
mod discovery;
mod manifests;
mod patch_label;
mod rbac;
mod selectors;
#[path = "../common/tls_double.rs"]
mod tls_double;
mod watch;
mod webhook_double;

use webhook_double::WebhookDouble;

const INTERNAL: &str = "internal.virtualization.deckhouse.io";
const UP_VM: &str = "internalvirtualizationvirtualmachines.internal.virtualization.deckhouse.io";
const RENAMED_PREFIX: &str = "kubevirt.internal.virtualization.deckhouse.io/";
/// KubeVirt's CRD fixtures applied through the proxy (`testdata/kubevirt-crds/original/`).
const CRD_FILES: [&str; 3] = ["virtualmachines", "virtualmachineinstances", "kubevirt"];
/// The names of those CRDs as a client of the proxy sees them.
const CRDS: [&str; 3] = [
    "virtualmachines.kubevirt.io",
    "virtualmachineinstances.kubevirt.io",
    "kubevirts.kubevirt.io",
];

/// What every case of this file shares.
struct Env {
    /// The proxy (API and webhook listeners); declared first so it stops before the control
    /// plane.
    p: ProxyProc,
    /// The validating webhook the proxy's webhook listener forwards to.
    double: WebhookDouble,
    /// The CA of the webhook listener's serving certificate.
    ca: PathBuf,
    /// The proxy's webhook listener (127.0.0.1).
    wh_port: u16,
    cp: ControlPlane,
}

/// The environment of this test binary: made by the first case that asks, shared by those
/// running at the same time.
fn env() -> Arc<Env> {
    static SLOT: Mutex<Weak<Env>> = Mutex::new(Weak::new());
    shared(&SLOT, || {
        let cp = ControlPlane::up();
        let dir = cp.dir.clone();
        let (ca, crt, key) = webhook_double::webhook_certs(&dir.join("webhook-certs"));
        let double = webhook_double::webhook_double(&crt, &key);
        let wh_port = free_port();
        let p = ProxyProc::start(
            &dir,
            &[
                ("KUBECONFIG", cp.kubeconfig()),
                ("WEBHOOK_ADDRESS", &format!("https://127.0.0.1:{}", double.port)),
                ("WEBHOOK_LISTEN_ADDRESS", "127.0.0.1"),
                ("WEBHOOK_LISTEN_PORT", &wh_port.to_string()),
                ("WEBHOOK_CERT_FILE", crt.to_str().expect("utf-8")),
                ("WEBHOOK_KEY_FILE", key.to_str().expect("utf-8")),
            ],
        );
        for f in CRD_FILES {
            ok(&p.kubectl(&[
                "apply",
                "-f",
                &format!("{}/original/{f}.yaml", crd_fixtures().display()),
            ]));
        }
        for crd in CRDS {
            if let Some(err) = wait_crd_established(&p, crd) {
                panic!("kubectl wait --for condition=established crd/{crd} through the proxy: {err}");
            }
        }
        // Wait until the renamed resource is served.
        p.wait_until(Duration::from_secs(30), |p| {
            p.kubectl(&["get", "vm", "-A"]).status.success()
        });
        Env {
            p,
            double,
            ca,
            wh_port,
            cp,
        }
    })
}

impl Env {
    /// The proxy's kubeconfig.
    fn pkc(&self) -> &str {
        self.p.kubeconfig.to_str().expect("utf-8")
    }

    /// `kubectl ARGS -f -` through the proxy with `input` on stdin.
    fn kubectl_in(&self, args: &[&str], input: &str) -> std::process::Output {
        kubectl_in(self.pkc(), args, input)
    }

    /// `kubectl apply -f -` of `manifest` through the proxy; its stdout.
    fn apply(&self, manifest: &str) -> String {
        ok(&self.kubectl_in(&["apply", "-f", "-"], manifest))
    }

    /// Creates namespace `ns` directly (admin).
    fn namespace(&self, ns: &str) {
        ok(&self.cp.kubectl(&["create", "namespace", ns]));
    }

    /// The VM as kube-apiserver holds it (with managed fields).
    fn upstream_vm(&self, ns: &str, name: &str) -> Value {
        parse_json(&ok(&self.cp.kubectl(&[
            "get",
            UP_VM,
            name,
            "-n",
            ns,
            "-o",
            "json",
            "--show-managed-fields",
        ])))
    }

    /// The VM as a client of the proxy sees it.
    fn proxy_vm(&self, ns: &str, name: &str) -> Value {
        parse_json(&ok(&self.p.kubectl(&["get", "vm", name, "-n", ns, "-o", "json"])))
    }
}
