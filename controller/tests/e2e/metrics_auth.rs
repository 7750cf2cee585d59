//! The metrics behind kube-rbac-proxy, as `controller/deploy/` puts them: one real
//! kube-rbac-proxy in front of the controller's `/metrics` and one in front of its sidecar's
//! monitoring listener, each with the config file of the deploy ConfigMap
//! `kube-rbac-proxy-config` and the path flags of its container in `deployment.yaml`, asking the
//! real kube-apiserver (TokenReview, SubjectAccessReview) about ServiceAccount tokens.

use std::path::Path;

use kube_api_rewriter_testkit::*;
use serde_json::Value;

use crate::env::{CONTROLLER_NS, Env};

/// The controller's kube-rbac-proxy container in `deployment.yaml`, and its config file.
const CONTROLLER: (&str, &str) = ("kube-rbac-proxy-controller", "controller-metrics.yaml");
/// The sidecar's.
const REWRITER: (&str, &str) = ("kube-rbac-proxy-rewriter", "rewriter-metrics.yaml");

/// A scraper allowed on both Deployments' metrics gets them; a token without the grant gets
/// 403, no token or a bad one 401; a grant for `virtualization-controller` alone opens the
/// controller's metrics but not the sidecar's (the config's resource attributes are what is
/// asked); the sidecar's probes pass without a token; nothing but `/metrics` of the controller
/// is proxied.
pub fn metrics_auth(e: &Env) {
    let ns = e.namespace("metrics-auth");
    let dir = e.cp.dir.join(&ns);
    std::fs::create_dir_all(&dir).expect("case dir");
    let controller_upstream = format!("http://127.0.0.1:{}/", e.ctl().metrics_port);
    let rewriter_upstream = format!("http://127.0.0.1:{}/", e.sidecar.mon_port);
    let ctl = start(e, &dir, CONTROLLER, &controller_upstream);
    let rw = start(e, &dir, REWRITER, &rewriter_upstream);

    for sa in ["prometheus", "nobody", "controller-only"] {
        ok(&e.cp.kubectl(&["create", "serviceaccount", sa, "-n", &ns]));
    }
    grant(e, &ns);
    let prometheus = token(e, &ns, "prometheus");
    let nobody = token(e, &ns, "nobody");
    let controller_only = token(e, &ns, "controller-only");
    let show = || {
        format!(
            "controller's proxy:\n{}\nsidecar's proxy:\n{}",
            ctl.logs(),
            rw.logs()
        )
    };

    let (code, body) = ctl.get("/metrics", Some(&prometheus));
    assert_eq!(code, "200", "{body}\n{}", show());
    for family in [
        "d8_virtualization_virtualmachine_status_phase",
        "virtualization_controller_reconcile_errors",
    ] {
        assert!(
            body.contains(&format!("# TYPE {family}")),
            "{family} not in:\n{body}"
        );
    }
    let (code, body) = rw.get("/metrics", Some(&prometheus));
    assert_eq!(code, "200", "{body}\n{}", show());
    for family in [
        "kube_api_rewriter_build_info",
        "kube_api_rewriter_client_requests",
    ] {
        assert!(body.contains(family), "{family} not in:\n{body}");
    }

    for p in [&ctl, &rw] {
        assert_eq!(p.status("/metrics", Some(&nobody)), "403", "{}", show());
        assert_eq!(p.status("/metrics", None), "401", "{}", show());
        assert_eq!(p.status("/metrics", Some("not-a-token")), "401", "{}", show());
    }

    // The two configs differ only in the Deployment's name: a grant for one is not for both.
    assert_eq!(
        ctl.status("/metrics", Some(&controller_only)),
        "200",
        "{}",
        show()
    );
    assert_eq!(rw.status("/metrics", Some(&controller_only)), "403", "{}", show());

    // The kubelet probes the sidecar through its kube-rbac-proxy, with no token.
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            rw.get(path, None),
            ("200".to_owned(), "ok".to_owned()),
            "{path}\n{}",
            show()
        );
    }
    // The controller's proxy forwards /metrics only, even to an allowed caller.
    assert_eq!(ctl.status("/healthz", Some(&prometheus)), "404", "{}", show());

    revoke(e, &ns);
}

/// kube-rbac-proxy as `container` of the deploy Deployment runs it, in front of `upstream` on
/// loopback instead of the pod's ports: its config file from the deploy ConfigMap, its other
/// flags (the paths it lets through) as they are.
fn start(e: &Env, dir: &Path, (container, config): (&str, &str), upstream: &str) -> KubeRbacProxy {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let configmap = manifest(
        e,
        &deploy.join("configmap.yaml"),
        "ConfigMap",
        "kube-rbac-proxy-config",
    );
    let config_yaml = configmap["data"][config]
        .as_str()
        .unwrap_or_else(|| panic!("no {config} in ConfigMap kube-rbac-proxy-config"));
    let dep = manifest(
        e,
        &deploy.join("deployment.yaml"),
        "Deployment",
        "virtualization-controller",
    );
    let c = dep["spec"]["template"]["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == container))
        .unwrap_or_else(|| panic!("no container {container} in deployment.yaml"));
    // Where it listens, what it proxies and where its config is are the pod's; the test gives
    // its own.
    let own = ["--secure-listen-address=", "--upstream=", "--config-file="];
    let args: Vec<&str> = c["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|a| !own.iter().any(|o| a.starts_with(o)))
        .collect();
    KubeRbacProxy::start(dir, e.cp.kubeconfig(), upstream, config_yaml, &args)
}

/// The object `kind`/`name` of the manifest file `path`, as kubectl reads it (no server
/// involved beyond discovery).
fn manifest(e: &Env, path: &Path, kind: &str, name: &str) -> Value {
    let path = path.to_str().expect("utf-8 path");
    let out = ok(&e
        .cp
        .kubectl(&["create", "--dry-run=client", "-o", "json", "-f", path]));
    // One JSON document per object, one after the other.
    serde_json::Deserializer::from_str(&out)
        .into_iter::<Value>()
        .map(|o| o.unwrap_or_else(|err| panic!("kubectl's JSON of {path}: {err}\n{out}")))
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {path}"))
}

/// What the case's ServiceAccounts may do, in the controller's namespace (where the
/// SubjectAccessReviews ask): `prometheus` gets any Deployment's metrics, as the deploy
/// ClusterRole `d8:virtualization:metrics-reader` grants; `controller-only` the controller's
/// alone. Waits until kube-apiserver's authorizer sees both grants, since kube-rbac-proxy
/// caches a denial for 30 s.
fn grant(e: &Env, ns: &str) {
    let role = |name: &str, names: &str| {
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: {name}, namespace: {CONTROLLER_NS}}}\nrules:\n- apiGroups: [apps]\n  resources: [deployments/prometheus-metrics]\n  verbs: [get]\n{names}---\n"
        )
    };
    let binding = |name: &str, sa: &str| {
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {name}, namespace: {CONTROLLER_NS}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {name}}}\nsubjects:\n- {{kind: ServiceAccount, name: {sa}, namespace: {ns}}}\n---\n"
        )
    };
    let (all, one) = (format!("{ns}-all"), format!("{ns}-controller"));
    e.apply(&format!(
        "{}{}{}{}",
        role(&all, ""),
        binding(&all, "prometheus"),
        role(&one, "  resourceNames: [virtualization-controller]\n"),
        binding(&one, "controller-only"),
    ));
    for (sa, name) in [
        ("prometheus", "virtualization-controller"),
        ("prometheus", "kube-api-rewriter"),
        ("controller-only", "virtualization-controller"),
    ] {
        e.wait(
            &format!("{sa} may get deployments/{name}/prometheus-metrics"),
            || {
                let o = e.cp.kubectl(&[
                    "auth",
                    "can-i",
                    "get",
                    &format!("deployments.apps/{name}"),
                    "--subresource=prometheus-metrics",
                    "-n",
                    CONTROLLER_NS,
                    &format!("--as=system:serviceaccount:{ns}:{sa}"),
                ]);
                let said = String::from_utf8_lossy(&o.stdout).trim().to_owned();
                if said == "yes" { Ok(()) } else { Err(said) }
            },
        );
    }
}

/// Removes what [`grant`] made (the controller's namespace outlives the case).
fn revoke(e: &Env, ns: &str) {
    for name in [format!("{ns}-all"), format!("{ns}-controller")] {
        ok(&e
            .cp
            .kubectl(&["delete", "role,rolebinding", &name, "-n", CONTROLLER_NS]));
    }
}

/// A token of the ServiceAccount `sa` of `ns` (TokenRequest, as a Pod's projected token).
fn token(e: &Env, ns: &str, sa: &str) -> String {
    ok(&e.cp.kubectl(&["create", "token", sa, "-n", ns]))
        .trim()
        .to_owned()
}
