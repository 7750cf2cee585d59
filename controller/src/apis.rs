//! The APIs the controller uses, which of them it cannot run without, and which the cluster
//! serves now.
//!
//! Required: the controller's own CRDs (`controller/crds/`) and KubeVirt's (renamed by the
//! rewriter). Without one of them `/readyz` answers 503 and names it. Optional: the CSI
//! snapshot API (`snapshot.storage.k8s.io` VolumeSnapshots, installed with a snapshot
//! controller). Without it everything runs but snapshots, which wait with the condition reason
//! `SnapshotAPINotServed`, and carry on once the CRDs are applied:
//! [`follow`] asks discovery again every few seconds while something is missing.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{error, info, warn};

/// An API resource: `resource.group/version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiName {
    /// The API group (`""` for the core group).
    pub group: &'static str,
    /// The version.
    pub version: &'static str,
    /// The resource (plural, lower case).
    pub resource: &'static str,
}

impl ApiName {
    /// `group/version`, or `version` for the core group: the discovery path's tail.
    pub fn group_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl fmt::Display for ApiName {
    /// `volumesnapshots.snapshot.storage.k8s.io/v1`, as `kubectl api-resources` names them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}/{}", self.resource, self.version)
        } else {
            write!(f, "{}.{}/{}", self.resource, self.group, self.version)
        }
    }
}

/// Whether the controller can run without an API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Not ready without it.
    Required,
    /// Runs without it; what waits meanwhile.
    Optional {
        /// What does not work until it is served, for the log.
        without: &'static str,
    },
}

/// An API the controller uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsedApi {
    /// Which.
    pub name: ApiName,
    /// Whether the controller can run without it.
    pub need: Need,
    /// What installs it, for people.
    pub from: &'static str,
}

/// `snapshot.storage.k8s.io/v1` VolumeSnapshots, which disk snapshots are taken as.
pub const VOLUME_SNAPSHOTS: ApiName = ApiName {
    group: "snapshot.storage.k8s.io",
    version: "v1",
    resource: "volumesnapshots",
};

const OWN: &str = "the controller's CRDs (controller/crds)";
const KUBEVIRT: &str = "KubeVirt's CRDs (stored renamed, served through the rewriter)";

const fn own(resource: &'static str) -> UsedApi {
    UsedApi {
        name: ApiName {
            group: crate::resources::GROUP,
            version: crate::resources::VERSION,
            resource,
        },
        need: Need::Required,
        from: OWN,
    }
}

const fn kubevirt(resource: &'static str) -> UsedApi {
    UsedApi {
        name: ApiName {
            group: "kubevirt.io",
            version: "v1",
            resource,
        },
        need: Need::Required,
        from: KUBEVIRT,
    }
}

/// Every API the controller uses beyond the core group, in the order they are reported.
pub const USED: &[UsedApi] = &[
    own("virtualmachines"),
    own("virtualmachineoperations"),
    own("virtualmachineclasses"),
    own("virtualdisks"),
    own("virtualimages"),
    own("virtualmachinepools"),
    own("virtualdisksnapshots"),
    own("virtualmachinesnapshots"),
    own("virtualmachineblockdeviceattachments"),
    kubevirt("virtualmachines"),
    kubevirt("virtualmachineinstances"),
    kubevirt("virtualmachineinstancemigrations"),
    UsedApi {
        name: VOLUME_SNAPSHOTS,
        need: Need::Optional {
            without: "VirtualDiskSnapshots and VirtualMachineSnapshots wait until it is",
        },
        from: "the CSI snapshot CRDs (kubernetes-csi/external-snapshotter)",
    },
];

/// What the controller knows of [`USED`]: for each, served or not, or not asked yet.
#[derive(Debug)]
pub struct Served {
    state: watch::Sender<Vec<Option<bool>>>,
}

impl Default for Served {
    fn default() -> Self {
        Served {
            state: watch::Sender::new(vec![None; USED.len()]),
        }
    }
}

impl Served {
    /// Whether `api` was served when discovery was last asked.
    pub fn is_served(&self, api: ApiName) -> bool {
        let state = self.state.borrow();
        USED.iter()
            .position(|u| u.name == api)
            .is_some_and(|i| state[i] == Some(true))
    }

    /// Why the controller cannot run yet, when it cannot: the required APIs that are not
    /// served, or that discovery was not asked yet.
    pub fn blocking(&self) -> Option<String> {
        let state = self.state.borrow();
        let required = || {
            USED.iter()
                .zip(state.iter())
                .filter(|(u, _)| u.need == Need::Required)
        };
        if required().any(|(_, s)| s.is_none()) {
            return Some("the served APIs were not discovered yet".to_owned());
        }
        let missing: Vec<String> = required()
            .filter(|(_, s)| **s == Some(false))
            .map(|(u, _)| format!("{} ({})", u.name, u.from))
            .collect();
        (!missing.is_empty()).then(|| format!("required APIs not served: {}", missing.join(", ")))
    }

    /// Each API of [`USED`] with whether it is served (`None`: not asked yet).
    pub fn rows(&self) -> Vec<(ApiName, Option<bool>)> {
        let state = self.state.borrow();
        USED.iter().map(|u| u.name).zip(state.iter().copied()).collect()
    }

    /// Waits until `api` is served (`served`) or known not to be (`!served`).
    pub async fn wait_until(&self, api: ApiName, served: bool) {
        let Some(i) = USED.iter().position(|u| u.name == api) else {
            return std::future::pending().await;
        };
        let mut rx = self.state.subscribe();
        // `wait_for` fails only when the sender is gone, and `self` holds it.
        let _ = rx.wait_for(|s| s[i] == Some(served)).await;
    }

    /// The items of the streams `open` makes, each run while `api` is served: one is opened
    /// when it is, and ended when it no longer is (and opened again when it is again).
    pub fn while_served<S>(
        self: std::sync::Arc<Self>,
        api: ApiName,
        open: impl Fn() -> S + Send + 'static,
    ) -> impl futures::Stream<Item = S::Item> + Send
    where
        S: futures::Stream + Send + 'static,
    {
        use futures::StreamExt as _;
        futures::stream::unfold(self, move |served| async move {
            served.wait_until(api, true).await;
            Some((served.clone(), served))
        })
        .flat_map(move |served| open().take_until(async move { served.wait_until(api, false).await }))
    }

    /// Records that `api` (one of [`USED`]) is `served` or not, as discovery would.
    #[cfg(test)]
    pub(crate) fn record(&self, api: ApiName, served: bool) {
        if let Some(i) = USED.iter().position(|u| u.name == api) {
            self.set(i, served);
        }
    }

    /// Records what discovery said of `USED[i]`; the previous value.
    #[cfg(test)]
    fn set(&self, i: usize, served: bool) -> Option<bool> {
        self.set_all(&[(i, served)])[0]
    }

    /// Records what discovery said of each `USED[i]` at once; the previous values.
    fn set_all(&self, found: &[(usize, bool)]) -> Vec<Option<bool>> {
        let mut old = Vec::with_capacity(found.len());
        self.state.send_if_modified(|s| {
            for &(i, served) in found {
                old.push(s[i]);
                s[i] = Some(served);
            }
            old.iter().zip(found).any(|(o, (_, n))| *o != Some(*n))
        });
        old
    }
}

/// How often discovery is asked while an API is missing, and when all are served.
#[derive(Debug, Clone, Copy)]
pub struct Intervals {
    /// While some API of [`USED`] is not served.
    pub missing: Duration,
    /// While all are.
    pub complete: Duration,
}

impl Default for Intervals {
    fn default() -> Self {
        Intervals {
            missing: Duration::from_secs(5),
            complete: Duration::from_secs(30),
        }
    }
}

/// Asks discovery which of [`USED`] `client` serves, records it in `served` and logs every
/// change (a missing API once, when it is found missing), then asks again; until dropped.
pub async fn follow(client: kube::Client, served: std::sync::Arc<Served>, every: Intervals) {
    loop {
        let complete = check(&client, &served).await;
        let pause = if complete { every.complete } else { every.missing };
        tokio::time::sleep(pause).await;
    }
}

/// One round of [`follow`]: whether every API is served.
async fn check(client: &kube::Client, served: &Served) -> bool {
    let mut by_gv: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, u) in USED.iter().enumerate() {
        by_gv.entry(u.name.group_version()).or_default().push(i);
    }
    let mut complete = true;
    // Recorded together once every group was asked, so that no one sees a round half done.
    let mut found = Vec::new();
    for (gv, apis) in by_gv {
        let resources = match client.list_api_group_resources(&gv).await {
            Ok(list) => list.resources.into_iter().map(|r| r.name).collect::<Vec<_>>(),
            // The group/version is not served at all.
            Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
            Err(e) => {
                warn!(group_version = %gv, error = %e, "API discovery failed; asking again");
                complete = false;
                continue;
            }
        };
        for i in apis {
            let now = resources.iter().any(|r| r == USED[i].name.resource);
            complete &= now;
            found.push((i, now));
        }
    }
    for ((i, now), before) in found.iter().zip(served.set_all(&found)) {
        report(&USED[*i], before, *now);
    }
    complete
}

/// Logs what changed of `u`: served or not `now`, `before` (`None`: first look).
fn report(u: &UsedApi, before: Option<bool>, now: bool) {
    let ApiName {
        group,
        version,
        resource,
    } = u.name;
    match (before, now, u.need) {
        (Some(true), true, _) | (Some(false), false, _) | (None, true, _) => {}
        (Some(false), true, _) => info!(group, version, resource, "API served now"),
        (_, false, Need::Required) => error!(
            group,
            version,
            resource,
            from = u.from,
            "required API not served: not ready until it is"
        ),
        (_, false, Need::Optional { without }) => warn!(
            group,
            version,
            resource,
            from = u.from,
            "optional API not served: {without}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_as_kubectl_writes_them() {
        assert_eq!(
            VOLUME_SNAPSHOTS.to_string(),
            "volumesnapshots.snapshot.storage.k8s.io/v1"
        );
        assert_eq!(VOLUME_SNAPSHOTS.group_version(), "snapshot.storage.k8s.io/v1");
        let pods = ApiName {
            group: "",
            version: "v1",
            resource: "pods",
        };
        assert_eq!(
            (pods.to_string(), pods.group_version()),
            ("pods/v1".into(), "v1".into())
        );
    }

    #[test]
    fn a_missing_required_api_blocks_and_a_missing_optional_one_does_not() {
        let served = Served::default();
        assert_eq!(
            served.blocking().as_deref(),
            Some("the served APIs were not discovered yet")
        );
        for (i, u) in USED.iter().enumerate() {
            served.set(i, u.need == Need::Required);
        }
        assert_eq!(served.blocking(), None);
        assert!(!served.is_served(VOLUME_SNAPSHOTS));
        let vmi = USED
            .iter()
            .position(|u| u.name.resource == "virtualmachineinstances")
            .expect("listed");
        assert_eq!(served.set(vmi, false), Some(true));
        let why = served.blocking().expect("blocked");
        assert!(
            why.contains("virtualmachineinstances.kubevirt.io/v1 (KubeVirt's CRDs"),
            "{why}"
        );
        let rows = served.rows();
        assert_eq!(rows.len(), USED.len());
        assert!(rows.contains(&(VOLUME_SNAPSHOTS, Some(false))));
    }

    #[tokio::test]
    async fn a_stream_runs_while_its_api_is_served() {
        use futures::StreamExt as _;
        let served = std::sync::Arc::new(Served::default());
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
        let rx = std::sync::Arc::new(tokio::sync::Mutex::new(rx));
        let opened = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let items = served.clone().while_served(VOLUME_SNAPSHOTS, {
            let (rx, opened) = (rx.clone(), opened.clone());
            move || {
                opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let rx = rx.clone();
                futures::stream::unfold(rx, |rx| async move {
                    let item = rx.lock().await.recv().await?;
                    Some((item, rx))
                })
            }
        });
        let mut items = Box::pin(items);
        tx.send(1).expect("sent");
        assert!(
            tokio::time::timeout(Duration::from_millis(200), items.next())
                .await
                .is_err(),
            "read before the API was served"
        );
        served.record(VOLUME_SNAPSHOTS, true);
        assert_eq!(
            tokio::time::timeout(Duration::from_millis(200), items.next())
                .await
                .expect("in time"),
            Some(1)
        );
        served.record(VOLUME_SNAPSHOTS, false);
        tx.send(2).expect("sent");
        assert!(
            tokio::time::timeout(Duration::from_millis(200), items.next())
                .await
                .is_err(),
            "read while not served"
        );
        served.record(VOLUME_SNAPSHOTS, true);
        assert_eq!(
            tokio::time::timeout(Duration::from_millis(200), items.next())
                .await
                .expect("in time"),
            Some(2)
        );
        assert_eq!(opened.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn waiting_ends_when_the_api_is_served_and_when_it_is_gone() {
        let served = std::sync::Arc::new(Served::default());
        let vs = USED
            .iter()
            .position(|u| u.name == VOLUME_SNAPSHOTS)
            .expect("listed");
        served.set(vs, false);
        let waiter = tokio::spawn({
            let served = served.clone();
            async move { served.wait_until(VOLUME_SNAPSHOTS, true).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        assert_eq!(served.set(vs, true), Some(false));
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("joined");
        let gone = tokio::spawn({
            let served = served.clone();
            async move { served.wait_until(VOLUME_SNAPSHOTS, false).await }
        });
        tokio::task::yield_now().await;
        assert!(!gone.is_finished());
        served.set(vs, false);
        tokio::time::timeout(Duration::from_secs(5), gone)
            .await
            .expect("woken")
            .expect("joined");
    }
}
