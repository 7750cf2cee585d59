//! Excludes in every view: metadata-only lists and watches and Table rows, whose objects carry
//! no kind of their own (the request's resource gives it).

use kube_api_rewriter::Rules;
use kube_api_rewriter::rules::Source;
use kube_api_rewriter::{ProxyMode, ResponseBody, Route};
use serde_json::Value;

fn rules() -> Rules {
    let text = "excludes:\n  - kinds: [ConfigMap]\n    matchLabels: {hide: \"yes\"}\n  - kinds: [InternalVirtualizationVirtualMachine]\n    matchNames: [secret-vm]\n";
    Rules::parse(&[
        Source {
            name: "kubevirt",
            text: kube_api_rewriter::rules::builtin::KUBEVIRT,
        },
        Source { name: "x", text },
    ])
    .unwrap()
}

fn meta(name: &str, hidden: bool) -> String {
    let labels = if hidden { r#","labels":{"hide":"yes"}"# } else { "" };
    format!(
        r#"{{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{{"name":"{name}","uid":"{name}"{labels}}}}}"#
    )
}

fn list(rules: &Rules, path: &str, body: &str) -> Value {
    let r = Route::new(rules, ProxyMode::Api, "GET", path);
    let mut lr = r.list_rewriter(rules);
    let mut out = Vec::new();
    lr.feed(body.as_bytes(), &mut out).unwrap();
    lr.finish(&mut out).unwrap();
    serde_json::from_slice(&out).unwrap()
}

fn names(items: &Value) -> Vec<&str> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            i["metadata"]["name"]
                .as_str()
                .or(i["object"]["metadata"]["name"].as_str())
                .unwrap()
        })
        .collect()
}

#[test]
fn metadata_lists_apply_excludes_by_the_requested_resource() {
    let rules = rules();
    let body = format!(
        r#"{{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{{}},"items":[{},{},{}]}}"#,
        meta("a", false),
        meta("b", true),
        meta("c", false)
    );
    let v = list(&rules, "/api/v1/namespaces/ns/configmaps", &body);
    assert_eq!(names(&v["items"]), ["a", "c"]);
    // The same items listed as Secrets: the ConfigMap exclude does not apply.
    let v = list(&rules, "/api/v1/namespaces/ns/secrets", &body);
    assert_eq!(names(&v["items"]), ["a", "b", "c"]);
    // A renamed resource: the exclude names the kind as the server holds it.
    let vms = format!(
        r#"{{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{{}},"items":[{},{}]}}"#,
        meta("vm", false),
        meta("secret-vm", false)
    );
    let v = list(&rules, "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines", &vms);
    assert_eq!(names(&v["items"]), ["vm"]);
}

#[test]
fn metadata_watches_apply_excludes() {
    let rules = rules();
    let r = Route::new(
        &rules,
        ProxyMode::Api,
        "GET",
        "/api/v1/namespaces/ns/configmaps?watch=1",
    );
    let mut w = r.watch_rewriter(&rules);
    let mut out = Vec::new();
    for (ty, hidden) in [("ADDED", false), ("MODIFIED", true), ("MODIFIED", false)] {
        let e = format!(r#"{{"type":"{ty}","object":{}}}"#, meta("a", hidden));
        w.feed(e.as_bytes(), &mut out).unwrap();
    }
    let types: Vec<String> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(types, ["ADDED", "DELETED", "ADDED"]);
}

#[test]
fn table_rows_of_hidden_objects_are_dropped() {
    let rules = rules();
    let row = |name: &str, hidden: bool| format!(r#"{{"cells":["{name}"],"object":{}}}"#, meta(name, hidden));
    let table = format!(
        r#"{{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{{}},"columnDefinitions":[{{"name":"Name"}}],"rows":[{},{},{}]}}"#,
        row("a", true),
        row("b", false),
        row("c", true)
    );
    let r = Route::new(&rules, ProxyMode::Api, "GET", "/api/v1/namespaces/ns/configmaps");
    let ResponseBody::Body(out) = r.response_body(&rules, table.as_bytes()).unwrap() else {
        panic!("not found")
    };
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(names(&v["rows"]), ["b"]);
    assert_eq!(v["columnDefinitions"][0]["name"], "Name");
    // A row holding a whole object is restored.
    let vm = r#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","rows":[{"cells":["x"],"object":{"kind":"InternalVirtualizationVirtualMachine","apiVersion":"internal.virtualization.deckhouse.io/v1","metadata":{"name":"x","labels":{"kubevirt.internal.virtualization.deckhouse.io/a":"1"}}}}]}"#;
    let r = Route::new(
        &rules,
        ProxyMode::Api,
        "GET",
        "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines",
    );
    let ResponseBody::Body(out) = r.response_body(&rules, vm.as_bytes()).unwrap() else {
        panic!("not found")
    };
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["rows"][0]["object"]["kind"], "VirtualMachine");
    assert_eq!(v["rows"][0]["object"]["metadata"]["labels"]["kubevirt.io/a"], "1");
}

/// `includeObject=None`: upstream is asked for metadata (so excludes see labels) and the rows'
/// objects become `null`, as kube-apiserver sends them.
#[test]
fn tables_without_objects_are_filtered_from_metadata() {
    let rules = rules();
    let path = "/api/v1/namespaces/ns/configmaps?includeObject=None&limit=5";
    let r = Route::new(&rules, ProxyMode::Api, "GET", path);
    assert_eq!(
        r.upstream_path(),
        "/api/v1/namespaces/ns/configmaps?includeObject=Metadata&limit=5"
    );
    let table = format!(
        r#"{{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{{}},"rows":[{{"cells":["a"],"object":{}}},{{"object":{} , "cells":["b"]}},{{"object":{}}},{{"cells":["d"],"object":{},"x":1}}]}}"#,
        meta("a", false),
        meta("b", false),
        meta("c", true),
        meta("d", false)
    );
    let ResponseBody::Body(out) = r.response_body(&rules, table.as_bytes()).unwrap() else {
        panic!("not found")
    };
    let v: Value =
        serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
    assert_eq!(
        v["rows"],
        serde_json::json!([
            {"cells": ["a"], "object": null},
            {"object": null, "cells": ["b"]},
            {"cells": ["d"], "object": null, "x": 1}
        ]),
        "{v}"
    );
    // Other includeObject values, and other verbs, are left alone.
    for (m, p) in [
        ("GET", "/api/v1/namespaces/ns/configmaps?includeObject=Object"),
        ("DELETE", path),
    ] {
        let r = Route::new(&rules, ProxyMode::Api, m, p);
        assert_eq!(r.upstream_path(), p);
        assert!(!r.context().strip_row_objects);
    }
}
