//! VirtualDisks: a disk's PersistentVolumeClaim, a VM waiting for its disks and getting them,
//! and a deleted disk's claim deleted.

use kube_api_rewriter_testkit::*;
use serde_json::Value;

use crate::env::*;

fn vd_yaml(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualDisk\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  persistentVolumeClaim: {{size: 1Gi, storageClassName: local}}\n"
    )
}

/// Waits until disk `name` has a claim and `phase`; returns the disk.
fn wait_disk(env: &Env, ns: &str, name: &str, phase: &str) -> Value {
    env.wait(&format!("VirtualDisk {ns}/{name} {phase}"), || {
        let vd = env.get(VD, ns, name).ok_or("no VirtualDisk")?;
        let st = &vd["status"];
        if st["phase"] == phase && st["target"]["persistentVolumeClaimName"].is_string() {
            Ok(vd)
        } else {
            Err(st.to_string())
        }
    })
}

/// A disk's claim is created and reported; a VM waits for its disks, then gets them as disks
/// and volumes; deleting a disk deletes its claim.
pub fn disks(env: &Env) {
    let ns = env.namespace("disk");
    let ns = ns.as_str();
    env.apply(&vd_yaml(ns, "root"));
    let vd = wait_disk(env, ns, "root", "WaitForFirstConsumer");
    let root_claim = vd["status"]["target"]["persistentVolumeClaimName"]
        .as_str()
        .expect("claim name")
        .to_owned();
    let pvc = env.get("pvc", ns, &root_claim).expect("claim");
    assert_eq!(pvc["spec"]["resources"]["requests"]["storage"], "1Gi", "{pvc}");
    assert_eq!(pvc["spec"]["storageClassName"], "local", "{pvc}");
    assert_eq!(
        pvc["metadata"]["ownerReferences"][0]["kind"], "VirtualDisk",
        "{pvc}"
    );

    env.apply(
        &(vm_yaml(ns, "d", "AlwaysOn", "256Mi")
            + "  blockDeviceRefs:\n  - {kind: VirtualDisk, name: root}\n  - {kind: VirtualDisk, name: data}\n"),
    );
    let vm = env.wait_vm(ns, "d", "waiting for its disks", |vm| {
        cond(vm, "BlockDevicesReady").is_some_and(|c| c.0 == "False" && c.2.contains("data not found"))
    });
    let (_, _, message) = cond(&vm, "BlockDevicesReady").expect("BlockDevicesReady");
    assert!(message.contains("root is WaitForFirstConsumer"), "{vm}");
    assert_eq!(vm["status"]["phase"], "Pending", "{vm}");
    assert!(env.get(UP_KVVM, ns, "d").is_none(), "rendered before its disks");

    env.apply(&vd_yaml(ns, "data"));
    let data_claim =
        wait_disk(env, ns, "data", "WaitForFirstConsumer")["status"]["target"]["persistentVolumeClaimName"]
            .as_str()
            .expect("claim name")
            .to_owned();
    for claim in [&root_claim, &data_claim] {
        env.provision(ns, claim);
    }
    let vd = wait_disk(env, ns, "root", "Ready");
    assert_eq!(vd["status"]["capacity"], "1Gi", "{vd}");
    env.wait_vm(ns, "d", "Running with its disks", |vm| {
        running(vm) && cond_is(vm, "BlockDevicesReady", "True")
    });
    let up = env.get(UP_KVVM, ns, "d").expect("KubeVirt VM");
    let t = &up["spec"]["template"]["spec"];
    let disks: Vec<&str> = t["domain"]["devices"]["disks"]
        .as_array()
        .expect("disks")
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    assert_eq!(disks, ["vd-root", "vd-data", "cloudinit"], "{up}");
    assert_eq!(
        t["volumes"][0]["persistentVolumeClaim"]["claimName"],
        root_claim.as_str(),
        "{up}"
    );
    assert_eq!(
        t["volumes"][1]["persistentVolumeClaim"]["claimName"],
        data_claim.as_str(),
        "{up}"
    );

    ok(&env.cp.kubectl(&["delete", VM, "d", "-n", ns, "--wait=false"]));
    env.wait("VM gone", || match env.get(VM, ns, "d") {
        None => Ok(()),
        Some(_) => Err("VM still there".to_owned()),
    });
    ok(&env.cp.kubectl(&["delete", VD, "root", "-n", ns, "--wait=false"]));
    env.wait("disk gone, its claim deleted", || {
        if env.get(VD, ns, "root").is_some() {
            return Err("disk still there".to_owned());
        }
        // Gone once the controller-manager's pvc-protection controller has seen that no pod
        // uses it and removed its `kubernetes.io/pvc-protection` finalizer.
        match env.get("pvc", ns, &root_claim) {
            None => Ok(()),
            Some(pvc) if pvc["metadata"]["deletionTimestamp"].is_string() => {
                Err("claim deleted, its finalizer not yet removed".to_owned())
            }
            Some(_) => Err("claim not deleted".to_owned()),
        }
    });
}
