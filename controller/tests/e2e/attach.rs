//! Hot-plug: a VirtualMachineBlockDeviceAttachment puts a disk into a running VM through
//! `addvolume` on the subresources API (virtualization-api, KubeVirt's virt-api and
//! virt-controller, the virt-handler double plugging it into the "domain"), is `Attached` only
//! once the instance reports the volume ready, cannot change, and unplugs the disk when deleted.

use std::time::{Duration, Instant};

use kube_api_rewriter_testkit::*;
use serde_json::Value;

use crate::env::*;

fn vmbda_yaml(ns: &str, name: &str, vm: &str, disk: &str) -> String {
    format!(
        "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualMachineBlockDeviceAttachment\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  virtualMachineName: {vm}\n  blockDeviceRef: {{kind: VirtualDisk, name: {disk}}}\n"
    )
}

/// The volume `name` in a list of KubeVirt volumes or volume statuses.
fn named<'a>(list: &'a Value, name: &str) -> Option<&'a Value> {
    list.as_array()?.iter().find(|v| v["name"] == name)
}

fn phase(env: &Env, ns: &str, name: &str) -> Option<String> {
    env.get(VMBDA, ns, name)
        .and_then(|o| o["status"]["phase"].as_str().map(str::to_owned))
}

pub fn hotplug(env: &Env) {
    let ns = env.namespace("hotplug");
    let ns = ns.as_str();
    env.apply(&(vm_yaml(ns, "app", "AlwaysOn", "256Mi")));
    env.wait_vm(ns, "app", "Running", running);
    env.apply(&format!(
        "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualDisk\nmetadata: {{name: extra, namespace: {ns}}}\nspec:\n  persistentVolumeClaim: {{size: 1Gi, storageClassName: local}}\n"
    ));
    let claim = env.wait("disk extra's claim", || {
        let vd = env.get(VD, ns, "extra").ok_or("no disk")?;
        vd["status"]["target"]["persistentVolumeClaimName"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| vd["status"].to_string())
    });

    // Before the disk is ready the attachment waits.
    env.apply(&vmbda_yaml(ns, "hot", "app", "extra"));
    env.wait("attachment Pending on its disk", || {
        let a = env.get(VMBDA, ns, "hot").ok_or("none")?;
        match cond(&a, "BlockDeviceReady") {
            Some((s, r, _))
                if a["status"]["phase"] == "Pending" && s == "False" && r == "BlockDeviceNotReady" =>
            {
                Ok(())
            }
            _ => Err(a["status"].to_string()),
        }
    });
    // The node is slow to plug it: the instance gets the volume, the guest not yet.
    env.handler.hold_hotplug(ns, "app", true);
    env.provision(ns, &claim);
    let vmi = env.wait("the instance gets the volume", || {
        let vmi = env.get(UP_VMI, ns, "app").ok_or("no VMI")?;
        match named(&vmi["spec"]["volumes"], "vd-extra") {
            Some(_) => Ok(vmi),
            None => Err(vmi["spec"]["volumes"].to_string()),
        }
    });
    let vol = named(&vmi["spec"]["volumes"], "vd-extra").expect("volume");
    assert_eq!(vol["persistentVolumeClaim"]["claimName"], claim.as_str(), "{vol}");
    assert_eq!(vol["persistentVolumeClaim"]["hotpluggable"], true, "{vol}");
    // addvolume answered long ago; without the volume's Ready status it is not Attached.
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        let p = phase(env, ns, "hot");
        assert_eq!(
            p.as_deref(),
            Some("InProgress"),
            "attached before the volume was ready"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    env.handler.hold_hotplug(ns, "app", false);
    let a = env.wait("attachment Attached", || {
        let a = env.get(VMBDA, ns, "hot").ok_or("none")?;
        if a["status"]["phase"] == "Attached" {
            Ok(a)
        } else {
            Err(a["status"].to_string())
        }
    });
    assert!(cond_is(&a, "Attached", "True"), "{a}");
    assert_eq!(a["status"]["virtualMachineName"], "app", "{a}");
    let vmi = env.get(UP_VMI, ns, "app").expect("VMI");
    let st = named(&vmi["status"]["volumeStatus"], "vd-extra").expect("volume status");
    assert_eq!(st["phase"], "Ready", "{st}");
    // The VM keeps running, with nothing waiting for a restart, and the disk stays plugged in
    // across the VM's reconciles.
    let vm = env.get(VM, ns, "app").expect("VM");
    assert!(running(&vm), "{vm}");
    assert!(
        !cond_is(&vm, "AwaitingRestartToApplyConfiguration", "True"),
        "{vm}"
    );
    let metrics = env.metrics();
    assert!(
        metrics.contains(&format!(
            "d8_virtualization_virtualmachineblockdeviceattachment_status_phase{{name=\"hot\",namespace=\"{ns}\",uid="
        )) && metrics.contains("phase=\"Attached\"} 1"),
        "{metrics}"
    );

    // The spec cannot change.
    let o = env.cp.kubectl(&[
        "patch",
        VMBDA,
        "hot",
        "-n",
        ns,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"blockDeviceRef":{"name":"other"}}}"#,
    ]);
    assert!(fails(&o).contains("cannot change"), "{}", fails(&o));

    // A disk attached already cannot be attached twice; deleting the refused one leaves it.
    env.apply(&vmbda_yaml(ns, "twice", "app", "extra"));
    env.wait("the second attachment of the disk Failed", || {
        let a = env.get(VMBDA, ns, "twice").ok_or("none")?;
        match cond(&a, "BlockDeviceReady") {
            Some((_, r, m)) if a["status"]["phase"] == "Failed" && r == "Conflict" && m.contains("hot") => {
                Ok(())
            }
            _ => Err(a["status"].to_string()),
        }
    });
    ok(&env.cp.kubectl(&["delete", VMBDA, "twice", "-n", ns]));
    assert_eq!(phase(env, ns, "hot").as_deref(), Some("Attached"));
    let vmi = env.get(UP_VMI, ns, "app").expect("VMI");
    assert!(
        named(&vmi["spec"]["volumes"], "vd-extra").is_some(),
        "unplugged by the refused one"
    );

    // Deleting the attachment unplugs the disk.
    ok(&env
        .cp
        .kubectl(&["delete", VMBDA, "hot", "-n", ns, "--wait=false"]));
    env.wait("the disk unplugged and the attachment gone", || {
        let vmi = env.get(UP_VMI, ns, "app").ok_or("no VMI")?;
        let kvvm = env.get(UP_KVVM, ns, "app").ok_or("no VM")?;
        let left = [
            named(&vmi["spec"]["volumes"], "vd-extra").is_some(),
            named(&vmi["status"]["volumeStatus"], "vd-extra").is_some(),
            named(&kvvm["spec"]["template"]["spec"]["volumes"], "vd-extra").is_some(),
            env.get(VMBDA, ns, "hot").is_some(),
        ];
        if left.iter().any(|l| *l) {
            Err(format!("{left:?}"))
        } else {
            Ok(())
        }
    });
    let vm = env.get(VM, ns, "app").expect("VM");
    assert!(running(&vm), "{vm}");
}
