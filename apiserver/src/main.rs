//! The `virtualization-api` binary: flags, logging, signals.

use anyhow::Context as _;
use clap::Parser as _;
use virtualization_api::flags::Flags;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::info!("signal received");
    };
    virtualization_api::run(flags, shutdown)
        .await
        .context("virtualization-api")
}
