//! TEST DOUBLE of a CSI driver with its snapshot sidecars: no storage driver runs here, so this
//! takes their part for `snapshot.storage.k8s.io/v1` VolumeSnapshots (CRDs from the
//! external-snapshotter client module, `../testdata/snapshot-crds/`). For each VolumeSnapshot of
//! a claim it binds a VolumeSnapshotContent of its own driver and reports the snapshot ready to
//! use, with the claim's size, as the snapshot controller does once the driver cut it; those
//! it was told to stall stay unready.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt as _};
use serde_json::json;

/// The driver name the contents carry.
pub const DRIVER: &str = "csi-double.virtualization.test";

/// What the double was told and what it did; shared with the cases.
#[derive(Default)]
pub struct Csi {
    stalled: Mutex<Vec<(String, String)>>,
    ready: Mutex<Vec<(String, String, Instant)>>,
}

impl Csi {
    /// Keeps VolumeSnapshots of namespace `ns` whose names start with `prefix` unready.
    pub fn stall(&self, ns: &str, prefix: &str) {
        lock(&self.stalled).push((ns.to_owned(), prefix.to_owned()));
    }

    /// When the double reported VolumeSnapshot `ns/name` ready.
    pub fn ready_at(&self, ns: &str, name: &str) -> Option<Instant> {
        lock(&self.ready)
            .iter()
            .find(|(n, m, _)| n == ns && m == name)
            .map(|r| r.2)
    }

    fn stalls(&self, ns: &str, name: &str) -> bool {
        lock(&self.stalled)
            .iter()
            .any(|(n, p)| n == ns && name.starts_with(p.as_str()))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("snapshot.storage.k8s.io", "v1", kind),
        plural,
    )
}

/// Runs the double with `client` (a cluster admin) until the task is dropped.
pub async fn run(client: Client, csi: Arc<Csi>) {
    let snapshots = resource("VolumeSnapshot", "volumesnapshots");
    let contents = Api::<DynamicObject>::all_with(
        client.clone(),
        &resource("VolumeSnapshotContent", "volumesnapshotcontents"),
    );
    let mut events = watcher(
        Api::<DynamicObject>::all_with(client.clone(), &snapshots),
        watcher::Config::default(),
    )
    .boxed();
    // A failing watch is said once, not at every retry (a case removes the CRDs for a while).
    let mut last_error = String::new();
    while let Some(ev) = events.next().await {
        let vs = match ev {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => o,
            Ok(_) => continue,
            Err(e) => {
                let e = e.to_string();
                if e != last_error {
                    eprintln!("CSI double: watch: {e} (retrying)");
                    last_error = e;
                }
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                continue;
            }
        };
        last_error.clear();
        let (ns, name) = (vs.namespace().unwrap_or_default(), vs.name_any());
        if vs.data["status"]["readyToUse"] == true || csi.stalls(&ns, &name) {
            continue;
        }
        let Some(claim) = vs.data["spec"]["source"]["persistentVolumeClaimName"].as_str() else {
            continue;
        };
        if let Err(e) = cut(&client, &contents, &snapshots, &vs, claim).await {
            eprintln!("CSI double: {ns}/{name}: {e}");
            continue;
        }
        lock(&csi.ready).push((ns, name, Instant::now()));
    }
}

/// Binds a content to `vs` and reports it ready to use with the size of `claim`.
async fn cut(
    client: &Client,
    contents: &Api<DynamicObject>,
    snapshots: &ApiResource,
    vs: &DynamicObject,
    claim: &str,
) -> Result<(), kube::Error> {
    let ns = vs.namespace().unwrap_or_default();
    let uid = vs.uid().unwrap_or_default();
    let content_name = format!("snapcontent-{uid}");
    let content: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotContent",
        "metadata": {"name": content_name},
        "spec": {
            "deletionPolicy": "Delete",
            "driver": DRIVER,
            "source": {"snapshotHandle": format!("double-{uid}")},
            "volumeSnapshotRef": {"name": vs.name_any(), "namespace": ns, "uid": uid},
        },
    }))
    .expect("a VolumeSnapshotContent");
    match contents.create(&PostParams::default(), &content).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e),
    }
    let pvc = Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(client.clone(), &ns)
        .get(claim)
        .await?;
    let size = pvc
        .spec
        .and_then(|s| s.resources?.requests?.get("storage").map(|q| q.0.clone()))
        .unwrap_or_else(|| "0".into());
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    Api::<DynamicObject>::namespaced_with(client.clone(), &ns, snapshots)
        .patch_status(
            &vs.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "boundVolumeSnapshotContentName": content_name,
                "creationTime": now,
                "readyToUse": true,
                "restoreSize": size,
            }})),
        )
        .await?;
    Ok(())
}
