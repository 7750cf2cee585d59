//! What the image and disk reconcilers share about data: resolving a [`DataSource`] to what a
//! data Pod reads, and running a data Pod ([`drive`]) with its Secret and Service until it
//! reports, then removing them ([`clean_up`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service};
use kube::api::{Api, DeleteParams, PostParams};
use tracing::info;

use super::{Context, is_not_found};
use crate::conditions::reason;
use crate::datapod::{self, Job, RegistryAuth, Source, State};
use crate::resources::{
    DataSource, DataSourceType, DiskPhase, ImagePhase, ImageStorage, ObjectRefKind, VirtualDisk, VirtualImage,
};
use crate::{Error, Result};

/// Why a data source cannot be used yet: a condition's reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReady {
    /// CamelCase reason.
    pub reason: &'static str,
    /// What the user can do about it.
    pub message: String,
}

fn not_ready(reason: &'static str, message: impl Into<String>) -> NotReady {
    NotReady {
        reason,
        message: message.into(),
    }
}

/// What a data Pod reads for `ds` in namespace `ns`: `Err` while a referred object is missing
/// or not ready, or a referred Secret is missing.
pub async fn resolve(ds: &DataSource, ns: &str, ctx: &Context) -> Result<Result<Source, NotReady>> {
    use base64::Engine as _;
    let decode = |field: &str, b64: &Option<String>| -> Result<Option<Vec<u8>>, NotReady> {
        b64.as_ref()
            .map(|s| {
                base64::engine::general_purpose::STANDARD
                    .decode(s.trim())
                    .map_err(|e| not_ready(reason::INVALID_CA_BUNDLE, format!("{field} is not base64: {e}")))
            })
            .transpose()
    };
    Ok(match ds.type_ {
        DataSourceType::Http => {
            let Some(http) = &ds.http else {
                return Ok(Err(not_ready(
                    reason::INVALID_DATA_SOURCE,
                    "spec.dataSource.http is missing",
                )));
            };
            let ca = match decode("spec.dataSource.http.caBundle", &http.ca_bundle) {
                Ok(ca) => ca,
                Err(e) => return Ok(Err(e)),
            };
            let c = http.checksum.clone().unwrap_or_default();
            Ok(Source::Http {
                url: http.url.clone(),
                sha256: c.sha256,
                md5: c.md5,
                ca,
            })
        }
        DataSourceType::ContainerImage => {
            let Some(ci) = &ds.container_image else {
                return Ok(Err(not_ready(
                    reason::INVALID_DATA_SOURCE,
                    "spec.dataSource.containerImage is missing",
                )));
            };
            let ca = match decode("spec.dataSource.containerImage.caBundle", &ci.ca_bundle) {
                Ok(ca) => ca,
                Err(e) => return Ok(Err(e)),
            };
            let auth = match &ci.image_pull_secret {
                None => RegistryAuth::None,
                Some(s) => {
                    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
                    if secrets.get_metadata_opt(&s.name).await?.is_none() {
                        return Ok(Err(not_ready(
                            reason::IMAGE_PULL_SECRET_NOT_FOUND,
                            format!("the image pull Secret {} is not in namespace {ns}", s.name),
                        )));
                    }
                    RegistryAuth::PullSecret(s.name.clone())
                }
            };
            Ok(Source::Registry {
                image: ci.image.clone(),
                auth,
                ca,
            })
        }
        DataSourceType::ObjectRef => {
            let Some(r) = &ds.object_ref else {
                return Ok(Err(not_ready(
                    reason::INVALID_DATA_SOURCE,
                    "spec.dataSource.objectRef is missing",
                )));
            };
            match r.kind {
                ObjectRefKind::VirtualImage => {
                    let images: Api<VirtualImage> = Api::namespaced(ctx.client.clone(), ns);
                    let Some(vi) = images.get_opt(&r.name).await? else {
                        return Ok(Err(not_ready(
                            reason::VIRTUAL_IMAGE_NOT_FOUND,
                            format!("VirtualImage {} not found in namespace {ns}", r.name),
                        )));
                    };
                    let st = vi.status.unwrap_or_default();
                    let target = st.target.unwrap_or_default();
                    match (st.phase, vi.spec.storage) {
                        (Some(ImagePhase::Ready), ImageStorage::ContainerRegistry) => {
                            match target.registry_url {
                                Some(image) => Ok(Source::Registry {
                                    image,
                                    auth: RegistryAuth::Dvcr,
                                    ca: None,
                                }),
                                None => Err(not_ready(
                                    reason::VIRTUAL_IMAGE_NOT_READY,
                                    format!("VirtualImage {} has no registryURL", r.name),
                                )),
                            }
                        }
                        (Some(ImagePhase::Ready), ImageStorage::PersistentVolumeClaim) => {
                            match target.persistent_volume_claim_name {
                                Some(claim) => Ok(Source::Claim(claim)),
                                None => Err(not_ready(
                                    reason::VIRTUAL_IMAGE_NOT_READY,
                                    format!("VirtualImage {} has no claim", r.name),
                                )),
                            }
                        }
                        (phase, _) => Err(not_ready(
                            reason::VIRTUAL_IMAGE_NOT_READY,
                            format!(
                                "VirtualImage {} is {}",
                                r.name,
                                phase.map_or("Pending".to_owned(), |p| format!("{p:?}"))
                            ),
                        )),
                    }
                }
                ObjectRefKind::VirtualDisk => {
                    let disks: Api<VirtualDisk> = Api::namespaced(ctx.client.clone(), ns);
                    let Some(vd) = disks.get_opt(&r.name).await? else {
                        return Ok(Err(not_ready(
                            reason::VIRTUAL_DISK_NOT_FOUND,
                            format!("VirtualDisk {} not found in namespace {ns}", r.name),
                        )));
                    };
                    let st = vd.status.unwrap_or_default();
                    match (st.phase, st.target.and_then(|t| t.persistent_volume_claim_name)) {
                        (Some(DiskPhase::Ready), Some(claim)) => Ok(Source::Claim(claim)),
                        (phase, _) => Err(not_ready(
                            reason::VIRTUAL_DISK_NOT_READY,
                            format!(
                                "VirtualDisk {} is {}",
                                r.name,
                                phase.map_or("Pending".to_owned(), |p| format!("{p:?}"))
                            ),
                        )),
                    }
                }
            }
        }
        DataSourceType::Upload => Ok(Source::Upload),
    })
}

/// The data of Secret `name` of the controller's namespace (empty when there is none).
async fn settings_secret(ctx: &Context, name: &str) -> Result<BTreeMap<String, Vec<u8>>> {
    if name.is_empty() {
        return Ok(BTreeMap::new());
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.data.namespace);
    Ok(secrets
        .get_opt(name)
        .await?
        .and_then(|s| s.data)
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect())
}

/// Creates what `job` needs that is not there yet (its Secret, Pod and, for an upload, its
/// Service) and returns what its Pod reports. A Pod that is gone before it reported (deleted
/// by someone) is created again.
pub async fn drive(ctx: &Context, job: &Job) -> Result<State> {
    let ns = &job.owner.namespace;
    let name = job.name();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let pod = pods.get_opt(&name).await?;
    if let Some(p) = &pod
        && !owned_by(&p.metadata, &job.owner.uid)
    {
        return Ok(State::Failed(format!(
            "a Pod {name} that the controller did not make is in the way"
        )));
    }
    let state = datapod::state(pod.as_ref());
    if state != State::Missing {
        return Ok(state);
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let dvcr = settings_secret(ctx, &ctx.data.dvcr_secret).await?;
    let secret = secrets.get_metadata_opt(&name).await?;
    if let Some(s) = &secret
        && !owned_by(&s.metadata, &job.owner.uid)
    {
        // Someone else's Secret would hand the Pod their credentials or certificate.
        return Ok(State::Failed(format!(
            "a Secret {name} that the controller did not make is in the way"
        )));
    }
    if secret.is_none() {
        let tls = if job.source == Source::Upload {
            settings_secret(ctx, &ctx.data.uploader_tls_secret).await?
        } else {
            BTreeMap::new()
        };
        let secret: Secret = serde_json::from_value(job.secret(&dvcr, &tls))?;
        create(&secrets, &secret).await?;
    }
    if job.source == Source::Upload {
        let services: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
        if services.get_metadata_opt(&name).await?.is_none() {
            let svc: Service = serde_json::from_value(job.service())?;
            create(&services, &svc).await?;
        }
    }
    let pod: Pod = serde_json::from_value(job.pod(&ctx.data, dvcr.contains_key("ca.crt")))?;
    create(&pods, &pod).await?;
    info!(pod = %name, source = ?source_kind(&job.source), "data Pod created");
    Ok(State::Pending)
}

/// Whether `meta`'s controller is the object of uid `uid`.
fn owned_by(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, uid: &str) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == uid)
}

fn source_kind(s: &Source) -> &'static str {
    match s {
        Source::Http { .. } => "http",
        Source::Registry { .. } => "registry",
        Source::Claim(_) => "claim",
        Source::Upload => "upload",
    }
}

/// Creates `obj`; one that exists already (a racing reconcile) is fine.
async fn create<K>(api: &Api<K>, obj: &K) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(Error::from(e)),
    }
}

/// What follows a written status: `job`'s objects deleted once its Pod reported, and when to
/// look again (a data source that is not ready has no watch here: in 2 s).
pub async fn finish(
    ctx: &Context,
    job: &std::result::Result<Job, NotReady>,
    state: &State,
) -> Result<kube::runtime::controller::Action> {
    use kube::runtime::controller::Action;
    match job {
        Err(_) => Ok(Action::requeue(std::time::Duration::from_secs(2))),
        Ok(job) => {
            if matches!(state, State::Succeeded(_) | State::Failed(_)) {
                clean_up(ctx, job).await?;
            }
            Ok(Action::await_change())
        }
    }
}

/// Deletes `job`'s Pod, Secret and Service (each may be gone already).
pub async fn clean_up(ctx: &Context, job: &Job) -> Result<()> {
    let ns = &job.owner.namespace;
    let name = job.name();
    let dp = DeleteParams::background();
    let gone = |r: std::result::Result<_, kube::Error>| match r {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(Error::from(e)),
    };
    gone(
        Api::<Pod>::namespaced(ctx.client.clone(), ns)
            .delete(&name, &dp)
            .await
            .map(|_| ()),
    )?;
    gone(
        Api::<Secret>::namespaced(ctx.client.clone(), ns)
            .delete(&name, &dp)
            .await
            .map(|_| ()),
    )?;
    if job.source == Source::Upload {
        gone(
            Api::<Service>::namespaced(ctx.client.clone(), ns)
                .delete(&name, &dp)
                .await
                .map(|_| ()),
        )?;
    }
    Ok(())
}

/// The size of claim `pvc` in bytes, from its request.
pub fn claim_bytes(pvc: &PersistentVolumeClaim) -> Option<u64> {
    let q = pvc
        .spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")?;
    bytes(&q.0)
}

/// A quantity in bytes (`10Gi` → 10737418240).
pub fn bytes(quantity: &str) -> Option<u64> {
    u64::try_from(crate::quantity::millis(quantity)? / 1000).ok()
}

/// Deletes `image` from DVCR with the controller's DVCR credentials; an image that is gone
/// already is fine.
pub async fn delete_from_dvcr(ctx: &Context, image: &str) -> Result<()> {
    let secret = settings_secret(ctx, &ctx.data.dvcr_secret).await?;
    let image: virtualization_dvcr::ImageReference = image.parse()?;
    virtualization_dvcr::delete_image_with_secret(
        &image,
        secret.get(".dockerconfigjson").map(Vec::as_slice),
        secret.get("ca.crt").map(Vec::as_slice),
    )
    .await?;
    Ok(())
}
