//! Authorization by SubjectAccessReview, with allow and deny decisions cached for 10 s
//! (k8s.io/apiserver's delegating authorizer defaults). Members of `system:masters` are always
//! allowed, as there.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use crate::authn::User;
use crate::error::{Error, Result};
use crate::subresources::{GROUP, VERSION};

/// How long a decision is kept.
pub const CACHE_TTL: Duration = Duration::from_secs(10);
const CACHE_MAX: usize = 4096;

/// What a request asks to do.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Attributes {
    /// A resource of our group.
    Resource {
        /// get, create, update...
        verb: &'static str,
        /// The namespace.
        namespace: String,
        /// The VM (empty for a list).
        name: String,
        /// The subresource (empty for the VM itself).
        subresource: String,
    },
    /// A path that is not a resource (discovery, OpenAPI, version).
    NonResource {
        /// get, ...
        verb: &'static str,
        /// The path.
        path: String,
    },
}

/// The verb of an HTTP method, as k8s.io/apiserver derives it for connect requests.
pub fn verb(method: &http::Method) -> &'static str {
    match *method {
        http::Method::GET | http::Method::HEAD => "get",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "",
    }
}

impl Attributes {
    /// The message of a denial, worded as kube-apiserver's.
    pub fn forbidden_message(&self, user: &str, reason: &str) -> String {
        let mut m = match self {
            Attributes::Resource {
                verb,
                namespace,
                name,
                subresource,
            } => {
                let resource = if subresource.is_empty() {
                    "virtualmachines".to_owned()
                } else {
                    format!("virtualmachines/{subresource}")
                };
                format!(
                    "virtualmachines.{GROUP} {name:?} is forbidden: User {user:?} cannot {verb} resource {resource:?} in API group {GROUP:?} in the namespace {namespace:?}"
                )
            }
            Attributes::NonResource { verb, path } => {
                format!("forbidden: User {user:?} cannot {verb} path {path:?}")
            }
        };
        if !reason.is_empty() {
            m.push_str(": ");
            m.push_str(reason);
        }
        m
    }

    fn review(&self, user: &User) -> SubjectAccessReview {
        let mut spec = SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            groups: Some(user.groups.clone()),
            extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
            ..Default::default()
        };
        match self {
            Attributes::Resource {
                verb,
                namespace,
                name,
                subresource,
            } => {
                spec.resource_attributes = Some(ResourceAttributes {
                    group: Some(GROUP.into()),
                    version: Some(VERSION.into()),
                    resource: Some("virtualmachines".into()),
                    subresource: (!subresource.is_empty()).then(|| subresource.clone()),
                    namespace: Some(namespace.clone()),
                    name: (!name.is_empty()).then(|| name.clone()),
                    verb: Some((*verb).into()),
                    ..Default::default()
                });
            }
            Attributes::NonResource { verb, path } => {
                spec.non_resource_attributes = Some(NonResourceAttributes {
                    path: Some(path.clone()),
                    verb: Some((*verb).into()),
                });
            }
        }
        SubjectAccessReview {
            spec,
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    user: String,
    groups: Vec<String>,
    extra: Vec<(String, Vec<String>)>,
    attrs: Attributes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Decision {
    allowed: bool,
    reason: String,
}

/// Decisions with the time they were made; entries older than the TTL are not used, and the
/// map is pruned (or, if still full, emptied) when it reaches its size limit.
#[derive(Debug)]
struct DecisionCache {
    ttl: Duration,
    max: usize,
    map: HashMap<Key, (Instant, Decision)>,
}

impl DecisionCache {
    fn new(ttl: Duration, max: usize) -> DecisionCache {
        DecisionCache {
            ttl,
            max,
            map: HashMap::new(),
        }
    }

    fn get(&self, key: &Key, now: Instant) -> Option<Decision> {
        self.map
            .get(key)
            .filter(|(at, _)| now.saturating_duration_since(*at) < self.ttl)
            .map(|(_, d)| d.clone())
    }

    fn insert(&mut self, key: Key, d: Decision, now: Instant) {
        if self.map.len() >= self.max {
            let ttl = self.ttl;
            self.map
                .retain(|_, (at, _)| now.saturating_duration_since(*at) < ttl);
            if self.map.len() >= self.max {
                self.map.clear();
            }
        }
        self.map.insert(key, (now, d));
    }
}

/// Asks kube-apiserver, remembering answers for [`CACHE_TTL`].
pub struct Authorizer {
    api: Api<SubjectAccessReview>,
    cache: Mutex<DecisionCache>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").finish_non_exhaustive()
    }
}

impl Authorizer {
    /// An authorizer using `client`.
    pub fn new(client: kube::Client) -> Authorizer {
        Authorizer {
            api: Api::all(client),
            cache: Mutex::new(DecisionCache::new(CACHE_TTL, CACHE_MAX)),
        }
    }

    /// Ok when `user` may do `attrs`; 403 when not; 500 when kube-apiserver cannot tell.
    pub async fn authorize(&self, user: &User, attrs: &Attributes) -> Result<()> {
        if user.groups.iter().any(|g| g == "system:masters") {
            return Ok(());
        }
        let key = Key {
            user: user.name.clone(),
            groups: user.groups.clone(),
            extra: user.extra.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            attrs: attrs.clone(),
        };
        let cached = self.lock().get(&key, Instant::now());
        let decision = match cached {
            Some(d) => d,
            None => {
                let d = self.ask(user, attrs).await?;
                self.lock().insert(key, d.clone(), Instant::now());
                d
            }
        };
        if decision.allowed {
            Ok(())
        } else {
            Err(Error::Forbidden(
                attrs.forbidden_message(&user.name, &decision.reason),
            ))
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DecisionCache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn ask(&self, user: &User, attrs: &Attributes) -> Result<Decision> {
        let review = self
            .api
            .create(&PostParams::default(), &attrs.review(user))
            .await
            .map_err(|e| Error::Internal(format!("authorization could not be checked: {e}")))?;
        let status = review.status.unwrap_or_default();
        Ok(Decision {
            allowed: status.allowed && !status.denied.unwrap_or(false),
            reason: status.reason.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn console() -> Attributes {
        Attributes::Resource {
            verb: "get",
            namespace: "ns".into(),
            name: "vm1".into(),
            subresource: "console".into(),
        }
    }

    fn key(user: &str) -> Key {
        Key {
            user: user.into(),
            groups: vec![],
            extra: vec![],
            attrs: console(),
        }
    }

    #[test]
    fn decisions_are_kept_for_the_ttl() {
        let t0 = Instant::now();
        let mut c = DecisionCache::new(CACHE_TTL, 3);
        let deny = Decision {
            allowed: false,
            reason: "no".into(),
        };
        c.insert(key("a"), deny.clone(), t0);
        assert_eq!(c.get(&key("a"), t0 + Duration::from_secs(9)), Some(deny.clone()));
        assert_eq!(c.get(&key("a"), t0 + CACHE_TTL), None);
        assert_eq!(c.get(&key("b"), t0), None);
        // Full: expired entries go first.
        c.insert(key("b"), deny.clone(), t0 + Duration::from_secs(5));
        c.insert(key("c"), deny.clone(), t0 + Duration::from_secs(5));
        c.insert(key("d"), deny.clone(), t0 + Duration::from_secs(11));
        assert_eq!(c.map.len(), 3);
        assert!(c.get(&key("b"), t0 + Duration::from_secs(11)).is_some());
        // Full of live entries: emptied.
        c.insert(key("e"), deny.clone(), t0 + Duration::from_secs(12));
        assert_eq!(c.map.len(), 1);
        assert_eq!(c.get(&key("e"), t0 + Duration::from_secs(12)), Some(deny));
    }

    #[test]
    fn verbs() {
        assert_eq!(verb(&http::Method::GET), "get");
        assert_eq!(verb(&http::Method::POST), "create");
        assert_eq!(verb(&http::Method::PUT), "update");
        assert_eq!(verb(&http::Method::OPTIONS), "");
    }

    #[test]
    fn messages() {
        assert_eq!(
            console().forbidden_message("user1", ""),
            "virtualmachines.subresources.virtualization.deckhouse.io \"vm1\" is forbidden: User \"user1\" cannot get resource \"virtualmachines/console\" in API group \"subresources.virtualization.deckhouse.io\" in the namespace \"ns\""
        );
        let np = Attributes::NonResource {
            verb: "get",
            path: "/openapi/v2".into(),
        };
        assert_eq!(
            np.forbidden_message("u", "no RBAC"),
            "forbidden: User \"u\" cannot get path \"/openapi/v2\": no RBAC"
        );
    }

    #[test]
    fn reviews() {
        let user = User {
            name: "user1".into(),
            groups: vec!["system:authenticated".into()],
            extra: [("scopes".to_owned(), vec!["a".to_owned()])].into(),
        };
        let r = console().review(&user);
        let ra = r.spec.resource_attributes.unwrap();
        assert_eq!(ra.group.as_deref(), Some(GROUP));
        assert_eq!(ra.version.as_deref(), Some("v1alpha2"));
        assert_eq!(ra.resource.as_deref(), Some("virtualmachines"));
        assert_eq!(ra.subresource.as_deref(), Some("console"));
        assert_eq!(ra.name.as_deref(), Some("vm1"));
        assert_eq!(r.spec.user.as_deref(), Some("user1"));
        assert_eq!(r.spec.extra.unwrap()["scopes"], ["a"]);
        let vm = Attributes::Resource {
            verb: "get",
            namespace: "ns".into(),
            name: "vm1".into(),
            subresource: String::new(),
        };
        assert_eq!(
            vm.review(&user).spec.resource_attributes.unwrap().subresource,
            None
        );
    }
}
