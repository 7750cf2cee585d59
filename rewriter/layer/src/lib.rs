//! kube-api-rewriter as a [`tower`] layer: a Kubernetes client written for one set of API
//! group names talks to a cluster that stores them under others, in-process, with no sidecar.
//!
//! Requests are renamed (path, query, label and field selectors, bodies of every patch type),
//! `Accept` asks for JSON where bodies are rewritten, and responses, lists and watch streams are
//! restored as they stream, item by item, in memory bounded by the largest item. The rules are
//! the sans-I/O core's ([`kube_api_rewriter::Rules`]); the built-in set renames KubeVirt's groups
//! as Deckhouse's virtualization module does.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use kube_api_rewriter_layer::RewriteLayer;
//!
//! let config = kube::Config::infer().await?;
//! let client = kube::client::ClientBuilder::try_from(config)?
//!     .with_layer(&RewriteLayer::kubevirt())
//!     .build();
//! // `client` now reads and writes `kubevirt.io/v1` VirtualMachines that the cluster stores as
//! // `internal.virtualization.deckhouse.io/v1` InternalVirtualizationVirtualMachines.
//! # let _ = client; Ok(()) }
//! ```
//!
//! A request the rules cannot rewrite (a body over the size limit, a protobuf body of a
//! renamed kind, malformed JSON) is answered by the layer itself with a Kubernetes `Status`,
//! so a kube-rs caller sees `kube::Error::Api` with its code and message.
//!
//! Streams run as tasks on the caller's tokio runtime; a LIST body past 1 MiB goes on rewriting
//! on the runtime's blocking pool, at most one such LIST per core beyond the first at a time, so
//! the rewrite and the socket copies use different cores.
//!
//! The crate is also the HTTP half of the `kube-api-rewriter` sidecar: [`Exchange`] is the one
//! request-and-response rewrite path the sidecar and the layer share, [`Observe`] its metrics
//! hook. It never chooses a `k8s-openapi` version and carries no server.

#![warn(unreachable_pub)]

pub mod body;
mod ctx;
mod error;
mod exchange;
mod gzip;
pub mod headers;
mod layer;
mod metrics;
mod openapi;
mod recycle;
mod response;
mod shutdown;
mod stream;
mod yaml;

pub use body::{Body, BoxError};
pub use ctx::Limits;
pub use error::Error;
pub use exchange::Exchange;
pub use kube_api_rewriter::Rules;
pub use layer::{RewriteLayer, RewriteService};
pub use metrics::{ByteCounter, Decision, Flow, NoMetrics, Observe, Side};
pub use openapi::cached_documents;
pub use shutdown::{Shutdown, ShutdownSignal};
