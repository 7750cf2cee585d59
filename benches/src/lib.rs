//! Test data for the benchmarks: KubeVirt VirtualMachines as kube-apiserver holds them behind
//! the rewriter (renamed group, kind, labels, annotations, finalizers and managedFields keys),
//! about 5 KB each, in LIST bodies and WATCH streams.
//!
//! The objects are shaped like the VMs in `testdata/kube-apiserver-1.36/vm-list.json` and
//! `vm-list-bulk-plain.json`, with more of a real VM filled in (affinity, tolerations, several
//! disks, interfaces, networks, cloud-init, two managedFields entries, status). Names, uids,
//! sizes and timestamps vary with a seeded generator, so the output is reproducible.

use std::io::{self, Write};

use serde_json::{Value, json};

/// The renamed API group as the server holds it.
pub const GROUP: &str = "internal.virtualization.deckhouse.io";
/// The renamed label/annotation/finalizer prefix for `kubevirt.io`.
pub const KV: &str = "kubevirt.internal.virtualization.deckhouse.io";

/// A small, fast, seeded generator (splitmix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A random UUID-shaped string.
    pub fn uuid(&mut self) -> String {
        let a = self.next_u64();
        let b = self.next_u64();
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | (b >> 48) & 0x3fff,
            b & 0xffff_ffff_ffff
        )
    }

    /// An RFC 3339 timestamp in 2026.
    pub fn time(&mut self) -> String {
        format!(
            "2026-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            1 + self.below(12),
            1 + self.below(28),
            self.below(24),
            self.below(60),
            self.below(60)
        )
    }
}

fn f(keys: &[&str]) -> Value {
    let mut m = serde_json::Map::new();
    m.insert(".".into(), json!({}));
    for k in keys {
        m.insert(format!("f:{k}"), json!({}));
    }
    Value::Object(m)
}

/// One VirtualMachine as the server holds it (renamed), number `i` of a generator.
pub fn vm(rng: &mut Rng, i: usize) -> Value {
    let ns = format!("tenant-{:03}", i % 97);
    let app = ["web", "db", "cache", "worker", "gw"][i % 5];
    let name = format!("vm-{i:06}-{app}");
    let uid = rng.uuid();
    let owner_uid = rng.uuid();
    let created = rng.time();
    let updated = rng.time();
    let cores = 1 + rng.below(8);
    let mem = 1 << rng.below(5);
    let rv = 100_000 + rng.below(9_000_000);
    let generation = 1 + rng.below(20);
    let disks = 1 + rng.below(2) as usize;
    let mac = format!(
        "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        rng.below(256),
        rng.below(256),
        rng.below(256),
        rng.below(256),
        rng.below(256)
    );
    let fw_uuid = rng.uuid();
    let disk_list: Vec<Value> = (0..disks)
        .map(|d| json!({"bootOrder": d + 1, "disk": {"bus": "virtio"}, "name": format!("{name}-disk-{d}")}))
        .chain(std::iter::once(
            json!({"disk": {"bus": "virtio"}, "name": "cloudinit"}),
        ))
        .collect();
    let volume_list: Vec<Value> = (0..disks)
        .map(|d| json!({"name": format!("{name}-disk-{d}"), "persistentVolumeClaim": {"claimName": format!("vd-{name}-disk-{d}")}}))
        .chain(std::iter::once(json!({"cloudInitNoCloud": {"userDataSecretRef": {"name": format!("{name}-cloud-init")}}, "name": "cloudinit"})))
        .collect();
    let disk_keys: Vec<String> = (0..disks)
        .map(|d| format!("k:{{\"name\":\"{name}-disk-{d}\"}}"))
        .collect();
    let mut disks_f = serde_json::Map::new();
    disks_f.insert(".".into(), json!({}));
    for k in &disk_keys {
        disks_f.insert(k.clone(), f(&["bootOrder", "disk", "name"]));
    }
    json!({
        "apiVersion": format!("{GROUP}/v1"),
        "kind": "InternalVirtualizationVirtualMachine",
        "metadata": {
            "annotations": {
                format!("{KV}/latest-observed-api-version"): "v1",
                format!("{KV}/storage-observed-api-version"): "v1",
                "example.com/description": format!("VM {name} in {ns}; owned by team {}", i % 13),
            },
            "creationTimestamp": created,
            "finalizers": [
                format!("{KV}/virtualMachineControllerFinalize"),
                "virtualization.deckhouse.io/vm-controller",
            ],
            "generation": generation,
            "labels": {
                "app": app,
                format!("{KV}/created-by"): "virt-controller",
                format!("vm.{KV}/name"): name,
                "virtualization.deckhouse.io/virtual-machine-name": name,
                "app.kubernetes.io/managed-by": "virtualization-controller",
            },
            "managedFields": [
                {
                    "apiVersion": format!("{GROUP}/v1"),
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {
                            "f:annotations": f(&[&format!("{KV}/latest-observed-api-version"), &format!("{KV}/storage-observed-api-version")]),
                            "f:finalizers": {".": {}, format!("v:\"{KV}/virtualMachineControllerFinalize\""): {}},
                            "f:labels": f(&[&format!("{KV}/created-by")]),
                        },
                        "f:status": f(&["conditions", "created", "desiredGeneration", "observedGeneration", "printableStatus", "ready", "volumeSnapshotStatuses"]),
                    },
                    "manager": "virt-controller",
                    "operation": "Update",
                    "time": updated,
                },
                {
                    "apiVersion": format!("{GROUP}/v1"),
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {
                            "f:annotations": f(&["example.com/description"]),
                            "f:finalizers": {"v:\"virtualization.deckhouse.io/vm-controller\"": {}},
                            "f:labels": f(&["app", &format!("vm.{KV}/name"), "virtualization.deckhouse.io/virtual-machine-name", "app.kubernetes.io/managed-by"]),
                            "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{owner_uid}\"}}"): {}},
                        },
                        "f:spec": {
                            ".": {},
                            "f:runStrategy": {},
                            "f:template": {
                                ".": {},
                                "f:metadata": {".": {}, "f:labels": f(&[&format!("{KV}/domain"), &format!("vm.{KV}/name")])},
                                "f:spec": {
                                    ".": {},
                                    "f:affinity": {},
                                    "f:domain": {".": {}, "f:cpu": f(&["cores", "model"]), "f:devices": {".": {}, "f:disks": disks_f, "f:interfaces": {}}, "f:resources": f(&["requests"])},
                                    "f:networks": {}, "f:nodeSelector": {}, "f:tolerations": {}, "f:volumes": {},
                                },
                            },
                        },
                    },
                    "manager": "virtualization-controller",
                    "operation": "Update",
                    "time": created,
                },
            ],
            "name": name,
            "namespace": ns,
            "ownerReferences": [{
                "apiVersion": "virtualization.deckhouse.io/v1alpha2",
                "blockOwnerDeletion": true,
                "controller": true,
                "kind": "VirtualMachine",
                "name": name,
                "uid": owner_uid,
            }],
            "resourceVersion": rv.to_string(),
            "uid": uid,
        },
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {
                    "creationTimestamp": null,
                    "labels": {
                        format!("{KV}/domain"): name,
                        format!("vm.{KV}/name"): name,
                    },
                },
                "spec": {
                    "affinity": {
                        "podAntiAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [{
                                "podAffinityTerm": {
                                    "labelSelector": {"matchLabels": {format!("vm.{KV}/name"): name}},
                                    "topologyKey": "kubernetes.io/hostname",
                                },
                                "weight": 100,
                            }],
                        },
                    },
                    "domain": {
                        "cpu": {"cores": cores, "model": "host-model"},
                        "devices": {
                            "disks": disk_list,
                            "interfaces": [{"bridge": {}, "macAddress": mac, "model": "virtio", "name": "default"}],
                        },
                        "firmware": {"uuid": fw_uuid},
                        "machine": {"type": "q35"},
                        "resources": {"requests": {"memory": format!("{mem}Gi")}},
                    },
                    "evictionStrategy": "LiveMigrate",
                    "networks": [{"name": "default", "pod": {}}],
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "terminationGracePeriodSeconds": 60,
                    "tolerations": [{"effect": "NoSchedule", "key": "dedicated.virtualization.deckhouse.io", "operator": "Exists"}],
                    "volumes": volume_list,
                },
            },
        },
        "status": {
            "conditions": [
                {"lastProbeTime": null, "lastTransitionTime": updated, "status": "True", "type": "Ready"},
                {"lastProbeTime": null, "lastTransitionTime": created, "message": "All of the VMI's DVs are bound and not running", "reason": "AllDVsReady", "status": "True", "type": "DataVolumesReady"},
            ],
            "created": true,
            "desiredGeneration": generation,
            "observedGeneration": generation,
            "printableStatus": "Running",
            "ready": true,
            "volumeSnapshotStatuses": (0..disks).map(|d| json!({"enabled": false, "name": format!("{name}-disk-{d}"), "reason": "No VolumeSnapshotClass for StorageClass local-path"})).collect::<Vec<_>>(),
        },
    })
}

/// The bytes of VM number `i` (compact JSON, as kube-apiserver writes it).
pub fn vm_bytes(rng: &mut Rng, i: usize) -> Vec<u8> {
    serde_json::to_vec(&vm(rng, i)).expect("serializes")
}

/// Writes a LIST envelope around VMs until at least `min_bytes` are written (or `max_items`).
pub fn write_list(w: &mut impl Write, seed: u64, max_items: usize, min_bytes: usize) -> io::Result<usize> {
    let mut rng = Rng::new(seed);
    let mut n = 0;
    w.write_all(format!("{{\"apiVersion\":\"{GROUP}/v1\",\"items\":[").as_bytes())?;
    let mut i = 0;
    while i < max_items && n < min_bytes {
        if i > 0 {
            w.write_all(b",")?;
        }
        let b = vm_bytes(&mut rng, i);
        n += b.len() + 1;
        w.write_all(&b)?;
        i += 1;
    }
    w.write_all(
        b"],\"kind\":\"InternalVirtualizationVirtualMachineList\",\"metadata\":{\"continue\":\"\",\"resourceVersion\":\"9912345\"}}",
    )?;
    Ok(i)
}

/// A LIST body of `items` VMs.
pub fn list(items: usize, seed: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(items * 5200);
    write_list(&mut v, seed, items, usize::MAX).expect("vec");
    v
}

/// A WATCH stream of `events` MODIFIED events, newline-delimited.
pub fn watch(events: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut v = Vec::with_capacity(events * 5200);
    for i in 0..events {
        v.extend_from_slice(b"{\"type\":\"MODIFIED\",\"object\":");
        v.extend_from_slice(&vm_bytes(&mut rng, i % 10_000));
        v.extend_from_slice(b"}\n");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_validity() {
        let mut rng = Rng::new(1);
        let total: usize = (0..100).map(|i| vm_bytes(&mut rng, i).len()).sum();
        assert!((4500..5500).contains(&(total / 100)), "mean {}", total / 100);
        let l = list(50, 7);
        let v: Value = serde_json::from_slice(&l).unwrap();
        assert_eq!(v["items"].as_array().unwrap().len(), 50);
        let w = watch(10, 7);
        assert_eq!(
            serde_json::Deserializer::from_slice(&w)
                .into_iter::<Value>()
                .count(),
            10
        );
    }
}
