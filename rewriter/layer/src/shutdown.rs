//! Graceful shutdown: one trigger, many watchers. Watch streams end cleanly at the next event
//! boundary once it fires, so clients re-watch instead of seeing a cut event.

use tokio::sync::watch;

/// Triggers shutdown.
///
/// ```
/// let shutdown = kube_api_rewriter_layer::Shutdown::new();
/// let watch = shutdown.watch();
/// assert!(!watch.is_cancelled());
/// shutdown.trigger();
/// assert!(watch.is_cancelled());
/// ```
#[derive(Debug, Clone)]
pub struct Shutdown {
    tx: watch::Sender<bool>,
}

/// Observes shutdown.
#[derive(Debug, Clone)]
pub struct Watch {
    rx: Option<watch::Receiver<bool>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A shutdown that has not been triggered.
    pub fn new() -> Self {
        Self {
            tx: watch::Sender::new(false),
        }
    }

    /// A watcher.
    pub fn watch(&self) -> Watch {
        Watch {
            rx: Some(self.tx.subscribe()),
        }
    }

    /// Starts shutting down (idempotent).
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }
}

impl Watch {
    /// A watcher that never fires (for embedding without a shutdown).
    pub fn never() -> Watch {
        Watch { rx: None }
    }

    /// True once shutdown was triggered.
    pub fn is_cancelled(&self) -> bool {
        self.rx.as_ref().is_some_and(|rx| *rx.borrow())
    }

    /// Completes when shutdown is triggered (or the trigger is gone).
    pub async fn cancelled(self) {
        match self.rx {
            Some(mut rx) => {
                let _ = rx.wait_for(|v| *v).await;
            }
            None => std::future::pending().await,
        }
    }
}
