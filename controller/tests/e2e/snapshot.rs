//! Snapshots: a VM snapshot of a running VM freezes the guest through the subresources API
//! (the controller's sidecar, kube-apiserver's aggregator, virtualization-api and its sidecar,
//! KubeVirt's virt-api, the virt-handler double), takes one disk snapshot and VolumeSnapshot
//! per disk (the CSI double makes them ready) and thaws the guest once they are ready; a freeze
//! that fails and a snapshot that never gets ready end `Failed` with the guest thawed.

use std::time::{Duration, Instant};

use kube_api_rewriter_testkit::*;
use serde_json::Value;

use crate::env::*;

/// Two bound disks and a running VM `name` using them; returns their claims.
pub fn running_vm_with_disks(env: &Env, ns: &str, name: &str) -> Vec<String> {
    let mut claims = Vec::new();
    for d in ["root", "data"] {
        let disk = format!("{name}-{d}");
        env.apply(&format!(
            "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualDisk\nmetadata: {{name: {disk}, namespace: {ns}}}\nspec:\n  persistentVolumeClaim: {{size: 1Gi, storageClassName: local}}\n"
        ));
        let claim = env.wait(&format!("disk {disk}'s claim"), || {
            let vd = env.get(VD, ns, &disk).ok_or("no disk")?;
            vd["status"]["target"]["persistentVolumeClaimName"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| vd["status"].to_string())
        });
        env.provision(ns, &claim);
        claims.push(claim);
    }
    env.apply(
        &(vm_yaml(ns, name, "AlwaysOn", "256Mi")
            + &format!(
                "  blockDeviceRefs:\n  - {{kind: VirtualDisk, name: {name}-root}}\n  - {{kind: VirtualDisk, name: {name}-data}}\n"
            )),
    );
    env.wait_vm(ns, name, "Running with its disks", running);
    claims
}

/// Creates VM snapshot `name` of `vm` and waits until it is Ready or Failed.
fn snapshot(env: &Env, ns: &str, name: &str, vm: &str) -> Value {
    env.apply(&format!(
        "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualMachineSnapshot\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{virtualMachineName: {vm}, requiredConsistency: true}}\n"
    ));
    env.wait(
        &format!("VirtualMachineSnapshot {ns}/{name} Ready or Failed"),
        || {
            let s = env.get(VMSNAPSHOT, ns, name).ok_or("no snapshot")?;
            match s["status"]["phase"].as_str() {
                Some("Ready" | "Failed") => Ok(s),
                _ => Err(s["status"].to_string()),
            }
        },
    )
}

/// The actions the virt-handler double was asked for VMI `ns/vm`, in order.
pub fn handler_actions(env: &Env, ns: &str, vm: &str) -> Vec<String> {
    env.handler.calls(ns, vm).into_iter().map(|c| c.action).collect()
}

/// Waits until the snapshot no longer holds the guest frozen (annotation and finalizer gone).
fn wait_thawed(env: &Env, ns: &str, name: &str) -> Value {
    env.wait(&format!("{ns}/{name} holds no freeze"), || {
        let s = env.get(VMSNAPSHOT, ns, name).ok_or("no snapshot")?;
        let m = &s["metadata"];
        if m["annotations"]["virtualization.deckhouse.io/frozen-vm"].is_null() && m["finalizers"].is_null() {
            Ok(s)
        } else {
            Err(m.to_string())
        }
    })
}

pub fn snapshots(env: &Env) {
    let ns = env.namespace("snapshot");
    let ns = ns.as_str();
    let claims = running_vm_with_disks(env, ns, "db");

    // A consistent snapshot of the running VM.
    let s = snapshot(env, ns, "s1", "db");
    assert_eq!(s["status"]["phase"], "Ready", "{s}");
    assert_eq!(s["status"]["consistent"], true, "{s}");
    assert!(cond_is(&s, "Ready", "True"), "{s}");
    let names: Vec<&str> = s["status"]["virtualDiskSnapshotNames"]
        .as_array()
        .expect("names")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(names, ["s1-db-root", "s1-db-data"], "{s}");
    let mut ready_times = Vec::new();
    for (vds_name, claim) in names.iter().zip(&claims) {
        let vds = env.get(VDSNAPSHOT, ns, vds_name).expect("disk snapshot");
        assert_eq!(vds["status"]["phase"], "Ready", "{vds}");
        assert_eq!(vds["status"]["consistent"], true, "{vds}");
        assert_eq!(
            vds["metadata"]["ownerReferences"][0]["kind"], "VirtualMachineSnapshot",
            "{vds}"
        );
        let vs_name = vds["status"]["volumeSnapshotName"]
            .as_str()
            .expect("volumeSnapshotName");
        let vs = env.get(VOLUME_SNAPSHOT, ns, vs_name).expect("VolumeSnapshot");
        assert_eq!(
            vs["spec"]["source"]["persistentVolumeClaimName"],
            claim.as_str(),
            "{vs}"
        );
        assert_eq!(vs["status"]["readyToUse"], true, "{vs}");
        assert_eq!(
            vs["metadata"]["ownerReferences"][0]["kind"], "VirtualDiskSnapshot",
            "{vs}"
        );
        ready_times.push(
            env.csi
                .ready_at(ns, vs_name)
                .expect("made ready by the CSI double"),
        );
    }
    // Frozen, then thawed once every VolumeSnapshot was ready.
    let calls = env.handler.calls(ns, "db");
    let actions: Vec<&str> = calls.iter().map(|c| c.action.as_str()).collect();
    assert_eq!(actions, ["freeze", "unfreeze"], "{calls:?}");
    assert!(calls[0].body.contains("unfreezeTimeout"), "{calls:?}");
    let last_ready = ready_times.iter().max().copied().unwrap_or_else(Instant::now);
    assert!(
        calls[1].at >= last_ready,
        "thawed before every VolumeSnapshot was ready"
    );
    // The requests went through virtualization-api: the freeze, then the thaw, both answered.
    let log = env.subresources.logs();
    let line_of = |sub: &str| {
        let path = format!("/namespaces/{ns}/virtualmachines/db/{sub}");
        log.lines()
            .position(|l| l.contains(&path) && l.contains("200"))
            .unwrap_or_else(|| panic!("virtualization-api did not answer {path} with 200:\n{log}"))
    };
    assert!(line_of("freeze") < line_of("unfreeze"), "{log}");
    wait_thawed(env, ns, "s1");
    let metrics = env.metrics();
    assert!(
        metrics.contains(&format!(
            "d8_virtualization_virtualmachinesnapshot_status_phase{{name=\"s1\",namespace=\"{ns}\","
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("d8_virtualization_virtualdisksnapshot_status_phase{name=\"s1-db-root\""),
        "{metrics}"
    );

    // A disk snapshot of its own of a running VM's disk cannot be consistent.
    env.apply(&format!(
        "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualDiskSnapshot\nmetadata: {{name: alone, namespace: {ns}}}\nspec: {{virtualDiskName: db-data}}\n"
    ));
    env.wait("a disk snapshot of a running VM's disk waits", || {
        let vds = env.get(VDSNAPSHOT, ns, "alone").ok_or("none")?;
        match cond(&vds, "Ready") {
            Some((s, r, m)) if s == "False" && r == "PotentiallyInconsistent" && m.contains("db") => Ok(()),
            _ => Err(vds["status"].to_string()),
        }
    });
    assert!(
        env.get(VOLUME_SNAPSHOT, ns, "alone").is_none(),
        "taken inconsistently"
    );

    // A guest that cannot be frozen: Failed, and thawed all the same.
    env.handler.refuse_freeze(ns, "db");
    let s = snapshot(env, ns, "s2", "db");
    assert_eq!(s["status"]["phase"], "Failed", "{s}");
    let (_, reason, message) = cond(&s, "Ready").expect("Ready");
    assert_eq!(reason, "FreezeFailed", "{s}");
    assert!(message.contains("freeze"), "{s}");
    wait_thawed(env, ns, "s2");
    assert_eq!(
        handler_actions(env, ns, "db"),
        ["freeze", "unfreeze", "freeze", "unfreeze"],
        "the refused freeze is followed by a thaw"
    );
    assert!(
        env.get(VDSNAPSHOT, ns, "s2-db-root").is_none(),
        "disks taken after a failed freeze"
    );
}

pub fn snapshot_timeout(env: &Env) {
    let ns = env.namespace("snapshot-timeout");
    let ns = ns.as_str();
    running_vm_with_disks(env, ns, "web");
    // The storage never cuts this snapshot's volumes.
    env.csi.stall(ns, "late-");
    let t = Instant::now();
    let s = snapshot(env, ns, "late", "web");
    assert_eq!(s["status"]["phase"], "Failed", "{s}");
    let (_, reason, message) = cond(&s, "Ready").expect("Ready");
    assert_eq!(reason, "VirtualDiskSnapshotFailed", "{s}");
    assert!(message.contains("not ready to use within"), "{s}");
    let vds = env.get(VDSNAPSHOT, ns, "late-web-root").expect("disk snapshot");
    assert_eq!(vds["status"]["phase"], "Failed", "{vds}");
    // Failed no sooner than the ready timeout after the disk snapshot was created; the
    // controller counts from its creationTimestamp, whole seconds, so up to 1 s early.
    let timeout: u64 = SNAPSHOT_READY_TIMEOUT
        .trim_end_matches('s')
        .parse()
        .expect("seconds");
    assert!(
        t.elapsed() + Duration::from_secs(1) >= Duration::from_secs(timeout),
        "failed {:?} after the snapshot was made, before the ready timeout of {SNAPSHOT_READY_TIMEOUT}",
        t.elapsed()
    );
    wait_thawed(env, ns, "late");
    assert_eq!(handler_actions(env, ns, "web"), ["freeze", "unfreeze"]);
    // Deleting the VM snapshot takes its disk snapshots and VolumeSnapshots with it.
    ok(&env.cp.kubectl(&["delete", VMSNAPSHOT, "late", "-n", ns]));
    env.wait("disk snapshots and VolumeSnapshots garbage-collected", || {
        let left: Vec<&str> = ["late-web-root", "late-web-data"]
            .into_iter()
            .filter(|n| env.get(VDSNAPSHOT, ns, n).is_some() || env.get(VOLUME_SNAPSHOT, ns, n).is_some())
            .collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    });
}
