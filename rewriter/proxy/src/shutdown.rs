//! Graceful shutdown: SIGTERM or SIGINT triggers the [`Shutdown`]; every listener, poller and
//! stream observes it through a [`ShutdownSignal`].

pub use kube_api_rewriter_layer::{Shutdown, ShutdownSignal};

/// Waits for SIGTERM or SIGINT and returns the signal's name.
pub async fn terminate_signal() -> std::io::Result<&'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}
