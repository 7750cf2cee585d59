//! The manifests and files the cases write and read: VirtualMachines with original names, the
//! CRD fixtures.

use serde_json::Value;

/// The `metadata:` lines of a VM with a finalizer, an annotation and an ownerReference, all
/// with original names (for [`vm`]'s `meta`).
pub const FINALIZED_META: &str = "  finalizers: [kubevirt.io/virtualMachineControllerFinalize]\n  annotations: {kubevirt.io/note: hello}\n  ownerReferences:\n  - {apiVersion: kubevirt.io/v1, kind: VirtualMachineInstance, name: owner, uid: 6f0c0d3c-4f6e-4a8f-9d6c-000000000001}\n";

/// A VirtualMachine manifest with original names; `meta` is extra YAML under `metadata:`
/// (indented by four spaces).
pub fn vm(ns: &str, name: &str, labels: &[(&str, &str)], meta: &str) -> String {
    let labels = labels
        .iter()
        .map(|(k, v)| format!("\"{k}\": \"{v}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{{labels}}}\n{meta}spec:\n  running: false\n  template:\n    metadata:\n      labels: {{kubevirt.io/domain: {name}}}\n    spec:\n      domain:\n        devices: {{}}\n        resources: {{requests: {{memory: 64Mi}}}}\n"
    )
}

/// A YAML file as JSON.
pub fn yaml_file(path: &str) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}
