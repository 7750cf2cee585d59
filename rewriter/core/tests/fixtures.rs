//! The engine against real kube-apiserver v1.36.3 captures (`testdata/kube-apiserver-1.36/` at the repository
//! root, made by `scripts/capture-fixtures.py`) and the KubeVirt CRDs: restore what the server sends, rename it
//! back, and check the names in between.

use std::path::PathBuf;

use kube_api_rewriter::object::{self, Context, Outcome};
use kube_api_rewriter::stream::{ListRewriter, WatchRewriter};
use kube_api_rewriter::{Direction, Rules};
use serde_json::Value;

fn shared() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

fn fixture(name: &str) -> Vec<u8> {
    let p = shared().join("kube-apiserver-1.36").join(name);
    let raw = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    if name.ends_with(".gz") {
        use std::io::Read;
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .unwrap();
        out
    } else {
        raw
    }
}

fn rules() -> Rules {
    Rules::builtin_kubevirt()
}

fn whole(rules: &Rules, dir: Direction, body: &[u8]) -> Vec<u8> {
    match object::rewrite(rules, dir, body, &Context::default()).unwrap() {
        Outcome::Object(b) => b.into_owned(),
        Outcome::Excluded => panic!("excluded"),
    }
}

fn json(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap()
}

fn watch(rules: &Rules, dir: Direction, body: &[u8], chunk: usize) -> Vec<u8> {
    let mut w = WatchRewriter::new(rules, dir, Context::default());
    let mut out = Vec::new();
    for c in body.chunks(chunk.max(1)) {
        w.feed(c, &mut out).unwrap();
    }
    w.finish(&mut out).unwrap();
    out
}

fn list(rules: &Rules, dir: Direction, body: &[u8], chunk: usize) -> Vec<u8> {
    let mut l = ListRewriter::new(rules, dir, Context::default());
    let mut out = Vec::new();
    for c in body.chunks(chunk.max(1)) {
        l.feed(c, &mut out).unwrap();
    }
    l.finish(&mut out).unwrap();
    out
}

#[derive(serde::Deserialize)]
struct Entry {
    file: String,
    path: String,
    status: Option<u16>,
}

fn index() -> Vec<Entry> {
    serde_json::from_slice(&fixture("index.json")).unwrap()
}

/// Discovery documents (legacy and aggregated): clients never send them, so renaming does not
/// undo restoring.
const LOSSY: &[&str] = &[
    "discovery-apis.json",
    "discovery-apis-internal-virtualization.json",
    "discovery-apis-internal-virtualization-v1.json",
    "discovery-apis-aggregated-v2.json",
];

#[test]
fn every_server_response_round_trips() {
    let rules = rules();
    let mut checked = 0;
    for e in index() {
        let body = fixture(&e.file);
        if e.file.ends_with(".raw")
            || e.path.starts_with("/openapi/")
            || serde_json::from_slice::<Value>(&body).is_err() && !e.path.contains("watch=")
        {
            continue; // text/plain 404, chunk-framed capture; OpenAPI documents: tests/openapi.rs
        }
        let (restored, back) = if e.path.contains("watch=") {
            let r = watch(&rules, Direction::Restore, &body, 4096);
            let b = watch(&rules, Direction::Rename, &r, 4096);
            (r, b)
        } else {
            let r = whole(&rules, Direction::Restore, &body);
            let b = whole(&rules, Direction::Rename, &r);
            (r, b)
        };
        let text = String::from_utf8_lossy(&restored);
        let is_status = serde_json::from_slice::<Value>(&body).is_ok_and(|v| v["kind"] == "Status");
        if LOSSY.contains(&e.file.as_str()) || is_status {
            // Clients never send these, so renaming leaves them alone: check the restore only.
            assert!(
                !text.contains("internal.virtualization.deckhouse.io"),
                "{}: renamed group left: {text}",
                e.file
            );
            continue;
        }
        if e.path.contains("watch=") {
            let a: Vec<Value> = body
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .map(json)
                .collect();
            let b: Vec<Value> = back
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .map(json)
                .collect();
            assert_eq!(a, b, "{}: rename(restore(x)) != x", e.file);
        } else if e.file.starts_with("crd-") {
            // Lossy by design: CRD names come from the rules, and the KubeVirt rules give VMs
            // `vm, vms` and VMIs `vmi, vmsi` where this server's CRDs (the module's) declare only
            // `intvirtvm` and `intvirtvmi`.
            let strip = |mut v: Value| {
                for item in v
                    .get_mut("items")
                    .and_then(Value::as_array_mut)
                    .map_or(vec![], |a| a.iter_mut().collect())
                {
                    item["spec"]["names"]["shortNames"] = Value::Null;
                    item["status"]["acceptedNames"]["shortNames"] = Value::Null;
                }
                if v.get("spec").is_some() {
                    v["spec"]["names"]["shortNames"] = Value::Null;
                    v["status"]["acceptedNames"]["shortNames"] = Value::Null;
                }
                v
            };
            assert_eq!(
                strip(json(&body)),
                strip(json(&back)),
                "{}: rename(restore(x)) != x",
                e.file
            );
        } else {
            assert_eq!(json(&body), json(&back), "{}: rename(restore(x)) != x", e.file);
        }
        // The API server's own bytes come back unchanged for every walker-rewritten kind.
        if e.file.starts_with("vm") || e.file.starts_with("kubevirt") || e.file.starts_with("event") {
            let compact = |b: &[u8]| {
                b.split(|&c| c == b'\n')
                    .filter(|l| !l.is_empty())
                    .flatten()
                    .copied()
                    .collect::<Vec<u8>>()
            };
            assert_eq!(
                compact(&body),
                compact(&back),
                "{}: bytes changed in a round trip",
                e.file
            );
        }
        if e.status.unwrap_or(200) < 300
            && e.path.contains("internal.virtualization.deckhouse.io")
            && !e.file.contains("410")
        {
            assert!(text.contains("kubevirt.io"), "{}: nothing restored", e.file);
        }
        checked += 1;
    }
    assert!(checked > 50, "only {checked} fixtures checked");
}

#[test]
fn vm_list_restores_every_name_by_location() {
    let rules = rules();
    let v = json(&whole(&rules, Direction::Restore, &fixture("vm-list.json")));
    assert_eq!(v["apiVersion"], "kubevirt.io/v1");
    assert_eq!(v["kind"], "VirtualMachineList");
    let vm1 = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == "vm1")
        .unwrap();
    assert_eq!(vm1["apiVersion"], "kubevirt.io/v1");
    assert_eq!(vm1["kind"], "VirtualMachine");
    let m = &vm1["metadata"];
    assert_eq!(m["labels"]["kubevirt.io/created-by"], "virt-controller");
    assert_eq!(m["annotations"]["kubevirt.io/latest-observed-api-version"], "v1");
    assert_eq!(m["finalizers"][0], "kubevirt.io/virtualMachineControllerFinalize");
    assert_eq!(
        m["ownerReferences"][0]["apiVersion"], "virtualization.deckhouse.io/v1alpha2",
        "other groups untouched"
    );
    let mf = m["managedFields"].as_array().unwrap();
    assert!(mf.iter().all(|f| f["apiVersion"] == "kubevirt.io/v1"));
    let fields = mf
        .iter()
        .map(|f| f["fieldsV1"]["f:metadata"].to_string())
        .collect::<String>();
    assert!(
        fields.contains("f:kubevirt.io/created-by"),
        "managedFields keys restored: {fields}"
    );
    assert!(!fields.contains("kubevirt.internal"), "{fields}");
    // Free text and spec are not touched: the server's template labels stay as they are.
    let tmpl = serde_json::to_string(&vm1["spec"]).unwrap();
    assert_eq!(
        tmpl,
        serde_json::to_string(
            &json(&fixture("vm-list.json"))["items"]
                .as_array()
                .unwrap()
                .iter()
                .find(|i| i["metadata"]["name"] == "vm1")
                .unwrap()["spec"]
        )
        .unwrap()
    );
}

#[test]
fn vmi_owner_reference_to_a_renamed_kind_is_restored() {
    let rules = rules();
    let v = json(&whole(&rules, Direction::Restore, &fixture("vmi-get.json")));
    let owner = &v["metadata"]["ownerReferences"][0];
    assert_eq!(owner["apiVersion"], "kubevirt.io/v1");
    assert_eq!(owner["kind"], "VirtualMachine");
    assert!(
        v["metadata"]["finalizers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "foregroundDeleteVirtualMachine")
    );
}

#[test]
fn tables_and_partial_object_metadata_are_restored() {
    let rules = rules();
    for f in [
        "vm-list-table.json",
        "vm-list-table-includeobject-object.json",
        "vm-get-table.json",
        "vm-list-partialobjectmetadata.json",
    ] {
        let out = whole(&rules, Direction::Restore, &fixture(f));
        let text = String::from_utf8(out).unwrap();
        assert!(
            !text.contains("kubevirt.internal.virtualization.deckhouse.io/created-by"),
            "{f}: {text:.300}"
        );
        assert!(text.contains("kubevirt.io/created-by"), "{f}");
    }
    let v = json(&whole(
        &rules,
        Direction::Restore,
        &fixture("vm-list-table-includeobject-object.json"),
    ));
    assert_eq!(v["rows"][0]["object"]["kind"], "VirtualMachine");
}

#[test]
fn status_errors_name_the_original_resource() {
    let rules = rules();
    let v = json(&whole(&rules, Direction::Restore, &fixture("vm-get-404.json")));
    assert_eq!(
        v["message"],
        "virtualmachines.kubevirt.io \"does-not-exist\" not found"
    );
    assert_eq!(v["details"]["group"], "kubevirt.io");
    assert_eq!(v["details"]["kind"], "virtualmachines");
    let v = json(&whole(
        &rules,
        Direction::Restore,
        &fixture("vm-create-422-invalid.json"),
    ));
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("VirtualMachine.kubevirt.io \"Bad_Name\" is invalid"),
        "{}",
        v["message"]
    );
    assert_eq!(v["details"]["kind"], "VirtualMachine");
    let v = json(&whole(
        &rules,
        Direction::Restore,
        &fixture("vm-list-403-forbidden.json"),
    ));
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("cannot list resource \"virtualmachines\" in API group \"kubevirt.io\"")
    );
}

#[test]
fn discovery_shows_only_original_groups() {
    let rules = rules();
    let v = json(&whole(
        &rules,
        Direction::Restore,
        &fixture("discovery-apis.json"),
    ));
    let names: Vec<&str> = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"kubevirt.io"));
    assert!(!names.iter().any(|n| n.contains("internal.virtualization")));
    let kv = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "kubevirt.io")
        .unwrap();
    assert_eq!(kv["preferredVersion"]["groupVersion"], "kubevirt.io/v1");
    let v = json(&whole(
        &rules,
        Direction::Restore,
        &fixture("discovery-apis-internal-virtualization-v1.json"),
    ));
    assert_eq!(v["groupVersion"], "kubevirt.io/v1");
    let vm = v["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "virtualmachines")
        .unwrap();
    assert_eq!(vm["kind"], "VirtualMachine");
    assert_eq!(vm["singularName"], "virtualmachine");
    // Discovery advertises what the server's CRD declares, prefix removed: the module's VM CRD
    // has the one short name `intvirtvm`.
    assert_eq!(vm["shortNames"], serde_json::json!(["vm"]));
    assert_eq!(vm["categories"], serde_json::json!(["all"]));
    assert!(
        v["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "virtualmachines/status")
    );
    // Aggregated discovery (apidiscovery.k8s.io/v2), what kubectl reads first.
    let v = json(&whole(
        &rules,
        Direction::Restore,
        &fixture("discovery-apis-aggregated-v2.json"),
    ));
    let items = v["items"].as_array().unwrap();
    let text = v.to_string();
    assert!(!text.contains("nternal.virtualization"), "{text:.300}");
    assert!(!text.contains("InternalVirtualization"), "{text:.300}");
    let kv = items
        .iter()
        .find(|g| g["metadata"]["name"] == "kubevirt.io")
        .expect("kubevirt.io listed");
    let res = kv["versions"][0]["resources"].as_array().unwrap();
    let vm = res.iter().find(|r| r["resource"] == "virtualmachines").unwrap();
    assert_eq!(kv["versions"][0]["version"], "v1");
    assert_eq!(
        vm["responseKind"],
        serde_json::json!({"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachine"})
    );
    assert_eq!(vm["singularResource"], "virtualmachine");
    assert_eq!(vm["shortNames"], serde_json::json!(["vm"]));
    assert_eq!(vm["subresources"][0]["subresource"], "status");
    assert_eq!(vm["subresources"][0]["responseKind"]["kind"], "VirtualMachine");
    let plurals: Vec<&str> = res.iter().map(|r| r["resource"].as_str().unwrap()).collect();
    for p in [
        "virtualmachineinstances",
        "virtualmachineinstancemigrations",
        "kubevirts",
    ] {
        assert!(plurals.contains(&p), "{p}: {plurals:?}");
    }
    // The aggregated API server's group is not renamed: it stays as the server listed it.
    let sub = |v: &Value| {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "subresources.virtualization.deckhouse.io")
            .cloned()
            .expect("the aggregated group")
    };
    assert_eq!(sub(&v), sub(&json(&fixture("discovery-apis-aggregated-v2.json"))));
}

#[test]
fn crds_restore_from_the_rules_and_hide_original_groups() {
    let rules = rules();
    let v = json(&whole(
        &rules,
        Direction::Restore,
        &fixture("crd-get-virtualmachines.json"),
    ));
    assert_eq!(v["metadata"]["name"], "virtualmachines.kubevirt.io");
    assert_eq!(v["spec"]["group"], "kubevirt.io");
    assert_eq!(v["spec"]["names"]["kind"], "VirtualMachine");
    assert_eq!(v["spec"]["names"]["shortNames"], serde_json::json!(["vm", "vms"]));
    assert_eq!(
        v["status"]["acceptedNames"]["kind"], "VirtualMachine",
        "Go left acceptedNames renamed"
    );
    assert_eq!(v["status"]["acceptedNames"]["plural"], "virtualmachines");
    // An original-group CRD served upstream (a real KubeVirt) is dropped from lists.
    let crd = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"virtualmachines.kubevirt.io"},"spec":{"group":"kubevirt.io"}}"#;
    let body = format!(
        r#"{{"kind":"CustomResourceDefinitionList","apiVersion":"apiextensions.k8s.io/v1","metadata":{{}},"items":[{crd},{}]}}"#,
        String::from_utf8(fixture("crd-get-virtualmachines.json")).unwrap()
    );
    let v = json(&whole(&rules, Direction::Restore, body.as_bytes()));
    assert_eq!(v["items"].as_array().unwrap().len(), 1);
    assert_eq!(v["items"][0]["metadata"]["name"], "virtualmachines.kubevirt.io");
    assert_eq!(v["items"][0]["spec"]["names"]["plural"], "virtualmachines");
}

#[test]
fn original_crds_rename_to_what_the_module_ships() {
    let rules = rules();
    let dir = shared().join("kubevirt-crds");
    for f in [
        "virtualmachines.yaml",
        "virtualmachineinstances.yaml",
        "kubevirt.yaml",
    ] {
        let original =
            kube_api_rewriter::patch::yaml_to_json(&std::fs::read(dir.join("original").join(f)).unwrap())
                .unwrap();
        let renamed = json(
            &kube_api_rewriter::patch::yaml_to_json(&std::fs::read(dir.join("renamed").join(f)).unwrap())
                .unwrap(),
        );
        let out = whole(&rules, Direction::Rename, &original);
        let v = json(&out);
        assert_eq!(v["metadata"]["name"], renamed["metadata"]["name"], "{f}");
        assert_eq!(v["spec"]["group"], renamed["spec"]["group"], "{f}");
        for k in ["kind", "listKind", "plural", "singular"] {
            assert_eq!(
                v["spec"]["names"][k], renamed["spec"]["names"][k],
                "{f} names.{k}"
            );
        }
        // Short names come from the rules (lossy by design): every one carries the prefix.
        for s in v["spec"]["names"]["shortNames"].as_array().unwrap() {
            assert!(s.as_str().unwrap().starts_with("intvirt"), "{f}: {s}");
        }
        assert_eq!(
            v["spec"]["versions"],
            json(&original)["spec"]["versions"],
            "{f}: schemas untouched"
        );
        let back = whole(&rules, Direction::Restore, &out);
        let (mut a, mut b) = (json(&back), json(&original));
        // Lossy by design: restored CRD names come from the rules (categories may be null there).
        a["spec"]["names"]["categories"] = Value::Null;
        b["spec"]["names"]["categories"] = Value::Null;
        assert_eq!(a, b, "{f}: restore(rename(x)) != x");
    }
}

#[test]
fn rbac_events_webhooks_and_access_reviews() {
    let rules = rules();
    let v = json(&whole(
        &rules,
        Direction::Restore,
        &fixture("rbac-clusterrole-get.json"),
    ));
    let s = v["rules"].to_string();
    assert!(
        s.contains("\"kubevirt.io\"")
            && s.contains("\"virtualmachines\"")
            && !s.contains("internalvirtualization"),
        "{s}"
    );
    let v = json(&whole(&rules, Direction::Restore, &fixture("event-create.json")));
    assert_eq!(v["involvedObject"]["apiVersion"], "kubevirt.io/v1");
    assert_eq!(v["involvedObject"]["kind"], "VirtualMachine");
    let v = json(&whole(&rules, Direction::Restore, &fixture("vwc-get.json")));
    let s = v["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["rules"].to_string())
        .collect::<String>();
    assert!(
        s.contains("kubevirt.io") && !s.contains("internal.virtualization"),
        "{s}"
    );
    let v = json(&whole(
        &rules,
        Direction::Restore,
        &fixture("rbac-selfsubjectaccessreview.json"),
    ));
    assert_eq!(v["spec"]["resourceAttributes"]["group"], "kubevirt.io");
    assert_eq!(v["spec"]["resourceAttributes"]["resource"], "virtualmachines");
    // And the request kubectl auth can-i sends is renamed.
    let req = br#"{"kind":"SelfSubjectAccessReview","apiVersion":"authorization.k8s.io/v1","spec":{"resourceAttributes":{"namespace":"demo","verb":"list","group":"kubevirt.io","resource":"virtualmachines"}}}"#;
    let v = json(&whole(&rules, Direction::Rename, req));
    assert_eq!(
        v["spec"]["resourceAttributes"]["group"],
        "internal.virtualization.deckhouse.io"
    );
    assert_eq!(
        v["spec"]["resourceAttributes"]["resource"],
        "internalvirtualizationvirtualmachines"
    );
}

#[test]
fn watch_streams_restore_per_event_with_newlines_at_any_split() {
    let rules = rules();
    let body = fixture("watch-vm-events.json");
    let whole_out = watch(&rules, Direction::Restore, &body, body.len());
    let events = body.iter().filter(|&&b| b == b'\n').count();
    assert!(events >= 8, "the capture's 7 changes and a bookmark: {events}");
    assert_eq!(
        whole_out.iter().filter(|&&b| b == b'\n').count(),
        events,
        "one line per event"
    );
    for chunk in [1, 7, 100, 4096] {
        assert_eq!(
            watch(&rules, Direction::Restore, &body, chunk),
            whole_out,
            "chunk {chunk}"
        );
    }
    let first = json(whole_out.split(|&b| b == b'\n').next().unwrap());
    assert_eq!(first["object"]["kind"], "VirtualMachine");
    let gone = watch(&rules, Direction::Restore, &fixture("watch-vm-410-gone.json"), 10);
    let ev = json(gone.split(|&b| b == b'\n').next().unwrap());
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["code"], 410);
    // A streaming list (sendInitialEvents=true): the objects, then the bookmark that ends them,
    // its annotation kept and its kind restored like the objects'.
    let streamed = watch(
        &rules,
        Direction::Restore,
        &fixture("watch-vm-streaming-list.json"),
        100,
    );
    let evs: Vec<Value> = streamed
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(json)
        .collect();
    let end = evs
        .iter()
        .position(|e| e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true")
        .expect("the initial-events-end bookmark");
    assert!(end > 0 && evs[..end].iter().all(|e| e["type"] == "ADDED"));
    assert_eq!(evs[end]["type"], "BOOKMARK");
    for e in &evs {
        assert_eq!(e["object"]["apiVersion"], "kubevirt.io/v1", "{e}");
        assert_eq!(e["object"]["kind"], "VirtualMachine", "{e}");
    }
}

#[test]
fn big_lists_stream_identically_at_any_split() {
    let rules = rules();
    let plain = fixture("vm-list-bulk-plain.json");
    assert_eq!(fixture("vm-list-bulk-gzip.json.gz"), plain);
    let reference = whole(&rules, Direction::Restore, &plain);
    for chunk in [1, 13, 4096, 65536, plain.len()] {
        let out = list(&rules, Direction::Restore, &plain, chunk);
        let at = out
            .iter()
            .zip(&reference)
            .position(|(a, b)| a != b)
            .unwrap_or(out.len().min(reference.len()));
        assert!(
            out == reference,
            "chunk {chunk}: differs at {at}: {:?} vs {:?}",
            String::from_utf8_lossy(&out[at.saturating_sub(80)..(at + 80).min(out.len())]),
            String::from_utf8_lossy(&reference[at.saturating_sub(80)..(at + 80).min(reference.len())])
        );
    }
    let v = json(&reference);
    assert_eq!(v["items"].as_array().unwrap().len(), 300);
    let table = whole(
        &rules,
        Direction::Restore,
        &fixture("vm-list-bulk-table-gzip.json.gz"),
    );
    assert!(
        !String::from_utf8(table)
            .unwrap()
            .contains("kubevirt.internal.virtualization.deckhouse.io/created-by")
    );
}

#[test]
fn malformed_json_is_rejected_with_an_offset() {
    let rules = rules();
    for (bad, at) in [
        (&b"{\"kind\":\"X\",}"[..], 12),
        (b"{\"a\":[1,2", 9),
        (b"{\"a\":tru}", 5),
    ] {
        let e = object::rewrite(&rules, Direction::Restore, bad, &Context::default()).unwrap_err();
        assert_eq!(e.offset(), Some(at), "{e}");
    }
    let mut l = ListRewriter::new(&rules, Direction::Restore, Context::default());
    let mut out = Vec::new();
    assert!(l.feed(br#"{"items":[{"a":1}}"#, &mut out).is_err());
}

#[test]
fn crd_tables_show_original_names() {
    use kube_api_rewriter::{ProxyMode, ResponseBody, Route};
    let rules = rules();
    let route = Route::new(
        &rules,
        ProxyMode::Api,
        "GET",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    );
    let table = r#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{},"columnDefinitions":[{"name":"Name","type":"string"}],"rows":[{"cells":["internalvirtualizationvirtualmachines.internal.virtualization.deckhouse.io","2026-11-29T15:40:49Z"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"internalvirtualizationvirtualmachines.internal.virtualization.deckhouse.io"}}},{"cells":["virtualmachines.kubevirt.io","x"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"virtualmachines.kubevirt.io"}}},{"cells":["foos.example.com","y"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"foos.example.com"}}}]}"#;
    let ResponseBody::Body(out) = route.response_body(&rules, table.as_bytes()).unwrap() else {
        panic!()
    };
    let v = json(&out);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "the upstream original-group CRD is hidden");
    assert_eq!(rows[0]["cells"][0], "virtualmachines.kubevirt.io");
    assert_eq!(
        rows[0]["object"]["metadata"]["name"],
        "virtualmachines.kubevirt.io"
    );
    assert_eq!(rows[1]["cells"][0], "foos.example.com");
}

#[test]
fn built_in_list_items_take_their_kind_from_the_list() {
    let rules = rules();
    let body = br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"virt-launcher-a","labels":{"kubevirt.internal.virtualization.deckhouse.io/domain":"a"},"ownerReferences":[{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachineInstance","name":"a","uid":"u"}]},"spec":{"nodeSelector":{"kubevirt.internal.virtualization.deckhouse.io/schedulable":"true"},"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"cpu-model.node.virtualization.deckhouse.io/Haswell","operator":"In","values":["true"]}]}]}}}}}]}"#;
    for chunk in [7, body.len()] {
        let v = json(&list(&rules, Direction::Restore, body, chunk));
        let pod = &v["items"][0];
        assert_eq!(pod["metadata"]["labels"]["kubevirt.io/domain"], "a");
        assert_eq!(
            pod["metadata"]["ownerReferences"][0]["kind"],
            "VirtualMachineInstance"
        );
        assert_eq!(pod["spec"]["nodeSelector"]["kubevirt.io/schedulable"], "true");
        let req = &pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchExpressions"][0];
        assert_eq!(req["key"], "cpu-model.node.kubevirt.io/Haswell");
    }
}

#[test]
fn a_value_is_written_as_soon_as_its_last_piece_arrives() {
    let rules = rules();
    let body = fixture("watch-vm-events.json");
    let first_end = body.iter().position(|&b| b == b'\n').unwrap() + 1;
    // Any split of the first event: once its last byte is fed, the event is out.
    for cut in [1, 100, first_end / 2, first_end - 2] {
        let mut w = WatchRewriter::new(&rules, Direction::Restore, Context::default());
        let mut out = Vec::new();
        w.feed(&body[..cut], &mut out).unwrap();
        assert!(out.is_empty(), "cut {cut}");
        w.feed(&body[cut..first_end], &mut out).unwrap();
        assert_eq!(
            out.iter().filter(|&&b| b == b'\n').count(),
            1,
            "cut {cut}: event held back"
        );
    }
    let plain = fixture("vm-list-bulk-plain.json");
    let items = plain.windows(2).position(|w| w == b"[{").unwrap() + 1;
    let one = items + json(&plain)["items"][0].to_string().len() + 200; // well into item 2
    let mut l = ListRewriter::new(&rules, Direction::Restore, Context::default());
    let mut out = Vec::new();
    for piece in plain[..one].chunks(1000) {
        l.feed(piece, &mut out).unwrap();
    }
    assert!(
        String::from_utf8_lossy(&out)
            .matches(r#""kind":"VirtualMachine""#)
            .count()
            >= 1,
        "first item out"
    );
}
