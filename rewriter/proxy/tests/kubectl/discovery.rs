//! What kubectl learns about KubeVirt's resources through the proxy: the CRDs (renamed
//! upstream, established, served), `api-resources` / `api-versions`, and `explain`.

use std::time::Duration;

use kube_api_rewriter_testkit::*;
use serde_json::json;

use crate::assertions::names;
use crate::manifests::yaml_file;
use crate::{CRD_FILES, CRDS, INTERNAL, env};

/// The CRDs the environment applied through the proxy are held renamed, whole, by
/// kube-apiserver, and are established and served under their original names.
#[test]
fn crds_renamed_and_established() {
    let e = env();
    let (cp, p) = (&e.cp, &e.p);
    let up = parse_json(&ok(&cp.kubectl(&["get", "crd", "-o", "json"])));
    let up_names = names(&up);
    for n in &up_names {
        assert!(!n.ends_with(".kubevirt.io"), "original CRD upstream: {n}");
    }
    for f in CRD_FILES {
        let want = yaml_file(&format!("{}/renamed/{f}.yaml", crd_fixtures().display()));
        let name = want["metadata"]["name"].as_str().expect("name");
        assert!(
            name.starts_with("internalvirtualization") && name.ends_with(INTERNAL),
            "{name}"
        );
        let got = up["items"]
            .as_array()
            .expect("items")
            .iter()
            .find(|c| c["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{name} not upstream; upstream has {up_names:?}"));
        assert_eq!(got["spec"]["group"], want["spec"]["group"], "{name}");
        for k in ["kind", "listKind", "plural", "singular"] {
            assert_eq!(got["spec"]["names"][k], want["spec"]["names"][k], "{name} {k}");
        }
        if got["spec"]["names"]["shortNames"] != want["spec"]["names"]["shortNames"] {
            eprintln!(
                "note: {name} shortNames {} upstream, {} in renamed/ (KubeVirt's own differ)",
                got["spec"]["names"]["shortNames"], want["spec"]["names"]["shortNames"]
            );
        }
        // The full schema landed (not trimmed on the way).
        let props = &got["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert!(
            props["properties"].as_object().is_some_and(|m| !m.is_empty()),
            "{name}"
        );
    }
    for crd in CRDS {
        if let Some(err) = wait_crd_established(p, crd) {
            panic!("kubectl wait --for condition=established crd/{crd} through the proxy: {err}");
        }
    }
    let through = parse_json(&ok(&p.kubectl(&[
        "get",
        "crd",
        "virtualmachines.kubevirt.io",
        "-o",
        "json",
    ])));
    assert_eq!(through["spec"]["group"], "kubevirt.io");
    assert_eq!(through["spec"]["names"]["kind"], "VirtualMachine");
    assert_eq!(through["spec"]["names"]["shortNames"], json!(["vm", "vms"]));
    // The renamed resource is served.
    p.wait_until(Duration::from_secs(30), |p| {
        p.kubectl(&["get", "vm", "-A"]).status.success()
    });
}

/// `kubectl api-resources` and `api-versions` list `kubevirt.io` with its short names and no
/// renamed name.
#[test]
fn api_resources() {
    let e = env();
    let p = &e.p;
    let out = ok(&p.kubectl(&["api-resources"]));
    assert!(
        !out.contains("internalvirtualization") && !out.contains(INTERNAL),
        "{out}"
    );
    let line = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some("virtualmachines"))
        .unwrap_or_else(|| panic!("no virtualmachines:\n{out}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        cols,
        [
            "virtualmachines",
            "vm,vms",
            "kubevirt.io/v1",
            "true",
            "VirtualMachine"
        ],
        "{out}"
    );
    let groups = ok(&p.kubectl(&["api-versions"]));
    assert!(groups.lines().any(|l| l == "kubevirt.io/v1"), "{groups}");
    assert!(!groups.contains(INTERNAL), "{groups}");
}

/// kubectl reads the OpenAPI documents through the proxy, which restores them
/// (tests/openapi.rs checks explain and validation in depth).
#[test]
fn explain() {
    let e = env();
    let p = &e.p;
    // kube-apiserver publishes a new CRD's schema a few seconds after it is established.
    p.wait_until(Duration::from_secs(60), |p| {
        p.kubectl(&["explain", "vm"]).status.success()
    });
    let out = ok(&p.kubectl(&["explain", "vm"]));
    assert!(
        out.contains("VirtualMachine") && !out.contains("InternalVirtualization"),
        "{out}"
    );
}
