//! The kube-rs cases: a `kube::Client` with KubeVirt's original names, through the side's
//! sidecar. The answer's body is what the client decoded, as JSON.

use std::time::Duration;

use anyhow::Result;
use futures::{StreamExt as _, TryStreamExt as _};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::discovery::Discovery;
use kube::runtime::watcher;
use serde_json::{Value, json};

use crate::answer::{Answer, Side};
use crate::corpus::KubeRsCase;

pub async fn run(case: KubeRsCase, side: &Side) -> Result<Answer> {
    let config = kube::Config::new(side.proxy.url("").parse()?);
    let client = kube::Client::try_from(config)?;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine"),
        "virtualmachines",
    );
    let vms: Api<DynamicObject> = Api::namespaced_with(client.clone(), side.ns, &ar);
    let out: Result<Value, kube::Error> = match case {
        KubeRsCase::List => vms.list(&ListParams::default()).await.map(to_json),
        KubeRsCase::Get => vms.get("vm1").await.map(to_json),
        KubeRsCase::GetMissing => vms.get("nope").await.map(to_json),
        KubeRsCase::ListMetadata => vms.list_metadata(&ListParams::default()).await.map(to_json),
        KubeRsCase::Watcher => Ok(watch(vms).await),
        KubeRsCase::Apply => {
            let vm = json!({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                "metadata": {"name": "vm6", "labels": {"kubevirt.io/vm": "vm6"}},
                "spec": {"running": false, "template": {"spec": {"domain": {"devices": {}}}}},
            });
            let pp = PatchParams::apply("kube-rs-diff");
            vms.patch("vm6", &pp, &Patch::Apply(&vm)).await.map(to_json)
        }
        KubeRsCase::Discovery => discovery(client).await,
    };
    Ok(match out {
        Ok(v) => Answer {
            status: "ok".into(),
            body: serde_json::to_vec(&v)?,
            ..Answer::default()
        },
        Err(e) => Answer {
            status: "error".into(),
            body: e.to_string().into_bytes(),
            ..Answer::default()
        },
    })
}

fn to_json(v: impl serde::Serialize) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// The watcher's events until its initial list is complete (or 10 s): type and name each.
async fn watch(vms: Api<DynamicObject>) -> Value {
    let events = watcher(vms, watcher::Config::default())
        .map_ok(|e| match e {
            watcher::Event::Init => "Init".to_owned(),
            watcher::Event::InitApply(o) => format!("InitApply {}", o.metadata.name.unwrap_or_default()),
            watcher::Event::InitDone => "InitDone".to_owned(),
            watcher::Event::Apply(o) => format!("Apply {}", o.metadata.name.unwrap_or_default()),
            watcher::Event::Delete(o) => format!("Delete {}", o.metadata.name.unwrap_or_default()),
        })
        .map(|r| r.unwrap_or_else(|e| format!("error: {e}")));
    let mut seen = Vec::new();
    let mut events = std::pin::pin!(events);
    let deadline = tokio::time::sleep(Duration::from_secs(10));
    let mut deadline = std::pin::pin!(deadline);
    loop {
        tokio::select! {
            e = events.next() => match e {
                Some(e) => {
                    let done = e == "InitDone" || e.starts_with("error");
                    seen.push(e);
                    if done { break; }
                }
                None => break,
            },
            () = &mut deadline => { seen.push("timed out".into()); break; }
        }
    }
    json!(seen)
}

/// kube-rs discovery of KubeVirt's group: versions, kinds, plurals, scopes and verbs.
async fn discovery(client: kube::Client) -> Result<Value, kube::Error> {
    let d = Discovery::new(client).filter(&["kubevirt.io"]).run().await?;
    let mut groups = Vec::new();
    for g in d.groups() {
        let mut resources = Vec::new();
        for (ar, caps) in g.recommended_resources() {
            resources.push(json!({
                "gvk": format!("{}/{} {}", ar.group, ar.version, ar.kind),
                "plural": ar.plural,
                "scope": format!("{:?}", caps.scope),
                "verbs": caps.operations,
                "subresources": caps.subresources.iter().map(|(s, _)| s.plural.clone()).collect::<Vec<_>>(),
            }));
        }
        groups.push(
            json!({"name": g.name(), "versions": g.versions().collect::<Vec<_>>(), "resources": resources}),
        );
    }
    Ok(json!(groups))
}
