//! Reconcile of a `VirtualMachineBlockDeviceAttachment`: once the VM runs and the disk is ready,
//! `addvolume` on the subresources API hot-plugs the disk's claim (KubeVirt adds it to the VM and
//! its instance, virt-handler plugs it into the domain); `Attached` only once the instance's
//! volume status reports the volume ready. Deleting the attachment unplugs the disk
//! (`removevolume`); its finalizer goes once the instance no longer has the volume.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::api::{Api, DynamicObject, PatchParams};
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::{Resource as _, ResourceExt as _};
use serde_json::Value;
use tracing::{info, instrument};

use super::report::write_status;
use super::wiring::Wiring;
use super::{Context, add_finalizer_patch, json_patch, remove_finalizer_patch};
use crate::conditions::{self, ATTACHED, BLOCK_DEVICE_READY, Builder, VIRTUAL_MACHINE_READY, reason};
use crate::kubevirt::{disk_volume_name, vm_resource, vmi_resource};
use crate::resources::{
    AttachmentPhase, BlockDeviceKind, DiskPhase, VirtualDisk, VirtualMachine,
    VirtualMachineBlockDeviceAttachment, VirtualMachineBlockDeviceAttachmentStatus, VmPhase,
};
use crate::subresources::{self, AddVolume};
use crate::{Error, Result};

/// Kept on an attachment until its disk is unplugged.
pub const FINALIZER: &str = "virtualization.deckhouse.io/vmbda-cleanup";

/// Where the volume is in KubeVirt's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plugged {
    /// Nowhere: not requested yet, or unplugged.
    No,
    /// Requested (in the VM, or in the instance's spec), not yet in the guest.
    Requested,
    /// In the guest: the instance's volume status says `Ready`.
    Ready,
}

/// Where volume `volume` is, from the KubeVirt VM `kvvm` and its instance `vmi`.
pub fn plugged(volume: &str, kvvm: Option<&Value>, vmi: Option<&Value>) -> Plugged {
    let named = |list: &Value| {
        list.as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == volume)
            .cloned()
    };
    if let Some(vmi) = vmi
        && named(&vmi["status"]["volumeStatus"]).is_some_and(|s| s["phase"] == "Ready")
        && named(&vmi["spec"]["volumes"]).is_some()
    {
        return Plugged::Ready;
    }
    let requested = kvvm.is_some_and(|vm| {
        named(&vm["spec"]["template"]["spec"]["volumes"]).is_some()
            || vm["status"]["volumeRequests"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["addVolumeOptions"]["name"] == volume)
    }) || vmi.is_some_and(|i| {
        named(&i["spec"]["volumes"]).is_some() || named(&i["status"]["volumeStatus"]).is_some()
    });
    if requested {
        Plugged::Requested
    } else {
        Plugged::No
    }
}

/// Why the disk cannot be attached now: `(condition, reason, message, final)`; `None` when it
/// can. `final` ones fail the attachment.
pub fn blocker(
    vmbda: &VirtualMachineBlockDeviceAttachment,
    vm: Option<&VirtualMachine>,
    disk: Option<&VirtualDisk>,
) -> Option<(&'static str, &'static str, String, bool)> {
    let (vm_name, disk_name) = (
        &vmbda.spec.virtual_machine_name,
        &vmbda.spec.block_device_ref.name,
    );
    let Some(vm) = vm else {
        return Some((
            VIRTUAL_MACHINE_READY,
            reason::VIRTUAL_MACHINE_NOT_FOUND,
            format!("VirtualMachine {vm_name} not found"),
            false,
        ));
    };
    if vm
        .spec
        .block_device_refs
        .iter()
        .any(|r| r.kind == BlockDeviceKind::VirtualDisk && &r.name == disk_name)
    {
        return Some((
            BLOCK_DEVICE_READY,
            reason::CONFLICT,
            format!("VirtualDisk {disk_name} is already in the blockDeviceRefs of VirtualMachine {vm_name}"),
            true,
        ));
    }
    let phase = vm.status.as_ref().and_then(|s| s.phase);
    if phase != Some(VmPhase::Running) {
        return Some((
            VIRTUAL_MACHINE_READY,
            reason::VIRTUAL_MACHINE_NOT_RUNNING,
            format!(
                "VirtualMachine {vm_name} is {:?}: disks are hot-plugged into running VMs",
                phase.unwrap_or(VmPhase::Pending)
            ),
            false,
        ));
    }
    match disk.and_then(|d| d.status.as_ref()?.phase) {
        Some(DiskPhase::Ready) => None,
        p => Some((
            BLOCK_DEVICE_READY,
            if disk.is_none() {
                reason::BLOCK_DEVICE_NOT_FOUND
            } else {
                reason::BLOCK_DEVICE_NOT_READY
            },
            match p {
                None if disk.is_none() => format!("VirtualDisk {disk_name} not found"),
                p => format!(
                    "VirtualDisk {disk_name} is {:?}, not Ready",
                    p.unwrap_or(DiskPhase::Pending)
                ),
            },
            false,
        )),
    }
}

/// The attachment among `others` that holds the same disk and came first (older, or as old
/// and of a smaller name), unless it failed.
pub fn conflict(
    vmbda: &VirtualMachineBlockDeviceAttachment,
    others: &[VirtualMachineBlockDeviceAttachment],
) -> Option<String> {
    let key = |a: &VirtualMachineBlockDeviceAttachment| {
        (a.meta().creation_timestamp.clone().map(|t| t.0), a.name_any())
    };
    others
        .iter()
        .filter(|o| {
            o.name_any() != vmbda.name_any()
                && o.spec.block_device_ref == vmbda.spec.block_device_ref
                && o.status.as_ref().and_then(|s| s.phase) != Some(AttachmentPhase::Failed)
                && key(o) < key(vmbda)
        })
        .map(|o| o.name_any())
        .next()
}

/// The VirtualMachineBlockDeviceAttachment controller: attachments only; [`reconcile`] looks at
/// the VM's instance on a timer while one moves. Sets [`Context::attachments`].
pub(crate) fn controller(w: &mut Wiring) -> BoxFuture<'static, ()> {
    let (api, all) = w.watch::<VirtualMachineBlockDeviceAttachment>(None);
    let attachments = Controller::new(api, all);
    let _ = w.ctx().attachments.set(attachments.store());
    w.start(attachments, reconcile)
}

/// Reconciles one attachment.
#[instrument(skip_all, fields(resource = "virtualmachineblockdeviceattachments.virtualization.deckhouse.io", namespace = vmbda.namespace().unwrap_or_default(), name = %vmbda.name_any()))]
pub async fn reconcile(vmbda: Arc<VirtualMachineBlockDeviceAttachment>, ctx: Arc<Context>) -> Result<Action> {
    let ns = vmbda.namespace().ok_or(Error::Missing("metadata.namespace"))?;
    let name = vmbda.name_any();
    let api: Api<VirtualMachineBlockDeviceAttachment> = Api::namespaced(ctx.client.clone(), &ns);
    let vm_name = vmbda.spec.virtual_machine_name.clone();
    let disk_name = vmbda.spec.block_device_ref.name.clone();
    let volume = disk_volume_name(&disk_name);
    let kvvm = Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &ns, &vm_resource())
        .get_opt(&vm_name)
        .await?;
    let vmi = Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &ns, &vmi_resource())
        .get_opt(&vm_name)
        .await?;
    let where_ = plugged(
        &volume,
        kvvm.as_ref().map(|o| &o.data),
        vmi.as_ref().map(|o| &o.data),
    );
    let old = vmbda.status.clone().unwrap_or_default();
    let now = conditions::now();
    let generation = vmbda.meta().generation;
    let cond = Builder::new(&old.conditions, generation, &now);
    // The VM runs and the disk is ready: what every attachment past `Pending` reports.
    let ready = || {
        [
            cond.make(
                VIRTUAL_MACHINE_READY,
                true,
                reason::READY,
                format!("VirtualMachine {vm_name} is running"),
            ),
            cond.make(
                BLOCK_DEVICE_READY,
                true,
                reason::READY,
                format!("VirtualDisk {disk_name} is ready"),
            ),
        ]
    };
    let mut new = VirtualMachineBlockDeviceAttachmentStatus {
        virtual_machine_name: Some(vm_name.clone()),
        observed_generation: generation,
        ..old.clone()
    };

    if vmbda.meta().deletion_timestamp.is_some() {
        // Unplugged once no KubeVirt object has the volume (or the VM is gone).
        let attached_here = old.phase != Some(AttachmentPhase::Failed);
        if attached_here && where_ != Plugged::No {
            new.phase = Some(AttachmentPhase::Terminating);
            new.conditions = vec![cond.make(
                ATTACHED,
                false,
                reason::DETACHING,
                format!("unplugging {volume} from VirtualMachine {vm_name}"),
            )];
            write_status(&api, &name, &old, &new, |s| &mut s.conditions).await?;
            let in_vm = kvvm.as_ref().is_some_and(|k| {
                k.data["spec"]["template"]["spec"]["volumes"]
                    .as_array()
                    .is_some_and(|v| v.iter().any(|v| v["name"] == volume.as_str()))
            });
            if in_vm {
                subresources::remove_volume(&ctx.client, &ns, &vm_name, &volume).await?;
                info!(%volume, vm = %vm_name, "volume removal requested");
            }
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        if let Some(patch) = remove_finalizer_patch(vmbda.finalizers(), FINALIZER) {
            api.patch(&name, &PatchParams::default(), &json_patch(patch)?)
                .await?;
            info!("unplugged, finalizer removed");
        }
        return Ok(Action::await_change());
    }
    if !vmbda.finalizers().iter().any(|f| f == FINALIZER) {
        let patch = json_patch(add_finalizer_patch(vmbda.finalizers(), FINALIZER))?;
        api.patch(&name, &PatchParams::default(), &patch).await?;
    }
    if old.phase == Some(AttachmentPhase::Failed) {
        // The spec cannot change: failed for good.
        return Ok(Action::await_change());
    }
    let vm = Api::<VirtualMachine>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&vm_name)
        .await?;
    let disk = Api::<VirtualDisk>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&disk_name)
        .await?;
    // The first attachment of a disk holds it; one after it fails before it does anything.
    if old.phase.is_none() || old.phase == Some(AttachmentPhase::Pending) {
        let others = api.list(&Default::default()).await?.items;
        if let Some(first) = conflict(&vmbda, &others) {
            let msg = format!(
                "VirtualDisk {disk_name} is attached by VirtualMachineBlockDeviceAttachment {first} already"
            );
            new.phase = Some(AttachmentPhase::Failed);
            new.conditions = vec![
                cond.make(BLOCK_DEVICE_READY, false, reason::CONFLICT, msg.clone()),
                cond.make(ATTACHED, false, reason::CONFLICT, msg),
            ];
            write_status(&api, &name, &old, &new, |s| &mut s.conditions).await?;
            return Ok(Action::await_change());
        }
    }
    if where_ == Plugged::Ready {
        new.phase = Some(AttachmentPhase::Attached);
        let [vm_ready, disk_ready] = ready();
        new.conditions = vec![
            vm_ready,
            disk_ready,
            cond.make(
                ATTACHED,
                true,
                reason::ATTACHED,
                format!("VirtualDisk {disk_name} is attached to VirtualMachine {vm_name}"),
            ),
        ];
        write_status(&api, &name, &old, &new, |s| &mut s.conditions).await?;
        // Followed until unplugged: an instance that restarts loses the volume.
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    if where_ == Plugged::No {
        if let Some((type_, reason, msg, fatal)) = blocker(&vmbda, vm.as_ref(), disk.as_ref()) {
            new.phase = Some(if fatal {
                AttachmentPhase::Failed
            } else {
                AttachmentPhase::Pending
            });
            new.conditions = vec![
                cond.make(type_, false, reason, msg.clone()),
                cond.make(ATTACHED, false, reason, msg),
            ];
            write_status(&api, &name, &old, &new, |s| &mut s.conditions).await?;
            return Ok(if fatal {
                Action::await_change()
            } else {
                Action::requeue(Duration::from_secs(2))
            });
        }
        let claim = disk
            .as_ref()
            .and_then(|d| {
                d.status
                    .as_ref()?
                    .target
                    .as_ref()?
                    .persistent_volume_claim_name
                    .clone()
            })
            .ok_or(Error::Missing("the disk's claim"))?;
        let serial = disk.as_ref().and_then(|d| d.uid()).unwrap_or_default();
        subresources::add_volume(
            &ctx.client,
            &ns,
            &vm_name,
            &AddVolume {
                name: &volume,
                volume_kind: "VirtualDisk",
                pvc_name: &claim,
                serial: &serial,
            },
        )
        .await?;
        info!(%volume, %claim, vm = %vm_name, "volume requested");
    }
    new.phase = Some(AttachmentPhase::InProgress);
    let [vm_ready, disk_ready] = ready();
    new.conditions = vec![
        vm_ready,
        disk_ready,
        cond.make(
            ATTACHED,
            false,
            reason::ATTACHMENT_REQUESTED,
            format!("waiting for VirtualMachine {vm_name} to report {volume} ready"),
        ),
    ];
    write_status(&api, &name, &old, &new, |s| &mut s.conditions).await?;
    Ok(Action::requeue(Duration::from_secs(1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn attached_only_once_the_instance_reports_the_volume_ready() {
        let vol = "vd-data";
        assert_eq!(plugged(vol, None, None), Plugged::No);
        let kvvm = json!({"spec": {"template": {"spec": {"volumes": []}}},
            "status": {"volumeRequests": [{"addVolumeOptions": {"name": vol}}]}});
        assert_eq!(plugged(vol, Some(&kvvm), None), Plugged::Requested);
        let mut vmi = json!({"spec": {"volumes": [{"name": vol}]},
            "status": {"volumeStatus": [{"name": vol, "phase": "AttachedToNode"}]}});
        assert_eq!(plugged(vol, None, Some(&vmi)), Plugged::Requested);
        vmi["status"]["volumeStatus"][0]["phase"] = json!("Ready");
        assert_eq!(plugged(vol, None, Some(&vmi)), Plugged::Ready);
        // Unplugging: gone from the spec, the status not yet.
        vmi["spec"]["volumes"] = json!([]);
        assert_eq!(plugged(vol, None, Some(&vmi)), Plugged::Requested);
        assert_eq!(plugged("vd-other", Some(&kvvm), Some(&vmi)), Plugged::No);
    }

    #[test]
    fn the_first_attachment_of_a_disk_holds_it() {
        let a = |name: &str,
                 disk: &str,
                 t: &str,
                 phase: Option<&str>|
         -> VirtualMachineBlockDeviceAttachment {
            serde_json::from_value(json!({
                "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualMachineBlockDeviceAttachment",
                "metadata": {"name": name, "namespace": "ns", "creationTimestamp": t},
                "spec": {"virtualMachineName": "vm", "blockDeviceRef": {"kind": "VirtualDisk", "name": disk}},
                "status": phase.map(|p| json!({"phase": p})),
            }))
            .expect("vmbda")
        };
        let first = a("hot", "d", "2026-01-01T00:00:00Z", Some("Attached"));
        let second = a("twice", "d", "2026-01-01T00:00:05Z", None);
        let all = [
            first.clone(),
            second.clone(),
            a("other", "e", "2025-01-01T00:00:00Z", None),
        ];
        assert_eq!(conflict(&second, &all).as_deref(), Some("hot"));
        assert_eq!(conflict(&first, &all), None);
        let failed = a("hot", "d", "2026-01-01T00:00:00Z", Some("Failed"));
        assert_eq!(conflict(&second, &[failed, second.clone()]), None);
    }

    #[test]
    fn blockers() {
        let vmbda: VirtualMachineBlockDeviceAttachment = serde_json::from_value(json!({
            "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualMachineBlockDeviceAttachment",
            "metadata": {"name": "a", "namespace": "ns"},
            "spec": {"virtualMachineName": "vm", "blockDeviceRef": {"kind": "VirtualDisk", "name": "data"}},
        }))
        .expect("vmbda");
        let vm = |phase: &str, refs: Value| -> VirtualMachine {
            serde_json::from_value(json!({
                "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualMachine",
                "metadata": {"name": "vm", "namespace": "ns"},
                "spec": {"cpu": {"cores": 1}, "memory": {"size": "1Gi"}, "blockDeviceRefs": refs},
                "status": {"phase": phase},
            }))
            .expect("vm")
        };
        let disk = |phase: &str| -> VirtualDisk {
            serde_json::from_value(json!({
                "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualDisk",
                "metadata": {"name": "data", "namespace": "ns"},
                "spec": {"persistentVolumeClaim": {"size": "1Gi"}},
                "status": {"phase": phase},
            }))
            .expect("disk")
        };
        let reason = |b: Option<(&str, &'static str, String, bool)>| b.map(|b| (b.1, b.3));
        assert_eq!(
            reason(blocker(&vmbda, None, None)),
            Some(("VirtualMachineNotFound", false))
        );
        let running = vm("Running", json!([]));
        assert_eq!(
            reason(blocker(&vmbda, Some(&running), None)),
            Some(("BlockDeviceNotFound", false))
        );
        assert_eq!(
            reason(blocker(&vmbda, Some(&running), Some(&disk("Provisioning")))),
            Some(("BlockDeviceNotReady", false))
        );
        assert_eq!(
            reason(blocker(&vmbda, Some(&running), Some(&disk("Ready")))),
            None
        );
        let stopped = vm("Stopped", json!([]));
        assert_eq!(
            reason(blocker(&vmbda, Some(&stopped), Some(&disk("Ready")))),
            Some(("VirtualMachineNotRunning", false))
        );
        let static_ = vm("Running", json!([{"kind": "VirtualDisk", "name": "data"}]));
        assert_eq!(
            reason(blocker(&vmbda, Some(&static_), Some(&disk("Ready")))),
            Some(("Conflict", true))
        );
    }
}
