//! `VirtualImage`: a disk image imported into DVCR (the cluster's own container registry) or
//! into a PersistentVolumeClaim, for VMs to boot from or disks to be filled from.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;
use super::data_source::{DataSource, DownloadSpeed, ImageUploadUrls};

/// An image, imported once from its data source. Its data source cannot change once
/// provisioning started.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "virtualization.deckhouse.io",
    version = "v1alpha2",
    kind = "VirtualImage",
    namespaced,
    shortname = "vi",
    category = "all",
    category = "virtualization",
    status = "VirtualImageStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"CDROM","type":"boolean","jsonPath":".status.cdrom"}"#,
    printcolumn = r#"{"name":"Progress","type":"string","jsonPath":".status.progress"}"#,
    printcolumn = r#"{"name":"StoredSize","type":"string","jsonPath":".status.size.stored"}"#,
    printcolumn = r#"{"name":"UnpackedSize","type":"string","jsonPath":".status.size.unpacked"}"#,
    printcolumn = r#"{"name":"RegistryURL","type":"string","jsonPath":".status.target.registryURL","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualImageSpec {
    /// Where the image is kept: `ContainerRegistry` (DVCR, the default) or
    /// `PersistentVolumeClaim`.
    #[serde(default)]
    pub storage: ImageStorage,
    /// For `PersistentVolumeClaim` storage: the claim's StorageClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<ImageClaim>,
    /// Where the data comes from.
    pub data_source: DataSource,
}

/// Where a [`VirtualImage`] is kept.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ImageStorage {
    /// In DVCR, as a container image (`<dvcr>/vi/<namespace>/<name>:<uid>`).
    #[default]
    ContainerRegistry,
    /// In a PersistentVolumeClaim of the image's namespace, as a raw disk.
    PersistentVolumeClaim,
}

/// The claim of a `PersistentVolumeClaim` image.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageClaim {
    /// The StorageClass; the cluster's default when not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

/// What the controller reports about an image.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualImageStatus {
    /// Where the image is in its life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ImagePhase>,
    /// How much of the import is done (`0%` ... `100%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// How fast the data was fetched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub download_speed: Option<DownloadSpeed>,
    /// The stored and the unpacked (virtual) size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<ImageSize>,
    /// The stored format: `qcow2`, `raw` or `iso`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Whether the image is a CD-ROM (an `iso`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cdrom: Option<bool>,
    /// Where the image is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<ImageTarget>,
    /// For an `Upload` source: where to upload.
    #[serde(default, rename = "imageUploadURLs", skip_serializing_if = "Option::is_none")]
    pub image_upload_urls: Option<ImageUploadUrls>,
    /// `DatasourceReady` and `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The sizes of an image.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageSize {
    /// Stored size, human-readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<String>,
    /// Stored size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_bytes: Option<String>,
    /// Virtual size of the disk, human-readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unpacked: Option<String>,
    /// Virtual size of the disk in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unpacked_bytes: Option<String>,
}

/// Where an image is kept.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageTarget {
    /// The image in DVCR.
    #[serde(default, rename = "registryURL", skip_serializing_if = "Option::is_none")]
    pub registry_url: Option<String>,
    /// The claim holding the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_name: Option<String>,
}

/// The phase of a VirtualImage.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ImagePhase {
    /// Waiting for its data source or for the importer to start.
    Pending,
    /// Being imported.
    Provisioning,
    /// Waiting for the user to upload the data.
    WaitForUserUpload,
    /// Imported: VMs and disks can use it.
    Ready,
    /// The import failed; the `Ready` condition says why.
    Failed,
    /// Being deleted.
    Terminating,
}
