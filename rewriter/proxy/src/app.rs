//! Start-up: rules, upstream, listeners, readiness, signals; then a graceful stop.

use std::sync::Arc;

use kube_api_rewriter::ProxyMode;

use crate::config::Config;
use crate::health::{self, Readiness};
use crate::metrics::Metrics;
use crate::metrics_auth::MonitoringAuth;
use crate::server::{self, ServeOptions};
use crate::shutdown::{self, Shutdown};
use crate::stack::{self, ProxySettings};
use crate::upstream::Upstream;
use crate::webhook;

/// A start-up failure: one line for the operator.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StartError(pub String);

fn start_err(e: impl std::fmt::Display) -> StartError {
    StartError(e.to_string())
}

/// Runs the proxies until SIGTERM or SIGINT, then stops gracefully.
pub async fn run(cfg: Config) -> Result<(), StartError> {
    let shutdown = Shutdown::new();
    let signals = shutdown.clone();
    let mut sig = tokio::spawn(async move {
        match shutdown::terminate_signal().await {
            Ok(name) => tracing::info!(signal = name, "shutting down"),
            Err(e) => tracing::error!(error = %e, "cannot listen for signals"),
        }
        signals.trigger();
    });
    let res = start(cfg, &shutdown).await;
    if res.is_err() {
        shutdown.trigger();
    }
    sig.abort();
    let _ = (&mut sig).await;
    res
}

/// Warnings about settings that work but deserve attention.
fn warn_settings(cfg: &Config) {
    if let Some(a) = cfg.client_proxy
        && !a.ip().is_loopback()
    {
        tracing::warn!(address = %a, "the API proxy listens on a non-loopback address: whoever reaches it uses the proxy's credentials");
    }
    if let Some(ip) = &cfg.pod_ip {
        tracing::info!(pod_ip = %ip, "POD_IP is set; this proxy does not need it (listen addresses come from their own settings)");
    }
    if let Some(p) = &cfg.pprof_bind_address {
        tracing::warn!(address = %p, "PPROF_BIND_ADDRESS is set: there is no pprof in this build (Go-only); nothing listens there. Profile with perf or tokio-console instead");
    }
}

/// Starts everything and returns when all listeners have stopped after `shutdown` fired.
pub async fn start(cfg: Config, shutdown: &Shutdown) -> Result<(), StartError> {
    crate::tls::install_default_provider();
    match crate::rlimit::raise_nofile() {
        Ok((soft, _)) => tracing::debug!(open_files = ?soft, "RLIMIT_NOFILE soft limit at the hard limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the RLIMIT_NOFILE soft limit"),
    }
    warn_settings(&cfg);
    let rules = crate::reload::RulesHandle::load(cfg.rules_path.as_deref()).map_err(StartError)?;
    let metrics = Metrics::new();
    rules.set_metrics(Arc::clone(&metrics));
    let d = cfg.deadlines;
    rules.spawn_watcher(&d, shutdown.signal()).map_err(StartError)?;
    let mut tasks = Vec::new();
    let opts = |name| ServeOptions {
        name,
        max_connections: cfg.max_connections,
        shutdown_deadline: d.shutdown,
        deadlines: d,
    };

    let api_upstream = match (cfg.client_proxy, &cfg.monitoring_auth) {
        (None, None) => None,
        _ => Some(Arc::new(
            Upstream::kube(&cfg.upstream, &d)
                .await
                .map_err(start_err)?
                .with_dropped_client_impersonation(cfg.drop_impersonation_headers),
        )),
    };
    let readiness = Readiness::new(d.readyz_stale);
    readiness.set_rules(Arc::clone(&rules));

    // Bind everything before serving anything, so a busy port fails start-up as a whole.
    let api_listener = match cfg.client_proxy {
        Some(addr) => Some(
            server::bind(addr, "CLIENT_PROXY_ADDRESS/PORT")
                .await
                .map_err(start_err)?,
        ),
        None => None,
    };
    let webhook = match &cfg.webhook {
        Some(w) => {
            let up =
                Arc::new(webhook::upstream(w, &d).map_err(|e| StartError(format!("WEBHOOK_ADDRESS: {e}")))?);
            let acc = webhook::acceptor(w, shutdown.signal())
                .map_err(|e| StartError(format!("webhook certificate: {e}")))?;
            let l = server::bind(w.listen, "WEBHOOK_LISTEN_ADDRESS/PORT")
                .await
                .map_err(start_err)?;
            Some((up, acc.map(|(a, _)| a), l))
        }
        None => None,
    };
    let monitoring = match cfg.monitoring {
        Some(addr) => Some(
            server::bind(addr, "MONITORING_BIND_ADDRESS")
                .await
                .map_err(start_err)?,
        ),
        None => None,
    };

    let monitoring_auth = match (&cfg.monitoring_auth, &api_upstream) {
        (Some(attrs), Some(up)) => Some(MonitoringAuth::new(Arc::clone(up), attrs.clone(), &d)),
        _ => None,
    };
    if let (Some(up), Some(l)) = (&api_upstream, api_listener) {
        readiness.spawn_poller(Arc::clone(up), d, shutdown.signal());
        let svc = stack::proxy(ProxySettings {
            name: "kube-api",
            mode: ProxyMode::Api,
            rules: Arc::clone(&rules),
            upstream: Arc::clone(up),
            metrics: Arc::clone(&metrics),
            limits: cfg.limits(),
            deadlines: d,
            shutdown: shutdown.signal(),
            rule_paths_only: false,
            remote_identity: Some(cfg.remote_identity.clone()),
        });
        tracing::info!(address = %l.local_addr().map_err(start_err)?, "API proxy listening");
        tasks.push(tokio::spawn(server::serve(
            l,
            None,
            svc,
            opts("kube-api"),
            shutdown.signal(),
        )));
    }
    let w_rule_paths_only = cfg.webhook.as_ref().is_some_and(|w| w.rule_paths_only);
    if let Some((up, acc, l)) = webhook {
        let svc = stack::proxy(ProxySettings {
            name: "webhook",
            mode: ProxyMode::Webhook,
            rules: Arc::clone(&rules),
            upstream: up,
            metrics: Arc::clone(&metrics),
            limits: cfg.limits(),
            deadlines: d,
            shutdown: shutdown.signal(),
            rule_paths_only: w_rule_paths_only,
            remote_identity: None,
        });
        tracing::info!(address = %l.local_addr().map_err(start_err)?, tls = acc.is_some(), "webhook proxy listening");
        tasks.push(tokio::spawn(server::serve(
            l,
            acc,
            svc,
            opts("webhook"),
            shutdown.signal(),
        )));
    }
    if cfg.client_proxy.is_none() {
        // Nothing to poll: readiness rests on the rules alone.
        readiness.force_ready();
    }
    if let Some(l) = monitoring {
        tracing::info!(address = %l.local_addr().map_err(start_err)?, "monitoring listening");
        let m = Arc::clone(&metrics);
        let r = Arc::clone(&readiness);
        let auth = monitoring_auth.clone();
        let h = tower::service_fn(move |req: http::Request<hyper::body::Incoming>| {
            let (m, r, auth) = (Arc::clone(&m), Arc::clone(&r), auth.clone());
            async move {
                if let Some(auth) = auth
                    && matches!(req.uri().path(), "/metrics" | "/metrics/")
                    && let Some(refused) = health::refuse(auth.check(req.headers()).await)
                {
                    return Ok(refused);
                }
                Ok::<_, std::convert::Infallible>(health::handle(&m, &r, &req))
            }
        });
        let mut o = opts("monitoring");
        o.shutdown_deadline = d.monitoring_shutdown;
        o.max_connections = cfg.monitoring_max_connections;
        tasks.push(tokio::spawn(server::serve(l, None, h, o, shutdown.signal())));
    }
    if tasks.is_empty() {
        return Err(StartError(
            "nothing to serve: CLIENT_PROXY=no and no WEBHOOK_ADDRESS".into(),
        ));
    }
    for t in tasks {
        let _ = t.await;
    }
    tracing::info!("stopped");
    Ok(())
}
