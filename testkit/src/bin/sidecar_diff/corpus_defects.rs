//! Cases aimed at the defects of the Go sidecar that the project's tests name
//! (`rewriter/core/tests/go_bugs.rs`): upgrades, label maps holding `null`, the webhook
//! listener, nested JSON Patch paths, a patch's leading whitespace, webhook configuration
//! patches, and aggregated discovery of a renamed group with two versions, a scale subresource
//! and a resource no rule names. What they need upstream is made by [`upstream_objects`],
//! [`EXTRA_CRDS`] and `main.rs` (the doubles, a Node).

use serde_json::{Value, json};

use super::{AGGREGATED, Case, Http, JSON, MERGE, N, R, Step, T, Touch, VMS, View, req, send};

/// Renamed CRDs beyond KubeVirt's three fixtures, as kube-apiserver holds them: KubeVirt's
/// VirtualMachineInstanceReplicaSet (versions `v1` and `v1alpha3`, a `scale` subresource) and a
/// resource of the renamed group that no rule names.
pub const EXTRA_CRDS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: internalvirtualizationvirtualmachineinstancereplicasets.internal.virtualization.deckhouse.io
spec:
  group: internal.virtualization.deckhouse.io
  names:
    kind: InternalVirtualizationVirtualMachineInstanceReplicaSet
    listKind: InternalVirtualizationVirtualMachineInstanceReplicaSetList
    plural: internalvirtualizationvirtualmachineinstancereplicasets
    singular: internalvirtualizationvirtualmachineinstancereplicaset
    shortNames: [intvirtvmirs, intvirtvmirss]
    categories: [intvirt]
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
  - name: v1alpha3
    served: true
    storage: false
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: somethings.internal.virtualization.deckhouse.io
spec:
  group: internal.virtualization.deckhouse.io
  names: {kind: Something, listKind: SomethingList, plural: somethings, singular: something}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;

/// The name of the Node whose kubelet is the kubelet double.
pub const KUBELET_NODE: &str = "diff-kubelet-double";

/// What each side's cases start from, stored straight in kube-apiserver (renamed, as the
/// sidecar stores them): VirtualMachines to patch and a Pod on the kubelet double's Node.
pub fn upstream_objects(ns: &str) -> String {
    let vm = |name: &str, labels: &str| {
        json!({
            "apiVersion": "internal.virtualization.deckhouse.io/v1",
            "kind": "InternalVirtualizationVirtualMachine",
            "metadata": {"name": name, "namespace": ns, "labels": serde_json::from_str::<Value>(labels).expect("labels")},
            "spec": {"running": false, "template": {"spec": {"domain": {"devices": {}}}}},
        })
    };
    let renamed = "kubevirt.internal.virtualization.deckhouse.io";
    let items = [
        vm(
            "vm-null-label",
            &format!(r#"{{"{renamed}/x":"1","{renamed}/y":"2"}}"#),
        ),
        vm("vm-json-patch", "{}"),
        vm("vm-leading-space", "{}"),
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "exec-target", "namespace": ns},
            "spec": {
                "nodeName": KUBELET_NODE,
                "automountServiceAccountToken": false,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "c", "image": "example.invalid/c"}],
            },
        }),
    ];
    json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

fn vm_path(name: &str) -> String {
    format!("{VMS}/{name}")
}

fn stored_vm(name: &'static str, vm: &str) -> Case {
    Case {
        name,
        touch: R,
        step: Step::Upstream(format!(
            "/apis/internal.virtualization.deckhouse.io/v1/namespaces/{{ns}}/internalvirtualizationvirtualmachines/{vm}"
        )),
    }
}

/// An AdmissionReview as kube-apiserver sends it for the renamed VirtualMachine `vm1` of the
/// side's namespace; `sub` is the subresource (`status`) or empty.
fn review(operation: &str, sub: &str) -> String {
    let gvk = json!({"group": "internal.virtualization.deckhouse.io", "version": "v1", "kind": "InternalVirtualizationVirtualMachine"});
    let gvr = json!({"group": "internal.virtualization.deckhouse.io", "version": "v1", "resource": "internalvirtualizationvirtualmachines"});
    let object = json!({
        "apiVersion": "internal.virtualization.deckhouse.io/v1",
        "kind": "InternalVirtualizationVirtualMachine",
        "metadata": {
            "name": "vm1",
            "namespace": "{ns}",
            "labels": {"kubevirt.internal.virtualization.deckhouse.io/created-by": "virt-controller"},
            "finalizers": ["kubevirt.internal.virtualization.deckhouse.io/virtualMachineControllerFinalize"],
        },
        "spec": {"running": false},
        "status": {"ready": false},
    });
    let mut request = json!({
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": "vm1", "namespace": "{ns}", "operation": operation,
        "userInfo": {"username": "admin", "groups": ["system:masters", "system:authenticated"]},
        "object": object, "dryRun": false,
    });
    if !sub.is_empty() {
        request["subResource"] = sub.into();
        request["requestSubResource"] = sub.into();
        request["oldObject"] = object;
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).to_string()
}

fn webhook(name: &'static str, path: &str, body: &str) -> Case {
    let Step::Http(h) = req(name, R, "POST", path, &[("Content-Type", JSON)], Some(body)).step else {
        unreachable!("req builds an HTTP step")
    };
    Case {
        name,
        touch: R,
        step: Step::Webhook(h),
    }
}

fn upgrade(name: &'static str, sub: &str) -> Case {
    Case {
        name,
        touch: N,
        step: Step::Upgrade(format!("/api/v1/namespaces/{{ns}}/pods/exec-target/{sub}")),
    }
}

fn discovery_view(name: &'static str, touch: Touch, repeat: usize, pick: fn(&Value) -> Value) -> Case {
    let mut c = req(name, touch, "GET", "/apis", &[("Accept", AGGREGATED)], None);
    if let Step::Http(Http { view, .. }) = &mut c.step {
        *view = Some(View { repeat, pick });
    }
    c
}

/// Every (group, version, resource) of an aggregated discovery document.
fn resources(v: &Value) -> impl Iterator<Item = (&str, &str, &Value)> {
    let items = v["items"].as_array().map(Vec::as_slice).unwrap_or_default();
    items.iter().flat_map(|g| {
        let group = g["metadata"]["name"].as_str().unwrap_or("?");
        let versions = g["versions"].as_array().map(Vec::as_slice).unwrap_or_default();
        versions.iter().flat_map(move |ver| {
            let version = ver["version"].as_str().unwrap_or("?");
            let rs = ver["resources"].as_array().map(Vec::as_slice).unwrap_or_default();
            rs.iter().map(move |r| (group, version, r))
        })
    })
}

/// The KubeVirt groups (and any group named `""`) with their versions, in the document's order.
fn kubevirt_groups(v: &Value) -> Value {
    let items = v["items"].as_array().map(Vec::as_slice).unwrap_or_default();
    items
        .iter()
        .filter_map(|g| {
            let name = g["metadata"]["name"].as_str().unwrap_or("?");
            let ours = name.is_empty() || name.contains("kubevirt") || name.contains("virtualization");
            let versions: Vec<_> = g["versions"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .filter_map(|x| x["version"].as_str())
                .collect();
            ours.then(|| Value::String(format!("{name:?}: {}", versions.join(","))))
        })
        .collect()
}

/// Each `scale` subresource, with the kind it answers.
fn scales(v: &Value) -> Value {
    resources(v)
        .flat_map(|(g, ver, r)| {
            let subs = r["subresources"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            subs.iter().filter(|s| s["subresource"] == "scale").map(move |s| {
                json!(format!(
                    "{g}/{ver} {}/scale: {}",
                    r["resource"].as_str().unwrap_or("?"),
                    s["responseKind"]
                ))
            })
        })
        .collect()
}

/// Where the resource no rule names is listed.
fn unruled(v: &Value) -> Value {
    resources(v)
        .filter(|(_, _, r)| r["resource"] == "somethings")
        .map(|(g, ver, _)| json!(format!("{g:?}/{ver} somethings")))
        .collect()
}

pub fn cases() -> Vec<Case> {
    let null_label =
        r#"{"metadata":{"labels":{"kubevirt.io/x":null,"zz":"1","aa":"2"},"annotations":{"note":"<a&b>"}}}"#;
    let json_patch = "application/json-patch+json";
    let wh_patch = r#"{"webhooks":[{"name":"vm.diff.example","clientConfig":{"url":"https://127.0.0.1:9/validate"},"rules":[{"apiGroups":["kubevirt.io"],"apiVersions":["v1"],"operations":["CREATE","UPDATE"],"resources":["virtualmachines","virtualmachines/status"]}],"objectSelector":{"matchLabels":{"diff-never":"match"}},"sideEffects":"None","admissionReviewVersions":["v1"],"failurePolicy":"Ignore"}]}"#;
    vec![
        upgrade("upgrade_exec", "exec?command=true&stdout=true"),
        upgrade("upgrade_attach", "attach?stdout=true"),
        upgrade("upgrade_portforward", "portforward?ports=80"),
        send(
            "patch_merge_null_label",
            R,
            "PATCH",
            &vm_path("vm-null-label"),
            MERGE,
            null_label,
        ),
        stored_vm("stored_null_label", "vm-null-label"),
        send(
            "patch_json_indexed_test",
            R,
            "PATCH",
            &vm_path("vm-json-patch"),
            json_patch,
            r#"[{"op":"add","path":"/metadata/finalizers","value":["kubevirt.io/first"]},{"op":"test","path":"/metadata/finalizers/0","value":"kubevirt.io/first"}]"#,
        ),
        send(
            "patch_json_indexed_add",
            R,
            "PATCH",
            &vm_path("vm-json-patch"),
            json_patch,
            r#"[{"op":"add","path":"/metadata/finalizers","value":[]},{"op":"add","path":"/metadata/finalizers/-","value":"kubevirt.io/second"}]"#,
        ),
        stored_vm("stored_json_patch", "vm-json-patch"),
        send(
            "patch_merge_leading_space",
            R,
            "PATCH",
            &vm_path("vm-leading-space"),
            MERGE,
            "\n  {\"metadata\":{\"labels\":{\"kubevirt.io/ws\":\"yes\"}}}",
        ),
        stored_vm("stored_leading_space", "vm-leading-space"),
        send(
            "patch_webhook_configuration_merge",
            T,
            "PATCH",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{ns}-vm-webhook",
            MERGE,
            wh_patch,
        ),
        Case {
            name: "stored_webhook_configuration_patched",
            touch: R,
            step: Step::Upstream(
                "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{ns}-vm-webhook"
                    .into(),
            ),
        },
        webhook(
            "webhook_query",
            "/virtualmachines-validate?timeout=10s",
            &review("CREATE", ""),
        ),
        webhook(
            "webhook_status_subresource",
            "/status-validate",
            &review("UPDATE", "status"),
        ),
        discovery_view("discovery_aggregated_order", R, 8, kubevirt_groups),
        discovery_view("discovery_aggregated_scale", R, 1, scales),
        discovery_view("discovery_aggregated_unruled", N, 1, unruled),
    ]
}
