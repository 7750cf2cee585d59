//! Reconcile of a `VirtualMachine`: the finalizer, its class and disks, the KubeVirt VM
//! rendered from the spec, Start requests for `AlwaysOnUnlessStoppedManually`, the status, and
//! deletion.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::api::{Api, DeleteParams, DynamicObject, PatchParams, PostParams};
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource as _, ResourceExt as _};
use serde_json::Value;
use tracing::{info, instrument};

use super::wiring::Wiring;
use super::{
    Context, add_finalizer_patch, is_not_found, json_patch, remove_finalizer_patch, retry_on_conflict,
    send_requests,
};
use crate::conditions::{
    AWAITING_RESTART_TO_APPLY_CONFIGURATION, BLOCK_DEVICES_READY, CLASS_READY, CONFIGURATION_APPLIED,
    RUNNING, condition, now, reason,
};
use crate::kubevirt;
use crate::kubevirt::{BlockDevice, Dependencies};
use crate::resources::{
    BlockDeviceKind, DiskPhase, ImagePhase, RunPolicy, VirtualDisk, VirtualImage, VirtualMachine,
    VirtualMachineClass, VirtualMachineStatus, VmPhase,
};
use crate::{Error, Result};

/// The finalizer the controller keeps on a VM until its KubeVirt VM and instance are gone.
pub const FINALIZER: &str = "virtualization.deckhouse.io/vm-cleanup";

/// A check of what a VM depends on, as a condition: (type, met, reason, message).
type Check = (&'static str, bool, &'static str, String);

/// Reads the VM's class and disks: what rendering takes from them, and a check per kind of
/// dependency. Nothing is rendered while a check is not met.
async fn dependencies(vm: &VirtualMachine, ctx: &Context, ns: &str) -> Result<(Dependencies, Vec<Check>)> {
    let mut deps = Dependencies::default();
    let mut checks = Vec::new();
    if let Some(class_name) = &vm.spec.virtual_machine_class_name {
        let classes: Api<VirtualMachineClass> = Api::all(ctx.client.clone());
        let check = match classes.get_opt(class_name).await? {
            None => (
                CLASS_READY,
                false,
                reason::VIRTUAL_MACHINE_CLASS_NOT_FOUND,
                format!("VirtualMachineClass {class_name} not found"),
            ),
            Some(class) => match kubevirt::validate_class(&vm.spec, class_name, &class.spec) {
                Err(problem) => (CLASS_READY, false, reason::NOT_ALLOWED_BY_CLASS, problem),
                Ok(()) => {
                    deps.class = Some(class.spec);
                    (
                        CLASS_READY,
                        true,
                        reason::VIRTUAL_MACHINE_CLASS_READY,
                        format!("VirtualMachineClass {class_name} applies"),
                    )
                }
            },
        };
        checks.push(check);
    }
    if !vm.spec.block_device_refs.is_empty() {
        let disks: Api<VirtualDisk> = Api::namespaced(ctx.client.clone(), ns);
        let images: Api<VirtualImage> = Api::namespaced(ctx.client.clone(), ns);
        let mut waiting = Vec::new();
        let phase_text = |p: Option<String>| p.unwrap_or_else(|| "Pending".to_owned());
        for r in &vm.spec.block_device_refs {
            match r.kind {
                BlockDeviceKind::VirtualDisk => {
                    let disk = disks.get_opt(&r.name).await?;
                    let status = disk.as_ref().and_then(|d| d.status.clone()).unwrap_or_default();
                    let claim = status.target.and_then(|t| t.persistent_volume_claim_name);
                    match (&disk, status.phase, claim) {
                        (None, ..) => waiting.push(format!("VirtualDisk {} not found", r.name)),
                        (Some(_), Some(DiskPhase::Ready), Some(claim)) => {
                            deps.disks.push(BlockDevice::Disk {
                                name: r.name.clone(),
                                claim,
                            })
                        }
                        (Some(_), phase, _) => waiting.push(format!(
                            "VirtualDisk {} is {}",
                            r.name,
                            phase_text(phase.map(|p| format!("{p:?}")))
                        )),
                    }
                }
                BlockDeviceKind::VirtualImage => {
                    let image = images.get_opt(&r.name).await?;
                    let status = image.as_ref().and_then(|i| i.status.clone()).unwrap_or_default();
                    let cdrom = status.cdrom.unwrap_or(false);
                    let target = status.target.unwrap_or_default();
                    match (
                        &image,
                        status.phase,
                        target.registry_url,
                        target.persistent_volume_claim_name,
                    ) {
                        (None, ..) => waiting.push(format!("VirtualImage {} not found", r.name)),
                        (Some(_), Some(ImagePhase::Ready), Some(image), _) => {
                            deps.disks.push(BlockDevice::ContainerDisk {
                                name: r.name.clone(),
                                image,
                                cdrom,
                            })
                        }
                        (Some(_), Some(ImagePhase::Ready), None, Some(claim)) => {
                            deps.disks.push(BlockDevice::ImageClaim {
                                name: r.name.clone(),
                                claim,
                                cdrom,
                            })
                        }
                        (Some(_), phase, ..) => waiting.push(format!(
                            "VirtualImage {} is {}",
                            r.name,
                            phase_text(phase.map(|p| format!("{p:?}")))
                        )),
                    }
                }
            }
        }
        checks.push(if waiting.is_empty() {
            (
                BLOCK_DEVICES_READY,
                true,
                reason::BLOCK_DEVICES_READY,
                format!("{} block device(s) ready", deps.disks.len()),
            )
        } else {
            (
                BLOCK_DEVICES_READY,
                false,
                reason::BLOCK_DEVICES_NOT_READY,
                waiting.join("; "),
            )
        });
    }
    Ok((deps, checks))
}

/// The VirtualMachine controller: VMs, and what brings one back to [`reconcile`]: the disks,
/// images and classes it names (found through the controller's own cache of VMs) and its
/// KubeVirt VM and instance (by their name label and controller ownerReference). Sets
/// [`Context::vms`].
pub(crate) fn controller(w: &mut Wiring) -> BoxFuture<'static, ()> {
    let (api, all) = w.watch::<VirtualMachine>(None);
    let vms = Controller::new(api, all);
    let vm_store = vms.store();
    let _ = w.ctx().vms.set(vm_store.clone());
    // The VMs of the namespace that name the block device `name` of `kind`.
    let vms_naming = |kind: BlockDeviceKind| {
        let store = vm_store.clone();
        move |ns: Option<String>, name: String| {
            store
                .state()
                .into_iter()
                .filter(|vm| {
                    vm.namespace() == ns
                        && vm
                            .spec
                            .block_device_refs
                            .iter()
                            .any(|r| r.kind == kind && r.name == name)
                })
                .map(|vm| ObjectRef::from(vm.as_ref()))
                .collect::<Vec<_>>()
        }
    };
    let vms_of_disk = {
        let naming = vms_naming(BlockDeviceKind::VirtualDisk);
        move |d: VirtualDisk| naming(d.namespace(), d.name_any())
    };
    let vms_of_image = {
        let naming = vms_naming(BlockDeviceKind::VirtualImage);
        move |i: VirtualImage| naming(i.namespace(), i.name_any())
    };
    let vms_of_class = {
        let store = vm_store.clone();
        move |c: VirtualMachineClass| {
            let name = c.name_any();
            store
                .state()
                .into_iter()
                .filter(|vm| vm.spec.virtual_machine_class_name.as_ref() == Some(&name))
                .map(|vm| ObjectRef::from(vm.as_ref()))
                .collect::<Vec<_>>()
        }
    };
    let (disks, all) = w.watch::<VirtualDisk>(None);
    let vms = vms.watches(disks, all, vms_of_disk);
    let (images, all) = w.watch::<VirtualImage>(None);
    let vms = vms.watches(images, all, vms_of_image);
    let (classes, all) = w.watch::<VirtualMachineClass>(None);
    let vms = vms.watches(classes, all, vms_of_class);
    // KubeVirt objects are selected by KubeVirt's own label key, so the sidecar rewrites the
    // selector on the way up and the labels in the stream on the way back.
    let (kvvms, labelled) = w.watch_dynamic(&kubevirt::vm_resource(), Some(kubevirt::NAME_LABEL));
    let vms = vms.watches_with(kvvms, kubevirt::vm_resource(), labelled, move |o| {
        vm_of(o).into_iter().flatten()
    });
    let (vmis, labelled) = w.watch_dynamic(&kubevirt::vmi_resource(), Some(kubevirt::NAME_LABEL));
    let vms = vms.watches_with(vmis, kubevirt::vmi_resource(), labelled, move |o| {
        vm_of(o).into_iter().flatten()
    });
    w.start(vms, reconcile)
}

/// The VMs a KubeVirt object maps to: the one its name label names and the one that controls
/// it (a label edited by hand still finds its VM).
fn vm_of(o: DynamicObject) -> Option<Vec<ObjectRef<VirtualMachine>>> {
    let ns = o.namespace()?;
    let mut refs: Vec<ObjectRef<VirtualMachine>> = Vec::new();
    let owner = o
        .owner_references()
        .iter()
        .find(|r| {
            r.controller == Some(true)
                && r.kind == "VirtualMachine"
                && r.api_version == format!("{}/{}", crate::resources::GROUP, crate::resources::VERSION)
        })
        .map(|r| r.name.clone());
    for name in [o.labels().get(kubevirt::NAME_LABEL).cloned(), owner]
        .into_iter()
        .flatten()
    {
        let r = ObjectRef::new(&name).within(&ns);
        if !refs.contains(&r) {
            refs.push(r);
        }
    }
    Some(refs)
}

/// Reconciles one VM, retrying at once on conflicts with a freshly read copy.
#[instrument(skip_all, fields(resource = "virtualmachines.virtualization.deckhouse.io", namespace = vm.namespace().unwrap_or_default(), name = %vm.name_any()))]
pub async fn reconcile(vm: Arc<VirtualMachine>, ctx: Arc<Context>) -> Result<Action> {
    let ns = vm.namespace().ok_or(Error::Missing("metadata.namespace"))?;
    let name = vm.name_any();
    let api: Api<VirtualMachine> = Api::namespaced(ctx.client.clone(), &ns);
    retry_on_conflict(
        vm,
        || async { Ok(api.get_opt(&name).await?) },
        |vm| reconcile_once(vm, &ctx),
    )
    .await
}

/// The KubeVirt APIs of one namespace.
struct KubeVirt {
    vms: Api<DynamicObject>,
    vmis: Api<DynamicObject>,
}

impl KubeVirt {
    fn new(ctx: &Context, ns: &str) -> KubeVirt {
        KubeVirt {
            vms: Api::namespaced_with(ctx.client.clone(), ns, &kubevirt::vm_resource()),
            vmis: Api::namespaced_with(ctx.client.clone(), ns, &kubevirt::vmi_resource()),
        }
    }
}

async fn reconcile_once(vm: Arc<VirtualMachine>, ctx: &Context) -> Result<Action> {
    let ns = vm.namespace().ok_or(Error::Missing("metadata.namespace"))?;
    let name = vm.name_any();
    let api: Api<VirtualMachine> = Api::namespaced(ctx.client.clone(), &ns);
    let kv = KubeVirt::new(ctx, &ns);

    if vm.meta().deletion_timestamp.is_some() {
        return delete(&vm, &api, &kv).await;
    }
    let mut vm = vm;
    if !vm.finalizers().iter().any(|f| f == FINALIZER) {
        let patch = json_patch(add_finalizer_patch(vm.finalizers(), FINALIZER))?;
        vm = Arc::new(api.patch(&name, &PatchParams::default(), &patch).await?);
    }
    let uid = vm.uid().ok_or(Error::Missing("metadata.uid"))?;
    let generation = vm.meta().generation;
    let old = vm.status.clone().unwrap_or_default();
    let now = now();

    if let Err(problem) = kubevirt::validate(&vm.spec) {
        // Nothing is rendered from an invalid spec; the condition says why, and the next
        // change of the VM brings it back here.
        let mut status = old.clone();
        status.phase.get_or_insert(VmPhase::Pending);
        status.observed_generation = generation;
        set(
            &mut status.conditions,
            condition(
                &old.conditions,
                CONFIGURATION_APPLIED,
                false,
                reason::INVALID_SPEC,
                problem,
                generation,
                &now,
            ),
        );
        write_status(&api, &vm, status).await?;
        return Ok(Action::await_change());
    }

    let (deps, checks) = dependencies(&vm, ctx, &ns).await?;
    let check_conditions = |old: &[crate::resources::Condition]| {
        checks
            .iter()
            .map(|(type_, met, reason, message)| {
                condition(old, type_, *met, reason, message.clone(), generation, &now)
            })
            .collect::<Vec<_>>()
    };
    if checks.iter().any(|c| !c.1) {
        // Waiting for a class or disks: nothing is rendered or changed; their watches bring
        // the VM back here.
        let mut status = old.clone();
        status.phase.get_or_insert(VmPhase::Pending);
        status.observed_generation = generation;
        for c in check_conditions(&old.conditions) {
            set(&mut status.conditions, c);
        }
        write_status(&api, &vm, status).await?;
        return Ok(Action::await_change());
    }

    let mut desired = kubevirt::render(&vm, &uid, &deps);
    let mut vmi = kv.vmis.get_opt(&name).await?;
    let existing = kv.vms.get_opt(&name).await?;
    if let Some(e) = &existing {
        // Disks hot-plugged into the running VM stay until they are unplugged.
        kubevirt::keep_hotplugged(
            &e.data["spec"]["template"]["spec"],
            &mut desired["spec"]["template"]["spec"],
        );
    }
    let kvvm = match existing {
        None => {
            let obj: DynamicObject = serde_json::from_value(desired.clone())?;
            let created = kv.vms.create(&PostParams::default(), &obj).await?;
            info!(run_strategy = %desired["spec"]["runStrategy"], "KubeVirt VM created");
            if vm.spec.run_policy == RunPolicy::AlwaysOnUnlessStoppedManually {
                send_requests(&kv.vms, &created, &[kubevirt::start_request()]).await?;
            }
            created
        }
        Some(existing) if existing.meta().deletion_timestamp.is_some() => {
            // Deleted from outside: recreate it once it is gone.
            return Ok(Action::requeue(Duration::from_secs(2)));
        }
        Some(existing) => match update(&existing, &desired) {
            None => existing,
            Some(updated) => {
                let was = existing.data["spec"]["runStrategy"].clone();
                let replaced = kv.vms.replace(&name, &PostParams::default(), &updated).await?;
                info!(was = %was, "KubeVirt VM updated");
                let strategy_changed = desired["spec"]["runStrategy"] != was;
                if strategy_changed
                    && vm.spec.run_policy == RunPolicy::AlwaysOnUnlessStoppedManually
                    && vmi.is_none()
                {
                    send_requests(&kv.vms, &replaced, &[kubevirt::start_request()]).await?;
                }
                replaced
            }
        },
    };
    if vmi
        .as_ref()
        .is_some_and(|i| i.meta().deletion_timestamp.is_some())
    {
        vmi = None;
    }

    let printable = kvvm.data["status"]["printableStatus"].as_str();
    let instance_phase = vmi.as_ref().and_then(|i| i.data["status"]["phase"].as_str());
    let running = instance_phase == Some("Running");
    let awaiting = vmi.as_ref().map_or_else(Vec::new, |i| {
        kubevirt::awaiting_restart(&desired["spec"]["template"]["spec"], &i.data["spec"])
    });
    let mut status = VirtualMachineStatus {
        phase: Some(kubevirt::phase(printable)),
        node_name: vmi
            .as_ref()
            .and_then(|i| i.data["status"]["nodeName"].as_str())
            .map(str::to_owned),
        conditions: Vec::new(),
        observed_generation: generation,
    };
    let c = &old.conditions;
    status.conditions.push(condition(
        c,
        RUNNING,
        running,
        if running {
            reason::VIRTUAL_MACHINE_RUNNING
        } else {
            reason::VIRTUAL_MACHINE_NOT_RUNNING
        },
        instance_phase.map_or_else(
            || "no VirtualMachineInstance".to_owned(),
            |p| format!("VirtualMachineInstance is {p}"),
        ),
        generation,
        &now,
    ));
    if awaiting.is_empty() {
        status.conditions.push(condition(
            c,
            CONFIGURATION_APPLIED,
            true,
            reason::CONFIGURATION_APPLIED,
            "the spec is applied",
            generation,
            &now,
        ));
    } else {
        let message = format!(
            "changes to spec.template.spec.{} apply when the VM restarts",
            awaiting.join(", ")
        );
        status.conditions.push(condition(
            c,
            CONFIGURATION_APPLIED,
            false,
            reason::RESTART_AWAITING_CHANGES,
            message.clone(),
            generation,
            &now,
        ));
        status.conditions.push(condition(
            c,
            AWAITING_RESTART_TO_APPLY_CONFIGURATION,
            true,
            reason::RESTART_AWAITING_CHANGES,
            message,
            generation,
            &now,
        ));
    }
    status.conditions.extend(check_conditions(c));
    write_status(&api, &vm, status).await?;
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// Deletion: delete the KubeVirt VM, wait until it and its instance are gone, then drop the
/// finalizer.
async fn delete(vm: &VirtualMachine, api: &Api<VirtualMachine>, kv: &KubeVirt) -> Result<Action> {
    if !vm.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let name = vm.name_any();
    let kvvm = kv.vms.get_opt(&name).await?;
    if let Some(k) = &kvvm
        && k.meta().deletion_timestamp.is_none()
    {
        match kv.vms.delete(&name, &DeleteParams::default()).await {
            Ok(_) => info!("KubeVirt VM deleted"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let vmi = kv.vmis.get_opt(&name).await?;
    if kvvm.is_some() || vmi.is_some() {
        let mut status = vm.status.clone().unwrap_or_default();
        status.phase = Some(VmPhase::Terminating);
        write_status(api, vm, status).await?;
        // The watches of both bring the VM back here when they go; this is the fallback.
        return Ok(Action::requeue(Duration::from_secs(10)));
    }
    if let Some(patch) = remove_finalizer_patch(vm.finalizers(), FINALIZER) {
        api.patch(&name, &PatchParams::default(), &json_patch(patch)?)
            .await?;
        info!("finalizer removed");
    }
    Ok(Action::await_change())
}

/// Fields virt-controller writes into a KubeVirt VM's spec and keeps there: the firmware UUID it
/// persists so the guest sees the same machine on every start, and the template's
/// `creationTimestamp: null` that Go clients write. Rendering leaves them out, so they are
/// carried over from the stored VM, or every reconcile would remove them and virt-controller put
/// them back, without end.
const KUBEVIRT_FIELDS: [&[&str]; 2] = [
    &["template", "spec", "domain", "firmware", "uuid"],
    &["template", "metadata", "creationTimestamp"],
];

/// Copies [`KUBEVIRT_FIELDS`] the stored spec has and the desired one lacks.
fn keep_kubevirt_fields(stored: &Value, desired: &mut Value) {
    for path in KUBEVIRT_FIELDS {
        let Some((last, parents)) = path.split_last() else {
            continue;
        };
        let Some(v) = parents
            .iter()
            .try_fold(stored, |v, k| v.get(k))
            .and_then(|p| p.get(last))
        else {
            continue;
        };
        let mut at = &mut *desired;
        for k in parents {
            if !at.is_object() {
                break;
            }
            at = at
                .as_object_mut()
                .expect("an object")
                .entry(k.to_string())
                .or_insert_with(|| Value::Object(Default::default()));
        }
        if let Some(o) = at.as_object_mut() {
            o.entry(last.to_string()).or_insert_with(|| v.clone());
        }
    }
}

/// The KubeVirt VM to write when `existing` differs from `desired`: `existing` (its
/// `resourceVersion`, finalizers, annotations and status kept) with the rendered spec, labels and
/// ownerReference. Hand edits of the spec or of those labels are put back.
fn update(existing: &DynamicObject, desired: &Value) -> Option<DynamicObject> {
    let mut desired = desired.clone();
    keep_kubevirt_fields(&existing.data["spec"], &mut desired["spec"]);
    let labels = existing.labels();
    let want_labels = desired["metadata"]["labels"].as_object()?;
    let labels_ok = want_labels
        .iter()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str());
    let want_uid = desired["metadata"]["ownerReferences"][0]["uid"].as_str();
    let owner_ok = existing
        .owner_references()
        .iter()
        .any(|r| Some(r.uid.as_str()) == want_uid && r.controller == Some(true));
    if labels_ok && owner_ok && existing.data["spec"] == desired["spec"] {
        return None;
    }
    let mut updated = existing.clone();
    let l = updated.labels_mut();
    for (k, v) in want_labels {
        l.insert(k.clone(), v.as_str().unwrap_or_default().to_owned());
    }
    updated.metadata.owner_references =
        serde_json::from_value(desired["metadata"]["ownerReferences"].clone()).ok();
    updated.data["spec"] = desired["spec"].clone();
    Some(updated)
}

/// Sets `c` in `conditions`, replacing one of its type.
fn set(conditions: &mut Vec<crate::resources::Condition>, c: crate::resources::Condition) {
    conditions.retain(|o| o.type_ != c.type_);
    conditions.push(c);
}

/// Writes `status` through `/status` when it differs from the VM's, with the VM's
/// `resourceVersion`: a stale VM gets a 409 and is reconciled again from a fresh copy.
async fn write_status(
    api: &Api<VirtualMachine>,
    vm: &VirtualMachine,
    status: VirtualMachineStatus,
) -> Result<()> {
    if vm.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let mut obj = vm.clone();
    obj.status = Some(status);
    api.replace_status(&vm.name_any(), &PostParams::default(), &obj)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn what_virt_controller_persists_is_kept_and_the_rest_is_ours() {
        let stored: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "a", "labels": {"x": "1"}, "ownerReferences": [{"apiVersion": "v", "kind": "K", "name": "a", "uid": "u1", "controller": true}]},
            "spec": {"runStrategy": "Always", "template": {"metadata": {"creationTimestamp": null},
                "spec": {"domain": {"cpu": {"cores": 1}, "firmware": {"uuid": "f-1"}}}}},
        }))
        .expect("object");
        let desired = json!({
            "metadata": {"labels": {"x": "1"}, "ownerReferences": [{"uid": "u1"}]},
            "spec": {"runStrategy": "Always", "template": {"spec": {"domain": {"cpu": {"cores": 1}}}}},
        });
        assert!(
            update(&stored, &desired).is_none(),
            "only virt-controller's fields differ"
        );
        let mut more = desired.clone();
        more["spec"]["template"]["spec"]["domain"]["cpu"]["cores"] = json!(2);
        let updated = update(&stored, &more).expect("a change of ours");
        let d = &updated.data["spec"]["template"]["spec"]["domain"];
        assert_eq!(d["cpu"]["cores"], 2);
        assert_eq!(d["firmware"]["uuid"], "f-1", "the firmware UUID is kept");
        // A firmware UUID of our own wins.
        let mut own = desired;
        own["spec"]["template"]["spec"]["domain"]["firmware"] = json!({"uuid": "mine"});
        let updated = update(&stored, &own).expect("a change of ours");
        assert_eq!(
            updated.data["spec"]["template"]["spec"]["domain"]["firmware"]["uuid"],
            "mine"
        );
    }
}
