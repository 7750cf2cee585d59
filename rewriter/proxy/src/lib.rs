//! The I/O side of kube-api-rewriter: the sidecar API proxy, the webhook proxy, monitoring and
//! the tower layer, all over the sans-I/O core ([`kube_api_rewriter`]).
//!
//! * [`config`]: settings from the environment (the Go sidecar's names and defaults) or flags.
//! * [`upstream`]: the connection to kube-apiserver (kubeconfig or in-cluster) or to a webhook.
//! * [`proxy`]: the request handler shared by the API proxy and the webhook proxy.
//! * [`webhook`]: the webhook proxy's target and TLS listener.
//! * [`tls`]: server certificates that reload when their files change.
//! * [`metrics`], [`health`]: `/metrics`, `/healthz`, `/readyz`.
//! * [`layer`]: the same rewriting as a `tower` layer for an in-process `kube::Client`.
//! * [`shutdown`], [`server`], [`app`]: signals, accept loops and start-up.

pub mod app;
pub mod body;
pub mod config;
pub mod health;
mod http_util;
pub mod layer;
pub mod metrics;
pub mod proxy;
mod response;
pub mod server;
pub mod shutdown;
pub mod tls;
pub mod upstream;
pub mod webhook;

pub use body::{Body, BoxError};
