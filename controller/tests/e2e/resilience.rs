//! What the controller comes through: a status write from a stale copy of a VM (409 Conflict),
//! and kube-apiserver restarting under it and both sidecars.

use std::time::Instant;

use kube_api_rewriter_testkit::*;
use serde_json::json;
use virtualization_controller::reconcile::{Context, vm};
use virtualization_controller::resources::VirtualMachine;

use crate::env::*;

/// A status write from a stale copy of a VM gets a 409 Conflict; the reconcile reads the VM
/// again and succeeds.
pub fn conflict(env: &Env) {
    let ns = env.namespace("conflict");
    let ns = ns.as_str();
    env.apply(&vm_yaml(ns, "x", "AlwaysOff", "256Mi"));
    env.wait_vm(ns, "x", "Stopped", stopped);
    env.rt.block_on(async {
        let url = format!("http://127.0.0.1:{}", env.sidecar.port)
            .parse()
            .expect("url");
        let client = kube::Client::try_from(kube::Config::new(url)).expect("client");
        let api: kube::Api<VirtualMachine> = kube::Api::namespaced(client.clone(), ns);
        let mut stale = api.get("x").await.expect("get VM");
        // Someone else writes the VM: the copy is stale now.
        tokio::task::block_in_place(|| {
            ok(&env.cp.kubectl(&["annotate", VM, "x", "-n", ns, "touched=yes"]));
        });
        // A copy whose status differs from what the reconcile computes, so it writes.
        stale.status = None;
        let direct = api
            .replace_status("x", &Default::default(), &stale)
            .await
            .expect_err("a write from the stale copy conflicts");
        assert!(
            matches!(&direct, kube::Error::Api(s) if s.code == 409),
            "{direct}"
        );
        let action = vm::reconcile(std::sync::Arc::new(stale), Context::new(client))
            .await
            .unwrap_or_else(|e| panic!("reconcile from a stale copy: {e}"));
        eprintln!("reconcile from a stale copy: {action:?}");
    });
    env.wait_vm(ns, "x", "Stopped", stopped);
}

/// kube-apiserver restarts under the controller and both sidecars; none of them restarts and
/// changes made afterwards are reconciled.
pub fn apiserver_restart(env: &Env) {
    let ns = env.namespace("restart");
    let ns = ns.as_str();
    env.apply(&vm_yaml(ns, "r", "AlwaysOff", "256Mi"));
    env.wait_vm(ns, "r", "Stopped", stopped);
    let t = Instant::now();
    ok(&env.cp.script("restart-apiserver"));
    eprintln!("kube-apiserver restarted in {:?}", t.elapsed());
    env.wait("kube-apiserver back", || {
        let o = env.cp.kubectl(&["get", VM, "r", "-n", ns]);
        if o.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&o.stderr).into_owned())
        }
    });
    let t = Instant::now();
    env.patch(VM, ns, "r", json!({"spec": {"runPolicy": "Manual"}}));
    env.completes(ns, "start", "Start", "r");
    env.wait_vm(ns, "r", "Running after the restart", running);
    env.patch(VM, ns, "r", json!({"spec": {"runPolicy": "AlwaysOff"}}));
    env.wait_vm(ns, "r", "Stopped after the restart", stopped);
    eprintln!("reconciled after the restart in {:?}", t.elapsed());
    assert!(env.ctl().alive(), "controller exited");
    for p in [&env.sidecar, &env.kv_sidecar] {
        assert_eq!(http_status(&[&p.mon("/healthz")]), "200", "a sidecar stopped");
    }
}
