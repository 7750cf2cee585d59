//! VirtualMachineOperations: Start, Stop and Restart complete, and the ones that cannot be done
//! fail with a condition saying why.

use crate::env::*;

/// VirtualMachineOperations start, stop and restart.
pub fn operations(env: &Env) {
    let ns = env.namespace("ops");
    let ns = ns.as_str();
    env.apply(&vm_yaml(ns, "o", "Manual", "256Mi"));
    // Manual: created stopped.
    env.wait_vm(ns, "o", "Stopped", stopped);
    let op = env.completes(ns, "start-1", "Start", "o");
    assert!(cond_is(&op, "Completed", "True"), "{op}");
    env.wait_vm(ns, "o", "Running", running);
    env.completes(ns, "stop-1", "Stop", "o");
    env.wait_vm(ns, "o", "Stopped", stopped);
    assert!(env.get(UP_VMI, ns, "o").is_none());
    env.completes(ns, "start-2", "Start", "o");
    env.wait_vm(ns, "o", "Running", running);
    let before = env.get(UP_VMI, ns, "o").expect("instance")["metadata"]["uid"].clone();
    let op = env.completes(ns, "restart-1", "Restart", "o");
    assert_eq!(op["status"]["stoppedInstanceUID"], before, "{op}");
    env.wait_vm(ns, "o", "Running", running);
    let after = env.get(UP_VMI, ns, "o").expect("instance")["metadata"]["uid"].clone();
    assert_ne!(before, after, "a restart makes a new instance");
}

/// Operations that cannot be done fail with a condition saying why.
pub fn bad_operations(env: &Env) {
    let ns = env.namespace("nop");
    let ns = ns.as_str();
    let op = env.operation(ns, "ghost-start", "Start", "ghost");
    assert_eq!(op["status"]["phase"], "Failed", "{op}");
    let (status, reason, message) = cond(&op, "Completed").expect("Completed");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "VirtualMachineNotFound"),
        "{op}"
    );
    assert!(message.contains("ghost"), "{op}");

    env.apply(&vm_yaml(ns, "always-on", "AlwaysOn", "256Mi"));
    env.wait_vm(ns, "always-on", "Running", running);
    let op = env.operation(ns, "stop-always-on", "Stop", "always-on");
    assert_eq!(op["status"]["phase"], "Failed", "{op}");
    assert_eq!(
        cond(&op, "Completed").expect("Completed").1,
        "NotAllowedByRunPolicy",
        "{op}"
    );
    env.wait_vm(ns, "always-on", "still Running", running);
}
