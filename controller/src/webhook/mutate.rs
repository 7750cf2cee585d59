//! The mutating webhook of `VirtualMachine`s: a VM created without a class gets the cluster's
//! default class, the one `VirtualMachineClass` annotated [`DEFAULT_CLASS_ANNOTATION`]` =
//! "true"` (none, or more than one, leaves the VM as it is).

use kube::Api;
use serde_json::{Value, json};

use crate::resources::VirtualMachineClass;

/// Path of the mutating webhook.
pub const MUTATE_PATH: &str = "/mutate-virtualization-deckhouse-io-v1alpha2-virtualmachine";
/// The annotation marking the default class.
pub const DEFAULT_CLASS_ANNOTATION: &str = "virtualmachineclass.virtualization.deckhouse.io/is-default-class";

/// The default class among `classes`: the only one annotated as such.
pub fn default_class(classes: &[VirtualMachineClass]) -> Option<&str> {
    let mut marked = classes.iter().filter(|c| {
        c.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
            .is_some_and(|v| v == "true")
    });
    let first = marked.next()?;
    match marked.next() {
        Some(_) => None,
        None => first.metadata.name.as_deref(),
    }
}

/// The JSON patch giving `vm` (an object as reviewed) `class` when it names none.
pub fn class_patch(vm: &Value, class: &str) -> Option<Value> {
    let spec = vm.get("spec")?;
    match spec.get("virtualMachineClassName") {
        Some(Value::String(s)) if !s.is_empty() => None,
        _ => Some(json!([{"op": "add", "path": "/spec/virtualMachineClassName", "value": class}])),
    }
}

/// The answer to an AdmissionReview of a VM: allowed, with the default class's patch when the
/// VM names no class. A class list that fails allows the VM unchanged (the validating webhook
/// and the controller then see it without a class).
pub async fn review(body: &[u8], client: &kube::Client) -> Result<Value, String> {
    use base64::Engine as _;
    let (uid, request) = super::request(body)?;
    let uid = uid.as_str();
    let mut response = json!({"uid": uid, "allowed": true});
    let object = &request["object"];
    if request["operation"] == "CREATE" && class_patch(object, "").is_some() {
        let classes: Api<VirtualMachineClass> = Api::all(client.clone());
        match classes.list(&Default::default()).await {
            Ok(list) => {
                if let Some(class) = default_class(&list.items)
                    && let Some(patch) = class_patch(object, class)
                {
                    tracing::info!(
                        namespace = object["metadata"]["namespace"].as_str().unwrap_or_default(),
                        name = object["metadata"]["name"].as_str().unwrap_or_default(),
                        class,
                        "default class given"
                    );
                    response["patchType"] = json!("JSONPatch");
                    response["patch"] =
                        json!(base64::engine::general_purpose::STANDARD.encode(patch.to_string()));
                }
            }
            Err(e) => tracing::warn!(error = %e, "VirtualMachineClasses could not be listed"),
        }
    }
    Ok(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, default: Option<&str>) -> VirtualMachineClass {
        let mut c: VirtualMachineClass = serde_json::from_value(json!({
            "apiVersion": "virtualization.deckhouse.io/v1alpha2",
            "kind": "VirtualMachineClass",
            "metadata": {"name": name},
            "spec": {},
        }))
        .expect("a class");
        if let Some(v) = default {
            c.metadata.annotations = Some([(DEFAULT_CLASS_ANNOTATION.to_owned(), v.to_owned())].into());
        }
        c
    }

    #[test]
    fn the_only_marked_class_is_the_default() {
        assert_eq!(
            default_class(&[class("a", None), class("b", Some("true"))]),
            Some("b")
        );
        assert_eq!(default_class(&[class("a", Some("false"))]), None);
        assert_eq!(
            default_class(&[class("a", Some("true")), class("b", Some("true"))]),
            None,
            "two defaults: none"
        );
    }

    #[test]
    fn only_a_vm_without_a_class_is_patched() {
        let p = class_patch(&json!({"spec": {"cpu": {}}}), "gen").expect("a patch");
        assert_eq!(p[0]["value"], "gen");
        assert_eq!(p[0]["path"], "/spec/virtualMachineClassName");
        assert!(class_patch(&json!({"spec": {"virtualMachineClassName": "x"}}), "gen").is_none());
        assert!(class_patch(&json!({"spec": {"virtualMachineClassName": ""}}), "gen").is_some());
        assert!(class_patch(&json!({}), "gen").is_none());
    }
}
