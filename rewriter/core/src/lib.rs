//! Rename Kubernetes API groups, kinds, resources, labels, annotations and finalizers on the way
//! to kube-apiserver, and restore them on the way back.
//!
//! This crate is the sans-I/O core: rules, paths, objects, patches and streams are plain
//! functions over bytes and values. It has no async runtime and no HTTP stack; the
//! `kube-api-rewriter` proxy, the webhook proxy and the tower layer wrap it.
//!
//! ```
//! use kube_api_rewriter::{Direction, Rules, path};
//! let rules = Rules::builtin_kubevirt();
//! let p = path::rewrite(&rules, Direction::Rename, "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/vm1").unwrap();
//! assert_eq!(p, "/apis/internal.virtualization.deckhouse.io/v1/namespaces/ns/internalvirtualizationvirtualmachines/vm1");
//! ```

#![warn(unreachable_pub)]

mod error;
mod json;
pub mod object;
pub mod openapi;
pub mod patch;
pub mod path;
pub mod proto;
mod route;
pub mod rules;
pub mod stream;

pub use error::{Error, JsonError, Result};
pub use route::{BodyMode, ProxyMode, RequestBody, ResponseBody, Route, is_json, status_json};
pub use rules::Rules;

/// Which way names go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Original → renamed (client to kube-apiserver; webhook responses).
    Rename,
    /// Renamed → original (kube-apiserver to client; webhook requests).
    Restore,
}

impl Direction {
    /// The other direction.
    pub fn reverse(self) -> Self {
        match self {
            Direction::Rename => Direction::Restore,
            Direction::Restore => Direction::Rename,
        }
    }
}
