//! The deployment manifests under `controller/deploy/`, dry-run on the server.

use kube_api_rewriter_testkit::*;
use serde_json::json;

use crate::env::Env;

/// The manifests under `controller/deploy/` pass a server-side dry run: the namespace is
/// created first (a dry run cannot see a namespace created in the same dry run), then everything
/// is applied with `--dry-run=server`, and nothing but the namespace exists afterwards.
pub fn deploy_manifests(env: &Env) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let file = |f: &str| dir.join(f).to_str().expect("utf-8").to_owned();
    ok(&env.cp.kubectl(&["apply", "-f", &file("namespace.yaml")]));
    let out = ok(&env.cp.kubectl(&["apply", "--dry-run=server", "-f", &file("")]));
    for obj in [
        "serviceaccount/virtualization-controller",
        "clusterrole.rbac.authorization.k8s.io/d8:virtualization:virtualization-controller",
        "clusterrolebinding.rbac.authorization.k8s.io/d8:virtualization:virtualization-controller",
        "configmap/kube-api-rewriter-kubeconfig",
        "configmap/kube-rbac-proxy-config",
        "clusterrole.rbac.authorization.k8s.io/d8:virtualization:kube-rbac-proxy",
        "clusterrolebinding.rbac.authorization.k8s.io/d8:virtualization:kube-rbac-proxy",
        "clusterrole.rbac.authorization.k8s.io/d8:virtualization:metrics-reader",
        "rolebinding.rbac.authorization.k8s.io/d8:virtualization:metrics-reader",
        "deployment.apps/virtualization-controller",
        "service/virtualization-controller",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/virtualization-controller",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/virtualization-controller",
        "configmap/dvcr-config",
        "deployment.apps/dvcr",
        "persistentvolumeclaim/dvcr-data",
        "service/dvcr",
    ] {
        assert!(
            out.contains(&format!("{obj} created (server dry run)")),
            "{obj}:\n{out}"
        );
    }
    let ns = "d8-virtualization";
    fails(
        &env.cp
            .kubectl(&["get", "deployment", "virtualization-controller", "-n", ns]),
    );
    fails(&env.cp.kubectl(&[
        "get",
        "validatingwebhookconfiguration",
        "virtualization-controller",
    ]));
    // The sidecar is the first container, with the env Deckhouse gives it.
    let dep = parse_json(&ok(&env.cp.kubectl(&[
        "create",
        "--dry-run=server",
        "-o",
        "json",
        "-f",
        &file("deployment.yaml"),
    ])));
    let containers = &dep["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers[0]["name"], "proxy", "{dep}");
    assert_eq!(
        containers[0]["env"][0],
        json!({"name": "CLIENT_PROXY_PORT", "value": "23915"}),
        "{dep}"
    );
    assert_eq!(containers[1]["name"], "virtualization-controller", "{dep}");
    // One kube-rbac-proxy per metrics listener (the e2e case metrics_auth runs them).
    assert_eq!(containers[2]["name"], "kube-rbac-proxy-controller", "{dep}");
    assert_eq!(containers[3]["name"], "kube-rbac-proxy-rewriter", "{dep}");
}
