//! `VirtualMachineBlockDeviceAttachment` (`vmbda`): a disk hot-plugged into a running VM, for as
//! long as the object exists.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;

/// A disk attached to a running VM without restarting it; deleting the object unplugs it. The
/// spec cannot change.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "virtualization.deckhouse.io",
    version = "v1alpha2",
    kind = "VirtualMachineBlockDeviceAttachment",
    namespaced,
    shortname = "vmbda",
    category = "all",
    category = "virtualization",
    status = "VirtualMachineBlockDeviceAttachmentStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"VirtualMachineName","type":"string","jsonPath":".status.virtualMachineName"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "the spec of a VirtualMachineBlockDeviceAttachment cannot change"}]))]
pub struct VirtualMachineBlockDeviceAttachmentSpec {
    /// The VM, in the attachment's namespace.
    pub virtual_machine_name: String,
    /// The disk to attach.
    pub block_device_ref: AttachedBlockDevice,
}

/// The block device of an attachment.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttachedBlockDevice {
    /// `VirtualDisk`.
    pub kind: AttachedKind,
    /// Its name, in the attachment's namespace.
    pub name: String,
}

/// What can be hot-plugged.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum AttachedKind {
    /// A VirtualDisk's claim.
    VirtualDisk,
}

/// Where an attachment is in its life.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum AttachmentPhase {
    /// Waiting: the VM not running, the disk not ready.
    Pending,
    /// Requested; the disk is not yet in the guest.
    InProgress,
    /// In the guest: the VM's instance reports the volume ready.
    Attached,
    /// Cannot be attached; the conditions say why.
    Failed,
    /// Being deleted: the disk is being unplugged.
    Terminating,
}

impl AttachmentPhase {
    /// Every phase, in the order of the phase metrics.
    pub const ALL: [AttachmentPhase; 5] = [
        AttachmentPhase::Pending,
        AttachmentPhase::InProgress,
        AttachmentPhase::Attached,
        AttachmentPhase::Failed,
        AttachmentPhase::Terminating,
    ];

    /// The phase's name.
    pub fn as_str(self) -> &'static str {
        match self {
            AttachmentPhase::Pending => "Pending",
            AttachmentPhase::InProgress => "InProgress",
            AttachmentPhase::Attached => "Attached",
            AttachmentPhase::Failed => "Failed",
            AttachmentPhase::Terminating => "Terminating",
        }
    }
}

/// What the controller reports about an attachment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineBlockDeviceAttachmentStatus {
    /// Where the attachment is in its life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<AttachmentPhase>,
    /// The VM the disk is attached to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine_name: Option<String>,
    /// `VirtualMachineReady`, `BlockDeviceReady` and `Attached`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` the status is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
