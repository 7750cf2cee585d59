//! [`run`]: the controllers, each a kube-runtime `Controller` over its kind with the watches
//! that map related objects to it, run together until a shutdown signal.

use std::sync::Arc;

use kube::ResourceExt as _;
use tracing::warn;

use super::{
    Context, Error, WatchBackoff, error_policy, pool, vd, vdsnapshot, vi, vm, vmbda, vmop, vmsnapshot,
};

/// Runs the VirtualMachine, VirtualMachineOperation, VirtualDisk, VirtualImage, snapshot and
/// attachment controllers until SIGTERM or Ctrl+C, then lets running reconciles finish. Beside
/// them, follows which APIs are served ([`crate::apis::follow`]) and sets [`Context::listed`]
/// once every resource they watch could be listed.
pub async fn run(ctx: Arc<Context>) {
    use futures::StreamExt as _;
    use kube::api::{Api, DynamicObject};
    use kube::core::PartialObjectMeta;
    use kube::runtime::reflector::ObjectRef;
    use kube::runtime::{Controller, WatchStreamExt as _, watcher};

    use super::ready::Watched;
    use crate::apis::VOLUME_SNAPSHOTS;

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
    // VolumeSnapshots are an optional API: they are watched while it is served; meanwhile the
    // disk snapshots wait (and say why).
    let volume_snapshots = {
        let api = Api::<PartialObjectMeta<DynamicObject>>::all_with(
            client.clone(),
            &vdsnapshot::volume_snapshot_resource(),
        );
        ctx.served.clone().while_served(VOLUME_SNAPSHOTS, move || {
            watcher(api.clone(), watcher::Config::default()).touched_objects()
        })
    };
    let disk_snapshots = Controller::new(
        Api::<VirtualDiskSnapshot>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns_stream_with(volume_snapshots, vdsnapshot::volume_snapshot_resource())
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

    let lp = || kube::api::ListParams::default();
    let data_pods = || lp().labels(crate::datapod::DATA_LABEL);
    let watched = vec![
        Watched::new(Api::<VirtualMachine>::all(client.clone()), lp()),
        Watched::new(Api::<VirtualMachineOperation>::all(client.clone()), lp()),
        Watched::new(kvvms(), lp()),
        Watched::new(vmis(), lp()),
        Watched::new(Api::<VirtualDisk>::all(client.clone()), lp()),
        Watched::new(Api::<VirtualMachineClass>::all(client.clone()), lp()),
        Watched::new(Api::<PersistentVolumeClaim>::all(client.clone()), lp()),
        Watched::new(Api::<VirtualImage>::all(client.clone()), lp()),
        Watched::new(Api::<Pod>::all(client.clone()), data_pods()),
        Watched::new(Api::<VirtualDiskSnapshot>::all(client.clone()), lp()),
        Watched::new(Api::<VirtualMachineSnapshot>::all(client.clone()), lp()),
        Watched::new(
            Api::<VirtualMachineBlockDeviceAttachment>::all(client.clone()),
            lp(),
        ),
        Watched::new(
            Api::<DynamicObject>::all_with(client.clone(), &vdsnapshot::volume_snapshot_resource()),
            lp(),
        )
        .optional(VOLUME_SNAPSHOTS),
        Watched::new(Api::<VirtualMachinePool>::all(client.clone()), lp()),
    ];
    let ready = super::ready::wait_listed(ctx.clone(), watched);
    let apis = tokio::spawn(crate::apis::follow(
        client.clone(),
        ctx.served.clone(),
        crate::apis::Intervals::default(),
    ));
    let vms = vms
        .run(vm::reconcile, error_policy, ctx.clone())
        .for_each(log_result("VirtualMachine"));
    let ops = ops
        .run(vmop::reconcile, error_policy, ctx.clone())
        .for_each(log_result("VirtualMachineOperation"));
    let disks = disks
        .run(vd::reconcile, error_policy, ctx.clone())
        .for_each(log_result("VirtualDisk"));
    let _ = ctx.images.set(images.store());
    let images = images
        .run(vi::reconcile, error_policy, ctx.clone())
        .for_each(log_result("VirtualImage"));
    let pools = pools
        .run(pool::reconcile, error_policy, ctx.clone())
        .for_each(log_result("VirtualMachinePool"));
    let ready = tokio::spawn(ready);
    let disk_snapshots = disk_snapshots
        .run(vdsnapshot::reconcile, error_policy, ctx.clone())
        .for_each(log_result("VirtualDiskSnapshot"));
    let vm_snapshots = vm_snapshots
        .run(vmsnapshot::reconcile, error_policy, ctx.clone())
        .for_each(log_result("VirtualMachineSnapshot"));
    let attachments = attachments
        .run(vmbda::reconcile, error_policy, ctx.clone())
        .for_each(log_result("VirtualMachineBlockDeviceAttachment"));
    futures::future::join(
        futures::future::join5(vms, ops, disks, images, pools),
        futures::future::join3(disk_snapshots, vm_snapshots, attachments),
    )
    .await;
    ready.abort();
    apis.abort();
}

/// Logs one result of the stream of the controller of `kind`. A watch's error names the
/// request that failed (the client's [`crate::client::RequestContextLayer`]).
fn log_result<T: std::fmt::Debug>(
    kind: &'static str,
) -> impl FnMut(
    std::result::Result<T, kube::runtime::controller::Error<Error, kube::runtime::watcher::Error>>,
) -> futures::future::Ready<()> {
    move |r| {
        match r {
            Ok(obj) => tracing::debug!(controller = kind, ?obj, "reconciled"),
            // A failed reconcile was logged by the error policy.
            Err(kube::runtime::controller::Error::ReconcilerFailed(..)) => {}
            // A KubeVirt object naming a VM that does not exist (a label edited by hand).
            Err(e @ kube::runtime::controller::Error::ObjectNotFound(..)) => {
                tracing::debug!(controller = kind, error = %e, "no such object")
            }
            Err(e) => warn!(controller = kind, error = %e, "watch failed"),
        }
        futures::future::ready(())
    }
}
