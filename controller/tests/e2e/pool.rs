//! VirtualMachinePools: VMs and their disks made from templates, scaled with `kubectl scale`
//! through the `scale` subresource, a deleted VM made again, and everything deleted with the
//! pool by the garbage collector.

use kube_api_rewriter_testkit::*;
use serde_json::Value;

use crate::env::*;

const POOL: &str = "web";
const POOL_LABEL: &str = "virtualization.deckhouse.io/pool";

/// A pool of `replicas` AlwaysOn VMs like `vm_yaml`'s, each with a disk from template `root`.
fn pool_yaml(ns: &str, replicas: u32) -> String {
    format!(
        r#"apiVersion: virtualization.deckhouse.io/v1alpha2
kind: VirtualMachinePool
metadata: {{name: {POOL}, namespace: {ns}}}
spec:
  replicas: {replicas}
  scaleDownPolicy: Newest
  virtualMachineTemplate:
    metadata: {{labels: {{app: shop}}, annotations: {{team: web}}}}
    spec:
      runPolicy: AlwaysOn
      cpu: {{cores: 1, coreFraction: "50%"}}
      memory: {{size: 256Mi}}
      nodeSelector: {{disk: ssd}}
      tolerations: [{{key: dedicated, operator: Exists, effect: NoSchedule}}]
      blockDeviceRefs:
      - {{kind: VirtualDisk, name: root}}
  virtualDiskTemplates:
  - metadata: {{name: root, labels: {{tier: data}}}}
    spec:
      persistentVolumeClaim: {{size: 1Gi, storageClassName: local}}
"#
    )
}

/// The sorted names of the objects of `resource` in `ns` carrying the pool's label.
fn children(env: &Env, resource: &str, ns: &str) -> Vec<String> {
    let out = ok(&env.cp.kubectl(&[
        "get",
        resource,
        "-n",
        ns,
        "-l",
        &format!("{POOL_LABEL}={POOL}"),
        "-o",
        "json",
    ]));
    let list = parse_json(&out);
    let mut names: Vec<String> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// Whether `obj` has a controller ownerReference to the pool of uid `uid`.
fn owned_by_pool(obj: &Value, uid: &str) -> bool {
    obj["metadata"]["ownerReferences"].as_array().is_some_and(|refs| {
        refs.iter().any(|r| {
            r["kind"] == "VirtualMachinePool"
                && r["name"] == POOL
                && r["uid"] == uid
                && r["controller"] == true
        })
    })
}

/// Waits until the pool's disk of VM `index` has a claim, gives the claim a volume, and
/// checks the disk is the pool's.
fn provision_disk(env: &Env, ns: &str, index: u32, pool_uid: &str) {
    let name = format!("root-{POOL}-{index}");
    let vd = env.wait(&format!("VirtualDisk {ns}/{name} with a claim"), || {
        let vd = env.get(VD, ns, &name).ok_or("no VirtualDisk")?;
        if vd["status"]["target"]["persistentVolumeClaimName"].is_string() {
            Ok(vd)
        } else {
            Err(vd["status"].to_string())
        }
    });
    assert!(owned_by_pool(&vd, pool_uid), "{vd}");
    assert_eq!(vd["metadata"]["labels"]["tier"], "data", "{vd}");
    let claim = vd["status"]["target"]["persistentVolumeClaimName"]
        .as_str()
        .expect("claim");
    env.provision(ns, claim);
}

/// Waits until VM `index` of the pool runs with its own disk and is the pool's; returns it.
fn wait_member(env: &Env, ns: &str, index: u32, pool_uid: &str) -> Value {
    let name = format!("{POOL}-{index}");
    let vm = env.wait_vm(ns, &name, "Running, made by the pool", running);
    assert!(owned_by_pool(&vm, pool_uid), "{vm}");
    assert_eq!(vm["metadata"]["labels"][POOL_LABEL], POOL, "{vm}");
    assert_eq!(vm["metadata"]["labels"]["app"], "shop", "{vm}");
    assert_eq!(vm["metadata"]["annotations"]["team"], "web", "{vm}");
    assert_eq!(
        vm["spec"]["blockDeviceRefs"][0]["name"],
        format!("root-{POOL}-{index}"),
        "{vm}"
    );
    vm
}

/// Waits until the pool's status says `replicas` VMs, all running, for its generation.
fn wait_pool_ready(env: &Env, ns: &str, replicas: i64) -> Value {
    env.wait(&format!("pool {ns}/{POOL}: {replicas} VMs ready"), || {
        let p = env.get(VMPOOL, ns, POOL).ok_or("no pool")?;
        let st = &p["status"];
        if st["replicas"] == replicas
            && st["readyReplicas"] == replicas
            && st["observedGeneration"] == p["metadata"]["generation"]
            && cond_is(&p, "Ready", "True")
        {
            Ok(p)
        } else {
            Err(st.to_string())
        }
    })
}

/// `kubectl scale` of the pool, through its `scale` subresource.
fn scale(env: &Env, ns: &str, replicas: u32) {
    ok(&env.cp.kubectl(&[
        "scale",
        &format!("virtualmachinepool/{POOL}"),
        "-n",
        ns,
        &format!("--replicas={replicas}"),
    ]));
}

/// A pool of 2 makes VMs `web-0` and `web-1` with their disks; scaled to 3 it makes `web-2`;
/// scaled to 1 it keeps the oldest (`Newest` goes first) and deletes the others' disks; a
/// deleted VM is made again; the status's selector selects the VMs; the pool's deletion takes
/// its VMs and disks with it.
pub fn pools(env: &Env) {
    let ns = env.namespace("pools");
    let ns = ns.as_str();
    env.apply(&pool_yaml(ns, 2));
    let pool = env.get(VMPOOL, ns, POOL).expect("the pool");
    let uid = pool["metadata"]["uid"].as_str().expect("uid").to_owned();
    for i in 0..2 {
        provision_disk(env, ns, i, &uid);
    }
    for i in 0..2 {
        wait_member(env, ns, i, &uid);
    }
    let p = wait_pool_ready(env, ns, 2);
    assert_eq!(p["status"]["selector"], format!("{POOL_LABEL}={POOL}"), "{p}");
    assert_eq!(children(env, VD, ns), ["root-web-0", "root-web-1"]);

    scale(env, ns, 3);
    provision_disk(env, ns, 2, &uid);
    wait_member(env, ns, 2, &uid);
    wait_pool_ready(env, ns, 3);
    assert_eq!(children(env, VM, ns), ["web-0", "web-1", "web-2"]);

    // `Newest`: web-2 is the youngest; web-0 and web-1 may share a second, and then the higher
    // index goes first.
    scale(env, ns, 1);
    env.wait("scaled down to web-0 and its disk", || {
        let (vms, disks) = (children(env, VM, ns), children(env, VD, ns));
        if vms == ["web-0"] && disks == ["root-web-0"] {
            Ok(())
        } else {
            Err(format!("VMs {vms:?}, disks {disks:?}"))
        }
    });
    wait_pool_ready(env, ns, 1);

    let old = env.get(VM, ns, "web-0").expect("web-0");
    let old_uid = old["metadata"]["uid"].as_str().expect("uid").to_owned();
    ok(&env.cp.kubectl(&["delete", VM, "web-0", "-n", ns, "--wait=false"]));
    env.wait("web-0 made again after its deletion", || {
        let vm = env.get(VM, ns, "web-0").ok_or("no web-0")?;
        let uid = vm["metadata"]["uid"].as_str().unwrap_or_default();
        if uid != old_uid && running(&vm) {
            Ok(())
        } else {
            Err(format!("uid {uid}, status {}", vm["status"]))
        }
    });
    wait_member(env, ns, 0, &uid);
    assert_eq!(children(env, VD, ns), ["root-web-0"], "the disk stays");

    // The selector the scale subresource reports, as an autoscaler would use it.
    let selector = ok(&env.cp.kubectl(&[
        "get",
        "vmpool",
        POOL,
        "-n",
        ns,
        "-o",
        "jsonpath={.status.selector}",
    ]))
    .trim()
    .to_owned();
    assert_eq!(selector, format!("{POOL_LABEL}={POOL}"));
    let selected = ok(&env.cp.kubectl(&[
        "get",
        VM,
        "-n",
        ns,
        "-l",
        &selector,
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]));
    assert_eq!(selected.trim(), "web-0");
    let scale_obj = parse_json(&ok(&env.cp.kubectl(&[
        "get",
        "--raw",
        &format!(
            "/apis/virtualization.deckhouse.io/v1alpha2/namespaces/{ns}/virtualmachinepools/{POOL}/scale"
        ),
    ])));
    assert_eq!(scale_obj["spec"]["replicas"], 1, "{scale_obj}");
    assert_eq!(scale_obj["status"]["selector"], selector.as_str(), "{scale_obj}");

    ok(&env
        .cp
        .kubectl(&["delete", VMPOOL, POOL, "-n", ns, "--wait=false"]));
    env.wait(
        "the pool's VMs and disks deleted by the garbage collector",
        || {
            let (vms, disks) = (children(env, VM, ns), children(env, VD, ns));
            if vms.is_empty() && disks.is_empty() && env.get(VMPOOL, ns, POOL).is_none() {
                Ok(())
            } else {
                Err(format!("VMs {vms:?}, disks {disks:?}"))
            }
        },
    );
}
