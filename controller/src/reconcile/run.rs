//! [`run`]: the controllers, each a kube-runtime `Controller` over its kind with the watches
//! that map related objects to it, run together until a shutdown signal.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kube::ResourceExt as _;
use tracing::warn;

use super::{
    Context, Error, WatchBackoff, error_policy, pool, vd, vdsnapshot, vi, vm, vmbda, vmop, vmsnapshot,
};

/// Runs the VirtualMachine, VirtualMachineOperation, VirtualDisk, VirtualImage, snapshot and
/// attachment controllers until SIGTERM or
/// Ctrl+C, then lets running reconciles finish. Sets [`Context::ready`] once every resource they watch
/// could be listed.
pub async fn run(ctx: Arc<Context>) {
    use futures::StreamExt as _;
    use kube::api::{Api, DynamicObject};
    use kube::runtime::reflector::ObjectRef;
    use kube::runtime::{Controller, watcher};

    use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};

    use crate::kubevirt::{NAME_LABEL, vm_resource, vmi_resource};
    use crate::resources::{
        BlockDeviceKind, OperationPhase, VirtualDisk, VirtualDiskSnapshot, VirtualImage, VirtualMachine,
        VirtualMachineBlockDeviceAttachment, VirtualMachineClass, VirtualMachineOperation,
        VirtualMachinePool, VirtualMachineSnapshot,
    };

    let client = ctx.client.clone();
    let kvvms = || Api::<DynamicObject>::all_with(client.clone(), &vm_resource());
    let vmis = || Api::<DynamicObject>::all_with(client.clone(), &vmi_resource());
    // KubeVirt objects are selected by KubeVirt's own label key, so the sidecar rewrites the
    // selector on the way up and the labels in the stream on the way back.
    let labelled = watcher::Config::default().labels(NAME_LABEL);

    // A KubeVirt object maps to the VM its name label names and to the VM that controls it (a
    // label edited by hand still finds its VM).
    let vm_of = |o: DynamicObject| {
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
        for name in [o.labels().get(NAME_LABEL).cloned(), owner].into_iter().flatten() {
            let r = ObjectRef::new(&name).within(&ns);
            if !refs.contains(&r) {
                refs.push(r);
            }
        }
        Some(refs)
    };
    let vms = Controller::new(
        Api::<VirtualMachine>::all(client.clone()),
        watcher::Config::default(),
    );
    let vm_store = vms.store();
    let _ = ctx.vms.set(vm_store.clone());
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
    let vms = vms
        .watches(
            Api::<VirtualDisk>::all(client.clone()),
            watcher::Config::default(),
            vms_of_disk,
        )
        .watches(
            Api::<VirtualImage>::all(client.clone()),
            watcher::Config::default(),
            vms_of_image,
        )
        .watches(
            Api::<VirtualMachineClass>::all(client.clone()),
            watcher::Config::default(),
            vms_of_class,
        )
        .watches_with(kvvms(), vm_resource(), labelled.clone(), move |o| {
            vm_of(o).into_iter().flatten()
        })
        .watches_with(vmis(), vmi_resource(), labelled.clone(), move |o| {
            vm_of(o).into_iter().flatten()
        })
        .trigger_backoff(WatchBackoff::default())
        .shutdown_on_signal();

    let ops = Controller::new(
        Api::<VirtualMachineOperation>::all(client.clone()),
        watcher::Config::default(),
    );
    let op_store = ops.store();
    let ops_of = move |o: DynamicObject| {
        let ns = o.namespace();
        let name = o.labels().get(NAME_LABEL).cloned();
        op_store
            .state()
            .into_iter()
            .filter(|op| {
                op.namespace() == ns
                    && Some(&op.spec.virtual_machine_name) == name.as_ref()
                    && !matches!(
                        op.status.as_ref().and_then(|s| s.phase),
                        Some(OperationPhase::Completed | OperationPhase::Failed)
                    )
            })
            .map(|op| ObjectRef::from(op.as_ref()))
            .collect::<Vec<_>>()
    };
    let ops = ops
        .watches_with(kvvms(), vm_resource(), labelled.clone(), ops_of.clone())
        .watches_with(vmis(), vmi_resource(), labelled, ops_of)
        .trigger_backoff(WatchBackoff::default())
        .shutdown_on_signal();

    let disks = Controller::new(
        Api::<VirtualDisk>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        watcher::Config::default().labels(vd::DISK_LABEL),
    )
    .owns(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().labels(crate::datapod::DATA_LABEL),
    )
    .trigger_backoff(WatchBackoff::default())
    .shutdown_on_signal();

    let _ = ctx.disks.set(disks.store());
    let images = Controller::new(
        Api::<VirtualImage>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().labels(crate::datapod::DATA_LABEL),
    )
    .trigger_backoff(WatchBackoff::default())
    .shutdown_on_signal();

    // Snapshots: a disk snapshot follows its VolumeSnapshot, a VM snapshot its disk snapshots.
    let disk_snapshots = Controller::new(
        Api::<VirtualDiskSnapshot>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns_with(
        Api::<DynamicObject>::all_with(client.clone(), &vdsnapshot::volume_snapshot_resource()),
        vdsnapshot::volume_snapshot_resource(),
        watcher::Config::default(),
    )
    .trigger_backoff(WatchBackoff::default())
    .shutdown_on_signal();
    let _ = ctx.disk_snapshots.set(disk_snapshots.store());
    let vm_snapshots = Controller::new(
        Api::<VirtualMachineSnapshot>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(
        Api::<VirtualDiskSnapshot>::all(client.clone()),
        watcher::Config::default(),
    )
    .trigger_backoff(WatchBackoff::default())
    .shutdown_on_signal();
    let _ = ctx.vm_snapshots.set(vm_snapshots.store());
    // Attachments look at the VM's instance on a timer while they move.
    let attachments = Controller::new(
        Api::<VirtualMachineBlockDeviceAttachment>::all(client.clone()),
        watcher::Config::default(),
    )
    .trigger_backoff(WatchBackoff::default())
    .shutdown_on_signal();
    let _ = ctx.attachments.set(attachments.store());

    // Pools: their VMs and disks, whose changes and deletions bring the pool back.
    let pools = Controller::new(
        Api::<VirtualMachinePool>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(
        Api::<VirtualMachine>::all(client.clone()),
        watcher::Config::default().labels(pool::POOL_LABEL),
    )
    .owns(
        Api::<VirtualDisk>::all(client.clone()),
        watcher::Config::default().labels(pool::POOL_LABEL),
    )
    .trigger_backoff(WatchBackoff::default())
    .shutdown_on_signal();

    let ready = {
        let ctx = ctx.clone();
        let pool_api = Api::<VirtualMachinePool>::all(client.clone());
        let (a, b) = (
            Api::<VirtualMachine>::all(client.clone()),
            Api::<VirtualMachineOperation>::all(client.clone()),
        );
        let (c, d) = (kvvms(), vmis());
        let (e, f, g) = (
            Api::<VirtualDisk>::all(client.clone()),
            Api::<VirtualMachineClass>::all(client.clone()),
            Api::<PersistentVolumeClaim>::all(client.clone()),
        );
        let (h, i) = (
            Api::<VirtualImage>::all(client.clone()),
            Api::<Pod>::all(client.clone()),
        );
        let (j, k, l, m) = (
            Api::<VirtualDiskSnapshot>::all(client.clone()),
            Api::<VirtualMachineSnapshot>::all(client.clone()),
            Api::<VirtualMachineBlockDeviceAttachment>::all(client.clone()),
            Api::<DynamicObject>::all_with(client.clone(), &vdsnapshot::volume_snapshot_resource()),
        );
        async move {
            // Not `Store::wait_until_ready`: its oneshot keeps one waker, and the controller's
            // own runner waits on it.
            let lp = kube::api::ListParams::default().limit(1);
            loop {
                let listed = futures::future::try_join4(
                    futures::future::try_join4(
                        a.list_metadata(&lp),
                        b.list_metadata(&lp),
                        c.list_metadata(&lp),
                        d.list_metadata(&lp),
                    ),
                    futures::future::try_join5(
                        e.list_metadata(&lp),
                        f.list_metadata(&lp),
                        g.list_metadata(&lp),
                        h.list_metadata(&lp),
                        i.list_metadata(&lp.clone().labels(crate::datapod::DATA_LABEL)),
                    ),
                    futures::future::try_join4(
                        j.list_metadata(&lp),
                        k.list_metadata(&lp),
                        l.list_metadata(&lp),
                        m.list_metadata(&lp),
                    ),
                    pool_api.list_metadata(&lp),
                )
                .await;
                match listed {
                    Ok(_) => break,
                    Err(e) => warn!(error = %e, "not ready"),
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            ctx.ready.store(true, Ordering::Relaxed);
            tracing::info!("every watched resource listed, ready");
        }
    };
    let vms = vms
        .run(vm::reconcile, error_policy, ctx.clone())
        .for_each(log_result);
    let ops = ops
        .run(vmop::reconcile, error_policy, ctx.clone())
        .for_each(log_result);
    let disks = disks
        .run(vd::reconcile, error_policy, ctx.clone())
        .for_each(log_result);
    let _ = ctx.images.set(images.store());
    let images = images
        .run(vi::reconcile, error_policy, ctx.clone())
        .for_each(log_result);
    let pools = pools
        .run(pool::reconcile, error_policy, ctx.clone())
        .for_each(log_result);
    let ready = tokio::spawn(ready);
    let disk_snapshots = disk_snapshots
        .run(vdsnapshot::reconcile, error_policy, ctx.clone())
        .for_each(log_result);
    let vm_snapshots = vm_snapshots
        .run(vmsnapshot::reconcile, error_policy, ctx.clone())
        .for_each(log_result);
    let attachments = attachments
        .run(vmbda::reconcile, error_policy, ctx.clone())
        .for_each(log_result);
    futures::future::join(
        futures::future::join5(vms, ops, disks, images, pools),
        futures::future::join3(disk_snapshots, vm_snapshots, attachments),
    )
    .await;
    ready.abort();
}

/// Logs one result of a controller's stream.
fn log_result<T: std::fmt::Debug>(
    r: std::result::Result<T, kube::runtime::controller::Error<Error, kube::runtime::watcher::Error>>,
) -> futures::future::Ready<()> {
    match r {
        Ok(obj) => tracing::debug!(?obj, "reconciled"),
        // A failed reconcile was logged by the error policy.
        Err(kube::runtime::controller::Error::ReconcilerFailed(..)) => {}
        // A KubeVirt object naming a VM that does not exist (a label edited by hand).
        Err(e @ kube::runtime::controller::Error::ObjectNotFound(..)) => {
            tracing::debug!(error = %e, "controller")
        }
        Err(e) => warn!(error = %e, "controller"),
    }
    futures::future::ready(())
}
