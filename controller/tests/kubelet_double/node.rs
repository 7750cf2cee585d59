//! The double's Node: registered Ready, kept alive by a renewed Lease and a refreshed Ready
//! heartbeat, as kube-controller-manager's node lifecycle controller expects of a kubelet.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource as _};
use serde_json::{Value, json};

/// How often the Lease is renewed; the Ready heartbeat every second time.
const RENEW: Duration = Duration::from_secs(10);

/// The time now as the API's `Time`.
pub fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Creates Node `node` (or updates its labels) and sets its status Ready.
pub async fn register(client: &Client, node: &str, labels: &[(&str, &str)]) -> Result<(), kube::Error> {
    let nodes = Api::<Node>::all(client.clone());
    let mut all: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", node),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
    ]
    .into_iter()
    .chain(labels.iter().copied())
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    if nodes.get_opt(node).await?.is_some() {
        let patch = json!({"metadata": {"labels": all}});
        nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    } else {
        let n = Node {
            metadata: ObjectMeta {
                name: Some(node.to_owned()),
                labels: Some(std::mem::take(&mut all)),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        match nodes.create(&PostParams::default(), &n).await {
            Ok(_) => {}
            // Created meanwhile: the labels on the next registration.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    let since = now();
    nodes
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status(&since)})),
        )
        .await?;
    renew_lease(client, node).await
}

/// The Node's whole status, its conditions' transitions at `since`.
fn status(since: &str) -> Value {
    let mut s = json!({
        "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"},
        "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"},
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": "kubelet-double", "systemUUID": "kubelet-double", "bootID": "kubelet-double",
            "kernelVersion": "", "osImage": "kubelet double", "containerRuntimeVersion": "local-process://0",
            "kubeletVersion": "v1.33.0", "kubeProxyVersion": "", "operatingSystem": "linux",
            "architecture": "amd64",
        },
    });
    s["conditions"] = conditions(since);
    s
}

/// Ready True and no pressure, heartbeats now, transitions at `since`.
fn conditions(since: &str) -> Value {
    let beat = now();
    let c = |t: &str, status: &str, reason: &str| {
        json!({"type": t, "status": status, "reason": reason, "message": "kubelet double",
               "lastHeartbeatTime": beat, "lastTransitionTime": since})
    };
    json!([
        c("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        c("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        c("PIDPressure", "False", "KubeletHasSufficientPID"),
        c("Ready", "True", "KubeletReady"),
    ])
}

/// Creates or renews the Node's Lease in `kube-node-lease`.
async fn renew_lease(client: &Client, node: &str) -> Result<(), kube::Error> {
    let leases = Api::<Lease>::namespaced(client.clone(), "kube-node-lease");
    let spec = LeaseSpec {
        holder_identity: Some(node.to_owned()),
        lease_duration_seconds: Some(40),
        renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
        ..LeaseSpec::default()
    };
    if leases.get_opt(node).await?.is_some() {
        let patch = json!({"spec": spec});
        leases
            .patch(node, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        return Ok(());
    }
    let owner = Api::<Node>::all(client.clone()).get(node).await?;
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(node.to_owned()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".to_owned(),
                kind: "Node".to_owned(),
                name: node.to_owned(),
                uid: owner.meta().uid.clone().unwrap_or_default(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
    };
    match leases.create(&PostParams::default(), &lease).await {
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        r => r.map(drop),
    }
}

/// Renews the Lease every 10 s and the Ready heartbeat every 20 s, for ever.
pub async fn heartbeat(client: Client, node: String) {
    let nodes = Api::<Node>::all(client.clone());
    let since = now();
    let mut tick = tokio::time::interval(RENEW);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 0u64.. {
        tick.tick().await;
        if let Err(e) = renew_lease(&client, &node).await {
            eprintln!("kubelet double: {node}: lease: {e}");
        }
        if n % 2 == 1 {
            let patch = json!({"status": {"conditions": conditions(&since)}});
            if let Err(e) = nodes
                .patch_status(&node, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                eprintln!("kubelet double: {node}: status: {e}");
            }
        }
    }
}
