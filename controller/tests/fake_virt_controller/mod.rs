//! TEST DOUBLE: a fake of KubeVirt's virt-controller. No KubeVirt runs here, so this stands in
//! for the part of it the virtualization-controller depends on. Like the real one in Deckhouse,
//! it only knows KubeVirt's original names (`kubevirt.io/v1`, `kubevirt.io/...` finalizers) and
//! reaches kube-apiserver through its own `kube-api-rewriter` instance.
//!
//! For each `kubevirt.io/v1` VirtualMachine it: adds KubeVirt's finalizer; acts on
//! `status.stateChangeRequests` in order (Stop deletes the instance, if its uid matches;
//! Start creates one) and clears the requests it acted on; keeps an instance for runStrategy
//! `Always` and none for `Halted`; writes `status.printableStatus` (`Running` or `Stopped`)
//! through `/status`. An instance (VirtualMachineInstance of the same name) gets the template's
//! labels and spec, a controller ownerReference to the VM, phase Running and node
//! [`NODE`]. On deletion it deletes the instance and removes its finalizer once the instance is
//! gone.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::{Controller, watcher};
use kube::{Client, Resource as _, ResourceExt as _};
use serde_json::{Value, json};
use virtualization_controller::kubevirt::{vm_resource, vmi_resource};
use virtualization_controller::reconcile::WatchBackoff;

/// KubeVirt's finalizer on VMs.
pub const FINALIZER: &str = "kubevirt.io/virtualMachineControllerFinalize";
/// The node every instance "runs" on.
pub const NODE: &str = "fake-node-1";

struct Ctx {
    client: Client,
}

/// Runs the fake until the task is dropped.
pub async fn run(client: Client) {
    let vms = Api::<DynamicObject>::all_with(client.clone(), &vm_resource());
    let vmis = Api::<DynamicObject>::all_with(client.clone(), &vmi_resource());
    Controller::new_with(vms, watcher::Config::default(), vm_resource())
        .owns_with(vmis, vmi_resource(), watcher::Config::default())
        .trigger_backoff(WatchBackoff::default())
        .run(
            reconcile,
            |_, _, _| Action::requeue(Duration::from_millis(300)),
            Arc::new(Ctx { client }),
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

fn json_patch(v: Value) -> Patch<()> {
    Patch::Json(serde_json::from_value(v).expect("JSON patch"))
}

async fn reconcile(vm: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    let ns = vm.namespace().unwrap_or_default();
    let name = vm.name_any();
    let vms = Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &ns, &vm_resource());
    let vmis = Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &ns, &vmi_resource());
    let pp = PatchParams::default();
    let mut vmi = vmis.get_opt(&name).await?;

    if vm.meta().deletion_timestamp.is_some() {
        if let Some(i) = &vmi {
            if i.meta().deletion_timestamp.is_none() {
                vmis.delete(&name, &DeleteParams::default()).await?;
            }
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        if let Some(i) = vm.finalizers().iter().position(|f| f == FINALIZER) {
            let path = format!("/metadata/finalizers/{i}");
            vms.patch(
                &name,
                &pp,
                &json_patch(
                    json!([{"op": "test", "path": path, "value": FINALIZER}, {"op": "remove", "path": path}]),
                ),
            )
            .await?;
        }
        return Ok(Action::await_change());
    }
    if !vm.finalizers().iter().any(|f| f == FINALIZER) {
        let op = if vm.finalizers().is_empty() {
            json!({"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]})
        } else {
            json!({"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER})
        };
        vms.patch(&name, &pp, &json_patch(json!([op]))).await?;
    }
    if vmi
        .as_ref()
        .is_some_and(|i| i.meta().deletion_timestamp.is_some())
    {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }

    let requests = vm.data["status"]["stateChangeRequests"].clone();
    for r in requests.as_array().into_iter().flatten() {
        match r["action"].as_str() {
            Some("Stop") => {
                if let Some(i) = &vmi
                    && r["uid"].as_str().is_none_or(|u| Some(u) == i.uid().as_deref())
                {
                    vmis.delete(&name, &DeleteParams::default()).await?;
                    vmi = None;
                }
            }
            Some("Start") if vmi.is_none() => vmi = Some(create_instance(&vmis, &vm).await?),
            _ => {}
        }
    }
    match vm.data["spec"]["runStrategy"].as_str() {
        Some("Always") if vmi.is_none() => vmi = Some(create_instance(&vmis, &vm).await?),
        Some("Halted") if vmi.is_some() => {
            vmis.delete(&name, &DeleteParams::default()).await?;
            vmi = None;
        }
        _ => {}
    }

    let printable = if vmi.is_some() { "Running" } else { "Stopped" };
    // Like virt-controller's status updates, only onto the version read.
    let mut ops =
        vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": vm.resource_version()})];
    if vm.data["status"].is_null() {
        ops.push(json!({"op": "add", "path": "/status", "value": {"printableStatus": printable}}));
    } else {
        if requests.as_array().is_some_and(|a| !a.is_empty()) {
            // Only the requests acted on: a request added meanwhile fails the test, and the
            // next round sees it.
            ops.push(json!({"op": "test", "path": "/status/stateChangeRequests", "value": requests}));
            ops.push(json!({"op": "remove", "path": "/status/stateChangeRequests"}));
        }
        if vm.data["status"]["printableStatus"] != printable {
            ops.push(json!({"op": "add", "path": "/status/printableStatus", "value": printable}));
        }
    }
    if ops.len() > 1 {
        vms.patch_status(&name, &pp, &json_patch(Value::Array(ops)))
            .await?;
    }
    Ok(Action::await_change())
}

async fn create_instance(
    vmis: &Api<DynamicObject>,
    vm: &DynamicObject,
) -> Result<DynamicObject, kube::Error> {
    let template = &vm.data["spec"]["template"];
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": vm.name_any(),
            "namespace": vm.namespace(),
            "labels": template["metadata"]["labels"],
            "ownerReferences": [{
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachine",
                "name": vm.name_any(),
                "uid": vm.uid(),
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": template["spec"],
        "status": {"phase": "Running", "nodeName": NODE},
    }))
    .expect("VirtualMachineInstance");
    vmis.create(&PostParams::default(), &obj).await
}
