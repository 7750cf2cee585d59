//! The `kube-api-rewriter` binary's library: the sidecar API proxy, the webhook proxy and
//! monitoring, over the rewriting path of [`kube_api_rewriter_layer`] and the sans-I/O core
//! ([`kube_api_rewriter`]).
//!
//! * [`config`]: settings from the environment (the Go sidecar's names and defaults) or flags.
//! * [`upstream`]: the connection to kube-apiserver (kubeconfig or in-cluster) or to a webhook:
//!   its credentials, the HTTP/2 pool, watches on connections of their own, and the identity
//!   headers it sends ([`upstream::identity`]: `REMOTE_USER`, `REMOTE_GROUPS`, impersonation).
//! * [`proxy`]: the request handler shared by the API proxy and the webhook proxy.
//! * [`webhook`]: the webhook proxy's target and TLS listener.
//! * [`tls`]: server certificates that reload when their files change.
//! * [`metrics`], [`health`]: `/metrics`, `/healthz`, `/readyz`; [`metrics_auth`]: `MONITORING_AUTH` (TokenReview and SubjectAccessReview for `/metrics`); [`labels`]: bounded label values.
//! * [`rlimit`]: the open-file limit raised at start; [`idle`]: the idle timeout of upgraded
//!   connections.
//! * [`shutdown`], [`server`], [`app`]: signals, accept loops and start-up; [`conns`]: the
//!   connection cap of a listener.
//! * [`reload`]: `RULES_PATH` reloaded without a restart.

pub mod app;
pub mod config;
pub mod conns;
pub mod health;
pub mod idle;
pub mod labels;
pub mod metrics;
pub mod metrics_auth;
pub mod proxy;
pub mod reload;
pub mod rlimit;
pub mod server;
pub mod shutdown;
pub mod tls;
pub mod upstream;
pub mod webhook;

pub use kube_api_rewriter_layer::{Body, BoxError};
