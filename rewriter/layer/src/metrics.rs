//! The metrics hook: what the rewriting path reports, for whoever keeps the metrics (the
//! sidecar's Prometheus registry; nothing by default in the layer).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kube_api_rewriter::Route;

/// Where body bytes were counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flow {
    /// The request body as the client sent it.
    FromClient,
    /// The request body as sent upstream.
    ToTarget,
    /// The response body as upstream sent it.
    FromTarget,
    /// The response body as sent to the client.
    ToClient,
}

/// Whether a body is rewritten or passed through untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Rewritten.
    Rewrite,
    /// Passed through byte for byte.
    Pass,
}

impl Decision {
    /// `rewrite` or `pass`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Rewrite => "rewrite",
            Decision::Pass => "pass",
        }
    }
}

/// Which body a rewrite was of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The request body (the client's side).
    Client,
    /// The response body (the target's side).
    Target,
}

/// Adds a number of bytes to a counter; made once per body, called once per frame.
pub type ByteCounter = Arc<dyn Fn(u64) + Send + Sync>;

/// Receives what the rewriting path measures. Every method has an empty default.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use kube_api_rewriter_layer::{ByteCounter, Decision, Flow, Observe, RewriteLayer};
/// use kube_api_rewriter::Route;
///
/// #[derive(Debug, Default)]
/// struct BytesToClient(Arc<AtomicU64>);
///
/// impl Observe for BytesToClient {
///     fn byte_counter(&self, _: &Route, flow: Flow, _: Decision) -> Option<ByteCounter> {
///         let total = Arc::clone(&self.0);
///         (flow == Flow::ToClient).then(|| {
///             Arc::new(move |n| {
///                 total.fetch_add(n, Ordering::Relaxed);
///             }) as ByteCounter
///         })
///     }
/// }
///
/// let layer = RewriteLayer::kubevirt().with_metrics(Arc::new(BytesToClient::default()));
/// # let _ = layer;
/// ```
pub trait Observe: fmt::Debug + Send + Sync + 'static {
    /// A counter for the body bytes of one request that pass `flow`, or `None` not to count.
    fn byte_counter(&self, route: &Route, flow: Flow, decision: Decision) -> Option<ByteCounter> {
        let _ = (route, flow, decision);
        None
    }

    /// One body was rewritten (`ok`) or failed to be, taking `took` of CPU time.
    fn rewritten(&self, route: &Route, side: Side, ok: bool, took: Duration) {
        let _ = (route, side, ok, took);
    }

    /// A response body that should have been rewritten was not valid JSON (passed untouched).
    fn invalid_json(&self, route: &Route, status: u16) {
        let _ = (route, status);
    }
}

/// Measures nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMetrics;

impl Observe for NoMetrics {}
