//! VirtualMachineOperations: Start, Stop and Restart complete, Migrate hands a migration to
//! real virt-controller, and the ones that cannot be done fail with a condition saying why.

use kube_api_rewriter_testkit::{ok, parse_json};

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

/// A Migrate operation creates a VirtualMachineInstanceMigration (stored renamed, owned by the
/// operation) that real virt-controller acts on: a target virt-launcher Pod, which the scheduler
/// places on the other kwok Node. The migration itself needs virt-handler on both Nodes, so the
/// operation stays InProgress; deleting it deletes the migration through the garbage collector.
pub fn migrate(env: &Env) {
    let ns = env.namespace("mig");
    let ns = ns.as_str();
    env.apply(&vm_yaml(ns, "m", "AlwaysOn", "256Mi"));
    env.wait_vm(ns, "m", "Running", running);
    let source = env.get(UP_VMI, ns, "m").expect("instance")["status"]["nodeName"]
        .as_str()
        .expect("a node")
        .to_owned();
    env.apply(&format!(
        "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualMachineOperation\nmetadata: {{name: move, namespace: {ns}}}\nspec: {{type: Migrate, virtualMachineName: m}}\n"
    ));
    let vmim = env.wait("the migration", || {
        env.get(UP_VMIM, ns, "vmop-move")
            .ok_or_else(|| "no migration".to_owned())
    });
    assert_eq!(vmim["spec"]["vmiName"], "m", "{vmim}");
    assert_eq!(
        vmim["metadata"]["ownerReferences"][0]["kind"], "VirtualMachineOperation",
        "{vmim}"
    );
    let target = env.wait("a target Pod on the other Node", || {
        let pods = parse_json(&ok(&env.cp.kubectl(&[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            UP_MIGRATION_LABEL,
            "-o",
            "json",
        ])));
        pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|p| p["spec"]["nodeName"].as_str().map(str::to_owned))
            .ok_or_else(|| pods.to_string())
    });
    assert_ne!(target, source, "the target Pod is on the source Node");
    let op = env.get(VMOP, ns, "move").expect("operation");
    assert_eq!(op["status"]["phase"], "InProgress", "{op}");
    ok(&env.cp.kubectl(&["delete", VMOP, "move", "-n", ns]));
    // The garbage collector deletes it with its operation; KubeVirt's finalizer then waits for
    // virt-handler to abort the handed-off migration, which no double does.
    env.wait("the migration deleted with its operation", || {
        let m = env.get(UP_VMIM, ns, "vmop-move");
        match m {
            Some(m) if m["metadata"]["deletionTimestamp"].is_null() => Err(m["metadata"].to_string()),
            _ => Ok(()),
        }
    });
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
