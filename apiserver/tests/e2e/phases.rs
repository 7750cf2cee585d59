//! The VM phase check: 409 for a VM that is not in a phase the subresource allows, following
//! the phase as it changes.

use std::time::Duration;

use kube_api_rewriter_testkit as tk;

use crate::client::vm_path;
use crate::env::{Env, set_phase, wait_for};

pub fn wrong_phase(e: &Env) {
    let err = tk::fails(&e.kubectl(&["get", "--raw", &vm_path("vm-stopped", "console")]));
    assert!(
        err.contains("VirtualMachine is not Running or Migrating"),
        "{err}"
    );
    e.rt.block_on(async {
        match e.ws(&vm_path("vm-stopped", "vnc"), e.cp.get("ADMIN_TOKEN")).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 409),
            other => panic!("expected 409, got {:?}", other.map(|x| x.1)),
        }
    });
    let err = tk::fails(&e.put(&vm_path("vm-migrating", "freeze"), "{}"));
    assert!(err.contains("VirtualMachine is not Running"), "{err}");
    let (code, body) = e.admin(
        &e.server,
        &["-X", "PUT", "-d", "{}"],
        &vm_path("vm-stopped", "unfreeze"),
    );
    assert_eq!(code, 409, "{body}");
    assert_eq!(tk::parse_json(&body)["reason"], "Conflict");
    // The watch cache follows the phase.
    set_phase(&e.cp, "vm-stopped", "Running");
    wait_for("the cache sees Running", Duration::from_secs(20), || {
        e.admin(&e.server, &[], &vm_path("vm-stopped", "console")).0 == 400
    });
    set_phase(&e.cp, "vm-stopped", "Stopped");
    wait_for("the cache sees Stopped", Duration::from_secs(20), || {
        e.admin(&e.server, &[], &vm_path("vm-stopped", "console")).0 == 409
    });
}
