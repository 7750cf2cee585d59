//! The `kube-api-rewriter` binary's library: the sidecar API proxy, the webhook proxy and
//! monitoring, over the rewriting path of [`kube_api_rewriter_layer`] and the sans-I/O core
//! ([`kube_api_rewriter`]).
//!
//! * [`config`]: settings from the environment (the Go sidecar's names and defaults) or flags.
//! * [`upstream`]: the connection to kube-apiserver (kubeconfig or in-cluster) or to a webhook:
//!   its credentials, the HTTP/2 pool, watches on connections of their own, and the identity
//!   headers it sends ([`upstream::identity`]: `REMOTE_USER`, `REMOTE_GROUPS`, impersonation).
//! * [`stack`]: the request path shared by the API proxy and the webhook proxy, a tower stack of
//!   one layer per concern (routing, metrics, drain, body limits, identity, rewriting,
//!   deadlines) around the service that sends upstream.
//! * [`server`]: accepting connections: TLS, the connection cap ([`server::conns`]), the
//!   header-read and idle timeouts ([`server::idle`]), graceful shutdown.
//! * [`deadlines`]: every deadline, configurable or fixed.
//! * [`webhook`]: the webhook proxy's target and TLS listener.
//! * [`tls`]: server certificates that reload when their files change.
//! * [`metrics`], [`health`]: `/metrics`, `/healthz`, `/readyz`; [`metrics_auth`]: `MONITORING_AUTH` (TokenReview and SubjectAccessReview for `/metrics`); [`labels`]: bounded label values.
//! * [`rlimit`]: the open-file limit raised at start.
//! * [`shutdown`], [`app`]: signals and start-up.
//! * [`reload`]: `RULES_PATH` reloaded without a restart.

pub mod app;
pub mod config;
pub mod deadlines;
pub mod health;
pub mod labels;
pub mod metrics;
pub mod metrics_auth;
pub mod reload;
pub mod rlimit;
pub mod server;
pub mod shutdown;
pub mod stack;
pub mod tls;
pub mod upstream;
pub mod webhook;

pub use kube_api_rewriter_layer::{Body, BoxError};
