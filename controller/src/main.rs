//! The `virtualization-controller` binary: flags, JSON logs, the probe and metrics listeners and
//! the controllers, until SIGTERM.

use anyhow::Context as _;
use clap::Parser;
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;
use virtualization_controller::health::{self, Endpoints};
use virtualization_controller::reconcile::{self, Context};

/// A thin virtualization-controller. It reaches the cluster through the kube-api-rewriter
/// sidecar: `KUBECONFIG` points at `http://127.0.0.1:23915` with no credentials.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Listen address of `/healthz` and `/readyz`.
    #[arg(long, env = "HEALTH_PROBE_BIND_ADDRESS", default_value = ":8083")]
    health_probe_bind_address: String,
    /// Listen address of `/metrics`.
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = "127.0.0.1:8080")]
    metrics_bind_address: String,
    /// Log filter (`info`, `debug`, `virtualization_controller=debug,kube=info`, ...).
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    log_level: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(EnvFilter::try_new(&args.log_level).context("--log-level")?)
        .with_current_span(true)
        .init();
    virtualization_controller::install_crypto_provider();

    let health = health::listen_addr(&args.health_probe_bind_address).map_err(anyhow::Error::msg)?;
    let metrics = health::listen_addr(&args.metrics_bind_address).map_err(anyhow::Error::msg)?;
    let health = TcpListener::bind(health)
        .await
        .with_context(|| format!("listening on {health}"))?;
    let metrics = TcpListener::bind(metrics)
        .await
        .with_context(|| format!("listening on {metrics}"))?;

    let mut config = kube::Config::infer().await.context("kubeconfig")?;
    // kube retries 503s itself, backing off up to ~10 s between tries; while kube-apiserver
    // restarts that idles the watches long after it is back. The watches' own backoff
    // (`WatchBackoff`, at most 2 s) and the error policy retry instead.
    config.default_retry = false;
    tracing::info!(server = %config.cluster_url, "starting");
    let client = kube::Client::try_from(config).context("kube client")?;
    let ctx = Context::new(client);

    let probes = tokio::spawn(health::serve(health, Endpoints::Probes, ctx.clone()));
    let metrics = tokio::spawn(health::serve(metrics, Endpoints::Metrics, ctx.clone()));
    reconcile::run(ctx).await;
    probes.abort();
    metrics.abort();
    tracing::info!("stopped");
    Ok(())
}
