//! virtualization-api's volume subresources through its sidecar to KubeVirt's own virt-api
//! (v1.6.0): virt-api records the request on KubeVirt's VM (through its own sidecar, so stored
//! renamed), and virt-controller applies it to the stopped VM's spec.

use std::time::Duration;

use kube_api_rewriter_testkit as tk;
use serde_json::Value;

use crate::client::vm_path;
use crate::env::{Env, NS, wait_for};

/// KubeVirt's VM `vm-running` as kube-apiserver stores it.
fn stored(e: &Env) -> Value {
    tk::parse_json(&tk::ok(&e.cp.kubectl(&[
        "get",
        "-n",
        NS,
        "internalvirtualizationvirtualmachines",
        "vm-running",
        "-o",
        "json",
    ])))
}

/// The hot-plugged volume `disk1` of the stored VM: in the template's volumes, or still a
/// pending request in its status.
fn disk1(vm: &Value) -> Option<Value> {
    let in_spec = vm["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "disk1")
        .cloned();
    in_spec.or_else(|| {
        vm["status"]["volumeRequests"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|r| {
                let add = &r["addVolumeOptions"];
                (add["name"] == "disk1").then(|| add["volumeSource"].clone())
            })
    })
}

pub fn volumes(e: &Env) {
    // KubeVirt's VM beside ours, through KubeVirt's admin sidecar (original names).
    tk::ok(&tk::kubectl_in(
        e.kubevirt.get("KV_KUBECONFIG"),
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {{name: vm-running, namespace: {NS}}}\nspec:\n  runStrategy: Halted\n  template:\n    spec:\n      domain:\n        devices: {{}}\n        resources: {{requests: {{memory: 64Mi}}}}\n"
        ),
    ));
    // virt-api records the request with a JSON patch of the VM's status, which kube-apiserver
    // refuses (422, "doc is missing path") until virt-controller has written a first status:
    // add a volume to a VM KubeVirt has seen, as a user would.
    wait_for("virt-controller's first status", Duration::from_secs(30), || {
        stored(e)["status"]["printableStatus"].is_string()
    });
    tk::ok(&e.put(
        &format!(
            "{}?name=disk1&volumeKind=VirtualDisk&pvcName=pvc-disk1&serial=s1",
            vm_path("vm-running", "addvolume")
        ),
        "{}",
    ));
    let mut seen = Value::Null;
    wait_for("disk1 on KubeVirt's VM", Duration::from_secs(30), || {
        seen = stored(e);
        disk1(&seen).is_some()
    });
    let source = disk1(&seen).expect("disk1");
    let pvc = source.get("persistentVolumeClaim").unwrap_or(&source);
    assert_eq!(pvc["claimName"], "pvc-disk1", "{seen}");
    assert_eq!(pvc["hotpluggable"], true, "{seen}");
    // virt-api patched through its sidecar: nothing of KubeVirt's stored under original names.
    for k in seen["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.keys())
    {
        assert!(
            !k.starts_with("kubevirt.io/"),
            "{k} stored with its original prefix"
        );
    }
    // An unknown volume is virt-api's error, in our group.
    let o = e.put(
        &format!("{}?name=nosuch", vm_path("vm-running", "removevolume")),
        "{}",
    );
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success() && err.contains("nosuch"), "{err}");
    tk::ok(&e.put(
        &format!("{}?name=disk1", vm_path("vm-running", "removevolume")),
        "{}",
    ));
    wait_for("disk1 gone from KubeVirt's VM", Duration::from_secs(30), || {
        seen = stored(e);
        let pending_removal = seen["status"]["volumeRequests"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["removeVolumeOptions"]["name"] == "disk1");
        pending_removal || disk1(&seen).is_none()
    });
}
