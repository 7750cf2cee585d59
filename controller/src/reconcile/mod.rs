//! One module per kind ([`vm`], [`vmop`], [`vd`], [`vi`], [`pool`], [`vdsnapshot`],
//! [`vmsnapshot`], [`vmbda`]), each owning its controller (its watches and owned kinds, built
//! through the shared `wiring`) and its reconcile; what they share (the [`Context`], the error
//! policy, conflict retries, finalizer patches, [`data`] Pods, [`report`]); and [`run`], which
//! only starts the controllers and joins them. Readiness (`ready`), the optional-API watches
//! and the tasks beside the controllers are in `wiring`, not in any kind's module.

pub mod data;
pub mod pool;
mod ready;
pub mod report;
mod run;
pub mod vd;
pub mod vdsnapshot;
pub mod vi;
pub mod vm;
pub mod vmbda;
pub mod vmop;
pub mod vmsnapshot;
mod wiring;

pub use run::run;

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
    /// Set once every watched resource of a served API could be listed.
    pub listed: AtomicBool,
    /// Why not everything could be listed yet, when it could not: the last failure.
    pub not_listed: std::sync::Mutex<Option<String>>,
    /// Which of the APIs the controller uses are served ([`crate::apis`]).
    pub served: Arc<crate::apis::Served>,
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
            listed: AtomicBool::new(false),
            not_listed: std::sync::Mutex::new(None),
            served: Arc::default(),
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

    /// `Ok` when the controller is ready (every required API served, every watched resource
    /// listed once), else why not.
    pub fn readiness(&self) -> std::result::Result<(), String> {
        if let Some(why) = self.served.blocking() {
            return Err(why);
        }
        if self.listed.load(Ordering::Relaxed) {
            return Ok(());
        }
        let last = self
            .not_listed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        Err(last.unwrap_or_else(|| "the watched resources were not listed yet".to_owned()))
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
            apis: self.served.rows(),
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
        group = %K::group(&()),
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
