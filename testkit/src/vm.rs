//! One realistic KubeVirt VirtualMachine, for every benchmark, load run and test that needs
//! one: as a client sends it (original names) or as kube-apiserver holds it behind the
//! rewriter (renamed group, kind, label, annotation and finalizer prefixes), with or without
//! what the server adds. Sizes and values vary with a seed, so the output is reproducible.
//!
//! The shape follows the VMs of `testdata/kube-apiserver-1.36/vm-list.json`, with more of a
//! real VM filled in: cloud-init (from a Secret, as Deckhouse provisions it), affinity, tolerations, several disks, interfaces, networks;
//! stored, two managedFields entries, an owner (the Deckhouse VirtualMachine) and status.
//! Inside `spec.template` the names stay original in both forms: the rules leave a VM's
//! template alone.
//!
//! ```
//! use kube_api_rewriter_testkit::vm::Vm;
//!
//! let sent = Vm::new("web-1", "default").json();
//! assert_eq!(sent["apiVersion"], "kubevirt.io/v1");
//! let held = Vm::new("web-1", "default").renamed().stored().json();
//! assert_eq!(held["kind"], "InternalVirtualizationVirtualMachine");
//! assert!(held["metadata"]["resourceVersion"].is_string());
//! ```

use serde_json::{Map, Value, json};

/// The renamed API group of `kubevirt.io`.
pub const RENAMED_GROUP: &str = "internal.virtualization.deckhouse.io";
/// The renamed kind of `VirtualMachine`.
pub const RENAMED_KIND: &str = "InternalVirtualizationVirtualMachine";
/// The renamed label, annotation and finalizer prefix of `kubevirt.io`.
pub const RENAMED_PREFIX: &str = "kubevirt.internal.virtualization.deckhouse.io";

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

/// A VirtualMachine to generate; see the module's documentation.
#[derive(Debug, Clone)]
pub struct Vm {
    name: String,
    namespace: String,
    renamed: bool,
    stored: bool,
    seed: u64,
}

impl Vm {
    /// The VM `name` in `namespace`, with original names and only what a client sends; its seed
    /// is taken from the name.
    pub fn new(name: &str, namespace: &str) -> Vm {
        let seed = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        Vm {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            renamed: false,
            stored: false,
            seed,
        }
    }

    /// With the names kube-apiserver holds behind the rewriter.
    #[must_use]
    pub fn renamed(mut self) -> Vm {
        self.renamed = true;
        self
    }

    /// With what the server adds: uid, resourceVersion, generation, creationTimestamp,
    /// managedFields, an owner reference and status. Such an object is served by doubles; a real
    /// server is sent the plain one (it would garbage-collect a VM whose owner is missing).
    #[must_use]
    pub fn stored(mut self) -> Vm {
        self.stored = true;
        self
    }

    /// With another seed (sizes, uids, times).
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Vm {
        self.seed = seed;
        self
    }

    /// The object (about 4 KB of JSON; 5 to 6 KB stored).
    pub fn json(&self) -> Value {
        let mut rng = Rng::new(self.seed);
        let (name, ns) = (self.name.as_str(), self.namespace.as_str());
        let (group, kind, p) = self.names();
        let managed_by = if self.renamed {
            "virt-operator-internal-virtualization"
        } else {
            "virt-operator"
        };
        let app = ["web", "db", "cache", "worker", "gw"][rng.below(5) as usize];
        let cores = 1 + rng.below(8);
        let mem = 1 << rng.below(5);
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
        let disk_name = |d: usize| format!("{name}-disk-{d}");
        let disk_list: Vec<Value> = (0..disks)
            .map(|d| json!({"bootOrder": d + 1, "disk": {"bus": "virtio"}, "name": disk_name(d)}))
            .chain(std::iter::once(
                json!({"disk": {"bus": "virtio"}, "name": "cloudinitdisk"}),
            ))
            .collect();
        let volume_list: Vec<Value> = (0..disks)
            .map(|d| json!({"name": disk_name(d), "persistentVolumeClaim": {"claimName": format!("vd-{}", disk_name(d))}}))
            .chain(std::iter::once(
                json!({"name": "cloudinitdisk", "cloudInitNoCloud": {"userDataSecretRef": {"name": format!("{name}-cloud-init")}}}),
            ))
            .collect();
        let mut vm = json!({
            "apiVersion": format!("{group}/v1"),
            "kind": kind,
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {
                    "app": app,
                    format!("{p}/created-by"): "virt-controller",
                    format!("vm.{p}/name"): name,
                    "virtualization.deckhouse.io/virtual-machine-name": name,
                    "app.kubernetes.io/managed-by": managed_by,
                },
                "annotations": {
                    format!("{p}/latest-observed-api-version"): "v1",
                    format!("{p}/storage-observed-api-version"): "v1",
                    "example.com/description": format!("VM {name} in {ns}: the {app} tier, owned by team {}", rng.below(13)),
                },
                "finalizers": [
                    format!("{p}/virtualMachineControllerFinalize"),
                    "virtualization.deckhouse.io/vm-controller",
                ],
            },
            "spec": {
                "runStrategy": "Halted",
                "template": {
                    "metadata": {
                        "labels": {"kubevirt.io/domain": name, "vm.kubevirt.io/name": name, "app": app},
                        "annotations": {"kubevirt.io/allow-pod-bridge-network-live-migration": "true"},
                    },
                    "spec": {
                        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                            "podAffinityTerm": {
                                "labelSelector": {"matchLabels": {"vm.kubevirt.io/name": name}},
                                "topologyKey": "kubernetes.io/hostname",
                            },
                            "weight": 100,
                        }]}},
                        "domain": {
                            "cpu": {"cores": cores, "sockets": 1, "threads": 1, "model": "host-model"},
                            "memory": {"guest": format!("{mem}Gi")},
                            "resources": {"requests": {"memory": format!("{mem}Gi"), "cpu": "1"}},
                            "machine": {"type": "q35"},
                            "firmware": {"uuid": fw_uuid},
                            "devices": {
                                "disks": disk_list,
                                "interfaces": [{"name": "default", "bridge": {}, "macAddress": mac, "model": "virtio"}],
                                "rng": {},
                                "networkInterfaceMultiqueue": true,
                            },
                        },
                        "evictionStrategy": "LiveMigrate",
                        "networks": [{"name": "default", "pod": {}}],
                        "nodeSelector": {"kubernetes.io/os": "linux", "kubevirt.io/schedulable": "true"},
                        "terminationGracePeriodSeconds": 60,
                        "tolerations": [{"effect": "NoSchedule", "key": "dedicated.virtualization.deckhouse.io", "operator": "Exists"}],
                        "volumes": volume_list,
                    },
                },
            },
        });
        if self.stored {
            self.add_stored(&mut vm, &mut rng, disks, group, p);
        }
        vm
    }

    /// The API group, kind and label prefix of this form.
    fn names(&self) -> (&'static str, &'static str, &'static str) {
        if self.renamed {
            (RENAMED_GROUP, RENAMED_KIND, RENAMED_PREFIX)
        } else {
            ("kubevirt.io", "VirtualMachine", "kubevirt.io")
        }
    }

    /// The object as compact JSON, as kube-apiserver writes it.
    pub fn bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.json()).expect("a Value serializes")
    }

    /// A minimal VM of the same name and names (about 400 bytes; 600 stored): for latency runs
    /// and tests that need many objects, not a realistic one.
    pub fn small(&self) -> Value {
        let (group, kind, p) = self.names();
        let mut vm = json!({
            "apiVersion": format!("{group}/v1"), "kind": kind,
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": {format!("{p}/vm"): self.name, "app": "bench"}},
            "spec": {"runStrategy": "Halted", "template": {"metadata": {"labels": {"kubevirt.io/vm": self.name}},
                "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}}}},
        });
        if self.stored {
            let mut rng = Rng::new(self.seed);
            let m = vm["metadata"].as_object_mut().expect("metadata");
            m.insert("uid".into(), json!(rng.uuid()));
            m.insert(
                "resourceVersion".into(),
                json!((100_000 + rng.below(9_000_000)).to_string()),
            );
        }
        vm
    }

    fn add_stored(&self, vm: &mut Value, rng: &mut Rng, disks: usize, group: &str, p: &str) {
        let name = self.name.as_str();
        let (uid, owner_uid) = (rng.uuid(), rng.uuid());
        let (created, updated) = (rng.time(), rng.time());
        let generation = 1 + rng.below(20);
        let mut disks_f = Map::new();
        disks_f.insert(".".into(), json!({}));
        for d in 0..disks {
            disks_f.insert(
                format!("k:{{\"name\":\"{name}-disk-{d}\"}}"),
                f(&["bootOrder", "disk", "name"]),
            );
        }
        let m = vm["metadata"].as_object_mut().expect("metadata");
        m.insert("uid".into(), json!(uid));
        m.insert(
            "resourceVersion".into(),
            json!((100_000 + rng.below(9_000_000)).to_string()),
        );
        m.insert("generation".into(), json!(generation));
        m.insert("creationTimestamp".into(), json!(created));
        m.insert(
            "ownerReferences".into(),
            json!([{"apiVersion": "virtualization.deckhouse.io/v1alpha2", "blockOwnerDeletion": true, "controller": true,
                "kind": "VirtualMachine", "name": name, "uid": owner_uid}]),
        );
        m.insert(
            "managedFields".into(),
            json!([
                {
                    "apiVersion": format!("{group}/v1"), "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {
                            "f:annotations": f(&[&format!("{p}/latest-observed-api-version"), &format!("{p}/storage-observed-api-version")]),
                            "f:finalizers": {".": {}, format!("v:\"{p}/virtualMachineControllerFinalize\""): {}},
                            "f:labels": f(&[&format!("{p}/created-by")]),
                        },
                        "f:status": f(&["conditions", "created", "desiredGeneration", "observedGeneration", "printableStatus", "ready", "volumeSnapshotStatuses"]),
                    },
                    "manager": "virt-controller", "operation": "Update", "time": updated,
                },
                {
                    "apiVersion": format!("{group}/v1"), "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {
                            "f:annotations": f(&["example.com/description"]),
                            "f:finalizers": {"v:\"virtualization.deckhouse.io/vm-controller\"": {}},
                            "f:labels": f(&["app", &format!("vm.{p}/name"), "virtualization.deckhouse.io/virtual-machine-name", "app.kubernetes.io/managed-by"]),
                            "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{owner_uid}\"}}"): {}},
                        },
                        "f:spec": {".": {}, "f:runStrategy": {}, "f:template": {".": {},
                            "f:metadata": {".": {}, "f:labels": f(&["kubevirt.io/domain", "vm.kubevirt.io/name", "app"])},
                            "f:spec": {".": {}, "f:affinity": {},
                                "f:domain": {".": {}, "f:cpu": f(&["cores", "model"]), "f:devices": {".": {}, "f:disks": disks_f, "f:interfaces": {}}, "f:resources": f(&["requests"])},
                                "f:networks": {}, "f:nodeSelector": {}, "f:tolerations": {}, "f:volumes": {}}}},
                    },
                    "manager": "virtualization-controller", "operation": "Update", "time": created,
                },
            ]),
        );
        vm.as_object_mut().expect("object").insert(
            "status".into(),
            json!({
                "conditions": [
                    {"lastProbeTime": null, "lastTransitionTime": updated, "status": "False", "reason": "VMINotExists", "type": "Ready"},
                    {"lastProbeTime": null, "lastTransitionTime": created, "message": "All of the VMI's DVs are bound and not running", "reason": "AllDVsReady", "status": "True", "type": "DataVolumesReady"},
                ],
                "created": false, "ready": false,
                "desiredGeneration": generation, "observedGeneration": generation,
                "printableStatus": "Stopped",
                "volumeSnapshotStatuses": (0..disks).map(|d| json!({"enabled": false, "name": format!("{name}-disk-{d}"), "reason": "No VolumeSnapshotClass for StorageClass local-path"})).collect::<Vec<_>>(),
            }),
        );
    }
}

/// A managedFields set: `{".": {}, "f:K": {}...}`.
fn f(keys: &[&str]) -> Value {
    let mut m = Map::new();
    m.insert(".".into(), json!({}));
    for k in keys {
        m.insert(format!("f:{k}"), json!({}));
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_by_form() {
        let mean = |f: &dyn Fn(usize) -> Vm| (0..50).map(|i| f(i).bytes().len()).sum::<usize>() / 50;
        let sent = mean(&|i| Vm::new(&format!("vm-{i:06}"), "tenant-001"));
        let stored = mean(&|i| Vm::new(&format!("vm-{i:06}"), "tenant-001").renamed().stored());
        eprintln!("mean sizes: sent {sent} B, stored {stored} B");
        assert!((2000..4000).contains(&sent), "sent {sent}");
        assert!((4500..5500).contains(&stored), "stored {stored}");
    }

    #[test]
    fn renamed_outside_the_template_only() {
        let held = Vm::new("a", "ns").renamed().stored().json();
        let text = held.to_string();
        assert!(
            !held["metadata"].to_string().contains("\"kubevirt.io/"),
            "{}",
            held["metadata"]
        );
        assert!(held["spec"]["template"]["metadata"]["labels"]["kubevirt.io/domain"].is_string());
        assert!(text.contains(RENAMED_PREFIX));
        let sent = Vm::new("a", "ns").json().to_string();
        assert!(!sent.contains("internal.virtualization"), "{sent}");
        assert!(!sent.contains("resourceVersion") && !sent.contains("ownerReferences"));
    }

    #[test]
    fn a_seed_gives_the_same_object() {
        assert_eq!(
            Vm::new("a", "ns").stored().json(),
            Vm::new("a", "ns").stored().json()
        );
        assert_ne!(
            Vm::new("a", "ns").seed(1).json(),
            Vm::new("a", "ns").seed(2).json()
        );
    }
}
