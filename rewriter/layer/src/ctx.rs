//! What every part of the rewriting path reads about one request: its [`Limits`] and the
//! context of its response ([`Ctx`]). A leaf: it imports none of the modules that use it.

use std::sync::Arc;
use std::time::Duration;

use kube_api_rewriter::{Route, Rules};

use crate::metrics::{ByteCounter, Decision, Flow, Observe, Side};
use crate::shutdown::ShutdownSignal;

/// Limits of the rewriting path: the defaults, changed with the `with_*` setters.
///
/// ```
/// let limits = kube_api_rewriter_layer::Limits::default().with_max_request_body(64 << 10);
/// assert_eq!(limits.max_request_body, 64 << 10);
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Limits {
    /// Largest request body read (or streamed) for one request; larger ones get a 413 `Status`.
    pub max_request_body: usize,
    /// Largest single LIST item or WATCH event held while a stream is rewritten. A larger one
    /// ends the response: a watch with an `ERROR` event carrying a `Status`, a list (whose
    /// `200` head has left already) with a reset, so the client never takes it as complete.
    pub max_item: usize,
    /// Largest response read whole (single objects, tables, discovery documents), counted
    /// after gzip decoding: a larger one (or a gzip body inflating past it) gets a 502 `Status`.
    pub max_response: usize,
}

impl Default for Limits {
    /// 3 MiB request bodies (kube-apiserver's own limit); 64 MiB items (kube-apiserver stores
    /// objects of at most 1.5 MiB in etcd, and takes requests of at most 3 MiB); 256 MiB whole
    /// responses.
    fn default() -> Self {
        Self {
            max_request_body: 3 << 20,
            max_item: 64 << 20,
            max_response: 256 << 20,
        }
    }
}

impl Limits {
    /// Sets [`Limits::max_request_body`].
    pub fn with_max_request_body(mut self, bytes: usize) -> Self {
        self.max_request_body = bytes;
        self
    }

    /// Sets [`Limits::max_item`].
    pub fn with_max_item(mut self, bytes: usize) -> Self {
        self.max_item = bytes;
        self
    }

    /// Sets [`Limits::max_response`].
    pub fn with_max_response(mut self, bytes: usize) -> Self {
        self.max_response = bytes;
        self
    }
}

/// What the response path needs to know about a request.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub(crate) rules: Arc<Rules>,
    pub(crate) route: Arc<Route>,
    /// The client accepts gzip.
    pub(crate) client_gzip: bool,
    pub(crate) limits: Limits,
    pub(crate) shutdown: ShutdownSignal,
    pub(crate) observe: Arc<dyn Observe>,
}

impl Ctx {
    pub(crate) fn counter(&self, flow: Flow, decision: Decision) -> Option<ByteCounter> {
        self.observe.byte_counter(&self.route, flow, decision)
    }

    /// Records one response-body rewrite.
    pub(crate) fn rewrote(&self, ok: bool, took: Duration) {
        self.observe.rewritten(&self.route, Side::Target, ok, took);
    }

    pub(crate) fn invalid_json(&self, status: u16) {
        self.observe.invalid_json(&self.route, status);
    }
}
