//! Bounded metric label values: a client cannot grow `/metrics` by inventing methods, resources
//! or subresources.
//!
//! * Methods outside the HTTP set become `OTHER`.
//! * A resource whose kind the rules know (renamed resources, CRDs, the built-in kinds of
//!   `rules/kinds.yaml`), with no subresource or a Kubernetes one, keeps its name: a finite set.
//! * Any other value (a resource the rules do not know, `APIGroup/<group>`) keeps its name while
//!   fewer than [`OTHER_VALUES`] such values have been seen, and becomes `OTHER` after that.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use kube_api_rewriter::Route;

/// The label value for anything over the bounds.
pub const OTHER: &str = "OTHER";

/// Distinct unknown resource values kept before they become [`OTHER`].
pub const OTHER_VALUES: usize = 100;

const METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE",
];

/// Subresources Kubernetes serves (and the streaming ones of KubeVirt's virt-api).
const SUBRESOURCES: &[&str] = &[
    "status",
    "scale",
    "log",
    "exec",
    "attach",
    "portforward",
    "proxy",
    "binding",
    "eviction",
    "ephemeralcontainers",
    "approval",
    "finalize",
    "token",
    "console",
    "vnc",
];

/// Values that never depend on the client.
const FIXED: &[&str] = &["UNKNOWN", "APIVersions/core", "APIGroupList"];

/// The `method` label of a request.
pub fn method(m: &str) -> String {
    if METHODS.contains(&m) {
        m.to_owned()
    } else {
        OTHER.to_owned()
    }
}

/// A set of values admitted up to a size.
#[derive(Debug)]
pub struct Budget {
    seen: Mutex<HashSet<String>>,
    cap: usize,
}

impl Budget {
    /// Admits up to `cap` distinct values.
    pub fn new(cap: usize) -> Self {
        Self {
            seen: Mutex::new(HashSet::new()),
            cap,
        }
    }

    /// True when `v` was admitted before or fits now.
    pub fn admit(&self, v: &str) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.contains(v) {
            return true;
        }
        if seen.len() >= self.cap {
            return false;
        }
        seen.insert(v.to_owned());
        true
    }
}

fn others() -> &'static Budget {
    static B: OnceLock<Budget> = OnceLock::new();
    B.get_or_init(|| Budget::new(OTHER_VALUES))
}

/// The `resource` label of a request.
pub fn resource(route: &Route) -> String {
    resource_in(route, others())
}

fn resource_in(route: &Route, budget: &Budget) -> String {
    let r = route.resource();
    if FIXED.contains(&r) {
        return r.to_owned();
    }
    let known = route.context().kind.is_some()
        && r.split_once('/')
            .is_none_or(|(_, sub)| SUBRESOURCES.contains(&sub));
    if known || budget.admit(r) {
        r.to_owned()
    } else {
        OTHER.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_api_rewriter::ProxyMode;
    use kube_api_rewriter::Rules;

    fn route(method: &str, path: &str) -> Route {
        static RULES: OnceLock<Rules> = OnceLock::new();
        Route::new(
            RULES.get_or_init(Rules::builtin_kubevirt),
            ProxyMode::Api,
            method,
            path,
        )
    }

    #[test]
    fn methods_outside_http_are_other() {
        assert_eq!(method("GET"), "GET");
        assert_eq!(method("PATCH"), "PATCH");
        assert_eq!(method("BREW"), OTHER);
        assert_eq!(method(route("x-invented-1", "/api").method()), OTHER);
    }

    #[test]
    fn invented_resources_are_bounded() {
        let b = Budget::new(3);
        let vms = route("GET", "/apis/kubevirt.io/v1/namespaces/d/virtualmachines");
        let mut values = HashSet::new();
        for i in 0..1000 {
            let r = route("GET", &format!("/api/v1/namespaces/d/invented{i}"));
            values.insert(resource_in(&r, &b));
            let r = route(
                "GET",
                &format!("/apis/kubevirt.io/v1/namespaces/d/virtualmachines/v/sub{i}"),
            );
            values.insert(resource_in(&r, &b));
            let r = route("GET", &format!("/apis/group{i}.example.com/v1"));
            values.insert(resource_in(&r, &b));
        }
        assert_eq!(values.len(), 4, "{values:?}");
        assert!(values.contains(OTHER));
        // Known resources keep their names once the budget is spent.
        assert_eq!(resource_in(&vms, &b), "virtualmachines");
        let status = route(
            "PUT",
            "/apis/kubevirt.io/v1/namespaces/d/virtualmachines/v/status",
        );
        assert_eq!(resource_in(&status, &b), "virtualmachines/status");
        assert_eq!(resource_in(&route("GET", "/apis"), &b), "APIGroupList");
        assert_eq!(resource_in(&route("GET", "/api/v1/pods"), &b), "pods");
    }
}
