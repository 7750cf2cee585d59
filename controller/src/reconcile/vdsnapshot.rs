//! Reconcile of a `VirtualDiskSnapshot`: once its disk is ready, a `VolumeSnapshot` of the
//! disk's claim (same name, owned by the snapshot, so the garbage collector deletes it with the
//! snapshot); `Ready` when the storage reports it ready to use, `Failed` when it reports an error
//! or is not ready within the ready timeout of its creation. While the cluster does not serve
//! VolumeSnapshots (an optional API, [`crate::apis`]) the snapshot waits, `Pending` with the
//! reason `SnapshotAPINotServed`, and is taken once it does.
//!
//! Consistency: a disk in use by a running VM cannot be taken consistently on its own. A
//! snapshot of a `VirtualMachineSnapshot` leaves that to it (it froze the guest, and says so
//! in [`CONSISTENT_ANNOTATION`]); a snapshot of its own with `requiredConsistency` waits
//! while such a VM runs.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::{Resource as _, ResourceExt as _};
use serde_json::{Value, json};
use tracing::{info, instrument};

use super::Context;
use super::report::write_status;
use super::wiring::Wiring;
use crate::apis::VOLUME_SNAPSHOTS;
use crate::conditions::{self, Builder, READY, VIRTUAL_DISK_READY, reason};
use crate::resources::{
    BlockDeviceKind, Condition, DiskPhase, SnapshotPhase, VirtualDisk, VirtualDiskSnapshot,
    VirtualDiskSnapshotStatus, VirtualMachine, VmPhase, controller_reference,
};
use crate::{Error, Result};

/// Set by a `VirtualMachineSnapshot` on the disk snapshots it creates: whether the guest was
/// frozen (or the VM stopped), so the disk is taken consistently.
pub const CONSISTENT_ANNOTATION: &str = "virtualization.deckhouse.io/consistent";

/// `snapshot.storage.k8s.io/v1` `VolumeSnapshot`.
pub fn volume_snapshot_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("snapshot.storage.k8s.io", "v1", "VolumeSnapshot"),
        "volumesnapshots",
    )
}

/// The VolumeSnapshot of `vds` (uid `uid`) of the claim `claim`.
pub fn volume_snapshot(vds: &VirtualDiskSnapshot, uid: &str, claim: &str) -> Value {
    let mut spec = json!({"source": {"persistentVolumeClaimName": claim}});
    if let Some(class) = &vds.spec.volume_snapshot_class_name {
        spec["volumeSnapshotClassName"] = json!(class);
    }
    json!({
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": vds.name_any(),
            "namespace": vds.namespace(),
            "ownerReferences": [controller_reference("VirtualDiskSnapshot", &vds.name_any(), uid)],
        },
        "spec": spec,
    })
}

/// What the disk and its VM allow.
#[derive(Debug, Clone, PartialEq)]
pub enum Readiness {
    /// Not yet.
    Wait {
        /// Whether the disk is ready (it is the VM that keeps the snapshot waiting).
        disk_ready: bool,
        /// Why, for the conditions.
        reason: &'static str,
        /// Why, for people.
        message: String,
    },
    /// Take it.
    Take {
        /// The disk's claim.
        claim: String,
        /// Whether the snapshot will be consistent.
        consistent: bool,
    },
}

/// Whether `vds` can be taken now, given its disk and the VMs of its namespace.
pub fn readiness(vds: &VirtualDiskSnapshot, disk: Option<&VirtualDisk>, vms: &[VirtualMachine]) -> Readiness {
    let name = &vds.spec.virtual_disk_name;
    let wait = |disk_ready, reason, message: String| Readiness::Wait {
        disk_ready,
        reason,
        message,
    };
    let Some(disk) = disk else {
        return wait(
            false,
            reason::VIRTUAL_DISK_NOT_FOUND,
            format!("VirtualDisk {name} not found"),
        );
    };
    let st = disk.status.clone().unwrap_or_default();
    let claim = st.target.and_then(|t| t.persistent_volume_claim_name);
    let (Some(DiskPhase::Ready), Some(claim)) = (st.phase, claim) else {
        return wait(
            false,
            reason::VIRTUAL_DISK_NOT_READY,
            format!(
                "VirtualDisk {name} is {:?}, not Ready",
                st.phase.unwrap_or(DiskPhase::Pending)
            ),
        );
    };
    if let Some(consistent) = vds.annotations().get(CONSISTENT_ANNOTATION) {
        return Readiness::Take {
            claim,
            consistent: consistent == "true",
        };
    }
    let running = vms.iter().find(|vm| {
        vm.spec
            .block_device_refs
            .iter()
            .any(|r| r.kind == BlockDeviceKind::VirtualDisk && &r.name == name)
            && !matches!(
                vm.status.as_ref().and_then(|s| s.phase),
                Some(VmPhase::Stopped) | None
            )
    });
    match running {
        Some(vm) if vds.spec.required_consistency => wait(
            true,
            reason::POTENTIALLY_INCONSISTENT,
            format!(
                "VirtualDisk {name} is in use by VirtualMachine {}, which is not stopped: take a VirtualMachineSnapshot of it (which freezes the guest), stop it, or set requiredConsistency to false",
                vm.name_any()
            ),
        ),
        Some(_) => Readiness::Take {
            claim,
            consistent: false,
        },
        None => Readiness::Take {
            claim,
            consistent: true,
        },
    }
}

/// Where the VolumeSnapshot is.
#[derive(Debug, Clone, PartialEq)]
pub enum Taken {
    /// Ready to use.
    Ready,
    /// The storage reported an error.
    Error(String),
    /// Neither yet.
    Waiting,
}

/// What the VolumeSnapshot's status says.
pub fn taken(vs: &DynamicObject) -> Taken {
    let st = &vs.data["status"];
    if st["readyToUse"] == true {
        Taken::Ready
    } else if let Some(m) = st["error"]["message"].as_str() {
        Taken::Error(m.to_owned())
    } else {
        Taken::Waiting
    }
}

/// The status after one look: `taken` is the VolumeSnapshot's state (`None`: not created),
/// `overdue` whether the ready timeout has passed.
pub fn status(
    old: &VirtualDiskSnapshotStatus,
    readiness: &Readiness,
    taken: Option<&Taken>,
    overdue: bool,
    name: &str,
    generation: Option<i64>,
    now: &str,
) -> VirtualDiskSnapshotStatus {
    let oc = &old.conditions;
    let cond = Builder::new(oc, generation, now);
    let mut new = VirtualDiskSnapshotStatus {
        observed_generation: generation,
        ..old.clone()
    };
    let (phase, conditions): (SnapshotPhase, Vec<Condition>) = match (readiness, taken) {
        (
            Readiness::Wait {
                disk_ready,
                reason,
                message,
            },
            None,
        ) => {
            let disk = if *disk_ready {
                cond.make(VIRTUAL_DISK_READY, true, reason::READY, "the disk is ready")
            } else {
                cond.make(VIRTUAL_DISK_READY, false, reason, message.clone())
            };
            let ready = cond.make(READY, false, reason, message.clone());
            (SnapshotPhase::Pending, vec![disk, ready])
        }
        (readiness, taken) => {
            if let Readiness::Take { consistent, .. } = readiness {
                new.consistent = Some(*consistent);
            }
            new.volume_snapshot_name = Some(name.to_owned());
            let disk = cond.make(VIRTUAL_DISK_READY, true, reason::READY, "the disk is ready");
            let ready = match taken {
                Some(Taken::Ready) => (
                    SnapshotPhase::Ready,
                    cond.make(
                        READY,
                        true,
                        reason::READY,
                        format!("VolumeSnapshot {name} is ready to use"),
                    ),
                ),
                Some(Taken::Error(m)) => (
                    SnapshotPhase::Failed,
                    cond.make(
                        READY,
                        false,
                        reason::VOLUME_SNAPSHOT_FAILED,
                        format!("VolumeSnapshot {name}: {m}"),
                    ),
                ),
                _ if overdue => (
                    SnapshotPhase::Failed,
                    cond.make(
                        READY,
                        false,
                        reason::VOLUME_SNAPSHOT_NOT_READY,
                        format!("VolumeSnapshot {name} was not ready to use within the ready timeout"),
                    ),
                ),
                _ => (
                    SnapshotPhase::InProgress,
                    cond.make(
                        READY,
                        false,
                        reason::SNAPSHOTTING,
                        format!("waiting for VolumeSnapshot {name} to be ready to use"),
                    ),
                ),
            };
            (ready.0, vec![disk, ready.1])
        }
    };
    new.phase = Some(phase);
    new.conditions = conditions;
    new
}

/// What `readiness` becomes while [`VOLUME_SNAPSHOTS`] is not served: a snapshot that could be
/// taken waits, with the reason `SnapshotAPINotServed` and a message naming the API.
pub fn api_not_served(readiness: Readiness) -> Readiness {
    match readiness {
        Readiness::Take { .. } => Readiness::Wait {
            disk_ready: true,
            reason: reason::SNAPSHOT_API_NOT_SERVED,
            message: not_served_message(),
        },
        wait => wait,
    }
}

/// Why a snapshot waits while [`VOLUME_SNAPSHOTS`] is not served.
pub fn not_served_message() -> String {
    format!(
        "the cluster does not serve {VOLUME_SNAPSHOTS} (the VolumeSnapshot CRD, installed with a CSI snapshot controller); the snapshot is taken once it does"
    )
}

/// How long after the VolumeSnapshot was created (`created`) it may still become ready.
fn remaining(
    created: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    timeout: Duration,
) -> Duration {
    let Some(t) = created else { return timeout };
    let age = k8s_openapi::jiff::Timestamp::now().duration_since(t.0);
    let age = Duration::try_from(age).unwrap_or_default();
    timeout.saturating_sub(age)
}

/// The VirtualDiskSnapshot controller: disk snapshots and their VolumeSnapshots, watched while
/// the cluster serves them ([`VOLUME_SNAPSHOTS`], an optional API); meanwhile the disk
/// snapshots wait and say why. Sets [`Context::disk_snapshots`].
pub(crate) fn controller(w: &mut Wiring) -> BoxFuture<'static, ()> {
    let (api, all) = w.watch::<VirtualDiskSnapshot>(None);
    let volume_snapshots = w.watch_while_served(VOLUME_SNAPSHOTS, &volume_snapshot_resource());
    let disk_snapshots =
        Controller::new(api, all).owns_stream_with(volume_snapshots, volume_snapshot_resource());
    let _ = w.ctx().disk_snapshots.set(disk_snapshots.store());
    w.start(disk_snapshots, reconcile)
}

/// Reconciles one disk snapshot.
#[instrument(skip_all, fields(resource = "virtualdisksnapshots.virtualization.deckhouse.io", namespace = vds.namespace().unwrap_or_default(), name = %vds.name_any()))]
pub async fn reconcile(vds: Arc<VirtualDiskSnapshot>, ctx: Arc<Context>) -> Result<Action> {
    let ns = vds.namespace().ok_or(Error::Missing("metadata.namespace"))?;
    let name = vds.name_any();
    let uid = vds.uid().ok_or(Error::Missing("metadata.uid"))?;
    let old = vds.status.clone().unwrap_or_default();
    if vds.meta().deletion_timestamp.is_some() || old.phase.is_some_and(SnapshotPhase::is_final) {
        // Taken or failed once; the VolumeSnapshot goes with the snapshot (owner reference).
        return Ok(Action::await_change());
    }
    let api: Api<VirtualDiskSnapshot> = Api::namespaced(ctx.client.clone(), &ns);
    let vss = Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &ns, &volume_snapshot_resource());
    // Not served: the snapshot waits, and says why, until it is (asked again below).
    let served = ctx.served.is_served(VOLUME_SNAPSHOTS);
    let mut vs = if served { vss.get_opt(&name).await? } else { None };
    let disk = Api::<VirtualDisk>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&vds.spec.virtual_disk_name)
        .await?;
    // The VM controller's cache when it runs (no LIST on every look), else the API.
    let vms: Vec<VirtualMachine> = match ctx.vms.get() {
        Some(store) => store
            .state()
            .iter()
            .filter(|vm| vm.namespace().as_deref() == Some(ns.as_str()))
            .map(|vm| VirtualMachine::clone(vm))
            .collect(),
        None => {
            Api::<VirtualMachine>::namespaced(ctx.client.clone(), &ns)
                .list(&Default::default())
                .await?
                .items
        }
    };
    let mut ready = readiness(&vds, disk.as_ref(), &vms);
    if !served {
        ready = api_not_served(ready);
    }
    if let (None, Readiness::Take { claim, .. }) = (&vs, &ready) {
        let obj: DynamicObject = serde_json::from_value(volume_snapshot(&vds, &uid, claim))?;
        vs = Some(vss.create(&PostParams::default(), &obj).await?);
        info!(volume_snapshot = %name, %claim, "VolumeSnapshot created");
    }
    let taken_at = vs.as_ref().and_then(|v| v.metadata.creation_timestamp.as_ref());
    let left = remaining(taken_at, ctx.snapshot_ready_timeout);
    let state = vs.as_ref().map(taken);
    let new = status(
        &old,
        &ready,
        state.as_ref(),
        left.is_zero(),
        &name,
        vds.meta().generation,
        &conditions::now(),
    );
    write_status(&api, &name, &old, &new, |s| &mut s.conditions).await?;
    Ok(match new.phase {
        Some(p) if p.is_final() => Action::await_change(),
        // The disk and its VM are not watched from here: look again.
        Some(SnapshotPhase::Pending) => Action::requeue(Duration::from_secs(2)),
        _ => Action::requeue(left.max(Duration::from_secs(1))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{DiskTarget, VirtualDiskSnapshotSpec, VirtualDiskStatus};

    fn vds(required: bool) -> VirtualDiskSnapshot {
        let mut s = VirtualDiskSnapshot::new(
            "snap",
            VirtualDiskSnapshotSpec {
                virtual_disk_name: "root".into(),
                required_consistency: required,
                volume_snapshot_class_name: None,
            },
        );
        s.metadata.namespace = Some("ns".into());
        s
    }

    fn disk(phase: DiskPhase) -> VirtualDisk {
        let mut d: VirtualDisk = serde_json::from_value(json!({
            "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualDisk",
            "metadata": {"name": "root", "namespace": "ns"},
            "spec": {"persistentVolumeClaim": {"size": "1Gi"}},
        }))
        .expect("disk");
        d.status = Some(VirtualDiskStatus {
            phase: Some(phase),
            target: Some(DiskTarget {
                persistent_volume_claim_name: Some("vd-root-1".into()),
            }),
            ..Default::default()
        });
        d
    }

    fn vm(phase: VmPhase) -> VirtualMachine {
        let mut vm: VirtualMachine = serde_json::from_value(json!({
            "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualMachine",
            "metadata": {"name": "vm", "namespace": "ns"},
            "spec": {"cpu": {"cores": 1}, "memory": {"size": "1Gi"},
                     "blockDeviceRefs": [{"kind": "VirtualDisk", "name": "root"}]},
        }))
        .expect("vm");
        vm.status = Some(serde_json::from_value(json!({"phase": phase})).expect("status"));
        vm
    }

    #[test]
    fn a_disk_is_taken_once_ready_and_consistently_only_when_no_running_vm_uses_it() {
        let r = readiness(&vds(true), None, &[]);
        assert!(
            matches!(
                r,
                Readiness::Wait {
                    reason: "VirtualDiskNotFound",
                    disk_ready: false,
                    ..
                }
            ),
            "{r:?}"
        );
        let r = readiness(&vds(true), Some(&disk(DiskPhase::Provisioning)), &[]);
        assert!(
            matches!(
                r,
                Readiness::Wait {
                    reason: "VirtualDiskNotReady",
                    ..
                }
            ),
            "{r:?}"
        );
        let ready = disk(DiskPhase::Ready);
        let take = |consistent| Readiness::Take {
            claim: "vd-root-1".into(),
            consistent,
        };
        assert_eq!(
            readiness(&vds(true), Some(&ready), &[vm(VmPhase::Stopped)]),
            take(true)
        );
        let r = readiness(&vds(true), Some(&ready), &[vm(VmPhase::Running)]);
        assert!(
            matches!(&r, Readiness::Wait { reason: "PotentiallyInconsistent", disk_ready: true, message } if message.contains("VirtualMachine vm")),
            "{r:?}"
        );
        assert_eq!(
            readiness(&vds(false), Some(&ready), &[vm(VmPhase::Running)]),
            take(false)
        );
        // A VM snapshot's disk snapshot: the VM snapshot froze the guest.
        let mut child = vds(true);
        child
            .annotations_mut()
            .insert(CONSISTENT_ANNOTATION.into(), "true".into());
        assert_eq!(
            readiness(&child, Some(&ready), &[vm(VmPhase::Running)]),
            take(true)
        );
    }

    #[test]
    fn without_the_volume_snapshot_api_a_snapshot_waits_and_names_it() {
        let take = readiness(&vds(false), Some(&disk(DiskPhase::Ready)), &[]);
        let wait = api_not_served(take);
        let st = status(&Default::default(), &wait, None, false, "snap", Some(1), "t");
        assert_eq!(st.phase, Some(SnapshotPhase::Pending));
        assert_eq!(st.volume_snapshot_name, None);
        let ready = crate::conditions::find(&st.conditions, READY).expect("Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", reason::SNAPSHOT_API_NOT_SERVED)
        );
        assert!(
            ready
                .message
                .contains("volumesnapshots.snapshot.storage.k8s.io/v1"),
            "{ready:?}"
        );
        let disk_ready = crate::conditions::find(&st.conditions, VIRTUAL_DISK_READY).expect("disk");
        assert_eq!(disk_ready.status, "True");
        // A disk that is not ready is said first.
        let wait = api_not_served(readiness(&vds(false), None, &[]));
        assert!(
            matches!(
                wait,
                Readiness::Wait {
                    reason: "VirtualDiskNotFound",
                    ..
                }
            ),
            "{wait:?}"
        );
    }

    #[test]
    fn the_status_follows_the_volume_snapshot_and_the_timeout() {
        let take = Readiness::Take {
            claim: "c".into(),
            consistent: true,
        };
        let s = |taken: Option<&Taken>, overdue| {
            status(&Default::default(), &take, taken, overdue, "snap", Some(1), "t")
        };
        let waiting = s(Some(&Taken::Waiting), false);
        assert_eq!(waiting.phase, Some(SnapshotPhase::InProgress));
        assert_eq!(waiting.volume_snapshot_name.as_deref(), Some("snap"));
        assert_eq!(waiting.consistent, Some(true));
        assert_eq!(s(Some(&Taken::Ready), false).phase, Some(SnapshotPhase::Ready));
        let failed = s(Some(&Taken::Error("no space".into())), false);
        assert_eq!(failed.phase, Some(SnapshotPhase::Failed));
        assert!(failed.conditions[1].message.contains("no space"), "{failed:?}");
        let late = s(Some(&Taken::Waiting), true);
        assert_eq!(
            (late.phase, late.conditions[1].reason.as_str()),
            (Some(SnapshotPhase::Failed), "VolumeSnapshotNotReady")
        );
        let vs: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
            "metadata": {"name": "snap"}, "status": {"readyToUse": true},
        }))
        .expect("vs");
        assert_eq!(taken(&vs), Taken::Ready);
        let c = volume_snapshot(&vds(true), "u", "vd-root-1");
        assert_eq!(c["spec"]["source"]["persistentVolumeClaimName"], "vd-root-1");
        assert_eq!(c["metadata"]["ownerReferences"][0]["kind"], "VirtualDiskSnapshot");
    }
}
