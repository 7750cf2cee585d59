//! Reconcile of a `VirtualDisk`: its PersistentVolumeClaim, created once and reported in the
//! status (`WaitForFirstConsumer` while unbound, `Ready` when bound), and deleted with the disk.
//! A disk with a data source is filled once by a data Pod writing into its claim
//! (`Provisioning` or `WaitForUserUpload`, then `Ready` or `Failed`).

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, PatchParams, PostParams};
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::{Resource as _, ResourceExt as _};
use serde_json::{Value, json};
use tracing::{info, instrument};

use super::data::{self, NotReady};
use super::report::{Stage, report, same_status};
use super::wiring::Wiring;
use super::{Context, add_finalizer_patch, is_not_found, json_patch, remove_finalizer_patch};
use crate::conditions::{self, READY, condition, reason};
use crate::datapod::{Destination, Job, Owner, State};
use crate::resources::{DiskPhase, DiskTarget, VirtualDisk, VirtualDiskStatus, controller_reference};
use crate::{Error, Result};

/// The finalizer the controller keeps on a disk until its claim is deleted.
pub const FINALIZER: &str = "virtualization.deckhouse.io/vd-cleanup";
/// The label on a disk's claim naming the disk; the claim watch selects on it.
pub const DISK_LABEL: &str = "virtualization.deckhouse.io/virtual-disk";

/// The claim's name: `vd-{name}-{uid}`, so a disk recreated under the same name never meets
/// the claim of its predecessor (which may still be terminating).
pub fn claim_name(disk: &str, uid: &str) -> String {
    format!("vd-{disk}-{uid}")
}

/// The claim for `vd` (uid `uid`): ReadWriteOnce, the requested size and storage class, the
/// disk label and a controller ownerReference to the disk.
pub fn claim(vd: &VirtualDisk, uid: &str) -> Value {
    let c = &vd.spec.persistent_volume_claim;
    let mut spec = json!({
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": c.size}},
    });
    if let Some(class) = &c.storage_class_name {
        spec["storageClassName"] = json!(class);
    }
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": claim_name(&vd.name_any(), uid),
            "namespace": vd.namespace(),
            "labels": {DISK_LABEL: vd.name_any()},
            "ownerReferences": [controller_reference("VirtualDisk", &vd.name_any(), uid)],
        },
        "spec": spec,
    })
}

/// The disk's status from its claim (`None`: not created yet).
pub fn status(claim_name: &str, pvc: Option<&PersistentVolumeClaim>) -> VirtualDiskStatus {
    let Some(pvc) = pvc else {
        return VirtualDiskStatus {
            phase: Some(DiskPhase::Pending),
            ..Default::default()
        };
    };
    let st = pvc.status.as_ref();
    let phase = match st.and_then(|s| s.phase.as_deref()) {
        Some("Bound") => DiskPhase::Ready,
        Some("Lost") => DiskPhase::Lost,
        _ => DiskPhase::WaitForFirstConsumer,
    };
    let capacity = (phase == DiskPhase::Ready)
        .then(|| st?.capacity.as_ref()?.get("storage").map(|q| q.0.clone()))
        .flatten();
    VirtualDiskStatus {
        phase: Some(phase),
        capacity,
        target: Some(DiskTarget {
            persistent_volume_claim_name: Some(claim_name.to_owned()),
        }),
        ..Default::default()
    }
}

/// The status of a disk with a data source: [`status`] of its claim while the data Pod is done
/// (`Ready` only once the claim is bound too), else where the data Pod is.
pub fn data_status(
    old: &VirtualDiskStatus,
    claim_name: &str,
    pvc: Option<&PersistentVolumeClaim>,
    source: &Result<&Job, &NotReady>,
    state: &State,
    now: &str,
) -> VirtualDiskStatus {
    let r = report(&old.conditions, source, state, None, now);
    let claimed = status(claim_name, pvc);
    let mut st = VirtualDiskStatus {
        phase: None,
        capacity: None,
        target: claimed.target.clone(),
        progress: r.progress,
        download_speed: r.download_speed,
        image_upload_urls: r.upload_urls,
        conditions: r.conditions,
    };
    st.phase = Some(match r.stage {
        Stage::Pending => DiskPhase::Pending,
        Stage::Provisioning => DiskPhase::Provisioning,
        Stage::WaitForUserUpload => DiskPhase::WaitForUserUpload,
        Stage::Failed => DiskPhase::Failed,
        Stage::Done(m) => {
            let format = m.format.clone().unwrap_or_else(|| "raw".into());
            let bound = claimed.phase == Some(DiskPhase::Ready);
            st.conditions[1] = if bound {
                st.capacity = claimed.capacity;
                condition(
                    &old.conditions,
                    READY,
                    true,
                    reason::READY,
                    format!("filled with a {format} disk"),
                    None,
                    now,
                )
            } else {
                condition(
                    &old.conditions,
                    READY,
                    false,
                    reason::WAIT_FOR_CLAIM,
                    "filled; waiting for the claim to be bound",
                    None,
                    now,
                )
            };
            claimed.phase.unwrap_or(DiskPhase::Pending)
        }
    });
    st
}

/// The VirtualDisk controller: disks, their claims (by [`DISK_LABEL`]) and their data Pods.
/// Sets [`Context::disks`].
pub(crate) fn controller(w: &mut Wiring) -> BoxFuture<'static, ()> {
    let (api, all) = w.watch::<VirtualDisk>(None);
    let (claims, by_disk) = w.watch::<PersistentVolumeClaim>(Some(DISK_LABEL));
    let (pods, data_pods) = w.watch::<Pod>(Some(crate::datapod::DATA_LABEL));
    let disks = Controller::new(api, all)
        .owns(claims, by_disk)
        .owns(pods, data_pods);
    let _ = w.ctx().disks.set(disks.store());
    w.start(disks, reconcile)
}

/// Reconciles one disk.
#[instrument(skip_all, fields(resource = "virtualdisks.virtualization.deckhouse.io", namespace = vd.namespace().unwrap_or_default(), name = %vd.name_any()))]
pub async fn reconcile(vd: Arc<VirtualDisk>, ctx: Arc<Context>) -> Result<Action> {
    let ns = vd.namespace().ok_or(Error::Missing("metadata.namespace"))?;
    let name = vd.name_any();
    let uid = vd.uid().ok_or(Error::Missing("metadata.uid"))?;
    let api: Api<VirtualDisk> = Api::namespaced(ctx.client.clone(), &ns);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let claim_name = claim_name(&name, &uid);

    if vd.meta().deletion_timestamp.is_some() {
        // The claim is deleted, not waited for: its `kubernetes.io/pvc-protection` finalizer
        // goes only when no pod uses it.
        match pvcs.delete(&claim_name, &DeleteParams::default()).await {
            Ok(_) => info!(claim = %claim_name, "claim deleted"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
        if let Some(patch) = remove_finalizer_patch(vd.finalizers(), FINALIZER) {
            api.patch(&name, &PatchParams::default(), &json_patch(patch)?)
                .await?;
        }
        return Ok(Action::await_change());
    }
    if !vd.finalizers().iter().any(|f| f == FINALIZER) {
        let patch = json_patch(add_finalizer_patch(vd.finalizers(), FINALIZER))?;
        api.patch(&name, &PatchParams::default(), &patch).await?;
    }
    let pvc = match pvcs.get_opt(&claim_name).await? {
        Some(pvc) => pvc,
        None => {
            let obj: PersistentVolumeClaim = serde_json::from_value(claim(&vd, &uid))?;
            let created = pvcs.create(&PostParams::default(), &obj).await?;
            info!(claim = %claim_name, size = %vd.spec.persistent_volume_claim.size, "claim created");
            created
        }
    };
    let Some(ds) = &vd.spec.data_source else {
        let new = status(&claim_name, Some(&pvc));
        if vd.status.as_ref() != Some(&new) {
            write_status(&api, &name, &new).await?;
        }
        return Ok(Action::await_change());
    };
    let old = vd.status.clone().unwrap_or_default();
    if old.phase == Some(DiskPhase::Failed) {
        // Filled once; the data source cannot change.
        return Ok(Action::await_change());
    }
    if old.phase == Some(DiskPhase::Ready) || old.phase == Some(DiskPhase::Lost) {
        // Filled: only the claim's fate is followed.
        let mut new = old.clone();
        new.phase = status(&claim_name, Some(&pvc)).phase;
        if new != old {
            write_status(&api, &name, &new).await?;
        }
        return Ok(Action::await_change());
    }
    let max_size = data::claim_bytes(&pvc)
        .or_else(|| data::bytes(&vd.spec.persistent_volume_claim.size))
        .unwrap_or(u64::MAX);
    let job = match data::resolve(ds, &ns, &ctx).await? {
        Ok(source) => Ok(Job {
            owner: Owner {
                kind: "VirtualDisk",
                name: name.clone(),
                namespace: ns.clone(),
                uid: uid.clone(),
            },
            source,
            destination: Destination::Claim {
                name: claim_name.clone(),
                max_size,
            },
        }),
        Err(nr) => Err(nr),
    };
    let state = match &job {
        Ok(job) => data::drive(&ctx, job).await?,
        Err(_) => State::Missing,
    };
    let new = data_status(
        &old,
        &claim_name,
        Some(&pvc),
        &job.as_ref(),
        &state,
        &conditions::now(),
    );
    if !same(&old, &new) {
        write_status(&api, &name, &new).await?;
        info!(phase = ?new.phase, "status");
    }
    data::finish(&ctx, &job, &state).await
}

/// Writes `new` as the whole status of disk `name`.
async fn write_status(api: &Api<VirtualDisk>, name: &str, new: &VirtualDiskStatus) -> Result<()> {
    let patch = json!([{"op": "add", "path": "/status", "value": new}]);
    api.patch_status(name, &PatchParams::default(), &json_patch(patch)?)
        .await?;
    Ok(())
}

fn same(a: &VirtualDiskStatus, b: &VirtualDiskStatus) -> bool {
    same_status(a, b, |s| &mut s.conditions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{DiskClaim, VirtualDiskSpec};

    fn vd() -> VirtualDisk {
        let mut vd = VirtualDisk::new(
            "root",
            VirtualDiskSpec {
                persistent_volume_claim: DiskClaim {
                    size: "10Gi".into(),
                    storage_class_name: Some("fast".into()),
                },
                data_source: None,
            },
        );
        vd.metadata.namespace = Some("ns".into());
        vd
    }

    #[test]
    fn the_claim_asks_for_the_size_and_class() {
        let c = claim(&vd(), "u-1");
        assert_eq!(c["metadata"]["name"], "vd-root-u-1");
        assert_eq!(c["metadata"]["namespace"], "ns");
        assert_eq!(c["metadata"]["labels"][DISK_LABEL], "root");
        assert_eq!(c["metadata"]["ownerReferences"][0]["kind"], "VirtualDisk");
        assert_eq!(c["spec"]["resources"]["requests"]["storage"], "10Gi");
        assert_eq!(c["spec"]["storageClassName"], "fast");
        let pvc: PersistentVolumeClaim = serde_json::from_value(c).expect("a claim");
        assert_eq!(pvc.metadata.name.as_deref(), Some("vd-root-u-1"));
    }

    #[test]
    fn status_follows_the_claim() {
        assert_eq!(status("c", None).phase, Some(DiskPhase::Pending));
        let mut pvc: PersistentVolumeClaim = serde_json::from_value(claim(&vd(), "u")).expect("claim");
        let s = status("c", Some(&pvc));
        assert_eq!(s.phase, Some(DiskPhase::WaitForFirstConsumer));
        assert_eq!(s.capacity, None);
        assert_eq!(
            s.target.and_then(|t| t.persistent_volume_claim_name).as_deref(),
            Some("c")
        );
        pvc.status = serde_json::from_value(json!({"phase": "Bound", "capacity": {"storage": "10Gi"}}))
            .expect("status");
        let s = status("c", Some(&pvc));
        assert_eq!(
            (s.phase, s.capacity.as_deref()),
            (Some(DiskPhase::Ready), Some("10Gi"))
        );
        pvc.status = serde_json::from_value(json!({"phase": "Lost"})).expect("status");
        assert_eq!(status("c", Some(&pvc)).phase, Some(DiskPhase::Lost));
    }
}
