//! The plain PUT subresources through kube-apiserver: freeze, unfreeze, addvolume,
//! removevolume, and what virt-api gets for them.

use kube_api_rewriter_testkit as tk;
use serde_json::Value;

use crate::client::vm_path;
use crate::env::{Env, SA};

pub fn puts(e: &Env) {
    let before = e.fake.puts().len();
    tk::ok(&e.put(
        &format!("{}?unfreezeTimeout=5m", vm_path("vm-running", "freeze")),
        "{}",
    ));
    tk::ok(&e.put(&vm_path("vm-running", "unfreeze"), "{}"));
    tk::ok(&e.put(
        &format!(
            "{}?name=disk1&volumeKind=VirtualDisk&pvcName=pvc-disk1&serial=s1",
            vm_path("vm-running", "addvolume")
        ),
        "{}",
    ));
    tk::ok(&e.put(
        &format!("{}?name=disk1", vm_path("vm-running", "removevolume")),
        "{}",
    ));
    let puts = e.fake.puts();
    let got: Vec<(String, Value)> = puts[before..]
        .iter()
        .map(|s| {
            (
                s.path.clone(),
                serde_json::from_str(&s.body).unwrap_or(Value::Null),
            )
        })
        .collect();
    let vmi = "/apis/subresources.kubevirt.io/v1/namespaces/demo/virtualmachineinstances/vm-running";
    let vm = "/apis/subresources.kubevirt.io/v1/namespaces/demo/virtualmachines/vm-running";
    let want = vec![
        (
            format!("{vmi}/freeze"),
            serde_json::json!({"unfreezeTimeout": "5m"}),
        ),
        (format!("{vmi}/unfreeze"), serde_json::json!({})),
        (
            format!("{vm}/addvolume"),
            serde_json::json!({"name": "disk1",
                "disk": {"name": "disk1", "errorPolicy": "report", "disk": {"bus": "scsi"}, "serial": "s1"},
                "volumeSource": {"persistentVolumeClaim": {"claimName": "pvc-disk1", "hotpluggable": true}}}),
        ),
        (format!("{vm}/removevolume"), serde_json::json!({"name": "disk1"})),
    ];
    assert_eq!(got, want);
    // The query string of a plain request is passed on too (as UpgradeAwareHandler does).
    assert_eq!(puts[before].query, "unfreezeTimeout=5m");
    assert!(
        puts[before..]
            .iter()
            .all(|s| s.user == SA && s.groups == ["system:serviceaccounts"])
    );
}
