//! Reconcile of a `VirtualMachineSnapshot`: one `VirtualDiskSnapshot` per disk of the VM, taken
//! together. For a consistent snapshot of a running VM the guest's filesystems are frozen first
//! (`freeze` on the subresources API, which virt-api hands to virt-handler) and thawed once
//! every disk snapshot is ready to use, or once the snapshot failed. While the guest may be
//! frozen the snapshot carries [`FROZEN_ANNOTATION`] and [`FINALIZER`]: the thaw is retried until
//! it succeeds or the VM is gone, also when the snapshot is deleted meanwhile. While the
//! cluster does not serve VolumeSnapshots ([`crate::apis`]) nothing is frozen or taken: the
//! snapshot waits, `Pending` with the reason `SnapshotAPINotServed`.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::{Resource as _, ResourceExt as _};
use serde_json::json;
use tracing::{info, instrument, warn};

use super::Context;
use super::report::write_status;
use super::vdsnapshot::CONSISTENT_ANNOTATION;
use super::wiring::Wiring;
use crate::apis::VOLUME_SNAPSHOTS;
use crate::conditions::{self, BLOCK_DEVICES_READY, Builder, READY, VIRTUAL_MACHINE_READY, reason};
use crate::resources::{
    BlockDeviceKind, DiskPhase, SnapshotPhase, VirtualDisk, VirtualDiskSnapshot, VirtualDiskSnapshotSpec,
    VirtualMachine, VirtualMachineSnapshot, VirtualMachineSnapshotStatus, VmPhase, controller_reference,
};
use crate::{Error, Result, subresources};

/// Set while the guest may be frozen by this snapshot: the VM's name.
pub const FROZEN_ANNOTATION: &str = "virtualization.deckhouse.io/frozen-vm";
/// Kept while the guest may be frozen, so that a deleted snapshot still thaws it.
pub const FINALIZER: &str = "virtualization.deckhouse.io/vmsnapshot-unfreeze";

/// What the VM's state means for a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guest {
    /// Running: frozen for a consistent snapshot.
    Running,
    /// Stopped: consistent as it is.
    Stopped,
    /// Starting, stopping, pending: wait.
    Transitioning,
}

/// The guest's state from the VM's phase.
pub fn guest(vm: &VirtualMachine) -> Guest {
    match vm.status.as_ref().and_then(|s| s.phase) {
        Some(VmPhase::Running | VmPhase::Migrating | VmPhase::Degraded | VmPhase::Pause) => Guest::Running,
        Some(VmPhase::Stopped) => Guest::Stopped,
        _ => Guest::Transitioning,
    }
}

/// The VM's disks, in its order.
pub fn disk_names(vm: &VirtualMachine) -> Vec<String> {
    vm.spec
        .block_device_refs
        .iter()
        .filter(|r| r.kind == BlockDeviceKind::VirtualDisk)
        .map(|r| r.name.clone())
        .collect()
}

/// The name of the snapshot of `disk` taken for VM snapshot `snapshot`.
pub fn disk_snapshot_name(snapshot: &str, disk: &str) -> String {
    format!("{snapshot}-{disk}")
}

/// The disks of the list that are not ready, as a message; `None` when all are.
pub fn unready_disks(disks: &[(String, Option<VirtualDisk>)]) -> Option<String> {
    let unready: Vec<String> = disks
        .iter()
        .filter_map(
            |(name, d)| match d.as_ref().and_then(|d| d.status.as_ref()?.phase) {
                Some(DiskPhase::Ready) => None,
                Some(p) => Some(format!("{name} is {p:?}")),
                None if d.is_none() => Some(format!("{name} not found")),
                None => Some(format!("{name} is Pending")),
            },
        )
        .collect();
    (!unready.is_empty()).then(|| format!("waiting for the VM's disks: {}", unready.join(", ")))
}

/// Where the disk snapshots are together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disks {
    /// Every one is ready to use.
    Ready,
    /// One failed: why.
    Failed(String),
    /// Some are being taken.
    InProgress,
}

/// The disk snapshots' verdict; `want` of them are expected.
pub fn disks_verdict(children: &[VirtualDiskSnapshot], want: usize) -> Disks {
    for c in children {
        let st = c.status.clone().unwrap_or_default();
        if st.phase == Some(SnapshotPhase::Failed) {
            let why = conditions::find(&st.conditions, READY)
                .map(|c| c.message.clone())
                .unwrap_or_default();
            return Disks::Failed(format!("VirtualDiskSnapshot {} failed: {why}", c.name_any()));
        }
    }
    let ready = children
        .iter()
        .filter(|c| c.status.as_ref().and_then(|s| s.phase) == Some(SnapshotPhase::Ready))
        .count();
    if ready >= want {
        Disks::Ready
    } else {
        Disks::InProgress
    }
}

/// The disk snapshot of `disk` for `vms` (uid `uid`).
fn disk_snapshot(
    vms: &VirtualMachineSnapshot,
    uid: &str,
    disk: &str,
    consistent: bool,
) -> Result<VirtualDiskSnapshot> {
    let name = disk_snapshot_name(&vms.name_any(), disk);
    let mut s = VirtualDiskSnapshot::new(
        &name,
        VirtualDiskSnapshotSpec {
            virtual_disk_name: disk.to_owned(),
            required_consistency: vms.spec.required_consistency,
            volume_snapshot_class_name: None,
        },
    );
    s.metadata.namespace = vms.namespace();
    s.metadata.annotations = Some([(CONSISTENT_ANNOTATION.to_owned(), consistent.to_string())].into());
    s.metadata.owner_references = Some(vec![serde_json::from_value(controller_reference(
        "VirtualMachineSnapshot",
        &vms.name_any(),
        uid,
    ))?]);
    Ok(s)
}

/// Whether an error of `unfreeze` means there is nothing left to thaw: the VM is gone (404)
/// or its guest is not running (409).
fn nothing_to_thaw(e: &Error) -> bool {
    matches!(e, Error::Kube(kube::Error::Api(s)) if s.code == 404 || s.code == 409)
}

/// The VirtualMachineSnapshot controller: VM snapshots and the disk snapshots they own. Sets
/// [`Context::vm_snapshots`].
pub(crate) fn controller(w: &mut Wiring) -> BoxFuture<'static, ()> {
    let (api, all) = w.watch::<VirtualMachineSnapshot>(None);
    let (children, all_children) = w.watch::<VirtualDiskSnapshot>(None);
    let vm_snapshots = Controller::new(api, all).owns(children, all_children);
    let _ = w.ctx().vm_snapshots.set(vm_snapshots.store());
    w.start(vm_snapshots, reconcile)
}

/// Reconciles one VM snapshot.
#[instrument(skip_all, fields(resource = "virtualmachinesnapshots.virtualization.deckhouse.io", namespace = vms.namespace().unwrap_or_default(), name = %vms.name_any()))]
pub async fn reconcile(vms: Arc<VirtualMachineSnapshot>, ctx: Arc<Context>) -> Result<Action> {
    let ns = vms.namespace().ok_or(Error::Missing("metadata.namespace"))?;
    let name = vms.name_any();
    let uid = vms.uid().ok_or(Error::Missing("metadata.uid"))?;
    let api: Api<VirtualMachineSnapshot> = Api::namespaced(ctx.client.clone(), &ns);
    // Read afresh: a reconcile a disk snapshot's event starts may bring a cached copy from
    // before the freeze was recorded, and would then neither count the snapshot consistent
    // nor thaw the guest.
    let Some(vms) = api.get_opt(&name).await? else {
        return Ok(Action::await_change());
    };
    let old = vms.status.clone().unwrap_or_default();
    let mut frozen = vms.annotations().get(FROZEN_ANNOTATION).cloned();
    let done = old.phase.is_some_and(SnapshotPhase::is_final) || vms.meta().deletion_timestamp.is_some();
    if done {
        if let Some(vm) = frozen {
            thaw(&ctx, &api, &vms, &ns, &vm).await?;
        }
        return Ok(Action::await_change());
    }
    let now = conditions::now();
    let generation = vms.meta().generation;
    let oc = old.conditions.clone();
    let cond = Builder::new(&oc, generation, &now);
    let vm_name = &vms.spec.virtual_machine_name;
    let vm = Api::<VirtualMachine>::namespaced(ctx.client.clone(), &ns)
        .get_opt(vm_name)
        .await?;
    let mut new = VirtualMachineSnapshotStatus {
        observed_generation: generation,
        ..old.clone()
    };
    let Some(vm) = vm else {
        if let Some(frozen_vm) = &frozen {
            // Gone: nothing to thaw.
            forget_freeze(&api, &vms, frozen_vm).await?;
        }
        let msg = format!("VirtualMachine {vm_name} not found");
        new.phase = Some(SnapshotPhase::Pending);
        new.conditions = vec![
            cond.make(
                VIRTUAL_MACHINE_READY,
                false,
                reason::VIRTUAL_MACHINE_NOT_FOUND,
                msg.clone(),
            ),
            cond.make(READY, false, reason::VIRTUAL_MACHINE_NOT_FOUND, msg),
        ];
        write_status(&api, &name, &old, &new, |s| &mut s.conditions).await?;
        return Ok(Action::requeue(Duration::from_secs(2)));
    };
    let disks_api = Api::<VirtualDisk>::namespaced(ctx.client.clone(), &ns);
    let mut disks = Vec::new();
    for d in disk_names(&vm) {
        let got = disks_api.get_opt(&d).await?;
        disks.push((d, got));
    }
    let children_api = Api::<VirtualDiskSnapshot>::namespaced(ctx.client.clone(), &ns);
    let mut children = Vec::new();
    for (d, _) in &disks {
        if let Some(c) = children_api.get_opt(&disk_snapshot_name(&name, d)).await? {
            children.push(c);
        }
    }
    let state = guest(&vm);
    let started = !children.is_empty() || frozen.is_some();
    let vm_cond = cond.make(
        VIRTUAL_MACHINE_READY,
        true,
        reason::READY,
        format!("VirtualMachine {vm_name} is {state:?}"),
    );
    if !started {
        let wait = match (state, unready_disks(&disks)) {
            (Guest::Transitioning, _) => Some((
                reason::VIRTUAL_MACHINE_TRANSITIONING,
                format!("VirtualMachine {vm_name} is neither running nor stopped"),
            )),
            (_, Some(msg)) => Some((reason::BLOCK_DEVICES_NOT_READY, msg)),
            _ => None,
        };
        if let Some((reason, msg)) = wait {
            new.phase = Some(SnapshotPhase::Pending);
            new.conditions = vec![
                vm_cond,
                cond.make(
                    BLOCK_DEVICES_READY,
                    reason != reason::BLOCK_DEVICES_NOT_READY,
                    reason,
                    msg.clone(),
                ),
                cond.make(READY, false, reason, msg),
            ];
            write_status(&api, &name, &old, &new, |s| &mut s.conditions).await?;
            return Ok(Action::requeue(Duration::from_secs(2)));
        }
    }
    let disks_cond = cond.make(
        BLOCK_DEVICES_READY,
        true,
        reason::READY,
        "the VM's disks are ready",
    );
    if !started && !ctx.served.is_served(VOLUME_SNAPSHOTS) {
        // Nothing frozen, nothing taken: the disk snapshots could not be.
        new.phase = Some(SnapshotPhase::Pending);
        new.conditions = vec![
            vm_cond,
            disks_cond,
            cond.make(
                READY,
                false,
                reason::SNAPSHOT_API_NOT_SERVED,
                super::vdsnapshot::not_served_message(),
            ),
        ];
        write_status(&api, &name, &old, &new, |s| &mut s.conditions).await?;
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    let freeze = state == Guest::Running && vms.spec.required_consistency;
    if freeze && !started {
        // Recorded before the freeze: a freeze that half-happened is thawed too.
        remember_freeze(&api, &vms, vm_name).await?;
        let timeout = ctx.snapshot_ready_timeout + Duration::from_secs(60);
        if let Err(e) = subresources::freeze(&ctx.client, &ns, vm_name, timeout).await {
            warn!(error = %e, vm = %vm_name, "freeze failed");
            new.phase = Some(SnapshotPhase::Failed);
            new.consistent = Some(false);
            new.conditions = vec![
                vm_cond,
                disks_cond,
                cond.make(
                    READY,
                    false,
                    reason::FREEZE_FAILED,
                    format!("freezing the guest of VirtualMachine {vm_name} failed: {e}"),
                ),
            ];
            write_status(&api, &name, &old, &new, |s| &mut s.conditions).await?;
            thaw(&ctx, &api, &vms, &ns, vm_name).await?;
            return Ok(Action::await_change());
        }
        info!(vm = %vm_name, "guest frozen");
        frozen = Some(vm_name.clone());
    }
    let consistent = frozen.is_some() || state == Guest::Stopped;
    for (d, _) in &disks {
        let child = disk_snapshot_name(&name, d);
        if !children.iter().any(|c| c.name_any() == child) {
            let obj = disk_snapshot(&vms, &uid, d, consistent)?;
            children.push(children_api.create(&PostParams::default(), &obj).await?);
            info!(disk = %d, snapshot = %child, "VirtualDiskSnapshot created");
        }
    }
    new.virtual_disk_snapshot_names = disks.iter().map(|(d, _)| disk_snapshot_name(&name, d)).collect();
    new.consistent = Some(consistent);
    let verdict = disks_verdict(&children, disks.len());
    let (phase, ready) = match &verdict {
        Disks::Ready => (
            SnapshotPhase::Ready,
            cond.make(READY, true, reason::READY, "every disk snapshot is ready to use"),
        ),
        Disks::Failed(why) => (
            SnapshotPhase::Failed,
            cond.make(READY, false, reason::VIRTUAL_DISK_SNAPSHOT_FAILED, why.clone()),
        ),
        Disks::InProgress => (
            SnapshotPhase::InProgress,
            cond.make(
                READY,
                false,
                reason::SNAPSHOTTING,
                "waiting for the disk snapshots to be ready to use",
            ),
        ),
    };
    if phase == SnapshotPhase::Ready {
        // Thawed before the snapshot says Ready.
        if let Some(vm) = &frozen {
            thaw(&ctx, &api, &vms, &ns, vm).await?;
        }
    }
    new.phase = Some(phase);
    new.conditions = vec![vm_cond, disks_cond, ready];
    write_status(&api, &name, &old, &new, |s| &mut s.conditions).await?;
    if phase == SnapshotPhase::Failed
        && let Some(vm) = &frozen
    {
        thaw(&ctx, &api, &vms, &ns, vm).await?;
    }
    Ok(Action::await_change())
}

/// Thaws the guest of `vm` and forgets the freeze; an error (but "nothing to thaw") is
/// returned, so the error policy retries.
async fn thaw(
    ctx: &Context,
    api: &Api<VirtualMachineSnapshot>,
    vms: &VirtualMachineSnapshot,
    ns: &str,
    vm: &str,
) -> Result<()> {
    match subresources::unfreeze(&ctx.client, ns, vm).await {
        Ok(()) => info!(%vm, "guest thawed"),
        Err(e) if nothing_to_thaw(&e) => info!(%vm, error = %e, "nothing to thaw"),
        Err(e) => return Err(e),
    }
    forget_freeze(api, vms, vm).await
}

/// Records that the guest of `vm` may be frozen: the annotation and the finalizer.
async fn remember_freeze(
    api: &Api<VirtualMachineSnapshot>,
    vms: &VirtualMachineSnapshot,
    vm: &str,
) -> Result<()> {
    let mut finalizers = vms.finalizers().to_vec();
    if !finalizers.iter().any(|f| f == FINALIZER) {
        finalizers.push(FINALIZER.to_owned());
    }
    let patch = json!({"metadata": {
        "resourceVersion": vms.resource_version(),
        "annotations": {FROZEN_ANNOTATION: vm},
        "finalizers": finalizers,
    }});
    api.patch(&vms.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

/// Removes the annotation and the finalizer of [`remember_freeze`].
async fn forget_freeze(
    api: &Api<VirtualMachineSnapshot>,
    vms: &VirtualMachineSnapshot,
    vm: &str,
) -> Result<()> {
    let finalizers: Vec<&String> = vms.finalizers().iter().filter(|f| *f != FINALIZER).collect();
    let patch = json!({"metadata": {
        "annotations": {FROZEN_ANNOTATION: null},
        "finalizers": finalizers,
    }});
    match api
        .patch(&vms.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => {}
        // Deleted once its finalizer went.
        Err(e) if super::is_not_found(&e) => {}
        Err(e) => return Err(e.into()),
    }
    info!(%vm, "freeze forgotten");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions::condition;
    use crate::resources::VirtualDiskSnapshotStatus;

    fn child(name: &str, phase: SnapshotPhase, why: &str) -> VirtualDiskSnapshot {
        let mut c = VirtualDiskSnapshot::new(
            name,
            VirtualDiskSnapshotSpec {
                virtual_disk_name: "d".into(),
                required_consistency: true,
                volume_snapshot_class_name: None,
            },
        );
        c.status = Some(VirtualDiskSnapshotStatus {
            phase: Some(phase),
            conditions: vec![condition(&[], "Ready", false, "X", why, None, "t")],
            ..Default::default()
        });
        c
    }

    #[test]
    fn the_disk_snapshots_decide_together() {
        use SnapshotPhase::*;
        assert_eq!(disks_verdict(&[], 0), Disks::Ready);
        assert_eq!(disks_verdict(&[child("a", Ready, "ok")], 2), Disks::InProgress);
        assert_eq!(
            disks_verdict(&[child("a", Ready, "ok"), child("b", Ready, "ok")], 2),
            Disks::Ready
        );
        assert_eq!(
            disks_verdict(
                &[
                    child("a", InProgress, "w"),
                    child("b", Failed, "not ready in time")
                ],
                2
            ),
            Disks::Failed("VirtualDiskSnapshot b failed: not ready in time".into())
        );
    }

    #[test]
    fn the_guest_and_the_disks_of_a_vm() {
        let mut vm: VirtualMachine = serde_json::from_value(json!({
            "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualMachine",
            "metadata": {"name": "vm", "namespace": "ns"},
            "spec": {"cpu": {"cores": 1}, "memory": {"size": "1Gi"},
                     "blockDeviceRefs": [{"kind": "VirtualDisk", "name": "root"},
                                         {"kind": "VirtualImage", "name": "iso"},
                                         {"kind": "VirtualDisk", "name": "data"}]},
        }))
        .expect("vm");
        assert_eq!(disk_names(&vm), ["root", "data"]);
        assert_eq!(guest(&vm), Guest::Transitioning);
        for (phase, want) in [
            (VmPhase::Running, Guest::Running),
            (VmPhase::Migrating, Guest::Running),
            (VmPhase::Stopped, Guest::Stopped),
            (VmPhase::Starting, Guest::Transitioning),
        ] {
            vm.status = Some(serde_json::from_value(json!({"phase": phase})).expect("status"));
            assert_eq!(guest(&vm), want, "{phase:?}");
        }
        assert_eq!(disk_snapshot_name("s", "root"), "s-root");
        assert_eq!(
            unready_disks(&[("root".into(), None)]).as_deref(),
            Some("waiting for the VM's disks: root not found")
        );
        assert_eq!(unready_disks(&[]), None);
    }
}
