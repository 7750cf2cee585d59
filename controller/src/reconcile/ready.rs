//! Readiness: the controller is ready once every required API is served ([`crate::apis`]) and
//! every resource its controllers watch could be listed once, an optional API's only while it
//! is served. Until then `/readyz` answers 503 with the last failure, which names the list.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::api::{Api, ListParams};
use tracing::{info, warn};

use super::Context;
use crate::apis::ApiName;

/// A watched resource: a LIST of one item shows the controllers can list it.
pub struct Watched {
    /// The optional API it belongs to: skipped while that is not served.
    optional: Option<ApiName>,
    list: Box<dyn Fn() -> BoxFuture<'static, kube::Result<()>> + Send + Sync>,
}

impl Watched {
    /// `api`, listed with `params` (the controllers' selector, if they use one).
    pub fn new<K>(api: Api<K>, params: ListParams) -> Watched
    where
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    {
        Watched {
            optional: None,
            list: Box::new(move || {
                let (api, lp) = (api.clone(), params.clone().limit(1));
                Box::pin(async move { api.list_metadata(&lp).await.map(drop) })
            }),
        }
    }

    /// Listed only while `optional` is served.
    pub fn optional(mut self, optional: ApiName) -> Watched {
        self.optional = Some(optional);
        self
    }
}

/// Lists each of `watched` until all succeed, then sets [`Context::listed`]; meanwhile the
/// last failure is what `/readyz` says.
pub async fn wait_listed(ctx: Arc<Context>, watched: Vec<Watched>) {
    // Not `Store::wait_until_ready`: its oneshot keeps one waker, and the controller's own
    // runner waits on it.
    loop {
        let lists = watched
            .iter()
            .filter(|w| w.optional.is_none_or(|api| ctx.served.is_served(api)))
            .map(|w| (w.list)());
        match futures::future::try_join_all(lists).await {
            Ok(_) if ctx.served.blocking().is_none() => break,
            Ok(_) => {}
            Err(e) => {
                warn!(error = %e, "not ready");
                *ctx.not_listed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e.to_string());
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    ctx.listed.store(true, Ordering::Relaxed);
    info!("every watched resource listed, ready");
}
