//! The reconcilers ([`vm`], [`vmop`], [`vd`], [`vi`], [`pool`]), what they share (the
//! [`Context`], the error policy, conflict retries, finalizer patches, [`data`] Pods) and [`run`],
//! which runs the controllers until a shutdown signal.

pub mod data;
pub mod pool;
pub mod report;
pub mod vd;
pub mod vdsnapshot;
pub mod vi;
pub mod vm;
pub mod vmbda;
pub mod vmop;
pub mod vmsnapshot;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use kube::api::Patch;
use kube::runtime::controller::Action;
use kube::{Client, Resource, ResourceExt as _};
use serde_json::{Value, json};
use tracing::warn;

use crate::{Error, Result};

/// How often a reconcile is retried at once when a write hits a 409 Conflict, re-reading the
/// object each time, before the error goes to the error policy.
pub const CONFLICT_RETRIES: usize = 5;

/// What the reconcilers share.
pub struct Context {
    /// The client (through the rewriter sidecar).
    pub client: Client,
    /// Reconciles that returned an error.
    pub errors: AtomicU64,
    /// Set once every watched resource could be listed.
    pub ready: AtomicBool,
    /// The VM controller's cache, once it runs: what the phase metric shows.
    pub vms: std::sync::OnceLock<kube::runtime::reflector::Store<crate::resources::VirtualMachine>>,
    /// The disk controller's cache, once it runs.
    pub disks: std::sync::OnceLock<kube::runtime::reflector::Store<crate::resources::VirtualDisk>>,
    /// The image controller's cache, once it runs.
    pub images: std::sync::OnceLock<kube::runtime::reflector::Store<crate::resources::VirtualImage>>,
    /// The disk snapshot controller's cache, once it runs.
    pub disk_snapshots:
        std::sync::OnceLock<kube::runtime::reflector::Store<crate::resources::VirtualDiskSnapshot>>,
    /// The VM snapshot controller's cache, once it runs.
    pub vm_snapshots:
        std::sync::OnceLock<kube::runtime::reflector::Store<crate::resources::VirtualMachineSnapshot>>,
    /// The attachment controller's cache, once it runs.
    pub attachments: std::sync::OnceLock<
        kube::runtime::reflector::Store<crate::resources::VirtualMachineBlockDeviceAttachment>,
    >,
    /// How images and disks are imported.
    pub data: crate::datapod::DataSettings,
    /// How long a snapshot may take to become ready to use before it fails (and a frozen
    /// guest is thawed).
    pub snapshot_ready_timeout: Duration,
}

/// The default of [`Context::snapshot_ready_timeout`].
pub const SNAPSHOT_READY_TIMEOUT: Duration = Duration::from_secs(300);

impl Context {
    /// A context for `client`, with no DVCR (images cannot be imported).
    pub fn new(client: Client) -> Arc<Context> {
        Self::with_data(client, crate::datapod::DataSettings::default())
    }

    /// A context for `client` importing images and disks as `data` says.
    pub fn with_data(client: Client, data: crate::datapod::DataSettings) -> Arc<Context> {
        Self::with_settings(client, data, SNAPSHOT_READY_TIMEOUT)
    }

    /// A context for `client` importing as `data` says, with snapshots failing after
    /// `snapshot_ready_timeout`.
    pub fn with_settings(
        client: Client,
        data: crate::datapod::DataSettings,
        snapshot_ready_timeout: Duration,
    ) -> Arc<Context> {
        Arc::new(Context {
            client,
            errors: AtomicU64::new(0),
            ready: AtomicBool::new(false),
            vms: std::sync::OnceLock::new(),
            disks: std::sync::OnceLock::new(),
            images: std::sync::OnceLock::new(),
            disk_snapshots: std::sync::OnceLock::new(),
            vm_snapshots: std::sync::OnceLock::new(),
            attachments: std::sync::OnceLock::new(),
            data,
            snapshot_ready_timeout,
        })
    }

    /// What `/metrics` shows now, with `errors` failed reconciles: VMs, disks and images of
    /// the caches, each sorted by namespace and name.
    pub fn metric_rows(&self, errors: u64) -> crate::metrics::Rows {
        use crate::metrics::ObjectRow;
        fn rows<K>(
            store: Option<&kube::runtime::reflector::Store<K>>,
            of: impl Fn(&K) -> Option<ObjectRow>,
        ) -> Vec<ObjectRow>
        where
            K: kube::Resource + Clone + 'static,
            K::DynamicType: std::hash::Hash + Eq + Clone,
        {
            let mut rows: Vec<_> = store
                .map(|s| s.state())
                .unwrap_or_default()
                .iter()
                .filter_map(|o| of(o))
                .collect();
            rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
            rows
        }
        crate::metrics::Rows {
            errors,
            vms: self.vm_rows(),
            disks: rows(self.disks.get(), ObjectRow::of_disk),
            images: rows(self.images.get(), ObjectRow::of_image),
            disk_snapshots: rows(self.disk_snapshots.get(), ObjectRow::of_disk_snapshot),
            vm_snapshots: rows(self.vm_snapshots.get(), ObjectRow::of_vm_snapshot),
            attachments: rows(self.attachments.get(), ObjectRow::of_attachment),
        }
    }

    /// The VMs of the cache as the phase metric shows them, sorted by namespace and name.
    pub fn vm_rows(&self) -> Vec<crate::metrics::VmRow> {
        let mut rows: Vec<_> = self
            .vms
            .get()
            .map(|s| s.state())
            .unwrap_or_default()
            .iter()
            .filter_map(|vm| crate::metrics::VmRow::of(vm))
            .collect();
        rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        rows
    }
}

/// Requeues a failed reconcile: at once-ish for a conflict, after a few seconds otherwise (the
/// API may be restarting).
pub fn error_policy<K: Resource<DynamicType = ()>>(obj: Arc<K>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.errors.fetch_add(1, Ordering::Relaxed);
    warn!(
        kind = %K::kind(&()),
        namespace = obj.namespace().unwrap_or_default(),
        name = %obj.name_any(),
        error = %err,
        "reconcile failed"
    );
    if is_patch_conflict(err) {
        Action::requeue(Duration::from_millis(500))
    } else {
        Action::requeue(Duration::from_secs(3))
    }
}

/// A 409 Conflict: a write based on a stale `resourceVersion`.
pub fn is_conflict(err: &Error) -> bool {
    matches!(err, Error::Kube(kube::Error::Api(s)) if s.is_conflict())
}

/// What kube-apiserver answers when a JSON patch does not apply to the object as it is now,
/// a failed `test` included: 422 Invalid with this message and no details.
const PATCH_NOT_APPLICABLE: &str = "the server rejected our request due to an error in our request";

/// A conflict, or a JSON patch that no longer applies because the object changed.
pub fn is_patch_conflict(err: &Error) -> bool {
    is_conflict(err)
        || matches!(err, Error::Kube(kube::Error::Api(s)) if s.code == 422 && s.message == PATCH_NOT_APPLICABLE)
}

/// A 404.
pub fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.is_not_found())
}

/// Runs `once` with the given object, and again with a freshly read one (`reread`) while it
/// fails with a conflict, [`CONFLICT_RETRIES`] times at most.
pub async fn retry_on_conflict<K, F, Fut, R, RFut>(first: Arc<K>, reread: R, once: F) -> Result<Action>
where
    F: Fn(Arc<K>) -> Fut,
    Fut: Future<Output = Result<Action>>,
    R: Fn() -> RFut,
    RFut: Future<Output = Result<Option<K>>>,
{
    let mut obj = first;
    let mut attempt = 0;
    loop {
        match once(obj).await {
            Err(e) if is_conflict(&e) && attempt < CONFLICT_RETRIES => {
                attempt += 1;
                tracing::debug!(error = %e, attempt, "conflict, re-reading");
                match reread().await? {
                    Some(fresh) => obj = Arc::new(fresh),
                    None => return Ok(Action::await_change()),
                }
            }
            r => return r,
        }
    }
}

/// Appends `requests` to the `status.stateChangeRequests` of KubeVirt VM `kvvm` (read through
/// `kvvms`), by a JSON patch of `/status` guarded by its `resourceVersion`; on a conflict the VM
/// is read again and the patch rebuilt, [`CONFLICT_RETRIES`] times at most.
pub async fn send_requests(
    kvvms: &kube::Api<kube::api::DynamicObject>,
    kvvm: &kube::api::DynamicObject,
    requests: &[Value],
) -> Result<()> {
    let name = kvvm.name_any();
    let mut current = kvvm.clone();
    let mut attempt = 0;
    loop {
        let rv = current.resource_version().unwrap_or_default();
        let patch = crate::kubevirt::state_change_patch(&rv, current.data.get("status"), requests);
        let sent = kvvms
            .patch_status(&name, &kube::api::PatchParams::default(), &json_patch(patch)?)
            .await
            .map_err(Error::from);
        match sent {
            Ok(_) => {
                tracing::info!(kubevirt_vm = %name, ?requests, "state change requested");
                return Ok(());
            }
            Err(e) if is_patch_conflict(&e) && attempt < CONFLICT_RETRIES => {
                attempt += 1;
                current = kvvms.get(&name).await?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The retry pace of the controllers' watches after an error: 500 ms, doubling up to 2 s, back
/// to 500 ms after an event arrives. kube-runtime's default goes up to 30 s; after a
/// kube-apiserver restart every watch fails in turn (connection refused, then 410 Expired) and
/// the backoff they share climbs, which left the controller idle for up to 13 s more.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
}

impl WatchBackoff {
    /// The first delay.
    pub const MIN: Duration = Duration::from_millis(500);
    /// The longest delay.
    pub const MAX: Duration = Duration::from_secs(2);
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff { next: Self::MIN }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let d = self.next;
        self.next = (d * 2).min(Self::MAX);
        Some(d)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::MIN;
    }
}

/// A JSON patch from its JSON text.
pub fn json_patch(ops: Value) -> Result<Patch<()>> {
    Ok(Patch::Json(serde_json::from_value(ops)?))
}

/// The JSON patch adding `finalizer` to `finalizers` (`add` of the list when there is none).
pub fn add_finalizer_patch(finalizers: &[String], finalizer: &str) -> Value {
    if finalizers.is_empty() {
        json!([{"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}])
    } else {
        json!([{"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}])
    }
}

/// The JSON patch removing `finalizer` from `finalizers`, guarded by a `test` of its position;
/// `None` when it is not there.
pub fn remove_finalizer_patch(finalizers: &[String], finalizer: &str) -> Option<Value> {
    let i = finalizers.iter().position(|f| f == finalizer)?;
    let path = format!("/metadata/finalizers/{i}");
    Some(json!([
        {"op": "test", "path": path, "value": finalizer},
        {"op": "remove", "path": path},
    ]))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finalizer_patches() {
        let f = "virtualization.deckhouse.io/vm-cleanup";
        assert_eq!(
            add_finalizer_patch(&[], f),
            json!([{"op": "add", "path": "/metadata/finalizers", "value": [f]}])
        );
        let two = ["a".to_owned(), f.to_owned()];
        assert_eq!(
            add_finalizer_patch(&two[..1], f),
            json!([{"op": "add", "path": "/metadata/finalizers/-", "value": f}])
        );
        assert_eq!(
            remove_finalizer_patch(&two, f),
            Some(json!([
                {"op": "test", "path": "/metadata/finalizers/1", "value": f},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ]))
        );
        assert_eq!(remove_finalizer_patch(&two[..1], f), None);
        assert!(json_patch(add_finalizer_patch(&[], f)).is_ok());
    }

    #[test]
    fn watch_backoff_doubles_to_its_cap_and_resets() {
        use kube::runtime::utils::Backoff as _;
        let mut b = WatchBackoff::default();
        let ms: Vec<u128> = b.by_ref().take(6).map(|d| d.as_millis()).collect();
        assert_eq!(ms, [500, 1000, 2000, 2000, 2000, 2000]);
        b.reset();
        assert_eq!(b.next(), Some(WatchBackoff::MIN));
    }
}
