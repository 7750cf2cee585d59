//! The `virtualization-controller` binary: flags, JSON logs, the probe and metrics listeners and
//! the controllers, until SIGTERM.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser;
use kube_api_rewriter_tls::{ALPN_HTTP1, Follow, ReloadingCert};
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;
use virtualization_controller::RewriterMode;
use virtualization_controller::datapod::DataSettings;
use virtualization_controller::health::{self, Endpoints};
use virtualization_controller::reconcile::{self, Context};
use virtualization_controller::webhook;

/// A thin virtualization-controller. By default it reaches the cluster through the
/// kube-api-rewriter sidecar: `KUBECONFIG` points at `http://127.0.0.1:23915` with no
/// credentials. With `--embedded-rewriter` it renames KubeVirt's groups itself, in its own
/// client, and `KUBECONFIG` (or the in-cluster config) points at kube-apiserver.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Listen address of `/healthz` and `/readyz`.
    #[arg(long, env = "HEALTH_PROBE_BIND_ADDRESS", default_value = ":8083")]
    health_probe_bind_address: String,
    /// Listen address of `/metrics`.
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = "127.0.0.1:8080")]
    metrics_bind_address: String,
    /// Listen address of the validating webhook (HTTPS).
    #[arg(long, env = "WEBHOOK_BIND_ADDRESS", default_value = ":9443")]
    webhook_bind_address: String,
    /// The webhook's certificate (PEM, reloaded when it changes); no webhook without it.
    #[arg(long, env = "WEBHOOK_CERT_FILE", requires = "webhook_key_file")]
    webhook_cert_file: Option<PathBuf>,
    /// The webhook certificate's key (PEM).
    #[arg(long, env = "WEBHOOK_KEY_FILE", requires = "webhook_cert_file")]
    webhook_key_file: Option<PathBuf>,
    /// Rename KubeVirt's groups in-process (the rewriter's Layer in the client) instead of
    /// relying on a sidecar.
    #[arg(long, env = "EMBEDDED_REWRITER")]
    embedded_rewriter: bool,
    /// The controller's namespace, where the DVCR and uploader Secrets are.
    #[arg(long, env = "POD_NAMESPACE", default_value = "d8-virtualization")]
    namespace: String,
    /// DVCR's `host:port`, as nodes and data Pods reach it; images cannot be imported without it.
    #[arg(long, env = "DVCR_ADDRESS")]
    dvcr_address: Option<String>,
    /// The Secret (in the controller's namespace) with DVCR's credentials (`.dockerconfigjson`)
    /// and CA (`ca.crt`).
    #[arg(long, env = "DVCR_SECRET", default_value = "dvcr-credentials")]
    dvcr_secret: String,
    /// The `kubernetes.io/tls` Secret (in the controller's namespace) the uploader serves with.
    #[arg(
        long,
        env = "UPLOADER_TLS_SECRET",
        default_value = "virtualization-uploader-tls"
    )]
    uploader_tls_secret: String,
    /// The image of the importer and uploader Pods.
    #[arg(long, env = "DATA_POD_IMAGE", default_value = "virtualization-dvcr:latest")]
    data_pod_image: String,
    /// The nodeSelector of the importer and uploader Pods: `key=value,key=value`.
    #[arg(long, env = "DATA_POD_NODE_SELECTOR", default_value = "", value_parser = parse_selector)]
    data_pod_node_selector: std::collections::BTreeMap<String, String>,
    /// How long a snapshot may take to become ready to use before it fails and a frozen guest
    /// is thawed: `90s`, `5m`, `1h`.
    #[arg(long, env = "SNAPSHOT_READY_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    snapshot_ready_timeout: std::time::Duration,
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
    let mode = if args.embedded_rewriter {
        RewriterMode::Embedded
    } else {
        RewriterMode::Sidecar
    };
    tracing::info!(server = %config.cluster_url, ?mode, "starting");
    let client = virtualization_controller::client(config, mode).context("kube client")?;
    let ctx = Context::with_settings(
        client,
        DataSettings {
            namespace: args.namespace.clone(),
            dvcr_address: args.dvcr_address.clone().filter(|a| !a.is_empty()),
            dvcr_secret: args.dvcr_secret.clone(),
            uploader_tls_secret: args.uploader_tls_secret.clone(),
            image: args.data_pod_image.clone(),
            node_selector: args.data_pod_node_selector.clone(),
        },
        args.snapshot_ready_timeout,
    );

    let webhook = match (&args.webhook_cert_file, &args.webhook_key_file) {
        (Some(cert), Some(key)) => {
            let addr = health::listen_addr(&args.webhook_bind_address).map_err(anyhow::Error::msg)?;
            let cert = ReloadingCert::load(cert, key)
                .map_err(virtualization_controller::Error::Tls)
                .context("webhook certificate")?;
            let reloader = cert
                .follow(Follow::files("webhook certificate"), std::future::pending())
                .map_err(virtualization_controller::Error::Tls)
                .context("webhook certificate")?;
            // TLS 1.2 and 1.3, HTTP/1.1, no client certificates (kube-apiserver calls webhooks
            // without one unless configured to).
            let tls = kube_api_rewriter_tls::server_config(cert, ALPN_HTTP1)
                .map_err(virtualization_controller::Error::Tls)
                .context("webhook TLS")?;
            let tls = Arc::new(tls);
            let listener = TcpListener::bind(addr)
                .await
                .with_context(|| format!("listening on {addr}"))?;
            tracing::info!(%addr, path = webhook::PATH, "validating webhook");
            vec![
                reloader,
                tokio::spawn(webhook::serve(listener, tls, ctx.client.clone())),
            ]
        }
        _ => {
            tracing::info!("no webhook certificate given: the validating webhook is off");
            Vec::new()
        }
    };
    let probes = tokio::spawn(health::serve(health, Endpoints::Probes, ctx.clone()));
    let metrics = tokio::spawn(health::serve(metrics, Endpoints::Metrics, ctx.clone()));
    reconcile::run(ctx).await;
    probes.abort();
    metrics.abort();
    webhook.iter().for_each(tokio::task::JoinHandle::abort);
    tracing::info!("stopped");
    Ok(())
}

/// `key=value,key=value` as a map; empty gives none.
fn parse_selector(s: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|kv| !kv.is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => Err(format!("{kv:?} is not key=value")),
        })
        .collect()
}

/// A whole number of seconds, minutes or hours (`90s`, `5m`, `1h`). Written here: the one
/// duration flag needs no crate, and Kubernetes users write durations this way.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let bad = || format!("{s:?} is not a duration such as 90s, 5m or 1h");
    let unit = s.chars().last().ok_or_else(bad)?;
    let n: u64 = s[..s.len() - unit.len_utf8()].parse().map_err(|_| bad())?;
    let secs = match unit {
        's' => n,
        'm' => n.checked_mul(60).ok_or_else(bad)?,
        'h' => n.checked_mul(3600).ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    Ok(std::time::Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(std::time::Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(std::time::Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(std::time::Duration::from_secs(3600)));
        for bad in ["", "5", "m", "-1s", "1.5m", "5d", "é"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
