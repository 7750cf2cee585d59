//! The webhook proxy: kube-apiserver calls it instead of the webhook server. AdmissionReview
//! requests are restored to the original names, responses (JSON patches) renamed; paths are
//! routed by the rules' webhook paths with the query kept; other paths pass through.
//!
//! The listener serves TLS with a certificate that reloads when its files change (plain HTTP
//! when no certificate is configured, as the Go sidecar does). The target is reached over TLS
//! with `WEBHOOK_SERVER_NAME` and, as Go does, without verification unless a CA file is given.

use std::sync::Arc;

use tokio_rustls::TlsAcceptor;

use crate::config::WebhookConfig;
use crate::deadlines::Deadlines;
use crate::shutdown::ShutdownSignal;
use crate::tls::{self, Follow, ReloadingCert, TlsError};
use crate::upstream::{Upstream, UpstreamError};

/// The webhook target.
pub fn upstream(cfg: &WebhookConfig, deadlines: &Deadlines) -> Result<Upstream, UpstreamError> {
    let name = cfg
        .server_name
        .clone()
        .or_else(|| cfg.target.host().map(str::to_owned));
    Upstream::webhook(&cfg.target, name.as_deref(), cfg.ca_file.as_deref(), deadlines)
}

/// The listener's TLS acceptor, with the certificate watched for changes; `None` for plain HTTP.
pub fn acceptor(
    cfg: &WebhookConfig,
    shutdown: ShutdownSignal,
) -> Result<Option<(TlsAcceptor, Arc<ReloadingCert>)>, TlsError> {
    let Some((cert, key)) = &cfg.tls else {
        return Ok(None);
    };
    let rc = ReloadingCert::load(cert, key)?;
    rc.follow(Follow::files("webhook certificate"), shutdown.cancelled())?;
    let sc = tls::server_config(Arc::clone(&rc))?;
    Ok(Some((TlsAcceptor::from(Arc::new(sc)), rc)))
}
