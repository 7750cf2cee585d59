//! Graceful shutdown: one trigger (SIGTERM, SIGINT or a call), many watchers.

use tokio::sync::watch;

/// Triggers shutdown.
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

/// Waits for SIGTERM or SIGINT and returns the signal's name.
pub async fn signal() -> std::io::Result<&'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}
