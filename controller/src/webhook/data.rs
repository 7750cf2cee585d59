//! Validation of `VirtualImage`s and `VirtualDisk`s: a data source that names its member, an
//! `http` or `https` URL, hex checksums of the right length, and a data source (and an image's
//! storage) that does not change once provisioning started.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::response;
use crate::resources::{DiskPhase, ImagePhase, VirtualDisk, VirtualImage, data_source};

/// Path of the VirtualImage webhook.
pub const IMAGE_PATH: &str = "/validate-virtualization-deckhouse-io-v1alpha2-virtualimage";
/// Path of the VirtualDisk webhook.
pub const DISK_PATH: &str = "/validate-virtualization-deckhouse-io-v1alpha2-virtualdisk";

/// Checks an image, and against its previous version on an update.
pub fn check_image(new: &VirtualImage, old: Option<&VirtualImage>) -> Result<(), String> {
    data_source::validate("spec.dataSource", &new.spec.data_source)?;
    let Some(old) = old else { return Ok(()) };
    let phase = old.status.as_ref().and_then(|s| s.phase);
    if matches!(phase, None | Some(ImagePhase::Pending)) {
        return Ok(());
    }
    let phase = phase.map(|p| format!("{p:?}")).unwrap_or_default();
    if new.spec.data_source != old.spec.data_source {
        return Err(immutable("VirtualImage", "spec.dataSource", &phase));
    }
    if new.spec.storage != old.spec.storage
        || new.spec.persistent_volume_claim != old.spec.persistent_volume_claim
    {
        return Err(immutable("VirtualImage", "spec.storage", &phase));
    }
    Ok(())
}

/// Checks a disk, and against its previous version on an update.
pub fn check_disk(new: &VirtualDisk, old: Option<&VirtualDisk>) -> Result<(), String> {
    if let Some(ds) = &new.spec.data_source {
        data_source::validate("spec.dataSource", ds)?;
    }
    let Some(old) = old else { return Ok(()) };
    let phase = old.status.as_ref().and_then(|s| s.phase);
    if old.spec.data_source.is_none() && phase.is_some() && new.spec.data_source.is_some() {
        return Err("spec.dataSource cannot be added to a VirtualDisk that is already provisioned".into());
    }
    if matches!(phase, None | Some(DiskPhase::Pending)) {
        return Ok(());
    }
    if new.spec.data_source != old.spec.data_source {
        let phase = phase.map(|p| format!("{p:?}")).unwrap_or_default();
        return Err(immutable("VirtualDisk", "spec.dataSource", &phase));
    }
    Ok(())
}

fn immutable(kind: &str, field: &str, phase: &str) -> String {
    format!("{field} of a {kind} cannot change once provisioning started (phase {phase})")
}

/// The answer to an AdmissionReview of an image.
pub fn review_image(body: &[u8]) -> Result<Value, String> {
    review(body, "VirtualImage", |new: &VirtualImage, old| {
        check_image(new, old.as_ref())
    })
}

/// The answer to an AdmissionReview of a disk.
pub fn review_disk(body: &[u8]) -> Result<Value, String> {
    review(body, "VirtualDisk", |new: &VirtualDisk, old| {
        check_disk(new, old.as_ref())
    })
}

fn review<K: DeserializeOwned>(
    body: &[u8],
    kind: &str,
    check: impl Fn(&K, Option<K>) -> Result<(), String>,
) -> Result<Value, String> {
    let (uid, request) = super::request(body)?;
    let uid = uid.as_str();
    let object = &request["object"];
    if object.is_null() {
        return Ok(response(uid, Ok(())));
    }
    let new: K = match serde_json::from_value(object.clone()) {
        Ok(k) => k,
        Err(e) => return Ok(response(uid, Err(format!("not a {kind}: {e}")))),
    };
    let old = match &request["oldObject"] {
        Value::Null => None,
        o => serde_json::from_value(o.clone()).ok(),
    };
    let verdict = check(&new, old);
    if let Err(message) = &verdict {
        tracing::info!(
            kind,
            namespace = object["metadata"]["namespace"].as_str().unwrap_or_default(),
            name = object["metadata"]["name"].as_str().unwrap_or_default(),
            %message,
            "denied"
        );
    }
    Ok(response(uid, verdict))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn image(url: &str, phase: Option<&str>) -> VirtualImage {
        serde_json::from_value(json!({
            "apiVersion": "virtualization.deckhouse.io/v1alpha2",
            "kind": "VirtualImage",
            "metadata": {"name": "i", "namespace": "ns"},
            "spec": {"dataSource": {"type": "HTTP", "http": {"url": url}}},
            "status": phase.map(|p| json!({"phase": p})),
        }))
        .expect("an image")
    }

    #[test]
    fn images_need_an_http_url() {
        assert_eq!(check_image(&image("https://x/a.img", None), None), Ok(()));
        let e = check_image(&image("file:///etc/passwd", None), None).unwrap_err();
        assert!(e.contains("scheme must be http or https"), "{e}");
    }

    #[test]
    fn the_data_source_is_fixed_once_provisioning_started() {
        let old = image("https://x/a.img", Some("Provisioning"));
        let e = check_image(&image("https://x/b.img", None), Some(&old)).unwrap_err();
        assert_eq!(
            e,
            "spec.dataSource of a VirtualImage cannot change once provisioning started (phase Provisioning)"
        );
        assert_eq!(check_image(&image("https://x/a.img", None), Some(&old)), Ok(()));
        let pending = image("https://x/a.img", Some("Pending"));
        assert_eq!(
            check_image(&image("https://x/b.img", None), Some(&pending)),
            Ok(())
        );
    }

    #[test]
    fn reviews_answer_with_the_request_uid() {
        let obj = serde_json::to_value(image("ftp://x", None)).expect("json");
        let body = json!({"request": {"uid": "r1", "operation": "CREATE", "object": obj}});
        let out = review_image(body.to_string().as_bytes()).expect("a review");
        assert_eq!(out["response"]["uid"], "r1");
        assert_eq!(out["response"]["allowed"], false);
        let body = json!({"request": {"uid": "r2", "object": {"spec": 1}}});
        let out = review_disk(body.to_string().as_bytes()).expect("a review");
        assert_eq!(out["response"]["allowed"], false);
        assert!(review_disk(b"[]").is_err());
    }
}
