//! What every kind's controller is wired with, in one place: the resources it watches, which
//! readiness lists ([`super::ready`]); an optional API's resources, watched only while it is
//! served ([`crate::apis::Served::while_served`]); the watch backoff, the shutdown on a signal,
//! and the log of each controller's results; and the tasks beside the controllers (which APIs
//! are served, readiness). Each kind's module builds its own `Controller` through a [`Wiring`];
//! [`super::run`] only starts them and joins them. Leader election, when it comes, belongs here
//! too.

use std::borrow::Cow;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt as _, Stream, StreamExt as _};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Action};
use kube::runtime::{Controller, WatchStreamExt as _, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tracing::warn;

use super::ready::{self, Watched};
use super::{Context, Error, Result, WatchBackoff, error_policy};
use crate::apis::{self, ApiName};

/// How the kinds' controllers are built: each watch a controller makes is taken from here, so
/// readiness lists what the controllers watch.
pub(crate) struct Wiring {
    ctx: Arc<Context>,
    /// What readiness lists: each watched resource once, by its URL, with its selector.
    watched: Vec<(String, Option<String>, Watched)>,
}

impl Wiring {
    /// Wiring for controllers sharing `ctx`.
    pub(crate) fn new(ctx: Arc<Context>) -> Wiring {
        Wiring {
            ctx,
            watched: Vec::new(),
        }
    }

    /// The controllers' context.
    pub(crate) fn ctx(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The controllers' client.
    pub(crate) fn client(&self) -> Client {
        self.ctx.client.clone()
    }

    /// Every `K` in the cluster, watched with the label selector `labels` (`None`: all).
    pub(crate) fn watch<K>(&mut self, labels: Option<&str>) -> (Api<K>, watcher::Config)
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let api = Api::<K>::all(self.client());
        self.listed(api.clone(), labels, None);
        (api, config(labels))
    }

    /// Every object of `resource` in the cluster, watched with the label selector `labels`.
    pub(crate) fn watch_dynamic(
        &mut self,
        resource: &ApiResource,
        labels: Option<&str>,
    ) -> (Api<DynamicObject>, watcher::Config) {
        let api = Api::<DynamicObject>::all_with(self.client(), resource);
        self.listed(api.clone(), labels, None);
        (api, config(labels))
    }

    /// The changes to objects of `resource` of the optional API `optional`, from a watch that
    /// runs only while the API is served ([`crate::apis::Served::while_served`]); meanwhile
    /// readiness does not list it either.
    pub(crate) fn watch_while_served(
        &mut self,
        optional: ApiName,
        resource: &ApiResource,
    ) -> impl Stream<Item = Result<PartialObjectMeta<DynamicObject>, watcher::Error>> + Send + 'static {
        self.listed(
            Api::<DynamicObject>::all_with(self.client(), resource),
            None,
            Some(optional),
        );
        let api = Api::<PartialObjectMeta<DynamicObject>>::all_with(self.client(), resource);
        self.ctx.served.clone().while_served(optional, move || {
            watcher(api.clone(), watcher::Config::default()).touched_objects()
        })
    }

    /// Records `api` for readiness, listed with `labels`, once per resource: a resource also
    /// watched without a selector is listed without one.
    fn listed<K>(&mut self, api: Api<K>, labels: Option<&str>, optional: Option<ApiName>)
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let url = api.resource_url().to_owned();
        if let Some(i) = self.watched.iter().position(|(u, _, _)| *u == url) {
            if labels.is_none() && self.watched[i].1.is_some() {
                self.watched[i] = (url, None, Watched::new(api, ListParams::default()));
            }
            return;
        }
        let params = match labels {
            Some(l) => ListParams::default().labels(l),
            None => ListParams::default(),
        };
        let mut watched = Watched::new(api, params);
        if let Some(optional) = optional {
            watched = watched.optional(optional);
        }
        self.watched.push((url, labels.map(str::to_owned), watched));
    }

    /// Runs `controller` with `reconcile` and the shared error policy until a shutdown signal,
    /// its watches retried at [`WatchBackoff`]'s pace and each result logged under the
    /// controller's kind. Nothing runs until the future is polled.
    pub(crate) fn start<K, F, Fut>(&self, controller: Controller<K>, reconcile: F) -> BoxFuture<'static, ()>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        F: FnMut(Arc<K>, Arc<Context>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Action>> + Send + 'static,
    {
        controller
            .trigger_backoff(WatchBackoff::default())
            .shutdown_on_signal()
            .run(reconcile, error_policy, self.ctx.clone())
            .for_each(log_result(K::kind(&())))
            .boxed()
    }

    /// Starts what runs beside the controllers: [`crate::apis::follow`], which asks discovery
    /// which APIs are served, and [`ready::wait_listed`], which sets [`Context::listed`] once
    /// every watched resource could be listed. They stop when the result is dropped.
    pub(crate) fn start_beside(self) -> Beside {
        let ready = ready::wait_listed(
            self.ctx.clone(),
            self.watched.into_iter().map(|(_, _, w)| w).collect(),
        );
        let apis = tokio::spawn(apis::follow(
            self.ctx.client.clone(),
            self.ctx.served.clone(),
            apis::Intervals::default(),
        ));
        let ready = tokio::spawn(ready);
        Beside {
            tasks: vec![ready, apis],
        }
    }
}

/// The tasks beside the controllers ([`Wiring::start_beside`]), aborted when dropped.
pub(crate) struct Beside {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Beside {
    fn drop(&mut self) {
        self.tasks.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

/// A watch with the label selector `labels`, or of everything.
fn config(labels: Option<&str>) -> watcher::Config {
    match labels {
        Some(l) => watcher::Config::default().labels(l),
        None => watcher::Config::default(),
    }
}

/// Logs one result of the stream of the controller of `kind`. A watch's error names the
/// request that failed (the client's [`crate::client::RequestContextLayer`]).
fn log_result<T: Debug>(
    kind: Cow<'static, str>,
) -> impl FnMut(std::result::Result<T, controller::Error<Error, watcher::Error>>) -> futures::future::Ready<()>
{
    move |r| {
        let kind: &str = &kind;
        match r {
            Ok(obj) => tracing::debug!(controller = kind, ?obj, "reconciled"),
            // A failed reconcile was logged by the error policy.
            Err(controller::Error::ReconcilerFailed(..)) => {}
            // A KubeVirt object naming a VM that does not exist (a label edited by hand).
            Err(e @ controller::Error::ObjectNotFound(..)) => {
                tracing::debug!(controller = kind, error = %e, "no such object")
            }
            Err(e) => warn!(controller = kind, error = %e, "watch failed"),
        }
        futures::future::ready(())
    }
}
