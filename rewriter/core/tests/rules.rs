//! Rule files: the Go format loads unchanged, the KubeVirt set is complete, bad files fail
//! with file, line and column.

use kube_api_rewriter::rules::Source;
use kube_api_rewriter::{Direction, Error, Rules};
use serde_json::Value;

fn go_rules(file: &str) -> String {
    let p = format!("{}/../../testdata/rules/{file}", env!("CARGO_MANIFEST_DIR"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    serde_json::to_string_pretty(&v["rewriteRules_json"]).unwrap()
}

fn err(text: &str) -> (u64, u64, String) {
    match Rules::parse(&[Source {
        name: "bad.yaml",
        text,
    }])
    .unwrap_err()
    {
        Error::Rules {
            file,
            line,
            column,
            message,
        } => {
            assert_eq!(file, "bad.yaml");
            (line, column, message)
        }
        other => panic!("{other}"),
    }
}

#[test]
fn the_builtin_kubevirt_set_is_complete() {
    let r = Rules::builtin_kubevirt();
    assert_eq!(r.groups().len(), 7);
    assert_eq!(r.groups().iter().map(|g| g.resources.len()).sum::<usize>(), 17);
    assert_eq!(r.webhooks().len(), 24);
    assert_eq!(r.kind_prefix(), "InternalVirtualization");
    assert_eq!(r.categories(), ["intvirt"]);
}

#[test]
fn go_rule_files_load_unchanged_and_agree() {
    let json = go_rules("kubevirt-rules.json");
    let from_json = Rules::parse(&[Source {
        name: "kubevirt-rules.json",
        text: &json,
    }])
    .unwrap();
    let builtin = Rules::builtin_kubevirt();
    for g in builtin.groups() {
        let other = from_json.group(&g.original).unwrap();
        assert_eq!(other.renamed, g.renamed);
        assert_eq!(
            other.resources.keys().collect::<Vec<_>>(),
            g.resources.keys().collect::<Vec<_>>()
        );
    }
    assert_eq!(from_json.webhooks().len(), builtin.webhooks().len());
    for (k, v) in [
        ("kubevirt.io/x", "1"),
        ("app.kubernetes.io/managed-by", "virt-operator"),
        ("vm.kubevirt.io/name", "a"),
    ] {
        assert_eq!(from_json.labels().rename(k, v), builtin.labels().rename(k, v));
    }
    let cdi = Rules::parse(&[Source {
        name: "intree.json",
        text: &go_rules("kubevirt-rules-intree-with-cdi.json"),
    }])
    .unwrap();
    assert!(cdi.group("cdi.kubevirt.io").is_some());
    assert_eq!(cdi.excludes().len(), 2);
    assert_eq!(
        cdi.rename_api_version("cdi.kubevirt.io/v1beta1").as_deref(),
        Some("cdi.internal.virtualization.deckhouse.io/v1beta1")
    );
}

#[test]
fn go_decoder_key_spellings_are_accepted() {
    let text = "KindPrefix: P\nresourcetypeprefix: p\nlabels:\n  Prefixes:\n    - {Original: a.io, Renamed: b.io}\n  Names: []\n";
    let r = Rules::parse(&[Source { name: "x", text }]).unwrap();
    assert_eq!(r.kind_prefix(), "P");
    assert_eq!(r.labels().rename("a.io/x", "").0, "b.io/x");
}

#[test]
fn bad_files_name_the_place() {
    let (line, col, msg) = err(
        "kindPrefix: X\nrules:\n  kubevirt.io:\n    groupRule: {group: kubevirt.io, renamed: x.io}\n    resourceRulez: {}\n",
    );
    assert_eq!(line, 5, "{msg}");
    assert!(col > 0);
    assert!(msg.contains("resourceRulez"), "{msg}");

    let (line, _, msg) =
        err("kinds:\n  - kinds: [Pod]\n    fields:\n      - {path: \"$.spec..x\", type: labels}\n");
    assert_eq!(line, 4, "{msg}");
    assert!(msg.contains("JSONPath"), "{msg}");

    let (line, _, msg) =
        err("kinds:\n  - kinds: [Pod]\n    fields:\n      - {path: $.spec.x, type: lables}\n");
    assert_eq!(line, 4);
    assert!(msg.contains("unknown field type"), "{msg}");

    let (line, _, msg) = err(
        "labels:\n  prefixes:\n    - {original: a.io, renamed: b.io}\n    - {original: a.io, renamed: c.io}\n",
    );
    assert_eq!(line, 4, "{msg}");
    assert!(msg.contains("two different ways"), "{msg}");

    let (line, col, msg) = err("kindPrefix: [unclosed\n");
    assert!(line >= 1 && col >= 1, "{msg}");
}

#[test]
fn renamed_pairs_of_one_name_do_not_collide() {
    // The KubeVirt set maps app.kubernetes.io/managed-by to itself twice, with different values.
    let r = Rules::builtin_kubevirt();
    let k = "app.kubernetes.io/managed-by";
    assert_eq!(
        r.labels().rename(k, "virt-operator").1,
        "virt-operator-internal-virtualization"
    );
    assert_eq!(
        r.labels().rename(k, "kubevirt-operator").1,
        "kubevirt-operator-internal-virtualization"
    );
    assert_eq!(
        r.labels()
            .restore(k, "kubevirt-operator-internal-virtualization")
            .1,
        "kubevirt-operator"
    );
}

#[test]
fn version_maps_rename_paths_and_api_versions() {
    let text = "rules:\n  example.io:\n    groupRule: {group: example.io, renamed: internal.example.com, versionMap: {v1alpha2: v1}}\n    resourceRules:\n      foos: {kind: Foo, listKind: FooList, plural: foos, singular: foo}\n";
    let r = Rules::parse(&[Source { name: "v", text }]).unwrap();
    assert_eq!(
        r.rename_api_version("example.io/v1alpha2").as_deref(),
        Some("internal.example.com/v1")
    );
    assert_eq!(
        r.restore_api_version("internal.example.com/v1", None).as_deref(),
        Some("example.io/v1alpha2")
    );
    let p =
        kube_api_rewriter::path::rewrite(&r, Direction::Rename, "/apis/example.io/v1alpha2/foos").unwrap();
    assert_eq!(p, "/apis/internal.example.com/v1/foos");
}

/// A Go rule file may list a group with an empty `groupRule` only so that `Init` turns its kinds
/// into excludes: it loads, nothing of it is renamed, its kinds are hidden, and a warning says so.
#[test]
fn empty_group_rule_loads_as_excludes_only() {
    let text = r#"{"kindPrefix":"P","resourceTypePrefix":"p","rules":{
        "example.io":{"groupRule":{"group":"example.io","renamed":"internal.example.com"},
            "resourceRules":{"foos":{"kind":"Foo","listKind":"FooList","plural":"foos"}}},
        "upstream.io":{"groupRule":{},
            "resourceRules":{"bars":{"kind":"Bar","plural":"bars"}}}}}"#;
    let r = Rules::parse(&[Source {
        name: "go.json",
        text,
    }])
    .unwrap();
    assert!(r.group("upstream.io").is_none());
    assert_eq!(r.rename_api_version("upstream.io/v1"), None);
    assert_eq!(
        kube_api_rewriter::path::rewrite(&r, Direction::Rename, "/apis/upstream.io/v1/bars").unwrap(),
        "/apis/upstream.io/v1/bars"
    );
    assert_eq!(r.warnings().len(), 1, "{:?}", r.warnings());
    assert!(
        r.warnings()[0].contains("upstream.io") && r.warnings()[0].contains("Bar, BarList"),
        "{:?}",
        r.warnings()
    );
    use kube_api_rewriter::object::{self, Context, Outcome};
    let bar = br#"{"apiVersion":"upstream.io/v1","kind":"Bar","metadata":{"name":"b"}}"#;
    let out = object::rewrite(&r, Direction::Restore, bar, &Context::default()).unwrap();
    assert!(matches!(out, Outcome::Excluded), "{out:?}");
    let list = br#"{"apiVersion":"v1","kind":"List","metadata":{},"items":[{"apiVersion":"upstream.io/v1","kind":"Bar","metadata":{"name":"b"}}]}"#;
    match object::rewrite(&r, Direction::Restore, list, &Context::default()).unwrap() {
        Outcome::Object(b) => {
            let v: Value = serde_json::from_slice(&b).unwrap();
            assert_eq!(v["items"].as_array().map(Vec::len), Some(0), "{v}");
        }
        other => panic!("{other:?}"),
    }
    // A groupRule that names its group but not the new name is still a mistake.
    let half = "rules:\n  x.io:\n    groupRule: {group: x.io}\n";
    assert!(
        Rules::parse(&[Source {
            name: "h",
            text: half
        }])
        .is_err()
    );
}
