//! Snapshots: a `VirtualDiskSnapshot` is a `VolumeSnapshot` of one disk's claim; a
//! `VirtualMachineSnapshot` takes one of each of a VM's disks, with the guest's filesystems
//! frozen meanwhile when the VM runs, so that the disks are consistent with each other.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;

/// Where a snapshot is in its life.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum SnapshotPhase {
    /// Waiting for what it needs (the VM, its disks ready).
    Pending,
    /// Being taken.
    InProgress,
    /// Taken: every volume snapshot is ready to use.
    Ready,
    /// Not taken; the conditions say why.
    Failed,
    /// Being deleted.
    Terminating,
}

impl SnapshotPhase {
    /// Every phase, in the order of the phase metrics.
    pub const ALL: [SnapshotPhase; 5] = [
        SnapshotPhase::Pending,
        SnapshotPhase::InProgress,
        SnapshotPhase::Ready,
        SnapshotPhase::Failed,
        SnapshotPhase::Terminating,
    ];

    /// The phase's name.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotPhase::Pending => "Pending",
            SnapshotPhase::InProgress => "InProgress",
            SnapshotPhase::Ready => "Ready",
            SnapshotPhase::Failed => "Failed",
            SnapshotPhase::Terminating => "Terminating",
        }
    }

    /// Whether nothing more happens to the snapshot.
    pub fn is_final(self) -> bool {
        matches!(self, SnapshotPhase::Ready | SnapshotPhase::Failed)
    }
}

fn yes() -> bool {
    true
}

/// A snapshot of one VirtualDisk: a `VolumeSnapshot` of the disk's claim, named as this object.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "virtualization.deckhouse.io",
    version = "v1alpha2",
    kind = "VirtualDiskSnapshot",
    namespaced,
    shortname = "vdsnapshot",
    category = "all",
    category = "virtualization",
    status = "VirtualDiskSnapshotStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Consistent","type":"boolean","jsonPath":".status.consistent"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "the spec of a VirtualDiskSnapshot cannot change"}]))]
pub struct VirtualDiskSnapshotSpec {
    /// The disk, in the snapshot's namespace.
    pub virtual_disk_name: String,
    /// Whether the snapshot must be consistent: a disk in use by a running VM is then taken
    /// only with the guest's filesystems frozen (a `VirtualMachineSnapshot` does that). The
    /// default.
    #[serde(default = "yes")]
    pub required_consistency: bool,
    /// The `VolumeSnapshotClass`; the cluster's default for the driver when not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_snapshot_class_name: Option<String>,
}

/// What the controller reports about a disk snapshot.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualDiskSnapshotStatus {
    /// Where the snapshot is in its life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<SnapshotPhase>,
    /// The `VolumeSnapshot` of the disk's claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_snapshot_name: Option<String>,
    /// Whether the disk was taken consistently (no running VM writing to it, or its guest
    /// frozen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistent: Option<bool>,
    /// `VirtualDiskReady` and `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` the status is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A snapshot of a VM's disks, taken together.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "virtualization.deckhouse.io",
    version = "v1alpha2",
    kind = "VirtualMachineSnapshot",
    namespaced,
    shortname = "vmsnapshot",
    category = "all",
    category = "virtualization",
    status = "VirtualMachineSnapshotStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Consistent","type":"boolean","jsonPath":".status.consistent"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "the spec of a VirtualMachineSnapshot cannot change"}]))]
pub struct VirtualMachineSnapshotSpec {
    /// The VM, in the snapshot's namespace.
    pub virtual_machine_name: String,
    /// Whether the snapshot must be consistent: a running VM's guest is frozen while its disks
    /// are taken, and a freeze that fails fails the snapshot. The default.
    #[serde(default = "yes")]
    pub required_consistency: bool,
    /// Whether a VM restored from the snapshot keeps the VM's IP address.
    #[serde(default)]
    pub keep_ip_address: KeepIpAddress,
}

/// Whether a restored VM keeps its IP address.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum KeepIpAddress {
    /// It does (the default).
    #[default]
    Always,
    /// It gets a new one.
    Never,
}

/// What the controller reports about a VM snapshot.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineSnapshotStatus {
    /// Where the snapshot is in its life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<SnapshotPhase>,
    /// Whether the disks were taken together consistently (a stopped VM, or a frozen guest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistent: Option<bool>,
    /// The `VirtualDiskSnapshot`s taken, one per disk.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub virtual_disk_snapshot_names: Vec<String>,
    /// `VirtualMachineReady`, `BlockDevicesReady` and `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` the status is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
