//! A thin virtualization-controller: it reconciles the user-facing
//! `virtualization.deckhouse.io/v1alpha2` `VirtualMachine` and `VirtualMachineOperation` into
//! KubeVirt `kubevirt.io/v1` objects, through a `kube-api-rewriter` sidecar that renames
//! KubeVirt's groups on the wire. The controller itself only knows KubeVirt's original names.

pub mod conditions;
pub mod health;
pub mod kubevirt;
pub mod reconcile;
pub mod resources;

/// Everything that can go wrong in the controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the Kubernetes API failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// An object could not be converted to or from JSON.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// An object lacks something the controller needs (a name, a namespace, a uid).
    #[error("object is missing {0}")]
    Missing(&'static str),
}

/// The controller's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Installs ring as the process's TLS provider (the only one in the build), for a
/// `KUBECONFIG` that points at an `https` server. Installing twice is harmless.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
