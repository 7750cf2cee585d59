//! Where a data job is, as the statuses of images and disks both show it: the
//! `DatasourceReady` and `Ready` conditions, the progress, the upload URL and the speed, from
//! the data source's readiness and what the data Pod reports.

use super::data::NotReady;
use crate::conditions::{Builder, DATASOURCE_READY, READY, reason};
use crate::datapod::{Job, Source, State};
use crate::resources::Condition;
use crate::resources::data_source::{DownloadSpeed, ImageUploadUrls, speed_text};
use virtualization_dvcr::TerminationMessage;

/// The stage of a data job.
#[derive(Debug, Clone, PartialEq)]
pub enum Stage {
    /// The data source is not ready.
    Pending,
    /// The data Pod starts or imports.
    Provisioning,
    /// The uploader waits for the user.
    WaitForUserUpload,
    /// The data Pod failed; the `Ready` condition says why.
    Failed,
    /// The data Pod is done: what it reported. `Ready` is left for the caller to say.
    Done(Box<TerminationMessage>),
}

/// A data job's part of a status.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Its stage.
    pub stage: Stage,
    /// `DatasourceReady`, then `Ready` (a placeholder when [`Stage::Done`]).
    pub conditions: Vec<Condition>,
    /// `0%` while importing, `100%` when done.
    pub progress: Option<String>,
    /// Where to upload, while an uploader waits.
    pub upload_urls: Option<ImageUploadUrls>,
    /// The fetch's average speed, when done.
    pub download_speed: Option<DownloadSpeed>,
}

/// The report for `state` of `job`'s Pod (`Err`: the data source is not ready); `old` are the
/// status's conditions so far.
pub fn report(
    old: &[Condition],
    source: &Result<&Job, &NotReady>,
    state: &State,
    generation: Option<i64>,
    now: &str,
) -> Report {
    let cond = Builder::new(old, generation, now);
    let job = match source {
        Err(nr) => {
            return Report {
                stage: Stage::Pending,
                conditions: vec![
                    cond.make(DATASOURCE_READY, false, nr.reason, nr.message.clone()),
                    cond.make(READY, false, reason::PENDING, "waiting for the data source"),
                ],
                progress: None,
                upload_urls: None,
                download_speed: None,
            };
        }
        Ok(job) => job,
    };
    let upload = job.source == Source::Upload;
    let mut r = Report {
        stage: Stage::Provisioning,
        conditions: vec![cond.make(
            DATASOURCE_READY,
            true,
            reason::DATASOURCE_READY,
            "the data source is ready",
        )],
        progress: None,
        upload_urls: upload.then(|| ImageUploadUrls {
            external: None,
            in_cluster: job.upload_url(),
        }),
        download_speed: None,
    };
    let ready = match state {
        State::Missing | State::Pending | State::Terminating => {
            let what = if upload {
                "the uploader is starting"
            } else {
                "the importer is starting"
            };
            cond.make(READY, false, reason::PROVISIONING, what)
        }
        State::Running if upload => {
            r.stage = Stage::WaitForUserUpload;
            let url = job.upload_url().unwrap_or_default();
            cond.make(
                READY,
                false,
                reason::WAIT_FOR_USER_UPLOAD,
                format!("upload the image: curl -T IMAGE {url}"),
            )
        }
        State::Running => {
            r.progress = Some("0%".into());
            cond.make(READY, false, reason::PROVISIONING, "importing")
        }
        State::Failed(why) => {
            r.stage = Stage::Failed;
            cond.make(READY, false, reason::PROVISIONING_FAILED, why.clone())
        }
        State::Succeeded(m) => {
            r.progress = Some("100%".into());
            r.upload_urls = None;
            r.download_speed = m.average_speed.filter(|s| *s > 0).map(|s| DownloadSpeed {
                avg: Some(speed_text(s)),
                avg_bytes: Some(s.to_string()),
            });
            r.stage = Stage::Done(m.clone());
            cond.make(READY, true, reason::READY, "imported")
        }
    };
    r.conditions.push(ready);
    r
}

/// Whether two statuses say the same, their conditions' times aside (`conditions` gives a
/// status's conditions).
pub fn same_status<T: Clone + PartialEq>(
    a: &T,
    b: &T,
    conditions: impl Fn(&mut T) -> &mut Vec<Condition>,
) -> bool {
    let strip = |s: &T| {
        let mut s = s.clone();
        for c in conditions(&mut s).iter_mut() {
            c.last_transition_time.clear();
        }
        s
    };
    strip(a) == strip(b)
}

/// Writes `new` as the whole status of object `name` when it says something other than `old`
/// ([`same_status`]); `true` when it wrote.
pub async fn write_status<K, S>(
    api: &kube::Api<K>,
    name: &str,
    old: &S,
    new: &S,
    conditions: impl Fn(&mut S) -> &mut Vec<Condition>,
) -> crate::Result<bool>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: Clone + PartialEq + serde::Serialize + std::fmt::Debug,
{
    if same_status(old, new, conditions) {
        return Ok(false);
    }
    let patch = serde_json::json!([{"op": "add", "path": "/status", "value": new}]);
    api.patch_status(
        name,
        &kube::api::PatchParams::default(),
        &super::json_patch(patch)?,
    )
    .await?;
    tracing::info!(status = ?new, "status");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapod::{Destination, Owner};

    fn job(source: Source) -> Job {
        Job {
            owner: Owner {
                kind: "VirtualImage",
                name: "i".into(),
                namespace: "ns".into(),
                uid: "u".into(),
            },
            source,
            destination: Destination::Registry("dvcr/vi/ns/i:u".into()),
        }
    }

    fn reasons(r: &Report) -> Vec<(&str, &str, &str)> {
        r.conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
            .collect()
    }

    #[test]
    fn each_state_has_its_stage_and_conditions() {
        let nr = NotReady {
            reason: "VirtualImageNotFound",
            message: "VirtualImage x not found".into(),
        };
        let r = report(&[], &Err(&nr), &State::Missing, None, "t");
        assert_eq!(r.stage, Stage::Pending);
        assert_eq!(
            reasons(&r),
            [
                ("DatasourceReady", "False", "VirtualImageNotFound"),
                ("Ready", "False", "Pending")
            ]
        );

        let upload = job(Source::Upload);
        let r = report(&[], &Ok(&upload), &State::Running, None, "t");
        assert_eq!(r.stage, Stage::WaitForUserUpload);
        assert!(
            r.conditions[1]
                .message
                .contains("curl -T IMAGE https://d8v-vi-uploader-u.ns.svc/upload")
        );
        assert!(r.upload_urls.is_some());

        let http = job(Source::Http {
            url: "http://x".into(),
            sha256: None,
            md5: None,
            ca: None,
        });
        let r = report(
            &[],
            &Ok(&http),
            &State::Failed("checksum mismatch".into()),
            None,
            "t",
        );
        assert_eq!(r.stage, Stage::Failed);
        assert_eq!(r.conditions[1].message, "checksum mismatch");

        let m = TerminationMessage {
            average_speed: Some(2 << 20),
            ..Default::default()
        };
        let r = report(&[], &Ok(&http), &State::Succeeded(Box::new(m)), None, "t");
        assert!(matches!(r.stage, Stage::Done(_)));
        assert_eq!(r.progress.as_deref(), Some("100%"));
        assert_eq!(r.download_speed.and_then(|s| s.avg).as_deref(), Some("2.0Mi/s"));
    }
}
