//! Reconcile of a `VirtualMachinePool`: VMs `POOL-INDEX` made from its template, each with its
//! disks `T-POOL-INDEX` made from the disk templates, created and deleted to match `replicas`,
//! and the status. `plan` decides what to create and delete; [`reconcile`] does it.
//!
//! A VM being deleted keeps its index until it is gone, with its disks: a VM deleted by hand
//! comes back under its own name, with the disks it had. Deleting the pool is left to the
//! garbage collector: every VM and disk has a controller ownerReference to it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::{Resource as _, ResourceExt as _};
use tracing::{info, instrument};

use super::wiring::Wiring;
use super::{Context, is_not_found, retry_on_conflict};
use crate::conditions::{READY, condition, now, reason};
use crate::resources::{
    BlockDeviceKind, ScaleDownPolicy, VirtualDisk, VirtualMachine, VirtualMachinePool,
    VirtualMachinePoolStatus, VmPhase, controller_reference,
};
use crate::{Error, Result};

/// The label on a pool's VMs and disks naming the pool; the pool's selector and the child
/// watches select on it.
pub const POOL_LABEL: &str = "virtualization.deckhouse.io/pool";

/// The name of VM `index` of pool `pool`.
pub fn vm_name(pool: &str, index: u32) -> String {
    format!("{pool}-{index}")
}

/// The name of the disk of template `template` of VM `index` of pool `pool`.
pub fn disk_name(template: &str, pool: &str, index: u32) -> String {
    format!("{template}-{pool}-{index}")
}

/// The label selector of a pool's VMs, as its status (and so the `scale` subresource) gives it.
pub fn selector(pool: &str) -> String {
    format!("{POOL_LABEL}={pool}")
}

/// The index in `name` after the prefix `{prefix}-`: only the digits [`vm_name`] writes (no
/// sign, no leading zero), so that one index has one name.
fn index_after(name: &str, prefix: &str) -> Option<u32> {
    let digits = name.strip_prefix(prefix)?.strip_prefix('-')?;
    let i: u32 = digits.parse().ok()?;
    (i.to_string() == digits).then_some(i)
}

/// The index of a disk named by [`disk_name`] for pool `pool`, whatever its template.
fn disk_index(name: &str, pool: &str) -> Option<u32> {
    let (rest, digits) = name.rsplit_once('-')?;
    rest.strip_suffix(pool)?.strip_suffix('-')?;
    let i: u32 = digits.parse().ok()?;
    (i.to_string() == digits).then_some(i)
}

/// A VM of the pool, as [`plan`] sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ChildVm {
    pub name: String,
    pub uid: String,
    pub index: u32,
    pub created: Option<Timestamp>,
    pub terminating: bool,
    pub running: bool,
}

/// A disk of the pool, as [`plan`] sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ChildDisk {
    pub name: String,
    pub uid: String,
    pub index: u32,
    pub terminating: bool,
}

/// What is in the pool's namespace: the pool's VMs and disks (those it controls, with a name
/// of its scheme), and the names of the other VMs and disks, which the pool does not take.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Existing {
    pub vms: Vec<ChildVm>,
    pub disks: Vec<ChildDisk>,
    pub foreign_vms: BTreeSet<String>,
    pub foreign_disks: BTreeSet<String>,
}

/// Whether `refs` hold a controller ownerReference to the object of uid `uid`.
fn controlled_by(refs: &[OwnerReference], uid: &str) -> bool {
    refs.iter().any(|r| r.controller == Some(true) && r.uid == uid)
}

/// Sorts the VMs and disks of a namespace into the pool's and the others.
pub(crate) fn existing(
    pool: &str,
    pool_uid: &str,
    vms: &[VirtualMachine],
    disks: &[VirtualDisk],
) -> Existing {
    let mut e = Existing::default();
    for vm in vms {
        let name = vm.name_any();
        let index = index_after(&name, pool);
        match index.filter(|_| controlled_by(vm.owner_references(), pool_uid)) {
            Some(index) => e.vms.push(ChildVm {
                uid: vm.uid().unwrap_or_default(),
                index,
                created: vm.meta().creation_timestamp.as_ref().map(|t| t.0),
                terminating: vm.meta().deletion_timestamp.is_some(),
                running: vm.status.as_ref().and_then(|s| s.phase) == Some(VmPhase::Running),
                name,
            }),
            None => {
                e.foreign_vms.insert(name);
            }
        }
    }
    for d in disks {
        let name = d.name_any();
        match disk_index(&name, pool).filter(|_| controlled_by(d.owner_references(), pool_uid)) {
            Some(index) => e.disks.push(ChildDisk {
                uid: d.uid().unwrap_or_default(),
                index,
                terminating: d.meta().deletion_timestamp.is_some(),
                name,
            }),
            None => {
                e.foreign_disks.insert(name);
            }
        }
    }
    e
}

/// What a reconcile does, and the counts the status reports after it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Plan {
    /// Disks to create, before the VMs that use them.
    pub create_disks: Vec<VirtualDisk>,
    /// VMs to create.
    pub create_vms: Vec<VirtualMachine>,
    /// VMs to delete (name, uid), in the scale-down policy's order.
    pub delete_vms: Vec<(String, String)>,
    /// Disks to delete (name, uid): those of no VM the pool keeps.
    pub delete_disks: Vec<(String, String)>,
    /// The VMs the pool has once done, not counting those being deleted.
    pub replicas: i32,
    /// How many of them run.
    pub ready_replicas: i32,
}

/// What to create and delete so that pool `pool` (with a name, namespace and uid) has
/// `spec.replicas` VMs, given what `existing` is there.
///
/// - Surplus VMs go in the policy's order: `Newest` the most recently created first, `Oldest`
///   the longest-lived first; VMs created in the same second go by index, the higher first.
/// - A VM being deleted keeps its index (and its disks) until it is gone, and counts towards
///   `replicas`: it is made again under its own name once gone, not replaced by another.
/// - Missing VMs get the lowest free indices; an index is not free while a VM of the pool, or a
///   VM or disk of its names the pool does not control, is there.
/// - Every kept or new VM gets a disk per template; the disks of an index the pool no longer has
///   are deleted.
pub(crate) fn plan(pool: &VirtualMachinePool, existing: &Existing) -> Result<Plan> {
    let name = pool.name_any();
    let ns = pool.namespace().ok_or(Error::Missing("metadata.namespace"))?;
    let uid = pool.uid().ok_or(Error::Missing("metadata.uid"))?;
    let spec = &pool.spec;
    let wanted = usize::try_from(spec.replicas.max(0)).unwrap_or(0);
    let templates: Vec<&str> = spec
        .virtual_disk_templates
        .iter()
        .map(|t| t.metadata.name.as_str())
        .collect();

    let (terminating, mut live): (Vec<&ChildVm>, Vec<&ChildVm>) =
        existing.vms.iter().partition(|vm| vm.terminating);
    // The order in which VMs go: the first of `live` go first.
    live.sort_by(|a, b| {
        let by_time = match spec.scale_down_policy {
            ScaleDownPolicy::Newest => b.created.cmp(&a.created),
            ScaleDownPolicy::Oldest => a.created.cmp(&b.created),
        };
        by_time.then(b.index.cmp(&a.index))
    });
    let surplus = live.len().saturating_sub(wanted);
    let (victims, kept) = live.split_at(surplus);

    let occupied: BTreeSet<u32> = existing.vms.iter().map(|vm| vm.index).collect();
    let taken = |i: u32| {
        occupied.contains(&i)
            || existing.foreign_vms.contains(&vm_name(&name, i))
            || templates
                .iter()
                .any(|t| existing.foreign_disks.contains(&disk_name(t, &name, i)))
    };
    let missing = wanted.saturating_sub(kept.len() + terminating.len());
    let new: Vec<u32> = (0..=u32::MAX).filter(|&i| !taken(i)).take(missing).collect();

    let owner: OwnerReference =
        serde_json::from_value(controller_reference("VirtualMachinePool", &name, &uid))?;
    let mut plan = Plan {
        delete_vms: victims
            .iter()
            .map(|vm| (vm.name.clone(), vm.uid.clone()))
            .collect(),
        replicas: i32::try_from(kept.len() + new.len()).unwrap_or(i32::MAX),
        ready_replicas: i32::try_from(kept.iter().filter(|vm| vm.running).count()).unwrap_or(i32::MAX),
        ..Plan::default()
    };

    // The disks of kept and new VMs are made when missing (a disk being deleted is waited
    // for: its name is still taken); those of VMs being deleted are left as they are.
    let members: BTreeSet<u32> = kept
        .iter()
        .map(|vm| vm.index)
        .chain(new.iter().copied())
        .collect();
    for &i in &members {
        for t in &spec.virtual_disk_templates {
            let disk = disk_name(&t.metadata.name, &name, i);
            if existing.disks.iter().any(|d| d.name == disk) || existing.foreign_disks.contains(&disk) {
                continue;
            }
            let mut vd = VirtualDisk::new(&disk, t.spec.clone());
            let meta = &mut vd.metadata;
            meta.namespace = Some(ns.clone());
            meta.labels = Some(with_pool_label(&t.metadata.labels, &name));
            meta.annotations = (!t.metadata.annotations.is_empty()).then(|| t.metadata.annotations.clone());
            meta.owner_references = Some(vec![owner.clone()]);
            plan.create_disks.push(vd);
        }
    }
    let keep_disks: BTreeSet<u32> = members
        .iter()
        .copied()
        .chain(terminating.iter().map(|vm| vm.index))
        .collect();
    plan.delete_disks = existing
        .disks
        .iter()
        .filter(|d| !d.terminating && !keep_disks.contains(&d.index))
        .map(|d| (d.name.clone(), d.uid.clone()))
        .collect();

    let template = &spec.virtual_machine_template;
    for &i in &new {
        let mut vm_spec = template.spec.clone();
        for r in &mut vm_spec.block_device_refs {
            if r.kind == BlockDeviceKind::VirtualDisk && templates.contains(&r.name.as_str()) {
                r.name = disk_name(&r.name, &name, i);
            }
        }
        let mut vm = VirtualMachine::new(&vm_name(&name, i), vm_spec);
        let meta = &mut vm.metadata;
        meta.namespace = Some(ns.clone());
        meta.labels = Some(with_pool_label(&template.metadata.labels, &name));
        meta.annotations =
            (!template.metadata.annotations.is_empty()).then(|| template.metadata.annotations.clone());
        meta.owner_references = Some(vec![owner.clone()]);
        plan.create_vms.push(vm);
    }
    Ok(plan)
}

/// A template's labels with the pool's label (which wins: the pool finds its children by it).
fn with_pool_label(
    labels: &std::collections::BTreeMap<String, String>,
    pool: &str,
) -> std::collections::BTreeMap<String, String> {
    let mut labels = labels.clone();
    labels.insert(POOL_LABEL.to_owned(), pool.to_owned());
    labels
}

/// The pool's status after `plan`: the counts, the selector, and `Ready`.
pub(crate) fn status(pool: &VirtualMachinePool, plan: &Plan, now: &str) -> VirtualMachinePoolStatus {
    let old = pool.status.clone().unwrap_or_default();
    let generation = pool.meta().generation;
    let wanted = pool.spec.replicas.max(0);
    let ready = plan.ready_replicas == wanted;
    let message = format!("{} of {wanted} VMs running", plan.ready_replicas);
    let reason = if ready {
        reason::ALL_REPLICAS_READY
    } else {
        reason::REPLICAS_NOT_READY
    };
    VirtualMachinePoolStatus {
        replicas: plan.replicas,
        ready_replicas: plan.ready_replicas,
        selector: Some(selector(&pool.name_any())),
        observed_generation: generation,
        conditions: vec![condition(
            &old.conditions,
            READY,
            ready,
            reason,
            message,
            generation,
            now,
        )],
    }
}

/// The VirtualMachinePool controller: pools, and their VMs and disks (by [`POOL_LABEL`]), whose
/// changes and deletions bring the pool back.
pub(crate) fn controller(w: &mut Wiring) -> BoxFuture<'static, ()> {
    let (api, all) = w.watch::<VirtualMachinePool>(None);
    let (vms, of_pool) = w.watch::<VirtualMachine>(Some(POOL_LABEL));
    let pools = Controller::new(api, all).owns(vms, of_pool);
    let (disks, of_pool) = w.watch::<VirtualDisk>(Some(POOL_LABEL));
    let pools = pools.owns(disks, of_pool);
    w.start(pools, reconcile)
}

/// Reconciles one pool, again from a fresh copy when a write meets a conflict.
#[instrument(skip_all, fields(resource = "virtualmachinepools.virtualization.deckhouse.io", namespace = pool.namespace().unwrap_or_default(), name = %pool.name_any()))]
pub async fn reconcile(pool: Arc<VirtualMachinePool>, ctx: Arc<Context>) -> Result<Action> {
    let ns = pool.namespace().ok_or(Error::Missing("metadata.namespace"))?;
    let name = pool.name_any();
    let api: Api<VirtualMachinePool> = Api::namespaced(ctx.client.clone(), &ns);
    retry_on_conflict(
        pool,
        || async { Ok(api.get_opt(&name).await?) },
        |pool| reconcile_once(pool, &ctx),
    )
    .await
}

async fn reconcile_once(pool: Arc<VirtualMachinePool>, ctx: &Context) -> Result<Action> {
    if pool.meta().deletion_timestamp.is_some() {
        // The garbage collector deletes the VMs and disks.
        return Ok(Action::await_change());
    }
    let ns = pool.namespace().ok_or(Error::Missing("metadata.namespace"))?;
    let name = pool.name_any();
    let uid = pool.uid().ok_or(Error::Missing("metadata.uid"))?;
    let vms: Api<VirtualMachine> = Api::namespaced(ctx.client.clone(), &ns);
    let disks: Api<VirtualDisk> = Api::namespaced(ctx.client.clone(), &ns);
    let pools: Api<VirtualMachinePool> = Api::namespaced(ctx.client.clone(), &ns);
    // Read from the API, not a cache: a cache that has not seen a VM just created would make
    // the plan create it again under the next index.
    let lp = ListParams::default();
    let (vm_list, disk_list) = futures::future::try_join(vms.list(&lp), disks.list(&lp)).await?;
    let existing = existing(&name, &uid, &vm_list.items, &disk_list.items);
    let plan = plan(&pool, &existing)?;

    // A name still taken (by an object being deleted, or one created by someone else since
    // the list): try again shortly rather than fail.
    let mut again = false;
    for vd in &plan.create_disks {
        match disks.create(&PostParams::default(), vd).await {
            Ok(_) => info!(disk = %vd.name_any(), "disk created"),
            Err(kube::Error::Api(s)) if s.is_already_exists() => again = true,
            Err(e) => return Err(e.into()),
        }
    }
    for vm in &plan.create_vms {
        match vms.create(&PostParams::default(), vm).await {
            Ok(_) => info!(vm = %vm.name_any(), "VM created"),
            Err(kube::Error::Api(s)) if s.is_already_exists() => again = true,
            Err(e) => return Err(e.into()),
        }
    }
    // Deleted by uid: a VM or disk made again under the same name since the list stays.
    let by_uid = |uid: &str| {
        DeleteParams::default().preconditions(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        })
    };
    for (vm, vm_uid) in &plan.delete_vms {
        match vms.delete(vm, &by_uid(vm_uid)).await {
            Ok(_) => info!(vm = %vm, "VM deleted (scale down)"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    for (disk, disk_uid) in &plan.delete_disks {
        match disks.delete(disk, &by_uid(disk_uid)).await {
            Ok(_) => info!(disk = %disk, "disk deleted (scale down)"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }

    let new = status(&pool, &plan, &now());
    if pool.status.as_ref() != Some(&new) {
        // With the pool's resourceVersion: a pool scaled since it was read gets a 409 and is
        // reconciled again from a fresh copy.
        let mut obj = (*pool).clone();
        obj.status = Some(new.clone());
        pools.replace_status(&name, &PostParams::default(), &obj).await?;
        info!(replicas = new.replicas, ready = new.ready_replicas, "status");
    }
    Ok(if again {
        Action::requeue(Duration::from_secs(1))
    } else {
        // The VMs and disks the pool owns bring it back when they change or go.
        Action::await_change()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{
        BlockDeviceRef, DiskClaim, DiskTemplateMetadata, TemplateMetadata, VirtualDiskSpec,
        VirtualDiskTemplate, VirtualMachinePoolSpec, VirtualMachineSpec, VirtualMachineTemplate,
    };

    fn pool(replicas: i32, policy: ScaleDownPolicy) -> VirtualMachinePool {
        let spec: VirtualMachineSpec = serde_json::from_value(serde_json::json!({
            "cpu": {"cores": 1}, "memory": {"size": "256Mi"},
            "blockDeviceRefs": [
                {"kind": "VirtualDisk", "name": "root"},
                {"kind": "VirtualDisk", "name": "shared"},
                {"kind": "VirtualImage", "name": "root"},
            ],
        }))
        .expect("spec");
        let mut p = VirtualMachinePool::new(
            "web",
            VirtualMachinePoolSpec {
                replicas,
                virtual_machine_template: VirtualMachineTemplate {
                    metadata: TemplateMetadata {
                        labels: [("app".to_owned(), "shop".to_owned())].into(),
                        annotations: Default::default(),
                    },
                    spec,
                },
                virtual_disk_templates: vec![VirtualDiskTemplate {
                    metadata: DiskTemplateMetadata {
                        name: "root".into(),
                        ..Default::default()
                    },
                    spec: VirtualDiskSpec {
                        persistent_volume_claim: DiskClaim {
                            size: "1Gi".into(),
                            storage_class_name: None,
                        },
                        data_source: None,
                    },
                }],
                scale_down_policy: policy,
            },
        );
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some("pool-uid".into());
        p.metadata.generation = Some(3);
        p
    }

    /// A live VM of index `i`, created at second `t`.
    fn vm(i: u32, t: i64) -> ChildVm {
        ChildVm {
            name: vm_name("web", i),
            uid: format!("vm-{i}"),
            index: i,
            created: Some(Timestamp::from_second(t).expect("time")),
            terminating: false,
            running: true,
        }
    }

    fn disk(i: u32) -> ChildDisk {
        ChildDisk {
            name: disk_name("root", "web", i),
            uid: format!("vd-{i}"),
            index: i,
            terminating: false,
        }
    }

    fn names<K: kube::Resource>(objs: &[K]) -> Vec<String> {
        objs.iter()
            .map(|o| o.meta().name.clone().unwrap_or_default())
            .collect()
    }

    fn first(pairs: &[(String, String)]) -> Vec<&str> {
        pairs.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn names_and_their_indices() {
        assert_eq!(index_after("web-3", "web"), Some(3));
        assert_eq!(index_after("web-03", "web"), None);
        assert_eq!(index_after("web-x", "web"), None);
        assert_eq!(index_after("webs-1", "web"), None);
        assert_eq!(disk_index("root-web-12", "web"), Some(12));
        assert_eq!(disk_index("my-data-web-0", "web"), Some(0));
        assert_eq!(disk_index("root-other-1", "web"), None);
        assert_eq!(disk_index("web-1", "web"), None);
        assert_eq!(selector("web"), "virtualization.deckhouse.io/pool=web");
    }

    #[test]
    fn scale_up_from_nothing_makes_disks_then_vms_with_their_own_disks() {
        let p = plan(&pool(2, ScaleDownPolicy::Newest), &Existing::default()).expect("plan");
        assert_eq!(names(&p.create_vms), ["web-0", "web-1"]);
        assert_eq!(names(&p.create_disks), ["root-web-0", "root-web-1"]);
        assert!(p.delete_vms.is_empty() && p.delete_disks.is_empty());
        assert_eq!((p.replicas, p.ready_replicas), (2, 0));

        let vm1 = &p.create_vms[1];
        // Only refs to a disk template are rewritten: not another disk, not an image.
        let refs: Vec<(BlockDeviceKind, &str)> = vm1
            .spec
            .block_device_refs
            .iter()
            .map(|BlockDeviceRef { kind, name }| (*kind, name.as_str()))
            .collect();
        assert_eq!(
            refs,
            [
                (BlockDeviceKind::VirtualDisk, "root-web-1"),
                (BlockDeviceKind::VirtualDisk, "shared"),
                (BlockDeviceKind::VirtualImage, "root"),
            ]
        );
        let labels = vm1.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels[POOL_LABEL], "web");
        assert_eq!(labels["app"], "shop");
        let owner = &vm1.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("VirtualMachinePool", "pool-uid", Some(true))
        );
        assert_eq!(vm1.metadata.namespace.as_deref(), Some("ns"));
        let d = &p.create_disks[0];
        assert_eq!(d.metadata.labels.as_ref().expect("labels")[POOL_LABEL], "web");
        assert_eq!(
            d.metadata.owner_references.as_ref().expect("owner")[0].name,
            "web"
        );
    }

    #[test]
    fn scale_up_fills_a_gap_first_and_skips_foreign_names() {
        let mut e = Existing {
            vms: vec![vm(0, 10), vm(2, 10)],
            disks: vec![disk(0), disk(2)],
            ..Default::default()
        };
        let p = plan(&pool(4, ScaleDownPolicy::Newest), &e).expect("plan");
        assert_eq!(names(&p.create_vms), ["web-1", "web-3"]);
        assert_eq!(names(&p.create_disks), ["root-web-1", "root-web-3"]);
        assert_eq!((p.replicas, p.ready_replicas), (4, 2));

        e.foreign_vms.insert("web-1".into());
        e.foreign_disks.insert("root-web-3".into());
        let p = plan(&pool(4, ScaleDownPolicy::Newest), &e).expect("plan");
        assert_eq!(names(&p.create_vms), ["web-4", "web-5"]);
    }

    #[test]
    fn a_missing_disk_of_a_kept_vm_is_made_again() {
        let e = Existing {
            vms: vec![vm(0, 10)],
            ..Default::default()
        };
        let p = plan(&pool(1, ScaleDownPolicy::Newest), &e).expect("plan");
        assert!(p.create_vms.is_empty());
        assert_eq!(names(&p.create_disks), ["root-web-0"]);
    }

    #[test]
    fn scale_down_newest_deletes_the_youngest_and_their_disks() {
        let e = Existing {
            vms: vec![vm(0, 10), vm(1, 30), vm(2, 20), vm(3, 30)],
            disks: vec![disk(0), disk(1), disk(2), disk(3)],
            ..Default::default()
        };
        let p = plan(&pool(2, ScaleDownPolicy::Newest), &e).expect("plan");
        // 1 and 3 were created in the same second: the higher index goes first.
        assert_eq!(first(&p.delete_vms), ["web-3", "web-1"]);
        assert_eq!(p.delete_vms[0].1, "vm-3");
        assert_eq!(first(&p.delete_disks), ["root-web-1", "root-web-3"]);
        assert!(p.create_vms.is_empty() && p.create_disks.is_empty());
        assert_eq!(p.replicas, 2);
    }

    #[test]
    fn scale_down_oldest_deletes_the_eldest() {
        let e = Existing {
            vms: vec![vm(0, 10), vm(1, 10), vm(2, 20), vm(3, 30)],
            disks: vec![disk(0), disk(1), disk(2), disk(3)],
            ..Default::default()
        };
        let p = plan(&pool(1, ScaleDownPolicy::Oldest), &e).expect("plan");
        assert_eq!(first(&p.delete_vms), ["web-1", "web-0", "web-2"]);
        assert_eq!(first(&p.delete_disks), ["root-web-0", "root-web-1", "root-web-2"]);
        let p = plan(&pool(0, ScaleDownPolicy::Oldest), &e).expect("plan");
        assert_eq!(p.delete_vms.len(), 4);
        assert_eq!((p.replicas, p.ready_replicas), (0, 0));
    }

    #[test]
    fn a_vm_being_deleted_keeps_its_index_and_disks_until_gone() {
        let mut gone = vm(0, 10);
        gone.terminating = true;
        let e = Existing {
            vms: vec![gone],
            disks: vec![disk(0)],
            ..Default::default()
        };
        let p = plan(&pool(1, ScaleDownPolicy::Newest), &e).expect("plan");
        assert!(p.create_vms.is_empty(), "{p:?}");
        assert!(p.delete_disks.is_empty() && p.create_disks.is_empty(), "{p:?}");
        assert_eq!(p.replicas, 0);
        // Once gone, it is made again under its own name, with the disk it had.
        let e = Existing {
            disks: vec![disk(0)],
            ..Default::default()
        };
        let p = plan(&pool(1, ScaleDownPolicy::Newest), &e).expect("plan");
        assert_eq!(names(&p.create_vms), ["web-0"]);
        assert!(p.create_disks.is_empty());
    }

    #[test]
    fn children_are_told_from_foreign_objects() {
        let owned = |name: &str, uid: &str| {
            let mut vm = VirtualMachine::new(
                name,
                pool(1, ScaleDownPolicy::Newest)
                    .spec
                    .virtual_machine_template
                    .spec,
            );
            vm.metadata.uid = Some(format!("{name}-uid"));
            vm.metadata.owner_references = Some(vec![
                serde_json::from_value(controller_reference("VirtualMachinePool", "web", uid)).expect("ref"),
            ]);
            vm
        };
        let vms = [
            owned("web-0", "pool-uid"),
            owned("web-1", "other"),
            owned("web-x", "pool-uid"),
        ];
        let e = existing("web", "pool-uid", &vms, &[]);
        assert_eq!(e.vms.len(), 1);
        assert_eq!((e.vms[0].index, e.vms[0].uid.as_str()), (0, "web-0-uid"));
        assert_eq!(
            e.foreign_vms.iter().map(String::as_str).collect::<Vec<_>>(),
            ["web-1", "web-x"]
        );
    }

    #[test]
    fn status_is_ready_when_every_wanted_vm_runs() {
        let mut e = Existing {
            vms: vec![vm(0, 10), vm(1, 10)],
            disks: vec![disk(0), disk(1)],
            ..Default::default()
        };
        let p = pool(2, ScaleDownPolicy::Newest);
        let s = status(&p, &plan(&p, &e).expect("plan"), "t1");
        assert_eq!((s.replicas, s.ready_replicas), (2, 2));
        assert_eq!(
            s.selector.as_deref(),
            Some("virtualization.deckhouse.io/pool=web")
        );
        assert_eq!(s.observed_generation, Some(3));
        let c = &s.conditions[0];
        assert_eq!(
            (
                c.type_.as_str(),
                c.status.as_str(),
                c.reason.as_str(),
                c.message.as_str()
            ),
            ("Ready", "True", "AllReplicasReady", "2 of 2 VMs running")
        );
        e.vms[1].running = false;
        let s = status(&p, &plan(&p, &e).expect("plan"), "t2");
        assert_eq!(
            (s.conditions[0].status.as_str(), s.conditions[0].reason.as_str()),
            ("False", "ReplicasNotReady")
        );
    }
}
