//! A thin virtualization-controller: it reconciles the user-facing
//! `virtualization.deckhouse.io/v1alpha2` `VirtualMachine` and `VirtualMachineOperation` into
//! KubeVirt `kubevirt.io/v1` objects, and imports `VirtualImage`s and `VirtualDisk`s through
//! data Pods into DVCR and claims. KubeVirt's groups are renamed on the wire, either by a
//! `kube-api-rewriter` sidecar or by the rewriter's tower Layer inside the controller's own
//! `kube::Client` ([`RewriterMode`]). The controller itself only knows KubeVirt's original names.

pub mod apis;
pub mod client;
pub(crate) mod conditions;
pub mod datapod;
pub mod health;
pub mod kubevirt;
pub mod metrics;
mod quantity;
pub mod reconcile;
pub mod resources;
pub mod subresources;
pub mod webhook;

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
    /// The webhook's certificate or key cannot be used.
    #[error("TLS: {0}")]
    Tls(#[from] kube_api_rewriter_tls::Error),
    /// DVCR could not be reached or refused a request.
    #[error("DVCR: {0}")]
    Dvcr(#[from] virtualization_dvcr::Error),
}

/// The controller's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Installs ring as the process's TLS provider (the only one in the build), for a
/// `KUBECONFIG` that points at an `https` server. Installing twice is harmless.
pub fn install_crypto_provider() {
    kube_api_rewriter_tls::install_default_provider();
}

/// Where KubeVirt's groups are renamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RewriterMode {
    /// By a `kube-api-rewriter` sidecar: `KUBECONFIG` points at it.
    #[default]
    Sidecar,
    /// By the rewriter's Layer in the controller's own client: `KUBECONFIG` points at
    /// kube-apiserver.
    Embedded,
}

pub use client::client;
