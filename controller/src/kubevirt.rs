//! KubeVirt, as this controller sees it: `kubevirt.io/v1` `VirtualMachine` and
//! `VirtualMachineInstance` under their original names (the sidecar renames them on the wire),
//! and the pure functions that render a KubeVirt VM from a [`VirtualMachine`], map KubeVirt's
//! state back, and build the `stateChangeRequests` patches KubeVirt's own clients send.

use std::collections::BTreeMap;

use kube::api::{ApiResource, GroupVersionKind};
use kube::core::ResourceExt as _;
use serde_json::{Value, json};

use crate::resources::{
    RunPolicy, VirtualMachine, VirtualMachineClassSpec, VirtualMachineSpec, VmPhase, controller_reference,
};

/// The label KubeVirt puts on a VM's objects, naming the VM; the watches select on it.
pub const NAME_LABEL: &str = "vm.kubevirt.io/name";
/// The name of the cloud-init disk and volume.
pub const CLOUD_INIT: &str = "cloudinit";

/// What rendering a VM takes from other objects: its class and its block devices.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dependencies {
    /// The spec of the VM's `VirtualMachineClass`, when it names one.
    pub class: Option<VirtualMachineClassSpec>,
    /// The VM's block devices, in order.
    pub disks: Vec<BlockDevice>,
}

/// A block device of a VM as rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockDevice {
    /// A VirtualDisk `name` in claim `claim`.
    Disk {
        /// The VirtualDisk.
        name: String,
        /// Its claim.
        claim: String,
    },
    /// A VirtualImage `name` in DVCR: a container disk; a CD-ROM when it is an `iso`.
    ContainerDisk {
        /// The VirtualImage.
        name: String,
        /// Its DVCR image.
        image: String,
        /// Whether it is a CD-ROM.
        cdrom: bool,
    },
    /// A VirtualImage `name` in claim `claim`, read-only; a CD-ROM when it is an `iso`.
    ImageClaim {
        /// The VirtualImage.
        name: String,
        /// Its claim.
        claim: String,
        /// Whether it is a CD-ROM.
        cdrom: bool,
    },
}

impl BlockDevice {
    /// Its disk and volume in the KubeVirt VM: `vd-NAME` for a disk, `vi-NAME` for an image.
    fn render(&self) -> (Value, Value) {
        let bus = |cdrom: bool| {
            if cdrom {
                json!({"cdrom": {"bus": "sata", "readonly": true}})
            } else {
                json!({"disk": {"bus": "virtio"}})
            }
        };
        let (name, device, volume) = match self {
            BlockDevice::Disk { name, claim } => (
                disk_volume_name(name),
                bus(false),
                json!({"persistentVolumeClaim": {"claimName": claim}}),
            ),
            BlockDevice::ContainerDisk { name, image, cdrom } => (
                image_volume_name(name),
                bus(*cdrom),
                json!({"containerDisk": {"image": image}}),
            ),
            BlockDevice::ImageClaim { name, claim, cdrom } => (
                image_volume_name(name),
                bus(*cdrom),
                json!({"persistentVolumeClaim": {"claimName": claim, "readOnly": true}}),
            ),
        };
        let mut disk = device;
        disk["name"] = json!(name);
        let mut vol = volume;
        vol["name"] = json!(name);
        (disk, vol)
    }
}

/// The name of a VirtualDisk's disk and volume in the KubeVirt VM.
pub fn disk_volume_name(disk: &str) -> String {
    format!("vd-{disk}")
}

/// The name of a VirtualImage's disk and volume in the KubeVirt VM.
pub fn image_volume_name(image: &str) -> String {
    format!("vi-{image}")
}

/// Whether a KubeVirt volume was hot-plugged (`addvolume` marks its source `hotpluggable`).
fn hotplugged(volume: &Value) -> bool {
    volume
        .as_object()
        .into_iter()
        .flat_map(|o| o.values())
        .any(|source| source["hotpluggable"] == true)
}

/// Appends to `desired` (a rendered template spec) the hot-plugged volumes of `stored` (the
/// KubeVirt VM's template spec, where virt-controller put them) that it lacks, with their disks:
/// rendering knows only the VM's own block devices, and a hot-plugged disk stays until it is
/// unplugged through `removevolume`.
pub fn keep_hotplugged(stored: &Value, desired: &mut Value) {
    let Some(volumes) = stored["volumes"].as_array() else {
        return;
    };
    for vol in volumes.iter().filter(|v| hotplugged(v)) {
        let name = &vol["name"];
        let has = |list: &Value| {
            list.as_array()
                .is_some_and(|l| l.iter().any(|x| &x["name"] == name))
        };
        if has(&desired["volumes"]) {
            continue;
        }
        let disk = stored["domain"]["devices"]["disks"]
            .as_array()
            .and_then(|d| d.iter().find(|d| &d["name"] == name))
            .cloned();
        if let Some(list) = desired["volumes"].as_array_mut() {
            list.push(vol.clone());
        }
        if let (Some(disk), Some(list)) = (disk, desired["domain"]["devices"]["disks"].as_array_mut()) {
            list.push(disk);
        }
    }
}

/// Checks a VM against its class: the core count must be one the class allows.
pub fn validate_class(
    spec: &VirtualMachineSpec,
    class_name: &str,
    class: &VirtualMachineClassSpec,
) -> Result<(), String> {
    let allowed = &class.cpu.cores;
    if !allowed.is_empty() && !allowed.contains(&spec.cpu.cores) {
        return Err(format!(
            "spec.cpu.cores {} is not allowed by VirtualMachineClass {class_name} (allowed: {allowed:?})",
            spec.cpu.cores
        ));
    }
    Ok(())
}

/// Checks that no block device is referred to twice.
pub fn validate_block_devices(spec: &VirtualMachineSpec) -> Result<(), String> {
    let refs = &spec.block_device_refs;
    for (i, r) in refs.iter().enumerate() {
        if refs[..i].contains(r) {
            return Err(format!(
                "spec.blockDeviceRefs: {:?} {} is referred to more than once",
                r.kind, r.name
            ));
        }
    }
    Ok(())
}

/// `kubevirt.io/v1` `VirtualMachine`.
pub fn vm_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine"),
        "virtualmachines",
    )
}

/// `kubevirt.io/v1` `VirtualMachineInstance`.
pub fn vmi_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"),
        "virtualmachineinstances",
    )
}

/// `kubevirt.io/v1` `VirtualMachineInstanceMigration`.
pub fn migration_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstanceMigration"),
        "virtualmachineinstancemigrations",
    )
}

/// The name of the migration a Migrate operation named `op` creates.
pub fn migration_name(op: &str) -> String {
    format!("vmop-{op}")
}

/// The VirtualMachineInstanceMigration of the Migrate operation `op` (name and uid) for the
/// instance `vmi`, owned by the operation (so it goes with it).
pub fn migration(op: &str, op_uid: &str, vmi: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {
            "name": migration_name(op),
            "ownerReferences": [controller_reference("VirtualMachineOperation", op, op_uid)],
        },
        "spec": {"vmiName": vmi},
    })
}

/// The KubeVirt `runStrategy` of a run policy. `AlwaysOnUnlessStoppedManually` is `Manual`;
/// the controller sends the Start itself when the VM is created.
pub fn run_strategy(policy: RunPolicy) -> &'static str {
    match policy {
        RunPolicy::AlwaysOn => "Always",
        RunPolicy::AlwaysOff => "Halted",
        RunPolicy::Manual | RunPolicy::AlwaysOnUnlessStoppedManually => "Manual",
    }
}

/// The VM phase for KubeVirt's `status.printableStatus` (Deckhouse's table).
pub fn phase(printable_status: Option<&str>) -> VmPhase {
    match printable_status.unwrap_or("") {
        "Stopped" => VmPhase::Stopped,
        "Provisioning" | "Starting" => VmPhase::Starting,
        "Running" => VmPhase::Running,
        "Paused" => VmPhase::Pause,
        "Stopping" => VmPhase::Stopping,
        "Terminating" => VmPhase::Terminating,
        "Migrating" | "WaitingForReceiver" => VmPhase::Migrating,
        _ => VmPhase::Pending,
    }
}

/// Checks what the CRD schema cannot: the memory size is a quantity, the core count is
/// positive, the core fraction a percentage from 5 to 100. The error names the field.
pub fn validate(spec: &VirtualMachineSpec) -> Result<(), String> {
    if spec.cpu.cores < 1 {
        return Err(format!(
            "spec.cpu.cores must be at least 1, not {}",
            spec.cpu.cores
        ));
    }
    if let Some(f) = &spec.cpu.core_fraction {
        percent(f).ok_or_else(|| {
            format!("spec.cpu.coreFraction must be a percentage from 5% to 100%, not {f:?}")
        })?;
    }
    if !is_quantity(&spec.memory.size) {
        return Err(format!(
            "spec.memory.size must be a quantity such as 1Gi, not {:?}",
            spec.memory.size
        ));
    }
    validate_block_devices(spec)
}

/// `"50%"` -> 50, for 5 to 100.
fn percent(s: &str) -> Option<u32> {
    let n: u32 = s.strip_suffix('%')?.parse().ok()?;
    (5..=100).contains(&n).then_some(n)
}

/// A positive Kubernetes quantity: decimal digits (with at most one `.`), then an optional
/// binary or decimal suffix or exponent.
fn is_quantity(s: &str) -> bool {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(end);
    let digits_ok = !num.is_empty()
        && num != "."
        && num.matches('.').count() <= 1
        && num.chars().any(|c| c.is_ascii_digit() && c != '0');
    let suffix_ok = matches!(
        suffix,
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "k" | "M" | "G" | "T" | "P" | "E"
    ) || suffix
        .strip_prefix(['e', 'E'])
        .is_some_and(|e| !e.is_empty() && e.trim_start_matches('-').chars().all(|c| c.is_ascii_digit()));
    digits_ok && suffix_ok
}

/// The labels of the KubeVirt VM and its template: the VM's own and `vm.kubevirt.io/name`.
pub fn labels(vm: &VirtualMachine) -> BTreeMap<String, String> {
    let mut l = vm.labels().clone();
    l.insert(NAME_LABEL.to_owned(), vm.name_any());
    l
}

/// The KubeVirt VM for `vm` (call [`validate`] first): same name and namespace, a controller
/// ownerReference to `vm`, labels, and a template with CPU, memory, disks, cloud-init,
/// nodeSelector and tolerations (the class's merged in). `uid` is the VM's uid.
pub fn render(vm: &VirtualMachine, uid: &str, deps: &Dependencies) -> Value {
    let labels = labels(vm);
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": vm.name_any(),
            "namespace": vm.namespace(),
            "labels": labels,
            "ownerReferences": [owner_reference(vm, uid)],
        },
        "spec": {
            "runStrategy": run_strategy(vm.spec.run_policy),
            "template": {
                "metadata": {"labels": labels},
                "spec": template_spec(&vm.spec, deps),
            },
        },
    })
}

/// The controller ownerReference of the KubeVirt VM to `vm`.
pub fn owner_reference(vm: &VirtualMachine, uid: &str) -> Value {
    controller_reference("VirtualMachine", &vm.name_any(), uid)
}

/// The template's `spec` (what a running instance has and a restart changes).
pub fn template_spec(spec: &VirtualMachineSpec, deps: &Dependencies) -> Value {
    let cores = spec.cpu.cores.max(1);
    let fraction = spec.cpu.core_fraction.as_deref().and_then(percent).unwrap_or(100);
    let cpu_request = format!("{}m", i64::from(cores) * i64::from(fraction) * 10);
    let mut domain = json!({
        "cpu": {"cores": cores},
        "memory": {"guest": spec.memory.size},
        "resources": {
            "requests": {"cpu": cpu_request, "memory": spec.memory.size},
            "limits": {"cpu": cores.to_string(), "memory": spec.memory.size},
        },
        "devices": {},
    });
    let mut out = json!({"domain": {}});
    let mut disks = Vec::new();
    let mut volumes = Vec::new();
    for device in &deps.disks {
        let (disk, volume) = device.render();
        disks.push(disk);
        volumes.push(volume);
    }
    if let Some(user_data) = spec.provisioning.as_ref().and_then(|p| p.user_data.as_ref()) {
        disks.push(json!({"name": CLOUD_INIT, "disk": {"bus": "virtio"}}));
        volumes.push(json!({"name": CLOUD_INIT, "cloudInitNoCloud": {"userData": user_data}}));
    }
    if !disks.is_empty() {
        domain["devices"]["disks"] = Value::Array(disks);
        out["volumes"] = Value::Array(volumes);
    }
    out["domain"] = domain;
    let class = deps.class.as_ref();
    let mut selector = spec.node_selector.clone().unwrap_or_default();
    selector.extend(class.and_then(|c| c.node_selector.clone()).unwrap_or_default());
    if !selector.is_empty() {
        out["nodeSelector"] = json!(selector);
    }
    let mut tolerations = spec.tolerations.clone().unwrap_or_default();
    for t in class.and_then(|c| c.tolerations.clone()).unwrap_or_default() {
        if !tolerations.contains(&t) {
            tolerations.push(t);
        }
    }
    if !tolerations.is_empty() {
        out["tolerations"] = json!(tolerations);
    }
    out
}

/// Whether every member of `want` is in `have` with the same value (objects compared member by
/// member, arrays element by element, strings as quantities where both are one, everything else
/// by equality): a running instance carries at least what was rendered, in KubeVirt's spelling.
pub fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| h.get(k).is_some_and(|hv| contains(hv, wv))),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(hv, wv)| contains(hv, wv))
        }
        // A quantity KubeVirt copied in Go's canonical form (`1000m` as `1`).
        (Value::String(h), Value::String(w)) => crate::quantity::same(h, w),
        _ => have == want,
    }
}

/// The names of the top-level template fields (`domain`, `volumes`, ...) that differ between
/// what is rendered and what the running instance has: the changes awaiting a restart.
pub fn awaiting_restart(rendered_template_spec: &Value, instance_spec: &Value) -> Vec<String> {
    let Some(want) = rendered_template_spec.as_object() else {
        return Vec::new();
    };
    let null = Value::Null;
    want.iter()
        .filter(|(k, v)| !contains(instance_spec.get(k.as_str()).unwrap_or(&null), v))
        .map(|(k, _)| k.clone())
        .collect()
}

/// A JSON patch of a KubeVirt VM's `/status` that appends `requests` to
/// `status.stateChangeRequests`, as `virtctl start|stop|restart` do. It applies only to the
/// version of the VM it was made from (`resource_version`, `status`): a VM changed meanwhile
/// fails the `test` and is read again, so neither side's status write is lost.
pub fn state_change_patch(resource_version: &str, status: Option<&Value>, requests: &[Value]) -> Value {
    let mut ops = vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version})];
    match status {
        None | Some(Value::Null) => {
            ops.push(json!({"op": "add", "path": "/status", "value": {"stateChangeRequests": requests}}))
        }
        Some(s) => match s.get("stateChangeRequests") {
            Some(Value::Array(a)) if !a.is_empty() => ops.extend(
                requests
                    .iter()
                    .map(|r| json!({"op": "add", "path": "/status/stateChangeRequests/-", "value": r})),
            ),
            _ => ops.push(json!({"op": "add", "path": "/status/stateChangeRequests", "value": requests})),
        },
    }
    Value::Array(ops)
}

/// A Start request.
pub fn start_request() -> Value {
    json!({"action": "Start"})
}

/// A Stop request for the instance with `uid` (KubeVirt ignores it for any other instance).
pub fn stop_request(uid: Option<&str>) -> Value {
    match uid {
        Some(uid) => json!({"action": "Stop", "uid": uid}),
        None => json!({"action": "Stop"}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{
        BlockDeviceKind, BlockDeviceRef, ClassCpu, CpuSpec, MemorySpec, Provisioning, Toleration,
    };

    fn spec() -> VirtualMachineSpec {
        VirtualMachineSpec {
            run_policy: RunPolicy::AlwaysOn,
            cpu: CpuSpec {
                cores: 2,
                core_fraction: Some("50%".into()),
            },
            memory: MemorySpec { size: "1Gi".into() },
            provisioning: Some(Provisioning {
                user_data: Some("#cloud-config\n".into()),
            }),
            node_selector: Some([("disk".to_owned(), "ssd".to_owned())].into()),
            tolerations: Some(vec![toleration("dedicated")]),
            virtual_machine_class_name: None,
            block_device_refs: Vec::new(),
        }
    }

    fn toleration(key: &str) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            value: None,
            effect: Some("NoSchedule".into()),
            toleration_seconds: None,
        }
    }

    fn no_deps() -> Dependencies {
        Dependencies::default()
    }

    fn vm(spec: VirtualMachineSpec) -> VirtualMachine {
        let mut vm = VirtualMachine::new("web", spec);
        vm.metadata.namespace = Some("ns".into());
        vm.metadata.labels = Some([("app".to_owned(), "shop".to_owned())].into());
        vm
    }

    #[test]
    fn run_policies_map_to_run_strategies() {
        assert_eq!(run_strategy(RunPolicy::AlwaysOn), "Always");
        assert_eq!(run_strategy(RunPolicy::AlwaysOff), "Halted");
        assert_eq!(run_strategy(RunPolicy::Manual), "Manual");
        assert_eq!(run_strategy(RunPolicy::AlwaysOnUnlessStoppedManually), "Manual");
    }

    #[test]
    fn printable_status_maps_to_phase() {
        for (s, p) in [
            (Some("Stopped"), VmPhase::Stopped),
            (Some("Provisioning"), VmPhase::Starting),
            (Some("Starting"), VmPhase::Starting),
            (Some("Running"), VmPhase::Running),
            (Some("Paused"), VmPhase::Pause),
            (Some("Stopping"), VmPhase::Stopping),
            (Some("Terminating"), VmPhase::Terminating),
            (Some("Migrating"), VmPhase::Migrating),
            (Some("WaitingForReceiver"), VmPhase::Migrating),
            (Some("ErrImagePull"), VmPhase::Pending),
            (Some(""), VmPhase::Pending),
            (None, VmPhase::Pending),
        ] {
            assert_eq!(phase(s), p, "{s:?}");
        }
    }

    #[test]
    fn render_fills_the_kubevirt_vm() {
        let r = render(&vm(spec()), "u-1", &no_deps());
        assert_eq!(r["metadata"]["labels"]["vm.kubevirt.io/name"], "web");
        assert_eq!(r["metadata"]["labels"]["app"], "shop");
        assert_eq!(
            r["spec"]["template"]["metadata"]["labels"],
            r["metadata"]["labels"]
        );
        assert_eq!(r["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(r["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(r["spec"]["runStrategy"], "Always");
        let t = &r["spec"]["template"]["spec"];
        assert_eq!(t["domain"]["cpu"]["cores"], 2);
        assert_eq!(t["domain"]["memory"]["guest"], "1Gi");
        assert_eq!(t["domain"]["resources"]["requests"]["cpu"], "1000m");
        assert_eq!(t["domain"]["resources"]["limits"]["cpu"], "2");
        assert_eq!(t["domain"]["devices"]["disks"][0]["name"], CLOUD_INIT);
        assert_eq!(t["volumes"][0]["cloudInitNoCloud"]["userData"], "#cloud-config\n");
        assert_eq!(t["nodeSelector"]["disk"], "ssd");
        assert_eq!(t["tolerations"][0]["key"], "dedicated");
    }

    #[test]
    fn render_leaves_out_what_is_not_set() {
        let mut s = spec();
        s.provisioning = None;
        s.node_selector = None;
        s.tolerations = None;
        s.cpu.core_fraction = None;
        let t = template_spec(&s, &no_deps());
        assert!(t.get("volumes").is_none(), "{t}");
        assert!(t["domain"]["devices"].get("disks").is_none(), "{t}");
        assert!(t.get("nodeSelector").is_none() && t.get("tolerations").is_none());
        assert_eq!(t["domain"]["resources"]["requests"]["cpu"], "2000m");
    }

    #[test]
    fn render_merges_the_class_and_attaches_disks() {
        let class = VirtualMachineClassSpec {
            cpu: ClassCpu { cores: vec![1, 2] },
            node_selector: Some(
                [
                    ("disk".to_owned(), "nvme".to_owned()),
                    ("zone".to_owned(), "a".to_owned()),
                ]
                .into(),
            ),
            tolerations: Some(vec![toleration("dedicated"), toleration("gpu")]),
        };
        let deps = Dependencies {
            class: Some(class),
            disks: vec![
                BlockDevice::Disk {
                    name: "root".into(),
                    claim: "vd-root-u".into(),
                },
                BlockDevice::ContainerDisk {
                    name: "installer".into(),
                    image: "dvcr:5000/vi/ns/installer:u".into(),
                    cdrom: true,
                },
                BlockDevice::Disk {
                    name: "data".into(),
                    claim: "vd-data-u".into(),
                },
                BlockDevice::ImageClaim {
                    name: "base".into(),
                    claim: "vi-base-u".into(),
                    cdrom: false,
                },
            ],
        };
        let t = template_spec(&spec(), &deps);
        // The class wins on a shared key; both sets of keys are there.
        assert_eq!(t["nodeSelector"], json!({"disk": "nvme", "zone": "a"}));
        let keys: Vec<&str> = t["tolerations"]
            .as_array()
            .expect("tolerations")
            .iter()
            .map(|t| t["key"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(keys, ["dedicated", "gpu"]);
        let disks: Vec<&str> = t["domain"]["devices"]["disks"]
            .as_array()
            .expect("disks")
            .iter()
            .map(|d| d["name"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            disks,
            ["vd-root", "vi-installer", "vd-data", "vi-base", CLOUD_INIT]
        );
        let d = &t["domain"]["devices"]["disks"];
        assert_eq!(d[1]["cdrom"], json!({"bus": "sata", "readonly": true}));
        assert_eq!(d[3]["disk"]["bus"], "virtio");
        let v = &t["volumes"];
        assert_eq!(v[0]["persistentVolumeClaim"]["claimName"], "vd-root-u");
        assert_eq!(v[1]["containerDisk"]["image"], "dvcr:5000/vi/ns/installer:u");
        assert_eq!(v[2]["persistentVolumeClaim"]["claimName"], "vd-data-u");
        assert_eq!(
            v[3]["persistentVolumeClaim"],
            json!({"claimName": "vi-base-u", "readOnly": true})
        );
        assert_eq!(v[4]["name"], CLOUD_INIT);
    }

    #[test]
    fn class_cores_and_duplicate_devices_are_checked() {
        let class = VirtualMachineClassSpec {
            cpu: ClassCpu { cores: vec![1, 4] },
            node_selector: None,
            tolerations: None,
        };
        let mut s = spec();
        let e = validate_class(&s, "small", &class).unwrap_err();
        assert!(e.contains("spec.cpu.cores 2") && e.contains("small"), "{e}");
        s.cpu.cores = 4;
        assert_eq!(validate_class(&s, "small", &class), Ok(()));
        let any = VirtualMachineClassSpec {
            cpu: ClassCpu::default(),
            ..class
        };
        assert_eq!(validate_class(&spec(), "any", &any), Ok(()));
        let r = |n: &str| BlockDeviceRef {
            kind: BlockDeviceKind::VirtualDisk,
            name: n.into(),
        };
        s.block_device_refs = vec![r("a"), r("b")];
        assert_eq!(validate_block_devices(&s), Ok(()));
        s.block_device_refs.push(r("a"));
        let e = validate_block_devices(&s).unwrap_err();
        assert!(e.contains("VirtualDisk a"), "{e}");
    }

    #[test]
    fn validate_names_the_bad_field() {
        assert_eq!(validate(&spec()), Ok(()));
        let mut s = spec();
        s.memory.size = "lots".into();
        assert!(validate(&s).unwrap_err().contains("spec.memory.size"));
        let mut s = spec();
        s.cpu.cores = 0;
        assert!(validate(&s).unwrap_err().contains("spec.cpu.cores"));
        let mut s = spec();
        s.cpu.core_fraction = Some("150%".into());
        assert!(validate(&s).unwrap_err().contains("spec.cpu.coreFraction"));
    }

    #[test]
    fn quantities() {
        for ok in ["1Gi", "512Mi", "1.5G", "1000", "1e3", "128974848"] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "lots", "1GiB", "Gi", "0", "1..5Gi", "-1Gi", "1 Gi"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn restart_awaits_on_template_changes_only() {
        let s = spec();
        let running = template_spec(&s, &no_deps());
        let mut instance = running.clone();
        instance["domain"]["firmware"] = json!({"uuid": "added by KubeVirt"});
        assert!(awaiting_restart(&running, &instance).is_empty());
        let mut s2 = s.clone();
        s2.memory.size = "2Gi".into();
        assert_eq!(
            awaiting_restart(&template_spec(&s2, &no_deps()), &instance),
            ["domain"]
        );
    }

    #[test]
    fn state_change_patches() {
        let start = [start_request()];
        let rv = json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"});
        assert_eq!(
            state_change_patch("7", None, &start),
            json!([rv, {"op": "add", "path": "/status", "value": {"stateChangeRequests": [{"action": "Start"}]}}])
        );
        assert_eq!(
            state_change_patch("7", Some(&json!({"printableStatus": "Stopped"})), &start),
            json!([rv, {"op": "add", "path": "/status/stateChangeRequests", "value": [{"action": "Start"}]}])
        );
        let pending = json!({"stateChangeRequests": [{"action": "Stop"}]});
        assert_eq!(
            state_change_patch("7", Some(&pending), &[stop_request(Some("u")), start_request()]),
            json!([
                rv,
                {"op": "add", "path": "/status/stateChangeRequests/-", "value": {"action": "Stop", "uid": "u"}},
                {"op": "add", "path": "/status/stateChangeRequests/-", "value": {"action": "Start"}},
            ])
        );
    }

    #[test]
    fn hot_plugged_volumes_are_kept_until_unplugged() {
        let stored = json!({
            "domain": {"devices": {"disks": [{"name": "vd-root"}, {"name": "vd-hot", "disk": {"bus": "scsi"}}]}},
            "volumes": [
                {"name": "vd-root", "persistentVolumeClaim": {"claimName": "r"}},
                {"name": "vd-hot", "persistentVolumeClaim": {"claimName": "h", "hotpluggable": true}},
            ],
        });
        let mut desired = json!({
            "domain": {"devices": {"disks": [{"name": "vd-root"}]}},
            "volumes": [{"name": "vd-root", "persistentVolumeClaim": {"claimName": "r"}}],
        });
        keep_hotplugged(&stored, &mut desired);
        assert_eq!(desired, stored);
        // Kept once, not again.
        keep_hotplugged(&stored, &mut desired);
        assert_eq!(desired["volumes"].as_array().map(Vec::len), Some(2));
        // A volume the VM itself has is not a hot-plugged one.
        let mut plain = json!({"domain": {"devices": {"disks": []}}, "volumes": []});
        keep_hotplugged(
            &json!({"volumes": [{"name": "vd-root", "persistentVolumeClaim": {"claimName": "r"}}]}),
            &mut plain,
        );
        assert_eq!(plain["volumes"], json!([]));
    }
}
