//! Who may: 403 from kube-apiserver's RBAC, 403 from our own SubjectAccessReview (and the
//! grant past it), 401 without the front-proxy certificate.

use std::path::Path;

use kube_api_rewriter_testkit as tk;

use crate::client::{direct, vm_path};
use crate::env::{Env, GROUP_PATH, NS, apply};

pub fn forbidden_by_kube_apiserver(e: &Env) {
    let before = e.server.logs().matches("user=user1").count();
    let err = tk::fails(&e.user1(&["get", "--raw", &vm_path("vm-running", "console")]));
    assert!(err.contains("Forbidden"), "{err}");
    assert!(err.contains(r#"User "user1" cannot get resource "virtualmachines/console" in API group "subresources.virtualization.deckhouse.io""#), "{err}");
    // Denied by kube-apiserver: nothing reached us.
    assert_eq!(e.server.logs().matches("user=user1").count(), before);
    e.rt.block_on(async {
        match e
            .ws(&vm_path("vm-running", "console"), e.cp.get("USER1_TOKEN"))
            .await
        {
            Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 403),
            other => panic!("expected 403, got {:?}", other.map(|x| x.1)),
        }
    });
}

pub fn forbidden_by_us(e: &Env) {
    let (code, body) = e.as_user(
        &e.server,
        "user1",
        &[],
        &["-X", "PUT", "-d", "{}"],
        &vm_path("vm-running", "freeze"),
    );
    assert_eq!(code, 403, "{body}");
    let s = tk::parse_json(&body);
    assert_eq!(s["kind"], "Status");
    assert_eq!(s["reason"], "Forbidden");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains(r#"User "user1" cannot update resource "virtualmachines/freeze""#),
        "{s}"
    );
    assert!(e.server.logs().contains("user=user1 code=403"));
    // Granted by RBAC (a real SubjectAccessReview allows it): past authorization to the
    // upgrade check.
    apply(
        &e.cp,
        &format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: vnc, namespace: {NS}}}\nrules:\n- apiGroups: [subresources.virtualization.deckhouse.io]\n  resources: [virtualmachines/vnc]\n  verbs: [get]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: vnc-user1, namespace: {NS}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: vnc}}\nsubjects: [{{kind: User, name: user1, apiGroup: rbac.authorization.k8s.io}}]\n"
        ),
    );
    let (code, body) = e.as_user(&e.server, "user1", &[], &[], &vm_path("vm-running", "vnc"));
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("Upgrade request required"), "{body}");
}

pub fn unauthorized(e: &Env) {
    // Identity headers without a certificate are not trusted.
    let (code, body) = direct(
        &e.server,
        e,
        None,
        &["X-Remote-User: admin", "X-Remote-Group: system:masters"],
        &[],
        GROUP_PATH,
    );
    assert_eq!(code, 401, "{body}");
    let s = tk::parse_json(&body);
    assert_eq!(
        (s["kind"].as_str(), s["reason"].as_str()),
        (Some("Status"), Some("Unauthorized"))
    );
    // A certificate of the front-proxy CA with a name not in requestheader-allowed-names.
    let (c, k) = tk::signed_cert(
        &e.dir,
        "not-front-proxy",
        "someone-else",
        None,
        Path::new(e.cp.get("FRONT_PROXY_CA_FILE")),
        Path::new(e.cp.get("FRONT_PROXY_CA_KEY")),
    );
    let (code, body) = direct(
        &e.server,
        e,
        Some((c.to_str().unwrap(), k.to_str().unwrap())),
        &["X-Remote-User: admin", "X-Remote-Group: system:masters"],
        &[],
        GROUP_PATH,
    );
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("not an allowed requestheader name"), "{body}");
}
