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
//!   virt-controller removes its finalizer.

use futures::StreamExt as _;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Client, Resource as _, ResourceExt as _};
use serde_json::{Value, json};
use virtualization_controller::kubevirt::vmi_resource;

/// Runs the double until the task is dropped.
pub async fn run(client: Client) {
    let vmis = Api::<DynamicObject>::all_with(client.clone(), &vmi_resource());
    let mut events = watcher(vmis, watcher::Config::default()).boxed();
    while let Some(ev) = events.next().await {
        let vmi = match ev {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => o,
            Ok(_) => continue,
            Err(e) => {
                eprintln!("virt-handler double: watch: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                continue;
            }
        };
        if let Some(status) = next_status(&vmi) {
            let api = Api::<DynamicObject>::namespaced_with(
                client.clone(),
                &vmi.namespace().unwrap_or_default(),
                &vmi_resource(),
            );
            // A conflict or a VMI gone meanwhile: the next event brings it round again.
            if let Err(e) = api
                .patch(
                    &vmi.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": status})),
                )
                .await
            {
                eprintln!("virt-handler double: {}: {e}", vmi.name_any());
            }
        }
    }
}

/// What virt-handler would write next into a VMI's status, if anything.
fn next_status(vmi: &DynamicObject) -> Option<Value> {
    let status = &vmi.data["status"];
    let phase = status["phase"].as_str().unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    if vmi.meta().deletion_timestamp.is_some() {
        return (!matches!(phase, "Succeeded" | "Failed")).then(|| json!({"phase": "Succeeded"}));
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
