//! What the cases assert about objects: renamed names only upstream, original names only
//! through the proxy, and the names a list holds.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::{INTERNAL, RENAMED_PREFIX};

fn keys(v: &Value) -> Vec<String> {
    v.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// An object as kube-apiserver holds it: renamed group/kind, and no `kubevirt.io/` key in
/// labels, annotations, finalizers, ownerReferences or managedFields (of `metadata`; the pod
/// template's labels in `spec` are left as the client wrote them, as Go does).
pub fn assert_upstream_renamed(v: &Value) {
    let m = &v["metadata"];
    assert_eq!(v["apiVersion"], format!("{INTERNAL}/v1"), "{v}");
    assert_eq!(v["kind"], "InternalVirtualizationVirtualMachine", "{v}");
    for k in keys(&m["labels"]).iter().chain(&keys(&m["annotations"])) {
        assert!(!k.starts_with("kubevirt.io/"), "original key {k} upstream: {m}");
    }
    for f in strings(&m["finalizers"]) {
        assert!(
            !f.starts_with("kubevirt.io/"),
            "original finalizer {f} upstream: {m}"
        );
    }
    for o in m["ownerReferences"].as_array().into_iter().flatten() {
        let av = o["apiVersion"].as_str().unwrap_or("");
        assert!(
            !av.starts_with("kubevirt.io/"),
            "original ownerReference upstream: {o}"
        );
    }
    for mf in m["managedFields"].as_array().into_iter().flatten() {
        assert!(
            !mf["apiVersion"]
                .as_str()
                .unwrap_or("")
                .starts_with("kubevirt.io/"),
            "{mf}"
        );
        assert!(
            !mf["fieldsV1"]["f:metadata"]
                .to_string()
                .contains("f:kubevirt.io/"),
            "original managedFields key upstream: {mf}"
        );
    }
}

/// An object as a client sees it through the proxy: original names only (the client's own
/// `last-applied-configuration` annotation is not looked at, it is opaque text).
pub fn assert_original(v: &Value) {
    let mut v = v.clone();
    if let Some(a) = v["metadata"]["annotations"].as_object_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    let s = v.to_string();
    for needle in [
        INTERNAL,
        "InternalVirtualization",
        "internalvirtualization",
        RENAMED_PREFIX,
    ] {
        assert!(!s.contains(needle), "{needle} leaks through the proxy: {s}");
    }
}

/// The names of a list's items.
pub fn names(list: &Value) -> BTreeSet<String> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_owned))
        .collect()
}

pub fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}
