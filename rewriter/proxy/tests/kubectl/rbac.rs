//! RBAC for `kubevirt.io` through the proxy: a Role and RoleBinding for `user1` written with
//! original names, then user1's access impersonated, with its own token, as access reviews and
//! with `kubectl auth can-i`.

use kube_api_rewriter_testkit::*;
use serde_json::json;

use crate::assertions::{assert_original, names, set};
use crate::manifests::vm;
use crate::{INTERNAL, env};

/// user1 may get and list VMs in `rbac` only.
const NS: &str = "rbac";
/// A namespace user1 has no role in (authorization does not need it to exist).
const OTHER_NS: &str = "kc";

#[test]
fn rbac_role_for_user1() {
    let e = env();
    let (cp, p) = (&e.cp, &e.p);
    e.namespace(NS);
    e.apply(&vm(NS, "r1", &[("kubevirt.io/created-by", "r")], ""));
    let manifests = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: vm-reader, namespace: rbac}\nrules:\n- apiGroups: [kubevirt.io]\n  resources: [virtualmachines]\n  verbs: [get, list]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: vm-reader, namespace: rbac}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: vm-reader}\nsubjects:\n- {apiGroup: rbac.authorization.k8s.io, kind: User, name: user1}\n";
    e.apply(manifests);
    let up = parse_json(&ok(&cp.kubectl(&[
        "get",
        "role",
        "vm-reader",
        "-n",
        NS,
        "-o",
        "json",
    ])));
    assert_eq!(
        up["rules"],
        json!([{"apiGroups": [INTERNAL], "resources": ["internalvirtualizationvirtualmachines"], "verbs": ["get", "list"]}]),
        "{up}"
    );
    let through = parse_json(&ok(&p.kubectl(&[
        "get",
        "role",
        "vm-reader",
        "-n",
        NS,
        "-o",
        "json",
    ])));
    assert_eq!(
        through["rules"][0]["apiGroups"],
        json!(["kubevirt.io"]),
        "{through}"
    );
    assert_eq!(
        through["rules"][0]["resources"],
        json!(["virtualmachines"]),
        "{through}"
    );
    let rb = parse_json(&ok(&cp.kubectl(&[
        "get",
        "rolebinding",
        "vm-reader",
        "-n",
        NS,
        "-o",
        "json",
    ])));
    assert_eq!(rb["subjects"][0]["name"], "user1");
    assert_eq!(rb["roleRef"]["name"], "vm-reader");

    // Impersonation through the proxy (admin credentials + Impersonate-User).
    let out = ok(&p.kubectl(&["get", "vm", "-n", NS, "--as", "user1", "-o", "name"]));
    assert_eq!(out.trim(), "virtualmachine.kubevirt.io/r1");
    let err = fails(&p.kubectl(&["get", "pods", "-n", NS, "--as", "user1"]));
    assert!(
        err.contains("Forbidden") && err.contains("\"user1\" cannot list resource \"pods\""),
        "{err}"
    );
    let err = fails(&p.kubectl(&["get", "vm", "-n", OTHER_NS, "--as", "user1"]));
    assert!(
        err.contains("Forbidden")
            && err.contains("cannot list resource \"virtualmachines\" in API group \"kubevirt.io\""),
        "{err}"
    );
    assert!(!err.contains(INTERNAL), "{err}");
    let err = fails(&p.kubectl(&["delete", "vm", "r1", "-n", NS, "--as", "user1"]));
    assert!(err.contains("Forbidden"), "{err}");

    // user1's own token through the proxy.
    let bearer = format!("Authorization: Bearer {}", cp.get("USER1_TOKEN"));
    let get = |path: &str| {
        let s = ok(&curl(&[
            "-sS",
            "-w",
            "\n%{http_code}",
            "-H",
            &bearer,
            &p.url(path),
        ]));
        let (body, code) = s.rsplit_once('\n').expect("code");
        (code.to_owned(), parse_json(body))
    };
    let (code, list) = get(&format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines"));
    assert_eq!(code, "200", "{list}");
    assert_eq!(list["kind"], "VirtualMachineList", "{list}");
    assert_eq!(names(&list), set(&["r1"]));
    assert_original(&list);
    let (code, one) = get(&format!(
        "/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines/r1"
    ));
    assert_eq!(
        (code.as_str(), &one["kind"]),
        ("200", &json!("VirtualMachine")),
        "{one}"
    );
    for path in [
        format!("/api/v1/namespaces/{NS}/pods"),
        format!("/apis/kubevirt.io/v1/namespaces/{OTHER_NS}/virtualmachines"),
        "/apis/kubevirt.io/v1/virtualmachines".to_owned(),
        format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstances"),
    ] {
        let (code, st) = get(&path);
        assert_eq!(code, "403", "{path}: {st}");
        assert_eq!(st["reason"], "Forbidden", "{st}");
        assert!(!st.to_string().contains(INTERNAL), "{st}");
    }
    let (code, st) = get(&format!(
        "/apis/kubevirt.io/v1/namespaces/{OTHER_NS}/virtualmachines"
    ));
    assert!(
        code == "403"
            && st["message"]
                .as_str()
                .is_some_and(|m| m.contains("in API group \"kubevirt.io\"")),
        "{st}"
    );

    // The access review kubectl auth can-i sends (JSON), impersonated and with user1's token.
    let review = |verb: &str, resource: &str, ns: &str, auth: &[&str]| {
        let body = json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"namespace": ns, "verb": verb, "group": "kubevirt.io", "resource": resource}},
        })
        .to_string();
        let mut args = vec![
            "-sS",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &body,
        ];
        args.extend_from_slice(auth);
        let url = p.url("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews");
        args.push(&url);
        let v = parse_json(&ok(&curl(&args)));
        assert_eq!(v["kind"], "SelfSubjectAccessReview", "{v}");
        assert_eq!(v["spec"]["resourceAttributes"]["group"], "kubevirt.io", "{v}");
        assert_eq!(v["spec"]["resourceAttributes"]["resource"], resource, "{v}");
        v["status"]["allowed"] == json!(true)
    };
    for auth in [vec!["-H", "Impersonate-User: user1"], vec!["-H", bearer.as_str()]] {
        assert!(review("list", "virtualmachines", NS, &auth), "{auth:?}");
        assert!(review("get", "virtualmachines", NS, &auth), "{auth:?}");
        assert!(!review("delete", "virtualmachines", NS, &auth), "{auth:?}");
        assert!(!review("list", "virtualmachines", OTHER_NS, &auth), "{auth:?}");
        assert!(!review("list", "virtualmachineinstances", NS, &auth), "{auth:?}");
    }

    // kubectl auth can-i itself.
    let can = |verb: &str, what: &str, ns: &str| {
        let o = p.kubectl(&["auth", "can-i", verb, what, "--as", "user1", "-n", ns]);
        (
            String::from_utf8_lossy(&o.stdout).trim().to_owned(),
            String::from_utf8_lossy(&o.stderr).trim().to_owned(),
        )
    };
    let (yes, err) = can("list", "virtualmachines.kubevirt.io", NS);
    // kubectl sends the review as protobuf: its resourceAttributes are renamed on the wire.
    assert_eq!(yes, "yes", "{err}");
    assert_eq!(can("get", "vm", NS).0, "yes");
    assert_eq!(can("delete", "virtualmachines.kubevirt.io", NS).0, "no");
    assert_eq!(can("list", "virtualmachines.kubevirt.io", OTHER_NS).0, "no");
    assert_eq!(can("list", "pods", NS).0, "no");
}
