//! What the aggregator serves from us: discovery, the OpenAPI documents, health and version,
//! and `GET virtualmachines/{name}`.

use std::time::Duration;

use kube_api_rewriter_testkit as tk;
use serde_json::Value;

use crate::client::direct;
use crate::env::{Env, GROUP_PATH, NS, wait_for};

pub fn discovery(e: &Env) {
    let list: Value = tk::parse_json(&tk::ok(&e.kubectl(&["get", "--raw", GROUP_PATH])));
    assert_eq!(list["kind"], "APIResourceList");
    let names: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    for n in [
        "virtualmachines",
        "virtualmachines/console",
        "virtualmachines/vnc",
        "virtualmachines/portforward",
        "virtualmachines/freeze",
        "virtualmachines/addvolume",
    ] {
        assert!(names.contains(&n), "{n} in {names:?}");
    }
    let group: Value = tk::parse_json(&tk::ok(&e.kubectl(&[
        "get",
        "--raw",
        "/apis/subresources.virtualization.deckhouse.io",
    ])));
    assert_eq!(group["preferredVersion"]["version"], "v1alpha2");
    let apis: Value = tk::parse_json(&tk::ok(&e.kubectl(&["get", "--raw", "/apis"])));
    assert!(
        apis["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "subresources.virtualization.deckhouse.io"),
        "{apis}"
    );
    let out = tk::ok(&e.kubectl(&[
        "api-resources",
        "--api-group=subresources.virtualization.deckhouse.io",
    ]));
    assert!(
        out.contains("virtualmachines") && out.contains("VirtualMachine"),
        "{out}"
    );
    // The aggregator's availability probe reached us with its own identity.
    assert!(
        e.server.logs().contains("user=system:kube-aggregator"),
        "{}",
        e.server.logs()
    );
}

pub fn openapi(e: &Env) {
    let def = "io.deckhouse.virtualization.subresources.v1alpha2.VirtualMachineConsole";
    wait_for(
        "the aggregator merged our OpenAPI v2",
        Duration::from_secs(90),
        || {
            let o = e.kubectl(&["get", "--raw", "/openapi/v2"]);
            o.status.success() && String::from_utf8_lossy(&o.stdout).contains(def)
        },
    );
    assert!(
        e.server
            .logs()
            .contains("path=/openapi/v2 user=system:aggregator code=200"),
        "{}",
        e.server.logs()
    );
    // The aggregator fetches v3 when it chooses to: ask the server straight, as the aggregator does.
    let (code, body) = e.as_user(&e.server, "system:aggregator", &[], &[], "/openapi/v3");
    assert_eq!(code, 200, "{body}");
    let idx = tk::parse_json(&body);
    let url = idx["paths"]["apis/subresources.virtualization.deckhouse.io/v1alpha2"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_owned();
    let (code, body) = e.as_user(&e.server, "system:aggregator", &[], &[], &url);
    assert_eq!(code, 200, "{body}");
    let doc = tk::parse_json(&body);
    assert_eq!(doc["openapi"], "3.0.0");
    assert!(doc["components"]["schemas"][def].is_object(), "{doc}");
}

pub fn health(e: &Env) {
    for p in ["/healthz", "/livez", "/readyz"] {
        // No client certificate at all: still ok.
        let (code, body) = direct(&e.server, e, None, &[], &[], p);
        assert_eq!((code, body.as_str()), (200, "ok"), "{p}");
    }
    let (code, body) = e.admin(&e.server, &[], "/version");
    assert_eq!(code, 200, "{body}");
    assert_eq!(tk::parse_json(&body)["gitVersion"], "v0.1.0");
}

pub fn get_vm(e: &Env) {
    let vm = tk::parse_json(&tk::ok(&e.kubectl(&[
        "get",
        "--raw",
        &format!("{GROUP_PATH}/namespaces/{NS}/virtualmachines/vm-running"),
    ])));
    assert_eq!(vm["kind"], "VirtualMachine");
    assert_eq!(
        vm["apiVersion"],
        "subresources.virtualization.deckhouse.io/v1alpha2"
    );
    assert_eq!(vm["metadata"]["name"], "vm-running");
    let err = tk::fails(&e.kubectl(&[
        "get",
        "--raw",
        &format!("{GROUP_PATH}/namespaces/{NS}/virtualmachines/nope"),
    ]));
    assert!(err.contains("NotFound") || err.contains("not found"), "{err}");
}
