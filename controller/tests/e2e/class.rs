//! VirtualMachineClasses: a VM waits for its class, gets its nodeSelector and tolerations, and
//! is told when its cores are not allowed.

use kube_api_rewriter_testkit::*;
use serde_json::json;

use crate::env::*;

/// A VM naming an absent class waits, Pending, with a condition saying so; once the class
/// exists its nodeSelector and tolerations reach the KubeVirt VM; a core count the class does
/// not allow is reported.
pub fn class(env: &Env) {
    let ns = env.namespace("class");
    let ns = ns.as_str();
    let class = format!("gold-{}", env.mode().name());
    env.apply(&(vm_yaml(ns, "c", "AlwaysOn", "256Mi") + &format!("  virtualMachineClassName: {class}\n")));
    let vm = env.wait_vm(ns, "c", "Pending, class not found", |vm| {
        cond(vm, "ClassReady").is_some_and(|c| c.0 == "False" && c.1 == "VirtualMachineClassNotFound")
    });
    assert_eq!(vm["status"]["phase"], "Pending", "{vm}");
    let (_, _, message) = cond(&vm, "ClassReady").expect("ClassReady");
    assert!(message.contains(&class), "{vm}");
    assert!(env.get(UP_KVVM, ns, "c").is_none(), "rendered without its class");

    // The class selects Nodes the VM's own selector does not: node-b becomes one for the case.
    let node = KUBEVIRT_NODES[1];
    ok(&env
        .cp
        .kubectl(&["label", "--overwrite", "node", node, "disk=nvme", "zone=a"]));
    env.apply(&format!(
        r#"apiVersion: virtualization.deckhouse.io/v1alpha2
kind: VirtualMachineClass
metadata: {{name: {class}}}
spec:
  cpu: {{cores: [1, 2]}}
  nodeSelector: {{disk: nvme, zone: a}}
  tolerations: [{{key: gold, operator: Exists, effect: NoSchedule}}]
"#
    ));
    let vm = env.wait_vm(ns, "c", "Running with its class", |vm| {
        running(vm) && cond_is(vm, "ClassReady", "True")
    });
    assert_eq!(
        vm["status"]["nodeName"], node,
        "scheduled where the class selects: {vm}"
    );
    let up = env.get(UP_KVVM, ns, "c").expect("KubeVirt VM");
    let t = &up["spec"]["template"]["spec"];
    // The VM's own `disk: ssd` is overridden by the class; `zone` comes from the class.
    assert_eq!(t["nodeSelector"], json!({"disk": "nvme", "zone": "a"}), "{up}");
    let keys: Vec<&str> = t["tolerations"]
        .as_array()
        .expect("tolerations")
        .iter()
        .filter_map(|t| t["key"].as_str())
        .collect();
    assert_eq!(keys, ["dedicated", "gold"], "{up}");

    env.patch(VM, ns, "c", json!({"spec": {"cpu": {"cores": 3}}}));
    let vm = env.wait_vm(ns, "c", "cores not allowed by the class", |vm| {
        cond(vm, "ClassReady").is_some_and(|c| c.0 == "False" && c.1 == "NotAllowedByClass")
            && vm["status"]["observedGeneration"] == vm["metadata"]["generation"]
    });
    let (_, _, message) = cond(&vm, "ClassReady").expect("ClassReady");
    assert!(message.contains("spec.cpu.cores 3"), "{vm}");
    ok(&env.cp.kubectl(&["delete", VM, "c", "-n", ns, "--wait=false"]));
    env.wait("VM gone", || match env.get(VM, ns, "c") {
        None => Ok(()),
        Some(_) => Err("VM still there".to_owned()),
    });
    ok(&env.cp.kubectl(&["delete", VMC, &class]));
    ok(&env
        .cp
        .kubectl(&["label", "--overwrite", "node", node, "disk=ssd", "zone-"]));
}
