//! Where the data of a `VirtualImage` or a `VirtualDisk` comes from: an HTTP download, a
//! container image, another object, or an upload by the user.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The source of an image's or a disk's data. `type` says which of the other members is used.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataSource {
    /// Which source.
    #[serde(rename = "type")]
    pub type_: DataSourceType,
    /// For `HTTP`: the file to download.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpSource>,
    /// For `ContainerImage`: the image holding the disk under `disk/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_image: Option<ContainerImageSource>,
    /// For `ObjectRef`: the object whose data is copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectRefSource>,
}

/// The kinds of [`DataSource`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DataSourceType {
    /// Downloaded from an `http` or `https` URL.
    #[serde(rename = "HTTP")]
    Http,
    /// Copied from a container image (the KubeVirt `containerDisk` layout).
    ContainerImage,
    /// Copied from another `VirtualImage` or a `VirtualDisk`.
    ObjectRef,
    /// Uploaded by the user to the URL in `status.imageUploadURLs`.
    Upload,
}

/// An HTTP source.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpSource {
    /// The URL (`http` or `https`).
    pub url: String,
    /// Checksums the downloaded file must have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<Checksum>,
    /// PEM CA certificates trusted for an `https` URL, base64-encoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
}

/// Checksums of a downloaded file (lower-case hex).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Checksum {
    /// MD5, 32 hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub md5: Option<String>,
    /// SHA-256, 64 hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// A container image source.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerImageSource {
    /// The image (`registry/path:tag` or `registry/path@sha256:...`).
    pub image: String,
    /// A `kubernetes.io/dockerconfigjson` Secret of the same namespace to pull it with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secret: Option<SecretName>,
    /// PEM CA certificates trusted for the registry, base64-encoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
}

/// A Secret by name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretName {
    /// The Secret's name.
    pub name: String,
}

/// Another object of the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRefSource {
    /// Its kind.
    pub kind: ObjectRefKind,
    /// Its name.
    pub name: String,
}

/// The kinds an [`ObjectRefSource`] can name.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ObjectRefKind {
    /// A `VirtualImage`.
    VirtualImage,
    /// A `VirtualDisk`.
    VirtualDisk,
}

/// How fast the data was fetched.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DownloadSpeed {
    /// The average, human-readable (`12.3Mi/s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avg: Option<String>,
    /// The average in bytes per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avg_bytes: Option<String>,
}

/// Where a user uploads the data of an `Upload` source.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageUploadUrls {
    /// From outside the cluster (when an ingress is set up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<String>,
    /// From inside the cluster: `curl -T disk.qcow2 URL`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_cluster: Option<String>,
}

/// Checks a data source on its own: the member its `type` names is there, the URL is `http` or
/// `https`, checksums are hex of the right length. `Err` names the field.
pub fn validate(field: &str, ds: &DataSource) -> Result<(), String> {
    let missing = |m: &str| format!("{field}.{m} is required for type {:?}", ds.type_);
    match ds.type_ {
        DataSourceType::Http => {
            let http = ds.http.as_ref().ok_or_else(|| missing("http"))?;
            let scheme = http.url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
            if !matches!(scheme.as_deref(), Some("http" | "https")) {
                return Err(format!(
                    "{field}.http.url {:?}: the scheme must be http or https",
                    http.url
                ));
            }
            if let Some(c) = &http.checksum {
                for (name, value, len) in [("md5", &c.md5, 32), ("sha256", &c.sha256, 64)] {
                    if let Some(v) = value
                        && (v.len() != len || !v.bytes().all(|b| b.is_ascii_hexdigit()))
                    {
                        return Err(format!(
                            "{field}.http.checksum.{name} {v:?} is not {len} hex digits"
                        ));
                    }
                }
            }
        }
        DataSourceType::ContainerImage => {
            let ci = ds
                .container_image
                .as_ref()
                .ok_or_else(|| missing("containerImage"))?;
            if ci.image.is_empty() || ci.image.contains("://") || ci.image.contains(char::is_whitespace) {
                return Err(format!(
                    "{field}.containerImage.image {:?} is not an image reference",
                    ci.image
                ));
            }
        }
        DataSourceType::ObjectRef => {
            let r = ds.object_ref.as_ref().ok_or_else(|| missing("objectRef"))?;
            if r.name.is_empty() {
                return Err(format!("{field}.objectRef.name is empty"));
            }
        }
        DataSourceType::Upload => {}
    }
    Ok(())
}

/// Human-readable bytes per second, in binary units (`12.3Mi/s`).
pub fn speed_text(bytes_per_second: u64) -> String {
    format!("{}/s", size_text(bytes_per_second))
}

/// Human-readable bytes, in binary units with one decimal (`1.5Gi`, `512B`).
pub fn size_text(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1}{}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(url: &str) -> DataSource {
        DataSource {
            type_: DataSourceType::Http,
            http: Some(HttpSource {
                url: url.into(),
                checksum: None,
                ca_bundle: None,
            }),
            container_image: None,
            object_ref: None,
        }
    }

    #[test]
    fn http_sources_need_an_http_url_and_hex_checksums() {
        assert_eq!(
            validate("spec.dataSource", &http("https://example.com/a.qcow2")),
            Ok(())
        );
        let e = validate("spec.dataSource", &http("ftp://example.com/a")).unwrap_err();
        assert!(e.contains("scheme must be http or https"), "{e}");
        let mut ds = http("http://x/a");
        ds.http.as_mut().expect("http").checksum = Some(Checksum {
            md5: None,
            sha256: Some("abc".into()),
        });
        let e = validate("spec.dataSource", &ds).unwrap_err();
        assert!(e.contains("spec.dataSource.http.checksum.sha256"), "{e}");
        ds.http = None;
        let e = validate("spec.dataSource", &ds).unwrap_err();
        assert!(e.contains("spec.dataSource.http is required"), "{e}");
    }

    #[test]
    fn the_type_names_the_member() {
        let ds = DataSource {
            type_: DataSourceType::ContainerImage,
            http: None,
            container_image: None,
            object_ref: None,
        };
        assert!(
            validate("s", &ds)
                .unwrap_err()
                .contains("s.containerImage is required")
        );
        let upload = DataSource {
            type_: DataSourceType::Upload,
            ..ds
        };
        assert_eq!(validate("s", &upload), Ok(()));
        assert_eq!(serde_json::to_value(DataSourceType::Http).expect("json"), "HTTP");
    }

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(size_text(512), "512B");
        assert_eq!(size_text(1536), "1.5Ki");
        assert_eq!(size_text(16 << 20), "16.0Mi");
        assert_eq!(speed_text(3 << 30), "3.0Gi/s");
    }
}
