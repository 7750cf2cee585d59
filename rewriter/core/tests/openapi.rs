//! OpenAPI of the real kube-apiserver v1.36.3 with KubeVirt's full-schema CRDs installed
//! (renamed, as the module ships them), restored: `/openapi/v2` as JSON and as the protobuf
//! kubectl asks for (captured with `Accept-Encoding: gzip`, kept as the server compressed them),
//! and `/openapi/v3` (the index and the renamed group's document). All from
//! `testdata/kube-apiserver-1.36/`, made by `scripts/capture-fixtures.py`.

use std::collections::BTreeSet;
use std::io::Read;

use kube_api_rewriter::{Rules, openapi};
use prost::Message;
use serde_json::Value;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../../testdata/kube-apiserver-1.36/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    if !name.ends_with(".gz") {
        return raw;
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(raw.as_slice())
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
    // Every `$ref` resolves: to a definition, or to one of the query parameters the v1.36 server
    // shares through the document's top-level `parameters`.
    let mut all = BTreeSet::new();
    refs(&after, &mut all);
    for r in &all {
        let (section, name) = r
            .strip_prefix("#/")
            .and_then(|r| r.split_once('/'))
            .unwrap_or_else(|| panic!("not a local ref: {r}"));
        assert!(
            matches!(section, "definitions" | "parameters") && after[section].get(name).is_some(),
            "dangling {r}"
        );
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

/// `/openapi/v3`: the index names the group document under the original group (the hash kept,
/// so the client's cache key is the server's), and the group document has only original names,
/// every `$ref` resolving.
#[test]
fn v3_index_and_group_document() {
    let rules = Rules::builtin_kubevirt();
    let index_in = fixture("openapi-v3-index.json");
    let index: Value =
        serde_json::from_slice(&openapi::json::restore(&rules, &index_in).expect("valid")).expect("json");
    let before: Value = serde_json::from_slice(&index_in).expect("json");
    let paths = index["paths"].as_object().expect("paths");
    assert_eq!(paths.len(), before["paths"].as_object().expect("paths").len());
    let up = before["paths"]["apis/internal.virtualization.deckhouse.io/v1"]["serverRelativeURL"]
        .as_str()
        .expect("the renamed group's document");
    let hash = up.split_once("?hash=").expect("a hash").1;
    assert_eq!(
        paths["apis/kubevirt.io/v1"]["serverRelativeURL"],
        format!("/openapi/v3/apis/kubevirt.io/v1?hash={hash}")
    );
    for (k, v) in before["paths"].as_object().expect("paths") {
        if !k.contains("internal.virtualization") {
            assert_eq!(paths.get(k), Some(v), "{k}");
        }
    }

    let doc_in = fixture("openapi-v3-internal-virtualization-v1.json");
    let doc: Value =
        serde_json::from_slice(&openapi::json::restore(&rules, &doc_in).expect("valid")).expect("json");
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    let vm = &schemas["io.kubevirt.v1.VirtualMachine"];
    assert_eq!(
        vm["x-kubernetes-group-version-kind"],
        serde_json::json!([{"group": "kubevirt.io", "kind": "VirtualMachine", "version": "v1"}])
    );
    assert!(
        vm["properties"]["spec"]["properties"]["template"].is_object(),
        "the full schema"
    );
    for kind in ["VirtualMachineInstanceMigrationList", "KubeVirt"] {
        assert!(schemas.contains_key(&format!("io.kubevirt.v1.{kind}")), "{kind}");
    }
    let mut all = BTreeSet::new();
    refs(&doc, &mut all);
    for r in &all {
        let name = r.strip_prefix("#/components/schemas/").expect("a schema ref");
        assert!(schemas.contains_key(name), "dangling {r}");
    }
    let ops = doc["paths"].as_object().expect("paths");
    assert!(ops.contains_key("/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}"));
    let text = doc.to_string();
    for leak in LEAKS {
        assert!(!text.contains(leak), "{leak}");
    }
    // Every operation's group-version-kind is the original one (descriptions, operationIds and
    // tags are free text the server wrote, left as they are).
    let (mut gvks, mut upstream) = (Vec::new(), Vec::new());
    gvk_of_operations(&doc["paths"], &mut gvks);
    let doc_before: Value = serde_json::from_slice(&doc_in).expect("json");
    gvk_of_operations(&doc_before["paths"], &mut upstream);
    assert_eq!(gvks.len(), upstream.len());
    for g in &gvks {
        assert_eq!(g["group"], "kubevirt.io", "{g}");
    }
    let kinds: BTreeSet<&str> = gvks.iter().map(|g| g["kind"].as_str().expect("kind")).collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "KubeVirt",
            "VirtualMachine",
            "VirtualMachineInstance",
            "VirtualMachineInstanceMigration"
        ])
    );
}

fn gvk_of_operations<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "x-kubernetes-group-version-kind" {
                    out.push(x);
                } else {
                    gvk_of_operations(x, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| gvk_of_operations(x, out)),
        _ => {}
    }
}
