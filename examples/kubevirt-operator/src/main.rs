//! An operator written for upstream KubeVirt (`kubevirt.io/v1` VirtualMachine, `kubevirt.io/`
//! labels) that runs unchanged in a cluster where KubeVirt's groups are renamed: its
//! `kube::Client` carries [`RewriteLayer`], so every request is renamed and every response,
//! list and watch restored in-process.
//!
//! For each VirtualMachine it sets the label `kubevirt.io/example-reconciled: "true"` and the
//! annotation `example.kubevirt.io/run-strategy` (the VM's `spec.runStrategy`) with a merge
//! patch, and prints `reconciled API_VERSION KIND NAMESPACE/NAME` once per change.
//!
//! ```sh
//! KUBECONFIG=... cargo run --manifest-path examples/kubevirt-operator/Cargo.toml
//! ```

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube_api_rewriter_layer::RewriteLayer;
use serde_json::json;

const LABEL: &str = "kubevirt.io/example-reconciled";
const ANNOTATION: &str = "example.kubevirt.io/run-strategy";

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("patching {0}: {1}")]
    Patch(String, #[source] kube::Error),
}

struct Ctx {
    client: kube::Client,
    resource: ApiResource,
}

async fn reconcile(vm: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = vm.metadata.name.clone().unwrap_or_default();
    let ns = vm.metadata.namespace.clone().unwrap_or_default();
    let strategy = vm.data["spec"]["runStrategy"].as_str().unwrap_or("").to_owned();
    let labels = vm.metadata.labels.clone().unwrap_or_default();
    let annotations = vm.metadata.annotations.clone().unwrap_or_default();
    if labels.get(LABEL).map(String::as_str) == Some("true") && annotations.get(ANNOTATION) == Some(&strategy)
    {
        return Ok(Action::await_change());
    }
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, &ctx.resource);
    let patch = json!({"metadata": {"labels": {LABEL: "true"}, "annotations": {ANNOTATION: strategy}}});
    let done = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| Error::Patch(format!("{ns}/{name}"), e))?;
    let types = done.types.unwrap_or_default();
    println!("reconciled {} {} {ns}/{name}", types.api_version, types.kind);
    Ok(Action::await_change())
}

fn error_policy(_: Arc<DynamicObject>, e: &Error, _: Arc<Ctx>) -> Action {
    eprintln!("reconcile failed: {e}");
    Action::requeue(Duration::from_secs(1))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = kube::Config::infer().await?;
    let client = kube::client::ClientBuilder::try_from(config)?
        .with_layer(&RewriteLayer::kubevirt())
        .build();
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine"));
    let vms: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let ctx = Arc::new(Ctx {
        client,
        resource: resource.clone(),
    });
    println!("watching kubevirt.io/v1 VirtualMachines");
    Controller::new_with(vms, watcher::Config::default(), resource)
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
    Ok(())
}
