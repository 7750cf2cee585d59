//! Graceful shutdown: one trigger ([`Shutdown`]), many observers ([`ShutdownSignal`]). Watch
//! streams end cleanly at the next event boundary once it fires, so clients re-watch instead of
//! seeing a cut event.

use tokio::sync::watch;

/// Triggers shutdown.
///
/// ```
/// let shutdown = kube_api_rewriter_layer::Shutdown::new();
/// let signal = shutdown.signal();
/// assert!(!signal.is_cancelled());
/// shutdown.trigger();
/// assert!(signal.is_cancelled());
/// ```
#[derive(Debug, Clone)]
pub struct Shutdown {
    tx: watch::Sender<bool>,
}

/// Observes a [`Shutdown`]: whether it has started, and a future that completes when it does.
#[derive(Debug, Clone)]
pub struct ShutdownSignal {
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

    /// An observer of this shutdown.
    pub fn signal(&self) -> ShutdownSignal {
        ShutdownSignal {
            rx: Some(self.tx.subscribe()),
        }
    }

    /// Starts shutting down (idempotent).
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }
}

impl ShutdownSignal {
    /// A signal that never fires (for embedding without a shutdown).
    pub fn never() -> ShutdownSignal {
        ShutdownSignal { rx: None }
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
