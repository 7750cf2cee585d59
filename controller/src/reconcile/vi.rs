//! Reconcile of a `VirtualImage`: its data source resolved, an importer (or uploader) Pod run
//! once, its result in the status, and its image deleted from DVCR with it.

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PatchParams};
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::{Resource as _, ResourceExt as _};
use serde_json::json;
use tracing::{info, instrument};

use super::data::{self, NotReady};
use super::report::{Stage, report, same_status};
use super::wiring::Wiring;
use super::{Context, add_finalizer_patch, json_patch, remove_finalizer_patch};
use crate::conditions::{self, READY, condition, reason};
use crate::datapod::{self, Destination, Job, Owner, Source, State};
use crate::resources::data_source::size_text;
use crate::resources::{ImagePhase, ImageSize, ImageStorage, ImageTarget, VirtualImage, VirtualImageStatus};
use crate::{Error, Result};

/// The finalizer the controller keeps on an image until its DVCR image is deleted.
pub const FINALIZER: &str = "virtualization.deckhouse.io/vi-cleanup";

/// The status for `state` of `job`'s Pod (`Err`: the data source is not ready).
pub fn status(
    old: &VirtualImageStatus,
    source: &Result<&Job, &NotReady>,
    state: &State,
    generation: Option<i64>,
    now: &str,
) -> VirtualImageStatus {
    let r = report(&old.conditions, source, state, generation, now);
    let mut st = VirtualImageStatus {
        observed_generation: generation,
        progress: r.progress,
        image_upload_urls: r.upload_urls,
        download_speed: r.download_speed,
        conditions: r.conditions,
        ..Default::default()
    };
    st.phase = Some(match r.stage {
        Stage::Pending => ImagePhase::Pending,
        Stage::Provisioning => ImagePhase::Provisioning,
        Stage::WaitForUserUpload => ImagePhase::WaitForUserUpload,
        Stage::Failed => ImagePhase::Failed,
        Stage::Done(m) => {
            let format = m.format.clone().unwrap_or_else(|| "raw".into());
            let (stored, unpacked) = (m.stored_size.unwrap_or(0), m.unpacked_size.unwrap_or(0));
            st.format = Some(format.clone());
            st.cdrom = Some(format == "iso");
            st.size = Some(ImageSize {
                stored: Some(size_text(stored)),
                stored_bytes: Some(stored.to_string()),
                unpacked: Some(size_text(unpacked)),
                unpacked_bytes: Some(unpacked.to_string()),
            });
            if let Ok(job) = source {
                st.target = Some(match &job.destination {
                    Destination::Registry(image) => ImageTarget {
                        registry_url: Some(image.clone()),
                        persistent_volume_claim_name: None,
                    },
                    Destination::Claim { name, .. } => ImageTarget {
                        registry_url: None,
                        persistent_volume_claim_name: Some(name.clone()),
                    },
                });
            }
            st.conditions[1] = condition(
                &old.conditions,
                READY,
                true,
                reason::READY,
                format!("a {format} image of {}", size_text(unpacked)),
                generation,
                now,
            );
            ImagePhase::Ready
        }
    });
    st
}

/// Writes `new` as the whole status of image `name`.
async fn write_status(api: &Api<VirtualImage>, name: &str, new: &VirtualImageStatus) -> Result<()> {
    let patch = json!([{"op": "add", "path": "/status", "value": new}]);
    api.patch_status(name, &PatchParams::default(), &json_patch(patch)?)
        .await?;
    Ok(())
}

/// The VirtualImage controller: images and their data Pods. Sets [`Context::images`].
pub(crate) fn controller(w: &mut Wiring) -> BoxFuture<'static, ()> {
    let (api, all) = w.watch::<VirtualImage>(None);
    let (pods, data_pods) = w.watch::<Pod>(Some(datapod::DATA_LABEL));
    let images = Controller::new(api, all).owns(pods, data_pods);
    let _ = w.ctx().images.set(images.store());
    w.start(images, reconcile)
}

/// Reconciles one image.
#[instrument(skip_all, fields(resource = "virtualimages.virtualization.deckhouse.io", namespace = vi.namespace().unwrap_or_default(), name = %vi.name_any()))]
pub async fn reconcile(vi: Arc<VirtualImage>, ctx: Arc<Context>) -> Result<Action> {
    let ns = vi.namespace().ok_or(Error::Missing("metadata.namespace"))?;
    let name = vi.name_any();
    let uid = vi.uid().ok_or(Error::Missing("metadata.uid"))?;
    let api: Api<VirtualImage> = Api::namespaced(ctx.client.clone(), &ns);
    let old = vi.status.clone().unwrap_or_default();
    let owner = Owner {
        kind: "VirtualImage",
        name: name.clone(),
        namespace: ns.clone(),
        uid: uid.clone(),
    };

    if vi.meta().deletion_timestamp.is_some() {
        if let Some(image) = old.target.as_ref().and_then(|t| t.registry_url.as_ref()) {
            data::delete_from_dvcr(&ctx, image).await?;
            info!(%image, "image deleted from DVCR");
        }
        if let Some(patch) = remove_finalizer_patch(vi.finalizers(), FINALIZER) {
            api.patch(&name, &PatchParams::default(), &json_patch(patch)?)
                .await?;
        }
        return Ok(Action::await_change());
    }
    if matches!(old.phase, Some(ImagePhase::Ready | ImagePhase::Failed)) {
        // Imported once; the data source cannot change.
        return Ok(Action::await_change());
    }
    let Some(dvcr) = ctx.data.dvcr_address.clone() else {
        let nr = NotReady {
            reason: reason::DVCR_NOT_CONFIGURED,
            message: "the controller runs without DVCR (--dvcr-address): images cannot be imported".into(),
        };
        let new = status(
            &old,
            &Err(&nr),
            &State::Missing,
            vi.meta().generation,
            &conditions::now(),
        );
        if !same(&old, &new) {
            write_status(&api, &name, &new).await?;
        }
        return Ok(Action::await_change());
    };
    if !vi.finalizers().iter().any(|f| f == FINALIZER) {
        let patch = json_patch(add_finalizer_patch(vi.finalizers(), FINALIZER))?;
        api.patch(&name, &PatchParams::default(), &patch).await?;
    }
    let in_claim = vi.spec.storage == ImageStorage::PersistentVolumeClaim;
    // A PersistentVolumeClaim image is imported into DVCR first, then copied into its claim.
    let staged = old
        .target
        .as_ref()
        .and_then(|t| t.registry_url.clone())
        .filter(|_| in_claim && old.phase == Some(ImagePhase::Provisioning));
    let job = match &staged {
        Some(image) => {
            let claim = ensure_claim(&ctx, &vi, &uid, &old).await?;
            Ok(Job {
                owner,
                source: Source::Registry {
                    image: image.clone(),
                    auth: datapod::RegistryAuth::Dvcr,
                    ca: None,
                },
                destination: claim,
            })
        }
        None => match data::resolve(&vi.spec.data_source, &ns, &ctx).await? {
            Ok(source) => Ok(Job {
                owner,
                source,
                destination: Destination::Registry(datapod::image_reference(&dvcr, &ns, &name, &uid)),
            }),
            Err(nr) => Err(nr),
        },
    };
    let state = match &job {
        Ok(job) => data::drive(&ctx, job).await?,
        Err(_) => State::Missing,
    };
    let mut new = status(
        &old,
        &job.as_ref(),
        &state,
        vi.meta().generation,
        &conditions::now(),
    );
    if in_claim && staged.is_none() && new.phase == Some(ImagePhase::Ready) {
        // In DVCR; the copy into the claim comes next.
        new.phase = Some(ImagePhase::Provisioning);
        new.progress = Some("50%".into());
        new.conditions[1] = condition(
            &old.conditions,
            READY,
            false,
            reason::PROVISIONING,
            "copying the image into its claim",
            vi.meta().generation,
            &conditions::now(),
        );
    }
    if staged.is_some() {
        // What the import into DVCR found stays; the copy only adds the claim.
        new.download_speed = old.download_speed.clone();
        new.cdrom = old.cdrom;
        if new.phase != Some(ImagePhase::Ready) {
            new.target = old.target.clone();
            new.size = old.size.clone();
            new.format = old.format.clone();
            if new.phase == Some(ImagePhase::Provisioning) {
                new.progress = Some("50%".into());
            }
        }
    }
    if let (Some(image), State::Succeeded(_)) = (&staged, &state) {
        data::delete_from_dvcr(&ctx, image).await?;
        info!(%image, "staged image deleted from DVCR");
    }
    if !same(&old, &new) {
        write_status(&api, &name, &new).await?;
        info!(phase = ?new.phase, "status");
    }
    data::finish(&ctx, &job, &state).await
}

/// The claim of a `PersistentVolumeClaim` image, `vi-NAME-UID`, created sized to the image's
/// unpacked size (whole MiB) when it is not there; its destination.
async fn ensure_claim(
    ctx: &Context,
    vi: &VirtualImage,
    uid: &str,
    old: &VirtualImageStatus,
) -> Result<Destination> {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let ns = vi.namespace().ok_or(Error::Missing("metadata.namespace"))?;
    let name = format!("vi-{}-{uid}", vi.name_any());
    let unpacked: u64 = old
        .size
        .as_ref()
        .and_then(|s| s.unpacked_bytes.as_deref())
        .and_then(|b| b.parse().ok())
        .unwrap_or(0);
    let mib = unpacked.div_ceil(1 << 20).max(1);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let pvc = match pvcs.get_opt(&name).await? {
        Some(pvc) => pvc,
        None => {
            let mut spec = json!({
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": format!("{mib}Mi")}},
            });
            if let Some(class) = vi
                .spec
                .persistent_volume_claim
                .as_ref()
                .and_then(|c| c.storage_class_name.as_ref())
            {
                spec["storageClassName"] = json!(class);
            }
            let obj = json!({
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "labels": {datapod::DATA_LABEL: format!("vi-{}", vi.name_any())},
                    "ownerReferences": [crate::resources::controller_reference("VirtualImage", &vi.name_any(), uid)],
                },
                "spec": spec,
            });
            let created = pvcs
                .create(&kube::api::PostParams::default(), &serde_json::from_value(obj)?)
                .await?;
            info!(claim = %name, size = %format!("{mib}Mi"), "claim created");
            created
        }
    };
    Ok(Destination::Claim {
        max_size: data::claim_bytes(&pvc).unwrap_or(mib << 20),
        name,
    })
}

fn same(a: &VirtualImageStatus, b: &VirtualImageStatus) -> bool {
    same_status(a, b, |s| &mut s.conditions)
}
