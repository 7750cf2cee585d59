//! TEST DOUBLE: a stand-in for KubeVirt's virt-handler, the node agent that runs a VMI's domain
//! through libvirt. It cannot run here (no hypervisor, no kubelet: kwok simulates the Nodes and
//! their Pods), so this plays its part of a VMI's life against real virt-controller. Like the
//! real one in Deckhouse, it knows only KubeVirt's original names and reaches kube-apiserver
//! through a `kube-api-rewriter`.
//!
//! For each `kubevirt.io/v1` VirtualMachineInstance:
//! - once virt-controller has it `Scheduled` on a Node (its virt-launcher Pod runs there), the
//!   domain "starts": phase `Running`, conditions `Ready` and `LiveMigratable`, the guest agent
//!   connected, an interface address, and the SELinux context (`none`: virt-controller hands a
//!   migration on only once it is known);
//! - once it is being deleted and not yet final, the domain "shuts down": phase `Succeeded`, so
//!   virt-controller removes its finalizer;
//! - a hot-plugged volume that virt-controller reports attached to the Node (its attachment Pod
//!   ready) is "plugged into the domain": phase `Ready` with a target; one gone from the spec is
//!   "unplugged": `UnMountedFromPod`, so virt-controller deletes its attachment Pod.
//!
//! [`api`] serves what virt-api hands to virt-handler (freeze, unfreeze).

pub mod api;

use futures::StreamExt as _;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Client, Resource as _, ResourceExt as _};
use serde_json::{Value, json};
use virtualization_controller::kubevirt::vmi_resource;

/// Runs the double until the task is dropped; `handler` holds what the cases asked of it.
/// Each VMI is looked at on every event and, for what a case released meanwhile, once a second.
pub async fn run(client: Client, handler: std::sync::Arc<api::Handler>) {
    let vmis = Api::<DynamicObject>::all_with(client.clone(), &vmi_resource());
    let mut events = watcher(vmis, watcher::Config::default()).boxed();
    let mut seen: std::collections::HashMap<(String, String), DynamicObject> = Default::default();
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        let due: Vec<DynamicObject> = tokio::select! {
            ev = events.next() => match ev {
                None => return,
                Some(Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => {
                    let key = (o.namespace().unwrap_or_default(), o.name_any());
                    seen.insert(key, o.clone());
                    vec![o]
                }
                Some(Ok(watcher::Event::Delete(o))) => {
                    seen.remove(&(o.namespace().unwrap_or_default(), o.name_any()));
                    continue;
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    eprintln!("virt-handler double: watch: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                    continue;
                }
            },
            _ = tick.tick() => seen.values().cloned().collect(),
        };
        for vmi in due {
            let held = handler.hotplug_held(&vmi.namespace().unwrap_or_default(), &vmi.name_any());
            if let Some(status) = next_status(&vmi, held) {
                write(&client, &vmi, status).await;
            }
        }
    }
}

/// Merges `status` into the VMI, guarded by its resourceVersion: a list in the status replaces
/// what virt-controller may have written meanwhile. A conflict or a VMI gone meanwhile: the
/// next event brings it round again.
async fn write(client: &Client, vmi: &DynamicObject, status: Value) {
    let api = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &vmi.namespace().unwrap_or_default(),
        &vmi_resource(),
    );
    let patch = json!({
        "metadata": {"resourceVersion": vmi.resource_version()},
        "status": status,
    });
    match api
        .patch(&vmi.name_any(), &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
        Err(e) => eprintln!("virt-handler double: {}: {e}", vmi.name_any()),
    }
}

/// What virt-handler would write next into a VMI's status, if anything.
fn next_status(vmi: &DynamicObject, hotplug_held: bool) -> Option<Value> {
    let status = &vmi.data["status"];
    let phase = status["phase"].as_str().unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    if vmi.meta().deletion_timestamp.is_some() {
        return (!matches!(phase, "Succeeded" | "Failed")).then(|| json!({"phase": "Succeeded"}));
    }
    if phase == "Running" {
        if hotplug_held {
            return None;
        }
        return hotplug_status(vmi).map(|volumes| json!({"volumeStatus": volumes}));
    }
    if phase != "Scheduled" || status["nodeName"].as_str().is_none_or(str::is_empty) {
        return None;
    }
    let cond =
        |t: &str| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
    Some(json!({
        "phase": "Running",
        "conditions": [cond("Ready"), cond("LiveMigratable"), cond("AgentConnected")],
        "interfaces": [{"name": "default", "interfaceName": "eth0", "ipAddress": "10.244.0.10", "podInterfaceName": "eth0"}],
        "guestOSInfo": {"id": "simulated", "name": "Simulated guest"},
        "selinuxContext": "none",
    }))
}

/// The VMI's `status.volumeStatus` with its hot-plugged volumes moved on as virt-handler moves
/// them, or `None` when none moves.
fn hotplug_status(vmi: &DynamicObject) -> Option<Value> {
    let in_spec: Vec<&str> = vmi.data["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .collect();
    let mut volumes = vmi.data["status"]["volumeStatus"].as_array()?.clone();
    let mut targets: Vec<String> = volumes
        .iter()
        .filter_map(|v| v["target"].as_str().map(str::to_owned))
        .collect();
    let mut moved = false;
    for v in volumes.iter_mut().filter(|v| v["hotplugVolume"].is_object()) {
        let name = v["name"].as_str().unwrap_or_default().to_owned();
        let phase = v["phase"].as_str().unwrap_or_default();
        let attached = v["hotplugVolume"]["attachPodUID"]
            .as_str()
            .is_some_and(|u| !u.is_empty());
        if in_spec.contains(&name.as_str()) && phase == "AttachedToNode" && attached {
            let target = (b'a'..=b'z')
                .map(|c| format!("sd{}", c as char))
                .find(|t| !targets.contains(t))?;
            targets.push(target.clone());
            v["phase"] = json!("Ready");
            v["reason"] = json!("VolumeReady");
            v["message"] = json!(format!("Successfully attach hotplugged volume {name} to VM"));
            v["target"] = json!(target);
            moved = true;
        } else if !in_spec.contains(&name.as_str()) && matches!(phase, "Ready" | "MountedToPod") {
            v["phase"] = json!("UnMountedFromPod");
            v["reason"] = json!("VolumeUnMountedFromPod");
            v["message"] = json!(format!("Volume {name} has been unmounted from virt-launcher pod"));
            v["target"] = json!("");
            moved = true;
        }
    }
    moved.then(|| Value::Array(volumes))
}
