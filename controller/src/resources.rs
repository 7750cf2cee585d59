//! The user-facing resources of `virtualization.deckhouse.io/v1alpha2` this controller serves:
//! `VirtualMachine`, `VirtualMachineOperation`, `VirtualMachineClass`, `VirtualDisk` and
//! `VirtualImage`. Their CRDs are generated from these types ([`crds`]) and committed under
//! `controller/crds/`.

pub mod data_source;
mod image;
mod pool;
mod snapshot;
mod vmbda;

pub use data_source::{DataSource, DataSourceType, ObjectRefKind};
pub use image::{
    ImageClaim, ImagePhase, ImageSize, ImageStorage, ImageTarget, VirtualImage, VirtualImageSpec,
    VirtualImageStatus,
};
pub use pool::{
    DiskTemplateMetadata, ScaleDownPolicy, TemplateMetadata, VirtualDiskTemplate, VirtualMachinePool,
    VirtualMachinePoolSpec, VirtualMachinePoolStatus, VirtualMachineTemplate,
};
pub use snapshot::{
    KeepIpAddress, SnapshotPhase, VirtualDiskSnapshot, VirtualDiskSnapshotSpec, VirtualDiskSnapshotStatus,
    VirtualMachineSnapshot, VirtualMachineSnapshotSpec, VirtualMachineSnapshotStatus,
};
pub use vmbda::{
    AttachedBlockDevice, AttachedKind, AttachmentPhase, VirtualMachineBlockDeviceAttachment,
    VirtualMachineBlockDeviceAttachmentSpec, VirtualMachineBlockDeviceAttachmentStatus,
};

use std::collections::BTreeMap;

use kube::{CustomResource, CustomResourceExt as _};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The API group of the user-facing resources.
pub const GROUP: &str = "virtualization.deckhouse.io";
/// Their version.
pub const VERSION: &str = "v1alpha2";

/// A virtual machine as users write it. The controller renders a KubeVirt `VirtualMachine` of
/// the same name from it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "virtualization.deckhouse.io",
    version = "v1alpha2",
    kind = "VirtualMachine",
    namespaced,
    shortname = "vm",
    category = "all",
    category = "virtualization",
    status = "VirtualMachineStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.nodeName"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineSpec {
    /// When the VM runs: `AlwaysOn`, `AlwaysOff`, `Manual` or `AlwaysOnUnlessStoppedManually`
    /// (the default).
    #[serde(default)]
    pub run_policy: RunPolicy,
    /// Virtual CPUs.
    pub cpu: CpuSpec,
    /// Guest memory.
    pub memory: MemorySpec,
    /// First-boot configuration (cloud-init).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<Provisioning>,
    /// Node labels the VM must be scheduled on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Taints the VM tolerates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// The `VirtualMachineClass` whose CPU rules, nodeSelector and tolerations apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine_class_name: Option<String>,
    /// Disks attached to the VM, in boot order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub block_device_refs: Vec<BlockDeviceRef>,
}

/// A block device of a VM: a [`VirtualDisk`] or [`VirtualImage`] of the VM's namespace, by name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceRef {
    /// What it refers to.
    pub kind: BlockDeviceKind,
    /// The name of the referred object.
    pub name: String,
}

/// The kinds a [`BlockDeviceRef`] can refer to.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum BlockDeviceKind {
    /// A [`VirtualDisk`].
    VirtualDisk,
    /// A [`VirtualImage`], read-only: a container disk (a CD-ROM for an `iso`) or a read-only
    /// claim.
    VirtualImage,
}

/// A class of VMs set up by the cluster admin: which core counts are allowed, and the nodes
/// (nodeSelector, tolerations) its VMs run on. Cluster-scoped.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "virtualization.deckhouse.io",
    version = "v1alpha2",
    kind = "VirtualMachineClass",
    shortname = "vmc",
    category = "virtualization",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineClassSpec {
    /// CPU rules.
    #[serde(default)]
    pub cpu: ClassCpu,
    /// Node labels merged into the nodeSelector of every VM of the class (the class's value
    /// wins on a shared key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Tolerations added to every VM of the class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
}

/// The CPU rules of a class.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassCpu {
    /// The core counts a VM of the class may have; empty allows any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cores: Vec<i32>,
}

/// A disk: the controller creates a PersistentVolumeClaim for it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "virtualization.deckhouse.io",
    version = "v1alpha2",
    kind = "VirtualDisk",
    namespaced,
    shortname = "vd",
    category = "all",
    category = "virtualization",
    status = "VirtualDiskStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Capacity","type":"string","jsonPath":".status.capacity"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualDiskSpec {
    /// The claim to create.
    pub persistent_volume_claim: DiskClaim,
    /// What the disk is filled with; a blank disk when not set. It cannot change once
    /// provisioning started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_source: Option<DataSource>,
}

/// The PersistentVolumeClaim of a disk.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskClaim {
    /// Requested size, a quantity such as `10Gi`.
    pub size: String,
    /// The StorageClass; the cluster's default when not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

/// What the controller reports about a disk.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualDiskStatus {
    /// Where the disk is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<DiskPhase>,
    /// The bound claim's capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<String>,
    /// The claim holding the disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<DiskTarget>,
    /// For a disk with a data source: how much of it is filled (`0%` ... `100%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// For a disk with a data source: how fast the data was fetched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub download_speed: Option<data_source::DownloadSpeed>,
    /// For an `Upload` source: where to upload.
    #[serde(default, rename = "imageUploadURLs", skip_serializing_if = "Option::is_none")]
    pub image_upload_urls: Option<data_source::ImageUploadUrls>,
    /// For a disk with a data source: `DatasourceReady` and `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Where a disk's data lives.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskTarget {
    /// The PersistentVolumeClaim's name (same namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_name: Option<String>,
}

/// The phase of a VirtualDisk.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DiskPhase {
    /// The claim is not created yet, or the data source is not ready.
    Pending,
    /// Being filled from its data source.
    Provisioning,
    /// Waiting for the user to upload the data.
    WaitForUserUpload,
    /// Filling it failed; the `Ready` condition says why.
    Failed,
    /// The claim exists and is not bound yet (a volume is made when a consumer appears).
    WaitForFirstConsumer,
    /// The claim is bound: the disk can be used.
    Ready,
    /// The claim lost its volume.
    Lost,
    /// Being deleted.
    Terminating,
}

/// When a VM runs, and who starts and stops it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RunPolicy {
    /// Always running; restarted when it stops.
    AlwaysOn,
    /// Never running.
    AlwaysOff,
    /// Started and stopped only by operations.
    Manual,
    /// Started when created, then started and stopped by operations.
    #[default]
    AlwaysOnUnlessStoppedManually,
}

/// Virtual CPUs of a VM.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuSpec {
    /// Number of cores (at least 1).
    pub cores: i32,
    /// Guaranteed share of each core, `"5%"` to `"100%"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_fraction: Option<String>,
}

/// Guest memory of a VM.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemorySpec {
    /// A Kubernetes quantity, e.g. `1Gi`.
    pub size: String,
}

/// First-boot configuration of a VM.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Provisioning {
    /// cloud-init user data, given to the guest on a NoCloud disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
}

/// A toleration of a node taint (the fields of `core/v1` `Toleration`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// Taint key; empty with `Exists` matches every key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `Exists` or `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// Taint value for `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`; empty matches all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
    /// How long a `NoExecute` taint is tolerated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

/// What the controller reports about a VM.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineStatus {
    /// Where the VM is in its life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<VmPhase>,
    /// The node the VM runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// `Running`, `ConfigurationApplied`, `AwaitingRestartToApplyConfiguration`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The phase of a VM (Deckhouse's set).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum VmPhase {
    /// Not started yet, or its state is unknown.
    Pending,
    /// Being started.
    Starting,
    /// Running.
    Running,
    /// Paused.
    Pause,
    /// Being stopped.
    Stopping,
    /// Stopped.
    Stopped,
    /// Being deleted.
    Terminating,
    /// Moving to another node.
    Migrating,
    /// Running with problems.
    Degraded,
}

/// A condition (the fields of `meta/v1` `Condition`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition's type, e.g. `Running`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// A CamelCase reason.
    pub reason: String,
    /// A human-readable message.
    pub message: String,
    /// When the status last changed (RFC 3339).
    pub last_transition_time: String,
    /// The `metadata.generation` the condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// An operation on a VM: start, stop, restart or migrate it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "virtualization.deckhouse.io",
    version = "v1alpha2",
    kind = "VirtualMachineOperation",
    namespaced,
    shortname = "vmop",
    category = "virtualization",
    status = "VirtualMachineOperationStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.type"}"#,
    printcolumn = r#"{"name":"VirtualMachine","type":"string","jsonPath":".spec.virtualMachineName"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineOperationSpec {
    /// What to do.
    #[serde(rename = "type")]
    pub type_: OperationType,
    /// The VM (same namespace) to do it to.
    pub virtual_machine_name: String,
}

/// What a VirtualMachineOperation does.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum OperationType {
    /// Start a stopped VM.
    Start,
    /// Stop a running VM.
    Stop,
    /// Stop, then start, a running VM.
    Restart,
    /// Move a running VM to another node (a KubeVirt VirtualMachineInstanceMigration).
    Migrate,
}

/// What the controller reports about an operation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineOperationStatus {
    /// Where the operation is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<OperationPhase>,
    /// `Completed`, saying why the operation is where it is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// For a restart: the uid of the instance that was stopped (the restart is done when a
    /// different instance runs).
    #[serde(
        default,
        rename = "stoppedInstanceUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub stopped_instance_uid: Option<String>,
}

/// The phase of a VirtualMachineOperation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum OperationPhase {
    /// Not acted on yet.
    Pending,
    /// The request is sent; waiting for the VM to get there.
    InProgress,
    /// Done.
    Completed,
    /// Cannot be done; the `Completed` condition says why.
    Failed,
}

/// A controller ownerReference to our object of `kind` named `name` (uid `uid`), as every
/// object the controller makes carries: deleted with it by the garbage collector, blocking its
/// foreground deletion.
pub fn controller_reference(kind: &str, name: &str, uid: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// The CRDs of this controller with the file names they are committed under in
/// `controller/crds/`.
pub fn crds() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        ("virtualmachines.yaml", VirtualMachine::crd()),
        ("virtualmachineoperations.yaml", VirtualMachineOperation::crd()),
        ("virtualmachineclasses.yaml", VirtualMachineClass::crd()),
        ("virtualdisks.yaml", VirtualDisk::crd()),
        ("virtualimages.yaml", VirtualImage::crd()),
        ("virtualmachinepools.yaml", VirtualMachinePool::crd()),
        ("virtualdisksnapshots.yaml", VirtualDiskSnapshot::crd()),
        ("virtualmachinesnapshots.yaml", VirtualMachineSnapshot::crd()),
        (
            "virtualmachineblockdeviceattachments.yaml",
            VirtualMachineBlockDeviceAttachment::crd(),
        ),
    ]
}

/// The committed text of a CRD: a generated-file comment and the CRD as indented JSON (which
/// is YAML, so `kubectl apply -f` takes it).
pub fn crd_text(crd: &CustomResourceDefinition) -> String {
    let json = serde_json::to_string_pretty(crd).expect("a CRD serializes");
    format!(
        "# Generated from controller/src/resources.rs; do not edit.\n# Regenerate: UPDATE_CRDS=1 cargo test -p virtualization-controller --test crds\n{json}\n"
    )
}
