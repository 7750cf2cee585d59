//! TEST DOUBLE of a kubelet: no kubelet can run containers here (no container runtime, no
//! cgroups, no images; kwok only simulates its Nodes' Pods), yet the controller's importer and
//! uploader Pods must really run for a test to see what they do. So this registers one Node,
//! keeps it alive as a kubelet would (Lease, Ready heartbeat) for the real kube-controller-manager
//! and kube-scheduler, and runs each Pod bound to it as a local process:
//!
//! - the first container's `command[0]`, by basename, is a local executable the test names;
//!   `command[1..]` and `args` are its arguments, `$(VAR)` expanded;
//! - its environment is only the Pod's (`env`, `envFrom`: values, Secrets, ConfigMaps, the
//!   downward API), plus `PATH` and `HOME`;
//! - its volumes are directories under the scratch directory (`pods/NS_NAME/volumes/VOL`), a
//!   PersistentVolumeClaim's the bound PersistentVolume's `hostPath` or `local` path, so the test
//!   sees what the Pod wrote into it;
//! - a process cannot see the container's paths, so each mount path (and the termination message
//!   path) is replaced in the arguments and env values by its local directory; each declared
//!   `containerPort` by a free loopback port ([`KubeletDouble::port`]);
//! - stdout and stderr go to `pods/NS_NAME/log` ([`KubeletDouble::logs`]);
//! - the Pod's status follows the process: Running, then Succeeded or Failed with the exit code
//!   and the termination message; `OnFailure` restarts a failed process up to 3 times;
//! - a Pod being deleted has its process killed and is then deleted with grace period 0.
//!
//! The other Nodes of the cluster (kwok's) are left alone.

mod node;
mod pod;
mod prepare;
mod rewrite;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};

/// A Pod by namespace and name.
type Key = (String, String);

/// A kubelet for one Node whose Pods run as local processes; cheap to clone.
#[derive(Clone)]
pub struct KubeletDouble {
    inner: Arc<Inner>,
}

/// What the double's tasks share.
struct Inner {
    client: Client,
    node: String,
    /// A command's basename → the local executable run for it.
    binaries: HashMap<String, PathBuf>,
    /// The scratch directory: `pods/NS_NAME/…`.
    dir: PathBuf,
    /// The Pods started, until they are gone.
    pods: Mutex<HashMap<Key, Entry>>,
}

/// A Pod the double has taken on.
struct Entry {
    uid: String,
    /// Declared containerPort → the loopback port given, once the process runs.
    ports: HashMap<u16, u16>,
    /// `true` (or dropped) to stop the Pod: kill its process and delete it.
    stop: tokio::sync::watch::Sender<bool>,
}

impl KubeletDouble {
    /// Registers Node `node` and runs Pods bound to it until the runtime stops.
    pub async fn start(
        client: Client,
        node: &str,
        labels: &[(&str, &str)],
        binaries: Vec<(String, PathBuf)>,
        dir: PathBuf,
    ) -> KubeletDouble {
        let mut tries = 0;
        while let Err(e) = node::register(&client, node, labels).await {
            tries += 1;
            assert!(tries < 60, "kubelet double: registering Node {node}: {e}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let inner = Arc::new(Inner {
            client: client.clone(),
            node: node.to_owned(),
            binaries: binaries.into_iter().collect(),
            dir,
            pods: Mutex::new(HashMap::new()),
        });
        tokio::spawn(node::heartbeat(client, node.to_owned()));
        tokio::spawn(watch_pods(inner.clone()));
        KubeletDouble { inner }
    }

    /// The loopback port a Pod's declared containerPort was given (None until the Pod runs).
    #[allow(dead_code, reason = "not every test crate including the double reads it")]
    pub fn port(&self, namespace: &str, pod: &str, container_port: u16) -> Option<u16> {
        let pods = self.inner.lock();
        let entry = pods.get(&(namespace.to_owned(), pod.to_owned()))?;
        entry.ports.get(&container_port).copied()
    }

    /// The log (stdout+stderr) of a Pod's container process so far.
    #[allow(dead_code, reason = "not every test crate including the double reads it")]
    pub fn logs(&self, namespace: &str, pod: &str) -> String {
        let path = self.inner.pod_dir(namespace, pod).join("log");
        std::fs::read(path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        self.pods.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `pods/NS_NAME` of the scratch directory.
    fn pod_dir(&self, namespace: &str, pod: &str) -> PathBuf {
        self.dir.join("pods").join(format!("{namespace}_{pod}"))
    }

    /// Records the ports a Pod's process was given, if it is still the Pod of `uid`.
    fn set_ports(&self, key: &Key, uid: &str, ports: HashMap<u16, u16>) {
        if let Some(e) = self.lock().get_mut(key).filter(|e| e.uid == uid) {
            e.ports = ports;
        }
    }
}

/// Watches the Pods bound to the Node: starts the new ones, stops the ones deleted.
async fn watch_pods(inner: Arc<Inner>) {
    let api = Api::<Pod>::all(inner.client.clone());
    let config = watcher::Config::default().fields(&format!("spec.nodeName={}", inner.node));
    let mut events = watcher(api, config).default_backoff().boxed();
    // The Pods of a relist, to stop the ones it no longer has.
    let mut listed: Option<HashSet<(Key, String)>> = None;
    while let Some(ev) = events.next().await {
        match ev {
            Ok(watcher::Event::Init) => listed = Some(HashSet::new()),
            Ok(watcher::Event::InitApply(p)) => {
                if let Some(l) = &mut listed {
                    l.insert((key(&p), p.uid().unwrap_or_default()));
                }
                on_pod(&inner, p);
            }
            Ok(watcher::Event::Apply(p)) => on_pod(&inner, p),
            Ok(watcher::Event::Delete(p)) => gone(&inner, &key(&p), &p.uid().unwrap_or_default()),
            Ok(watcher::Event::InitDone) => {
                let Some(l) = listed.take() else { continue };
                let stale: Vec<(Key, String)> = inner
                    .lock()
                    .iter()
                    .map(|(k, e)| (k.clone(), e.uid.clone()))
                    .filter(|ku| !l.contains(ku))
                    .collect();
                for (k, uid) in stale {
                    gone(&inner, &k, &uid);
                }
            }
            Err(e) => eprintln!("kubelet double: {}: watch Pods: {e}", inner.node),
        }
    }
}

fn key(p: &Pod) -> Key {
    (p.namespace().unwrap_or_default(), p.name_any())
}

/// A Pod added or changed.
fn on_pod(inner: &Arc<Inner>, p: Pod) {
    let k = key(&p);
    let uid = p.uid().unwrap_or_default();
    let deleting = p.metadata.deletion_timestamp.is_some();
    let mut pods = inner.lock();
    if let Some(e) = pods.get(&k) {
        if e.uid == uid {
            if deleting {
                e.stop.send_replace(true);
            }
            return;
        }
        // Recreated under the same name: the old one is gone.
        e.stop.send_replace(true);
        pods.remove(&k);
    }
    let phase = p
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default();
    if deleting {
        // Never started here (or already stopped): nothing runs, so it can go.
        tokio::spawn(pod::delete(inner.client.clone(), k, uid));
        return;
    }
    if matches!(phase, "Succeeded" | "Failed") {
        return;
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    pods.insert(
        k.clone(),
        Entry {
            uid,
            ports: HashMap::new(),
            stop,
        },
    );
    drop(pods);
    tokio::spawn(pod::run(inner.clone(), p, stopped));
}

/// A Pod deleted: its process is stopped.
fn gone(inner: &Inner, k: &Key, uid: &str) {
    let mut pods = inner.lock();
    if pods.get(k).is_some_and(|e| e.uid == uid)
        && let Some(e) = pods.remove(k)
    {
        e.stop.send_replace(true);
    }
}
