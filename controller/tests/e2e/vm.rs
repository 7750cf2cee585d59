//! VirtualMachines into KubeVirt VMs: what a VM becomes upstream and how its deletion waits,
//! runPolicy, spec changes (applied at once or awaiting a restart), invalid specs, and a KubeVirt
//! VM edited by hand.

use kube_api_rewriter_testkit::*;
use serde_json::json;

use crate::env::*;

/// KubeVirt's finalizer on VMs as kube-apiserver stores it.
const UP_KV_FINALIZER: &str =
    "kubevirt.internal.virtualization.deckhouse.io/virtualMachineControllerFinalize";

/// Create, look upstream, delete.
pub fn lifecycle(env: &Env) {
    let ns = env.namespace("life");
    let ns = ns.as_str();
    // The default runPolicy, AlwaysOnUnlessStoppedManually: Manual, and a Start on creation.
    let yaml = vm_yaml(ns, "web", "AlwaysOnUnlessStoppedManually", "256Mi")
        .replace("  runPolicy: AlwaysOnUnlessStoppedManually\n", "");
    env.apply(&yaml);
    let vm = env.wait_vm(ns, "web", "Running", running);
    assert!(
        vm["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.contains(&json!("virtualization.deckhouse.io/vm-cleanup"))),
        "{vm}"
    );
    let uid = vm["metadata"]["uid"].clone();
    // One of kwok's Nodes, where the scheduler put the virt-launcher Pod.
    let node = vm["status"]["nodeName"].as_str().unwrap_or_default().to_owned();
    // The phase metric: one series per phase, 1 for Running.
    let want = format!(
        r#"d8_virtualization_virtualmachine_status_phase{{name="web",namespace="{ns}",uid="{}",node="{}",phase="Running"}} 1"#,
        uid.as_str().unwrap_or_default(),
        node
    );
    env.wait("phase metric", || {
        let body = env.metrics();
        if body.lines().any(|l| l == want) {
            Ok(())
        } else {
            Err(body)
        }
    });

    // Upstream: the KubeVirt VM exists only under the renamed group, with renamed labels and
    // finalizer, and the controller ownerReference to the VM.
    let up = env.get(UP_KVVM, ns, "web").expect("KubeVirt VM upstream");
    assert_eq!(
        up["apiVersion"], "internal.virtualization.deckhouse.io/v1",
        "{up}"
    );
    assert_eq!(up["kind"], "InternalVirtualizationVirtualMachine", "{up}");
    let labels = &up["metadata"]["labels"];
    assert_eq!(labels[UP_NAME_LABEL], "web", "{up}");
    assert_eq!(labels["app"], "shop", "{up}");
    assert!(labels.get("vm.kubevirt.io/name").is_none(), "{up}");
    // (The template's labels are stored as written: the built-in rules do not rename
    // `spec.template.metadata` of a KubeVirt VM. The instance made from them is renamed.)
    let fins = up["metadata"]["finalizers"].to_string();
    assert!(
        fins.contains(UP_KV_FINALIZER) && !fins.contains("\"kubevirt.io/"),
        "{up}"
    );
    let owner = &up["metadata"]["ownerReferences"][0];
    assert_eq!(
        owner["apiVersion"], "virtualization.deckhouse.io/v1alpha2",
        "{up}"
    );
    assert_eq!(owner["kind"], "VirtualMachine", "{up}");
    assert_eq!(owner["uid"], uid, "{up}");
    assert_eq!(owner["controller"], true, "{up}");
    assert_eq!(up["spec"]["runStrategy"], "Manual", "{up}");
    let t = &up["spec"]["template"]["spec"];
    assert_eq!(t["domain"]["cpu"]["cores"], 1, "{up}");
    assert_eq!(t["domain"]["memory"]["guest"], "256Mi", "{up}");
    assert_eq!(t["domain"]["resources"]["requests"]["cpu"], "500m", "{up}");
    assert!(
        t["volumes"][0]["cloudInitNoCloud"]["userData"]
            .as_str()
            .is_some_and(|u| u.contains("hostname: web")),
        "{up}"
    );
    assert_eq!(t["nodeSelector"]["disk"], "ssd", "{up}");
    assert_eq!(t["tolerations"][0]["key"], "dedicated", "{up}");
    // The instance: renamed labels, and its ownerReference to the KubeVirt VM renamed too.
    let vmi = env.get(UP_VMI, ns, "web").expect("instance upstream");
    assert_eq!(
        vmi["kind"], "InternalVirtualizationVirtualMachineInstance",
        "{vmi}"
    );
    assert_eq!(vmi["metadata"]["labels"][UP_NAME_LABEL], "web", "{vmi}");
    let owner = &vmi["metadata"]["ownerReferences"][0];
    assert_eq!(
        owner["apiVersion"], "internal.virtualization.deckhouse.io/v1",
        "{vmi}"
    );
    assert_eq!(owner["kind"], "InternalVirtualizationVirtualMachine", "{vmi}");
    assert_eq!(owner["uid"], up["metadata"]["uid"], "{vmi}");
    // Nothing upstream under KubeVirt's own names.
    fails(&env.cp.kubectl(&["get", "crd", "virtualmachines.kubevirt.io"]));
    fails(&env.cp.kubectl(&["get", "virtualmachines.kubevirt.io", "-n", ns]));
    // Through the rewriter, KubeVirt's names.
    let through = parse_json(&ok(&env.kv_sidecar.kubectl(&[
        "get",
        "virtualmachines.kubevirt.io",
        "web",
        "-n",
        ns,
        "-o",
        "json",
    ])));
    assert_eq!(
        through["metadata"]["labels"]["vm.kubevirt.io/name"], "web",
        "{through}"
    );
    // Printer columns.
    let table = ok(&env.cp.kubectl(&["get", VM, "web", "-n", ns]));
    let mut lines = table.lines();
    let head: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(head, ["NAME", "PHASE", "NODE", "AGE"], "{table}");
    let row: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(row[..3], ["web", "Running", node.as_str()], "{table}");

    // Deletion waits for the KubeVirt VM and its instance. An extra finalizer on the instance
    // holds it (and so the KubeVirt VM, whose virt-controller waits for it).
    ok(&env.cp.kubectl(&[
        "patch",
        UP_VMI,
        "web",
        "-n",
        ns,
        "--type",
        "json",
        "-p",
        r#"[{"op":"add","path":"/metadata/finalizers","value":["test.example/hold"]}]"#,
    ]));
    ok(&env.cp.kubectl(&["delete", VM, "web", "-n", ns, "--wait=false"]));
    env.wait("instance and KubeVirt VM deleting", || {
        let vmi = env.get(UP_VMI, ns, "web").ok_or("no instance")?;
        let kvvm = env.get(UP_KVVM, ns, "web").ok_or("no KubeVirt VM")?;
        if vmi["metadata"]["deletionTimestamp"].is_string()
            && kvvm["metadata"]["deletionTimestamp"].is_string()
        {
            Ok(())
        } else {
            Err("not deleting yet".to_owned())
        }
    });
    let vm = env.wait_vm(ns, "web", "Terminating", |vm| {
        vm["status"]["phase"] == "Terminating"
    });
    assert!(
        vm["metadata"]["finalizers"].to_string().contains("vm-cleanup"),
        "{vm}"
    );
    ok(&env.cp.kubectl(&[
        "patch",
        UP_VMI,
        "web",
        "-n",
        ns,
        "--type",
        "json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]));
    env.wait("VM, KubeVirt VM and instance gone", || {
        for r in [VM, UP_KVVM, UP_VMI] {
            if env.get(r, ns, "web").is_some() {
                return Err(format!("{r} still there"));
            }
        }
        Ok(())
    });
}

/// runPolicy changes start and stop the VM.
pub fn run_policy(env: &Env) {
    let ns = env.namespace("policy");
    let ns = ns.as_str();
    env.apply(&vm_yaml(ns, "p", "AlwaysOff", "256Mi"));
    env.wait_vm(ns, "p", "Stopped", stopped);
    let strategy = || env.get(UP_KVVM, ns, "p").expect("KubeVirt VM")["spec"]["runStrategy"].clone();
    assert_eq!(strategy(), "Halted");
    assert!(env.get(UP_VMI, ns, "p").is_none());
    for (policy, strategy_want, want_running) in [
        ("AlwaysOn", "Always", true),
        ("Manual", "Manual", true),
        ("AlwaysOff", "Halted", false),
        ("AlwaysOnUnlessStoppedManually", "Manual", true),
    ] {
        env.patch(VM, ns, "p", json!({"spec": {"runPolicy": policy}}));
        if want_running {
            env.wait_vm(ns, "p", &format!("{policy}: Running"), running);
        } else {
            env.wait_vm(ns, "p", &format!("{policy}: Stopped"), stopped);
        }
        assert_eq!(strategy(), strategy_want, "{policy}");
        assert_eq!(env.get(UP_VMI, ns, "p").is_some(), want_running, "{policy}");
    }
}

/// A spec change is applied at once to a stopped VM and awaits a restart on a running one.
pub fn spec_change(env: &Env) {
    let ns = env.namespace("change");
    let ns = ns.as_str();
    env.apply(&vm_yaml(ns, "c", "Manual", "256Mi"));
    env.wait_vm(ns, "c", "Stopped", stopped);
    env.patch(VM, ns, "c", json!({"spec": {"cpu": {"cores": 2}}}));
    let vm = env.wait_vm(ns, "c", "Stopped, applied", |vm| {
        stopped(vm) && cond_is(vm, "ConfigurationApplied", "True")
    });
    assert!(cond(&vm, "AwaitingRestartToApplyConfiguration").is_none(), "{vm}");
    let up = env.get(UP_KVVM, ns, "c").expect("KubeVirt VM");
    assert_eq!(
        up["spec"]["template"]["spec"]["domain"]["cpu"]["cores"], 2,
        "{up}"
    );

    env.completes(ns, "start", "Start", "c");
    env.wait_vm(ns, "c", "Running", running);
    env.patch(
        VM,
        ns,
        "c",
        json!({"spec": {"memory": {"size": "512Mi"}}, "metadata": {"labels": {"tier": "gold"}}}),
    );
    let vm = env.wait_vm(ns, "c", "awaiting restart", |vm| {
        phase_is(vm, "Running") && cond_is(vm, "AwaitingRestartToApplyConfiguration", "True")
    });
    let (_, reason, message) = cond(&vm, "ConfigurationApplied").expect("ConfigurationApplied");
    assert_eq!(reason, "RestartAwaitingChanges", "{vm}");
    assert!(message.contains("domain"), "{vm}");
    assert!(cond_is(&vm, "ConfigurationApplied", "False"), "{vm}");
    let up = env.get(UP_KVVM, ns, "c").expect("KubeVirt VM");
    assert_eq!(
        up["spec"]["template"]["spec"]["domain"]["memory"]["guest"], "512Mi",
        "{up}"
    );
    assert_eq!(up["metadata"]["labels"]["tier"], "gold", "{up}");
    let vmi = env.get(UP_VMI, ns, "c").expect("instance");
    assert_eq!(vmi["spec"]["domain"]["memory"]["guest"], "256Mi", "{vmi}");

    env.completes(ns, "restart", "Restart", "c");
    let vm = env.wait_vm(ns, "c", "restarted, applied", running);
    assert!(cond(&vm, "AwaitingRestartToApplyConfiguration").is_none(), "{vm}");
    let vmi = env.get(UP_VMI, ns, "c").expect("instance");
    assert_eq!(vmi["spec"]["domain"]["memory"]["guest"], "512Mi", "{vmi}");
}

/// An invalid spec gets a condition naming the problem, not a crash loop; fixed, it goes on.
pub fn invalid_spec(env: &Env) {
    let ns = env.namespace("bad");
    let ns = ns.as_str();
    env.apply(&vm_yaml(ns, "mem", "AlwaysOn", "lots"));
    env.apply(&vm_yaml(ns, "frac", "AlwaysOn", "256Mi").replace("50%", "150%"));
    for (name, field) in [("mem", "spec.memory.size"), ("frac", "spec.cpu.coreFraction")] {
        let vm = env.wait_vm(ns, name, "InvalidSpec", |vm| {
            cond(vm, "ConfigurationApplied").is_some_and(|c| c.0 == "False" && c.1 == "InvalidSpec")
                && vm["status"]["observedGeneration"] == vm["metadata"]["generation"]
        });
        let (_, _, message) = cond(&vm, "ConfigurationApplied").expect("condition");
        assert!(message.contains(field), "{vm}");
        assert_eq!(vm["status"]["phase"], "Pending", "{vm}");
        assert!(
            env.get(UP_KVVM, ns, name).is_none(),
            "nothing rendered from an invalid spec"
        );
    }
    assert!(env.ctl().alive(), "controller exited");
    env.patch(VM, ns, "mem", json!({"spec": {"memory": {"size": "256Mi"}}}));
    env.wait_vm(ns, "mem", "Running once fixed", running);
}

/// A KubeVirt VM edited by hand upstream is put back.
pub fn hand_edit(env: &Env) {
    let ns = env.namespace("hand");
    let ns = ns.as_str();
    env.apply(&vm_yaml(ns, "h", "AlwaysOff", "256Mi"));
    env.wait_vm(ns, "h", "Stopped", stopped);
    // The spec, then a label: each is put back on its own.
    let put_back = |what: &str| {
        env.wait(
            &format!("KubeVirt VM put back after a hand edit of {what}"),
            || {
                let up = env.get(UP_KVVM, ns, "h").ok_or("no KubeVirt VM")?;
                let back = up["metadata"]["labels"][UP_NAME_LABEL] == "h"
                    && up["spec"]["runStrategy"] == "Halted"
                    && up["spec"]["template"]["spec"]["domain"]["cpu"]["cores"] == 1;
                if back { Ok(()) } else { Err(up.to_string()) }
            },
        )
    };
    env.patch(
        UP_KVVM,
        ns,
        "h",
        json!({"spec": {"runStrategy": "Always", "template": {"spec": {"domain": {"cpu": {"cores": 8}}}}}}),
    );
    put_back("the spec");
    env.patch(
        UP_KVVM,
        ns,
        "h",
        json!({"metadata": {"labels": {UP_NAME_LABEL: "other"}}}),
    );
    put_back("a label");
    env.wait("no instance", || match env.get(UP_VMI, ns, "h") {
        None => Ok(()),
        Some(_) => Err("instance still there".to_owned()),
    });
    env.wait_vm(ns, "h", "Stopped", stopped);
}
