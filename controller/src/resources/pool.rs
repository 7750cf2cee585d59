//! `VirtualMachinePool` (`vmpool`): a number of alike VMs made from one template, each with its
//! own disks made from disk templates, scaled through the `scale` subresource.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Condition, VirtualDiskSpec, VirtualMachineSpec};

/// A set of `replicas` VMs named `NAME-0`, `NAME-1`, ..., made from
/// `virtualMachineTemplate`, each with a disk `T-NAME-INDEX` per disk template `T`. The pool
/// owns them: deleting it deletes them (the garbage collector). `kubectl scale` changes
/// `replicas`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "virtualization.deckhouse.io",
    version = "v1alpha2",
    kind = "VirtualMachinePool",
    namespaced,
    shortname = "vmpool",
    category = "all",
    category = "virtualization",
    status = "VirtualMachinePoolStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachinePoolSpec {
    /// How many VMs the pool has (default 1).
    #[serde(default = "one")]
    #[schemars(range(min = 0))]
    pub replicas: i32,
    /// What every VM of the pool is made from. The template applies to VMs created after it
    /// changes; existing VMs are left as they are.
    pub virtual_machine_template: VirtualMachineTemplate,
    /// The disks every VM gets, one of each: a `blockDeviceRefs` entry of kind `VirtualDisk`
    /// naming a template's `metadata.name` refers to the VM's own copy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub virtual_disk_templates: Vec<VirtualDiskTemplate>,
    /// Which VMs are deleted first when the pool scales down: `Newest` (the default) or
    /// `Oldest`.
    #[serde(default)]
    pub scale_down_policy: ScaleDownPolicy,
}

fn one() -> i32 {
    1
}

/// The template of a pool's VMs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineTemplate {
    /// Labels and annotations of every VM.
    #[serde(default)]
    pub metadata: TemplateMetadata,
    /// The spec of every VM.
    pub spec: VirtualMachineSpec,
}

/// Labels and annotations a template gives the objects made from it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Labels (the pool's own label is added).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The template of one disk of every VM of a pool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualDiskTemplate {
    /// The template's name and the disks' labels and annotations.
    pub metadata: DiskTemplateMetadata,
    /// The spec of every disk made from the template.
    pub spec: VirtualDiskSpec,
}

/// The metadata of a disk template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskTemplateMetadata {
    /// The template's name `T`: VM `POOL-INDEX` gets disk `T-POOL-INDEX`.
    pub name: String,
    /// Labels (the pool's own label is added).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Which VMs a pool deletes first when it scales down, by creation time; VMs created in the
/// same second go by index, the higher first.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ScaleDownPolicy {
    /// The most recently created VMs go first.
    #[default]
    Newest,
    /// The longest-lived VMs go first.
    Oldest,
}

/// What the controller reports about a pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachinePoolStatus {
    /// How many VMs the pool has, not counting those being deleted.
    #[serde(default)]
    pub replicas: i32,
    /// How many of them are `Running`.
    #[serde(default)]
    pub ready_replicas: i32,
    /// The label selector of the pool's VMs, as the `scale` subresource reports it
    /// (`virtualization.deckhouse.io/pool=NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// The `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: every VM the pool should have runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
