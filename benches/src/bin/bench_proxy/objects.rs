//! The VirtualMachines the benchmark sends and serves, with the renamed names.

use serde_json::json;

use crate::{GROUP, KIND, LABEL, NS};

/// A realistic VirtualMachine (about 4 KB of JSON, 5 KB once kube-apiserver adds its
/// managedFields) with the renamed names, as kube-apiserver stores it. `server` adds what the
/// server adds (uid, resourceVersion, managedFields, status).
pub(crate) fn vm(name: &str, server: bool) -> serde_json::Value {
    // Only the object's own metadata is renamed; inside spec.template the names stay original
    // (the rules leave a VM's template alone, on the way up as on the way back).
    let l = |k: &str| format!("{LABEL}/{k}");
    let o = |k: &str| format!("kubevirt.io/{k}");
    let user_data = format!(
        "#cloud-config\nhostname: {name}\nssh_pwauth: false\nusers:\n  - name: cloud\n    sudo: ALL=(ALL) NOPASSWD:ALL\n    shell: /bin/bash\n    ssh_authorized_keys:\n      - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIO7bench0bench1bench2bench3bench4bench5bench6 bench@example\npackage_update: true\npackages: [qemu-guest-agent, curl, jq, htop]\nwrite_files:\n  - path: /etc/motd\n    content: |\n      {name} is managed by the virtualization benchmark; changes are lost on restart.\n  - path: /etc/sysctl.d/90-bench.conf\n    content: |\n      net.core.somaxconn = 4096\n      vm.swappiness = 10\nruncmd:\n  - [systemctl, enable, --now, qemu-guest-agent]\n  - [sh, -c, 'echo ready > /run/bench-ready']\n"
    );
    let mut v = json!({
        "apiVersion": format!("{GROUP}/v1"),
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {
                l("vm"): name, l("os"): "linux", "app": "bench", "tier": "backend",
                "app.kubernetes.io/managed-by": "virt-operator-internal-virtualization",
            },
            "annotations": {
                l("latest-observed-api-version"): "v1",
                l("storage-observed-api-version"): "v1alpha3",
                "bench/description": "a benchmark virtual machine with a realistic specification",
            },
            "finalizers": [format!("{LABEL}/virtualMachineControllerFinalize")],
        },
        "spec": {
            "running": false,
            "template": {
                "metadata": {
                    "labels": {o("vm"): name, o("domain"): name, o("size"): "medium", "app": "bench"},
                    "annotations": {o("allow-pod-bridge-network-live-migration"): "true"},
                },
                "spec": {
                    "domain": {
                        "cpu": {"cores": 2, "sockets": 1, "threads": 1, "model": "host-model"},
                        "memory": {"guest": "2Gi"},
                        "resources": {"requests": {"memory": "2Gi", "cpu": "1"}, "limits": {"memory": "2Gi", "cpu": "2"}},
                        "machine": {"type": "q35"},
                        "firmware": {"serial": "6d3bd5a2-0cc5-4e5e-9b57-3c8d1f4f1c1e", "bootloader": {"efi": {"secureBoot": false}}},
                        "features": {"acpi": {}, "apic": {}, "smm": {"enabled": true}},
                        "clock": {"utc": {}, "timer": {"rtc": {"tickPolicy": "catchup"}, "pit": {"tickPolicy": "delay"}, "hpet": {"present": false}}},
                        "devices": {
                            "disks": [
                                {"name": "rootdisk", "disk": {"bus": "virtio"}, "bootOrder": 1},
                                {"name": "datadisk", "disk": {"bus": "virtio"}},
                                {"name": "cloudinitdisk", "disk": {"bus": "virtio"}},
                            ],
                            "interfaces": [{"name": "default", "masquerade": {}, "model": "virtio",
                                "ports": [{"name": "ssh", "port": 22, "protocol": "TCP"}, {"name": "http", "port": 80, "protocol": "TCP"}]}],
                            "rng": {},
                            "networkInterfaceMultiqueue": true,
                        },
                    },
                    "networks": [{"name": "default", "pod": {}}],
                    "terminationGracePeriodSeconds": 30,
                    "nodeSelector": {"kubernetes.io/os": "linux", o("schedulable"): "true"},
                    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                        "weight": 100,
                        "podAffinityTerm": {"labelSelector": {"matchLabels": {o("vm"): name}}, "topologyKey": "kubernetes.io/hostname"},
                    }]}},
                    "tolerations": [{"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"}],
                    "volumes": [
                        {"name": "rootdisk", "containerDisk": {"image": "quay.io/containerdisks/fedora:39", "imagePullPolicy": "IfNotPresent"}},
                        {"name": "datadisk", "persistentVolumeClaim": {"claimName": format!("{name}-data")}},
                        {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": user_data}},
                    ],
                },
            },
        },
    });
    if server {
        let m = v["metadata"].as_object_mut().expect("metadata");
        m.insert("uid".into(), json!("0b7e5d3e-8f1a-4a5b-9a3e-2f1c5d6e7f80"));
        m.insert("resourceVersion".into(), json!("123456"));
        m.insert("generation".into(), json!(1));
        m.insert("creationTimestamp".into(), json!("2024-05-01T10:00:00Z"));
        m.insert(
            "managedFields".into(),
            json!([{
                "manager": "kubectl-client-side-apply", "operation": "Update",
                "apiVersion": format!("{GROUP}/v1"), "time": "2024-05-01T10:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {
                        "f:annotations": {".": {}, format!("f:{}", l("latest-observed-api-version")): {}, format!("f:{}", l("storage-observed-api-version")): {}, "f:bench/description": {}},
                        "f:labels": {".": {}, "f:app": {}, "f:tier": {}, format!("f:{}", l("vm")): {}, format!("f:{}", l("os")): {}},
                    },
                    "f:spec": {".": {}, "f:running": {}, "f:template": {".": {},
                        "f:metadata": {".": {}, "f:labels": {".": {}, "f:app": {}, format!("f:{}", o("vm")): {}, format!("f:{}", o("domain")): {}}},
                        "f:spec": {".": {}, "f:domain": {".": {}, "f:cpu": {}, "f:devices": {}, "f:memory": {}, "f:resources": {}},
                            "f:networks": {}, "f:volumes": {}, "f:nodeSelector": {}, "f:affinity": {}, "f:tolerations": {}}}},
                },
            }]),
        );
        v.as_object_mut().expect("object").insert(
            "status".into(),
            json!({"printableStatus": "Stopped", "created": false, "ready": false,
                "conditions": [{"type": "Ready", "status": "False", "reason": "VMINotExists", "lastProbeTime": null, "lastTransitionTime": "2024-05-01T10:00:01Z"}],
                "volumeSnapshotStatuses": [{"name": "rootdisk", "enabled": false, "reason": "Volume type has no StorageClass defined"}]}),
        );
    }
    v
}

/// A small object for the latency runs (about 600 bytes).
pub(crate) fn small_vm(name: &str) -> String {
    json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": KIND,
        "metadata": {"name": name, "namespace": NS, "uid": "0b7e5d3e-8f1a-4a5b-9a3e-2f1c5d6e7f81", "resourceVersion": "42",
            "labels": {format!("{LABEL}/vm"): name, "app": "bench"}},
        "spec": {"running": false, "template": {"metadata": {"labels": {"kubevirt.io/vm": name}},
            "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}}}},
    })
    .to_string()
}
