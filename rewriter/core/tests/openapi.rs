//! `/openapi/v2` of the real kube-apiserver 1.20 with KubeVirt's full-schema CRDs installed
//! (renamed, through the proxy), as JSON and as the protobuf kubectl asks for, restored.
//! Captured with `curl $KUBE_APISERVER_URL/openapi/v2` (and `-H 'Accept:
//! application/com.github.proto-openapi.spec.v2@v1.0+protobuf'`), stored gzip-compressed.

use std::collections::BTreeSet;
use std::io::Read;

use kube_api_rewriter::{Rules, openapi};
use prost::Message;
use serde_json::Value;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../../testdata/kube-apiserver-1.20/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let gz = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice())
        .read_to_end(&mut out)
        .expect("gzip");
    out
}

const LEAKS: [&str; 3] = [
    "io.deckhouse.virtualization.internal",
    "internal.virtualization.deckhouse.io/",
    "group: internal.virtualization.deckhouse.io",
];

fn refs(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("$ref", Value::String(s)) => {
                        out.insert(s.clone());
                    }
                    _ => refs(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

/// The restored JSON document: names of the renamed group appear only in their original form,
/// every `$ref` resolves, and whatever belongs to other groups is unchanged.
fn restored_json() -> (Value, Value) {
    let rules = Rules::builtin_kubevirt();
    let input = fixture("openapi-v2-kubevirt.json.gz");
    let out = openapi::json::restore(&rules, &input)
        .expect("valid JSON")
        .into_owned();
    let before: Value = serde_json::from_slice(&input).expect("json");
    let after: Value = serde_json::from_slice(&out).expect("still JSON");
    (before, after)
}

#[test]
fn v2_json() {
    let (before, after) = restored_json();
    let defs = after["definitions"].as_object().expect("definitions");
    for k in defs.keys() {
        assert!(!k.contains("nternalVirtualization"), "{k}");
    }
    for kind in [
        "VirtualMachine",
        "VirtualMachineList",
        "VirtualMachineInstance",
        "KubeVirt",
    ] {
        let d = &defs[&format!("io.kubevirt.v1.{kind}")];
        assert_eq!(
            d["x-kubernetes-group-version-kind"],
            serde_json::json!([{"group": "kubevirt.io", "kind": kind, "version": "v1"}]),
            "{kind}"
        );
    }
    // The full schema came through: explain and validation read it.
    assert!(
        defs["io.kubevirt.v1.VirtualMachine"]["properties"]["spec"]["properties"]["template"]["properties"]["spec"]
            ["properties"]["domain"]
            .is_object()
    );
    let mut all = BTreeSet::new();
    refs(&after, &mut all);
    for r in &all {
        let name = r.strip_prefix("#/definitions/").expect("local ref");
        assert!(defs.contains_key(name), "dangling {r}");
    }
    assert!(all.contains("#/definitions/io.kubevirt.v1.VirtualMachineList"));
    // Everything of other groups: the same, key for key.
    let (bd, bp) = (
        before["definitions"].as_object().unwrap(),
        before["paths"].as_object().unwrap(),
    );
    let ap = after["paths"].as_object().expect("paths");
    assert_eq!(bd.len(), defs.len());
    assert_eq!(bp.len(), ap.len());
    for (k, v) in bd.iter().filter(|(k, _)| !k.starts_with("io.deckhouse")) {
        assert_eq!(defs.get(k), Some(v), "{k}");
    }
    for (k, v) in bp.iter().filter(|(k, _)| !k.contains("internal.virtualization")) {
        assert_eq!(ap.get(k), Some(v), "{k}");
    }
    for k in ap.keys() {
        assert!(!k.contains("internal.virtualization"), "{k}");
    }
    let get = &ap["/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}"]["get"];
    assert_eq!(
        get["x-kubernetes-group-version-kind"],
        serde_json::json!({"group": "kubevirt.io", "kind": "VirtualMachine", "version": "v1"})
    );
    let text = serde_json::to_string(&after).expect("text");
    for leak in LEAKS {
        assert!(!text.contains(leak), "{leak}");
    }
}

// The few gnostic messages this test reads back, with prost (it skips what it does not declare).
#[derive(Message)]
struct Document {
    #[prost(message, optional, tag = "8")]
    paths: Option<Paths>,
    #[prost(message, optional, tag = "9")]
    definitions: Option<Definitions>,
}
#[derive(Message)]
struct Paths {
    #[prost(message, repeated, tag = "2")]
    path: Vec<Named>,
}
#[derive(Message)]
struct Definitions {
    #[prost(message, repeated, tag = "1")]
    additional_properties: Vec<Named>,
}
#[derive(Message)]
struct Named {
    #[prost(string, tag = "1")]
    name: String,
}

#[test]
fn v2_protobuf() {
    let rules = Rules::builtin_kubevirt();
    let input = fixture("openapi-v2-kubevirt.pb.gz");
    let out = openapi::proto::restore(&rules, &input)
        .expect("valid protobuf")
        .expect("changed");
    for leak in LEAKS {
        assert!(!out.windows(leak.len()).any(|w| w == leak.as_bytes()), "{leak}");
    }
    // Once restored, nothing more to restore.
    assert_eq!(openapi::proto::restore(&rules, &out).expect("valid"), None);
    // The same names as the restored JSON document (gnostic's order is its own).
    let doc = Document::decode(out.as_slice()).expect("a gnostic Document");
    let (_, json) = restored_json();
    let names = |v: &Value| {
        v.as_object()
            .expect("map")
            .keys()
            .cloned()
            .collect::<BTreeSet<_>>()
    };
    let pb_defs: BTreeSet<String> = doc
        .definitions
        .expect("definitions")
        .additional_properties
        .into_iter()
        .map(|n| n.name)
        .collect();
    let pb_paths: BTreeSet<String> = doc
        .paths
        .expect("paths")
        .path
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert_eq!(pb_defs, names(&json["definitions"]));
    assert_eq!(pb_paths, names(&json["paths"]));
    let gvk = b"group: kubevirt.io\nkind: VirtualMachine\nversion: v1\n";
    assert!(out.windows(gvk.len()).any(|w| w == gvk));
}
