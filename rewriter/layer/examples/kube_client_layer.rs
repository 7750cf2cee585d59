//! A `kube::Client` that rewrites in-process: the application speaks `kubevirt.io`, the cluster
//! stores `internal.virtualization.deckhouse.io`, and no sidecar runs.
//!
//! ```sh
//! KUBECONFIG=... cargo run -p kube-api-rewriter-layer --example kube_client_layer
//! ```
//! Prints one line per VirtualMachine in `default`: `API_VERSION KIND NAMESPACE/NAME`.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::client::ClientBuilder;
use kube_api_rewriter_layer::RewriteLayer;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = kube::Config::infer().await?;
    let client = ClientBuilder::try_from(config)?
        .with_layer(&RewriteLayer::kubevirt())
        .build();
    let gvk = GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine");
    let vms: Api<DynamicObject> = Api::namespaced_with(client, "default", &ApiResource::from_gvk(&gvk));
    for vm in vms.list(&ListParams::default()).await? {
        let types = vm.types.unwrap_or_default();
        println!(
            "{} {} {}/{}",
            types.api_version,
            types.kind,
            vm.metadata.namespace.unwrap_or_default(),
            vm.metadata.name.unwrap_or_default()
        );
    }
    Ok(())
}
