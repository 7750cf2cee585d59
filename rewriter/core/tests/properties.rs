//! Property tests for the laws over generated objects.
//!
//! * Client-side documents (original names): `restore(rename(x)) == x`, byte for byte.
//! * Server-side documents (renamed names): `rename(restore(x)) == x`, byte for byte.
//! * Chunk-boundary independence: any split of a LIST or WATCH body gives the output of a
//!   single feed.
//! * JSON Patch commutes with renaming:
//!   `patch(rename(doc), rename(p)) == rename(patch(doc, p))` (as `serde_json::Value`).
//!
//! Lossy by design, and so not generated on the side where they lose information:
//! * a client-side name that is already in the renamed form (`kubevirt.internal.virtualization
//!   .deckhouse.io/x`, `app.kubernetes.io/managed-by=virt-operator-internal-virtualization`),
//!   or a client-side `preserved-original-<name>` whose `<name>` no rule renames: restore
//!   cannot tell them from names it must restore;
//! * a server-side `preserved-original-<name>` (rename strips the marker);
//! * API groups in the renamed form in client documents (ownerReferences, apiVersion).

use std::sync::OnceLock;

use kube_api_rewriter::object::{self, Context, Outcome};
use kube_api_rewriter::patch;
use kube_api_rewriter::stream::{ListRewriter, WatchRewriter};
use kube_api_rewriter::{Direction, Rules};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn rules() -> &'static Rules {
    static R: OnceLock<Rules> = OnceLock::new();
    R.get_or_init(Rules::builtin_kubevirt)
}

fn rw(dir: Direction, doc: &[u8]) -> Vec<u8> {
    match object::rewrite(rules(), dir, doc, &Context::default()) {
        Ok(Outcome::Object(b)) => b.into_owned(),
        Ok(Outcome::Excluded) => panic!("excluded: {}", String::from_utf8_lossy(doc)),
        Err(e) => panic!("{e}: {}", String::from_utf8_lossy(doc)),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// What clients send and see: original names.
    Client,
    /// What kube-apiserver holds: renamed names.
    Server,
}

const KV: &str = "kubevirt.internal.virtualization.deckhouse.io";

/// Prefixes (the part before `/`) of label, annotation and finalizer names.
const ORIGINAL_PREFIXES: &[&str] = &[
    "kubevirt.io",
    "vm.kubevirt.io",
    "operator.kubevirt.io",
    "prometheus.kubevirt.io",
    "cpu-model.node.kubevirt.io",
    "certificates.kubevirt.io",
];
const RENAMED_PREFIXES: &[&str] = &[
    KV,
    "vm.kubevirt.internal.virtualization.deckhouse.io",
    "operator.kubevirt.internal.virtualization.deckhouse.io",
    "prometheus.kubevirt.internal.virtualization.deckhouse.io",
    "cpu-model.node.virtualization.deckhouse.io",
    "certificates.kubevirt.internal.virtualization.deckhouse.io",
];
const NEUTRAL_PREFIXES: &[&str] = &[
    "virtualization.deckhouse.io",
    "app.kubernetes.io",
    "example.com",
    "kubernetes.io",
    "node.kubevirt.io.example.com",
    "kubevirt.io.evil",
];

/// Renamed forms that only some kinds of names have (for the lossy check).
fn looks_renamed(name: &str, value: &str) -> bool {
    let prefix = name.split_once('/').map_or("", |p| p.0);
    RENAMED_PREFIXES.contains(&prefix)
        || [
            KV,
            "node-labeller.virtualization.deckhouse.io/skip-node",
            "node-labeller.internal.virtualization.deckhouse.io/obsolete-host-model",
        ]
        .contains(&name)
        || (name == "app.kubernetes.io/managed-by" && value.ends_with("-internal-virtualization"))
        || name.starts_with("preserved-original-")
}

fn name_key() -> impl Strategy<Value = String> {
    let prefixed = (
        prop::sample::select([ORIGINAL_PREFIXES, RENAMED_PREFIXES, NEUTRAL_PREFIXES].concat()),
        "[a-z][a-z0-9.-]{0,8}",
    )
        .prop_map(|(p, s)| format!("{p}/{s}"));
    prop_oneof![
        4 => prefixed,
        1 => "[a-z][a-z0-9-]{0,8}",
        1 => prop::sample::select(vec![
            "kubevirt.io".to_owned(),
            KV.to_owned(),
            "node-labeller.kubevirt.io/skip-node".into(),
            "node-labeller.virtualization.deckhouse.io/skip-node".into(),
            "app.kubernetes.io/managed-by".into(),
            "preserved-original-kubevirt.io/x".into(),
            "preserved-original-app".into(),
        ]),
        1 => "[ -~]{1,16}",
    ]
}

fn free_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9 ./-]{0,12}",
        Just(format!("{KV}/created-by")),
        Just("kubevirt.io/v1".to_owned()),
        Just("internal.virtualization.deckhouse.io/v1".to_owned()),
        Just("InternalVirtualizationVirtualMachine".to_owned()),
        Just("virt-operator".to_owned()),
        Just("virt-operator-internal-virtualization".to_owned()),
        "\\PC{0,6}",
    ]
}

/// Names usable on `side` (the ones that survive the round trip by design).
fn names_for(side: Side, n: usize) -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec((name_key(), free_text()), 0..n).prop_map(move |v| {
        let mut seen = std::collections::HashSet::new();
        v.into_iter()
            .filter(|(k, val)| match side {
                Side::Client => !looks_renamed(k, val),
                Side::Server => !k.starts_with("preserved-original-"),
            })
            .filter(|(k, _)| seen.insert(k.clone()))
            .collect()
    })
}

fn map_of(pairs: &[(String, String)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

/// An arbitrary JSON value with strings that look like names.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        free_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop_oneof![free_text(), name_key()], inner), 0..4)
                .prop_map(|v| Value::Object(v.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// (apiVersion, kind) of top-level objects, by side.
fn gvk(side: Side) -> impl Strategy<Value = (&'static str, &'static str)> {
    let client = [
        ("kubevirt.io/v1", "VirtualMachine"),
        ("kubevirt.io/v1", "VirtualMachineInstance"),
        ("kubevirt.io/v1alpha3", "VirtualMachine"),
        ("v1", "Pod"),
        ("apps/v1", "Deployment"),
        ("v1", "ConfigMap"),
        ("virtualization.deckhouse.io/v1alpha2", "VirtualMachine"),
    ];
    let server = [
        (
            "internal.virtualization.deckhouse.io/v1",
            "InternalVirtualizationVirtualMachine",
        ),
        (
            "internal.virtualization.deckhouse.io/v1",
            "InternalVirtualizationVirtualMachineInstance",
        ),
        (
            "internal.virtualization.deckhouse.io/v1alpha3",
            "InternalVirtualizationVirtualMachine",
        ),
        ("v1", "Pod"),
        ("apps/v1", "Deployment"),
        ("v1", "ConfigMap"),
        ("virtualization.deckhouse.io/v1alpha2", "VirtualMachine"),
    ];
    prop::sample::select(match side {
        Side::Client => client.to_vec(),
        Side::Server => server.to_vec(),
    })
}

fn owner_gvk(side: Side) -> impl Strategy<Value = (&'static str, &'static str)> {
    let client = [
        ("kubevirt.io/v1", "VirtualMachine"),
        ("kubevirt.io/v1", "VirtualMachineInstance"),
        ("apps/v1", "ReplicaSet"),
        ("virtualization.deckhouse.io/v1alpha2", "VirtualMachine"),
        ("cdi.kubevirt.io/v1beta1", "DataVolume"),
    ];
    let server = [
        (
            "internal.virtualization.deckhouse.io/v1",
            "InternalVirtualizationVirtualMachine",
        ),
        (
            "internal.virtualization.deckhouse.io/v1",
            "InternalVirtualizationVirtualMachineInstance",
        ),
        ("apps/v1", "ReplicaSet"),
        ("virtualization.deckhouse.io/v1alpha2", "VirtualMachine"),
        ("cdi.kubevirt.io/v1beta1", "DataVolume"),
    ];
    prop::sample::select(match side {
        Side::Client => client.to_vec(),
        Side::Server => server.to_vec(),
    })
}

fn fields_v1(labels: &[(String, String)], annotations: &[(String, String)], finalizers: &[String]) -> Value {
    let f = |pairs: &[(String, String)]| {
        let mut m = Map::new();
        m.insert(".".into(), json!({}));
        for (k, _) in pairs {
            m.insert(format!("f:{k}"), json!({}));
        }
        Value::Object(m)
    };
    let mut fin = Map::new();
    fin.insert(".".into(), json!({}));
    for x in finalizers {
        fin.insert(format!("v:{}", Value::String(x.clone())), json!({}));
    }
    json!({"f:metadata": {"f:labels": f(labels), "f:annotations": f(annotations), "f:finalizers": fin}, "f:spec": {".": {}, "f:running": {}}})
}

/// A whole object as `side` holds it.
fn doc(side: Side) -> impl Strategy<Value = Value> {
    (
        gvk(side),
        names_for(side, 6),
        names_for(side, 5),
        names_for(side, 4),
        prop::collection::vec((owner_gvk(side), "[a-z]{1,6}", any::<bool>()), 0..3),
        names_for(side, 4),
        any_json(),
        free_text(),
        any::<bool>(),
    )
        .prop_map(move |(gvk, labels, annotations, fins, owners, tmpl_labels, extra, text, managed)| {
            let finalizers: Vec<String> = fins.into_iter().map(|(k, _)| k).collect();
            let mut meta = Map::new();
            meta.insert("name".into(), json!("obj"));
            meta.insert("namespace".into(), json!("ns"));
            if !labels.is_empty() {
                meta.insert("labels".into(), map_of(&labels));
            }
            if !annotations.is_empty() {
                meta.insert("annotations".into(), map_of(&annotations));
            }
            if !finalizers.is_empty() {
                meta.insert("finalizers".into(), json!(finalizers));
            }
            if !owners.is_empty() {
                let o: Vec<Value> = owners
                    .iter()
                    .map(|((av, k), n, c)| json!({"apiVersion": av, "kind": k, "name": n, "uid": format!("uid-{n}"), "controller": c}))
                    .collect();
                meta.insert("ownerReferences".into(), Value::Array(o));
            }
            if managed {
                meta.insert(
                    "managedFields".into(),
                    json!([{"apiVersion": gvk.0, "fieldsType": "FieldsV1", "fieldsV1": fields_v1(&labels, &annotations, &finalizers), "manager": "m", "operation": "Update", "time": "2026-01-01T00:00:00Z"}]),
                );
            }
            let spec = if gvk.1.ends_with("VirtualMachine") || gvk.1 == "Deployment" {
                json!({
                    "description": text,
                    "running": true,
                    "template": {
                        "metadata": {"labels": map_of(&tmpl_labels)},
                        "spec": {
                            "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": map_of(&tmpl_labels)}, "topologyKey": "kubernetes.io/hostname"}]}},
                            "description": text,
                            "extra": extra,
                        }
                    }
                })
            } else {
                json!({"nodeSelector": map_of(&tmpl_labels), "description": text, "extra": extra})
            };
            json!({"apiVersion": gvk.0, "kind": gvk.1, "metadata": meta, "spec": spec, "status": {"note": text}})
        })
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, max_global_rejects: 1 << 20, max_local_rejects: 1 << 20, ..ProptestConfig::default() })]

    #[test]
    fn client_docs_restore_rename_is_identity(d in doc(Side::Client), pretty in any::<bool>()) {
        let x = if pretty { serde_json::to_vec_pretty(&d).unwrap() } else { serde_json::to_vec(&d).unwrap() };
        let renamed = rw(Direction::Rename, &x);
        let back = rw(Direction::Restore, &renamed);
        prop_assert!(back == x, "\nx:       {}\nrenamed: {}\nback:    {}", show(&x), show(&renamed), show(&back));
    }

    #[test]
    fn server_docs_rename_restore_is_identity(d in doc(Side::Server), pretty in any::<bool>()) {
        let x = if pretty { serde_json::to_vec_pretty(&d).unwrap() } else { serde_json::to_vec(&d).unwrap() };
        let restored = rw(Direction::Restore, &x);
        let back = rw(Direction::Rename, &restored);
        prop_assert!(back == x, "\nx:        {}\nrestored: {}\nback:     {}", show(&x), show(&restored), show(&back));
    }

    #[test]
    fn list_output_does_not_depend_on_chunking(
        items in prop::collection::vec(doc(Side::Server), 0..4),
        pretty in any::<bool>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        dir in prop::sample::select(vec![Direction::Restore, Direction::Rename]),
    ) {
        let list = json!({
            "apiVersion": "internal.virtualization.deckhouse.io/v1",
            "items": items,
            "kind": "InternalVirtualizationVirtualMachineList",
            "metadata": {"resourceVersion": "7", "continue": ""},
        });
        let body = if pretty { serde_json::to_vec_pretty(&list).unwrap() } else { serde_json::to_vec(&list).unwrap() };
        let feed = |cuts: &[usize]| {
            let mut lr = ListRewriter::new(rules(), dir, Context::default());
            let mut out = Vec::new();
            let mut prev = 0;
            for &c in cuts.iter().chain(std::iter::once(&body.len())) {
                lr.feed(&body[prev..c], &mut out).unwrap();
                prev = c;
            }
            lr.finish(&mut out).unwrap();
            out
        };
        let whole = feed(&[]);
        let mut cs: Vec<usize> = cuts.iter().map(|i| i.index(body.len() + 1)).collect();
        cs.sort_unstable();
        prop_assert_eq!(show(&feed(&cs)), show(&whole), "cuts {:?}", cs);
        // The streamed list equals the whole-document rewrite, byte for byte (whitespace too).
        let doc = rw(dir, &body);
        prop_assert_eq!(show(&whole), show(&doc));
    }

    #[test]
    fn watch_output_does_not_depend_on_chunking(
        events in prop::collection::vec((prop::sample::select(vec!["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]), doc(Side::Server)), 0..4),
        pretty in any::<bool>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let mut body = Vec::new();
        for (t, o) in &events {
            let e = json!({"type": t, "object": o});
            if pretty { body.extend(serde_json::to_vec_pretty(&e).unwrap()) } else { body.extend(serde_json::to_vec(&e).unwrap()) }
            body.push(b'\n');
        }
        let feed = |cuts: &[usize]| {
            let mut wr = WatchRewriter::new(rules(), Direction::Restore, Context::default());
            let mut out = Vec::new();
            let mut prev = 0;
            for &c in cuts.iter().chain(std::iter::once(&body.len())) {
                wr.feed(&body[prev..c], &mut out).unwrap();
                prev = c;
            }
            wr.finish(&mut out).unwrap();
            out
        };
        let whole = feed(&[]);
        let mut cs: Vec<usize> = cuts.iter().map(|i| i.index(body.len() + 1)).collect();
        cs.sort_unstable();
        prop_assert_eq!(show(&feed(&cs)), show(&whole), "cuts {:?}", cs);
        let n = serde_json::Deserializer::from_slice(&whole)
            .into_iter::<Value>()
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
            .len();
        prop_assert_eq!(n, events.len());
    }

    #[test]
    fn json_patch_commutes_with_rename(d in doc(Side::Client), ops in prop::collection::vec(patch_op(), 1..5)) {
        let group_kind = {
            let av = d["apiVersion"].as_str().unwrap();
            let g = av.split_once('/').map_or("", |x| x.0).to_owned();
            (g, d["kind"].as_str().unwrap().to_owned())
        };
        let p = Value::Array(ops);
        let mut applied = d.clone();
        let jp: json_patch::Patch = serde_json::from_value(p.clone()).unwrap();
        prop_assume!(json_patch::patch(&mut applied, &jp).is_ok());
        let plan = patch::plan_for(rules(), &group_kind.0, &group_kind.1);
        let pb = serde_json::to_vec(&p).unwrap();
        let rp = patch::json_patch(rules(), Direction::Rename, &pb, plan).unwrap();
        let rp: Value = serde_json::from_slice(&rp).unwrap();
        let mut left: Value = serde_json::from_slice(&rw(Direction::Rename, &serde_json::to_vec(&d).unwrap())).unwrap();
        let rjp: json_patch::Patch = serde_json::from_value(rp.clone()).unwrap();
        json_patch::patch(&mut left, &rjp).map_err(|e| TestCaseError::fail(format!("renamed patch fails: {e}\npatch: {rp}")))?;
        let right: Value = serde_json::from_slice(&rw(Direction::Rename, &serde_json::to_vec(&applied).unwrap())).unwrap();
        prop_assert!(left == right, "\ndoc:   {d}\npatch: {p}\nrenamed patch: {rp}\nleft:  {left}\nright: {right}");
    }
}

fn esc(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// JSON Patch operations over the places names live in (and some that only look like it).
fn patch_op() -> impl Strategy<Value = Value> {
    let client_name = || name_key().prop_filter("lossy on the client side", |k| !looks_renamed(k, ""));
    // Lossy by design: a move or copy between a label whose *value* a `name=value` rule
    // renames and a key no such rule covers changes which values get renamed.
    let plain_source =
        || client_name().prop_filter("value-renamed source", |k| k != "app.kubernetes.io/managed-by");
    prop_oneof![
        (client_name(), free_text()).prop_map(|(k, v)| json!({"op": "add", "path": format!("/metadata/labels/{}", esc(&k)), "value": v})),
        (client_name(), free_text()).prop_map(|(k, v)| json!({"op": "add", "path": format!("/metadata/annotations/{}", esc(&k)), "value": v})),
        (client_name(), free_text()).prop_map(|(k, v)| json!({"op": "add", "path": "/metadata/labels", "value": {k: v}})),
        client_name().prop_map(|k| json!({"op": "remove", "path": format!("/metadata/labels/{}", esc(&k))})),
        client_name().prop_map(|k| json!({"op": "add", "path": "/metadata/finalizers", "value": [k]})),
        client_name().prop_map(|k| json!({"op": "add", "path": "/metadata/finalizers/-", "value": k})),
        Just(json!({"op": "remove", "path": "/metadata/finalizers/0"})),
        client_name().prop_map(|k| json!({"op": "replace", "path": "/metadata/finalizers/0", "value": k})),
        (plain_source(), client_name()).prop_map(|(a, b)| json!({"op": "move", "from": format!("/metadata/labels/{}", esc(&a)), "path": format!("/metadata/annotations/{}", esc(&b))})),
        (plain_source(), plain_source()).prop_map(|(a, b)| json!({"op": "copy", "from": format!("/metadata/labels/{}", esc(&a)), "path": format!("/metadata/labels/{}", esc(&b))})),
        (owner_gvk(Side::Client), "[a-z]{1,4}").prop_map(|((av, k), n)| json!({"op": "add", "path": "/metadata/ownerReferences", "value": [{"apiVersion": av, "kind": k, "name": n, "uid": "u"}]})),
        (owner_gvk(Side::Client), "[a-z]{1,4}").prop_map(|((av, k), n)| json!({"op": "add", "path": "/metadata/ownerReferences/-", "value": {"apiVersion": av, "kind": k, "name": n, "uid": "u"}})),
        free_text().prop_map(|t| json!({"op": "replace", "path": "/spec/description", "value": t})),
        free_text().prop_map(|t| json!({"op": "add", "path": "/status/note", "value": t})),
        Just(json!({"op": "test", "path": "/apiVersion", "value": "kubevirt.io/v1"})),
    ]
}

/// The LIST stream rewriter keeps the envelope's whitespace as it came.
#[test]
fn list_stream_keeps_envelope_whitespace() {
    let body = b"{\n  \"apiVersion\": \"v1\",\n  \"items\": [],\n  \"kind\": \"ConfigMapList\"\n}";
    let mut lr = ListRewriter::new(rules(), Direction::Restore, Context::default());
    let mut out = Vec::new();
    lr.feed(body, &mut out).unwrap();
    lr.finish(&mut out).unwrap();
    assert_eq!(show(&out), show(body));
}

/// A JSON Patch op on `/kind` renames the kind, so a `test` op keeps holding after renaming.
#[test]
fn json_patch_kind_value_is_renamed() {
    let plan = patch::plan_for(rules(), "kubevirt.io", "VirtualMachine");
    let p = br#"[{"op":"test","path":"/kind","value":"VirtualMachine"}]"#;
    let out = patch::json_patch(rules(), Direction::Rename, p, plan).unwrap();
    assert_eq!(
        show(&out),
        r#"[{"op":"test","path":"/kind","value":"InternalVirtualizationVirtualMachine"}]"#
    );
}

/// Items of a LIST that repeat each other's label and annotation keys (what the stream's memo
/// follows from item to item) come out as each item rewritten alone: renamed keys that now
/// collide, the same keys again with other values, the keys in another order, fewer, more;
/// owners' apiVersion/kind pairs met before.
#[test]
fn list_items_with_repeated_keys_rewrite_as_alone() {
    let internal = "kubevirt.internal.virtualization.deckhouse.io";
    // Owners of several kinds, in turn: their apiVersion/kind pairs repeat too.
    let owners = [
        (
            "internal.virtualization.deckhouse.io/v1",
            "InternalVirtualizationVirtualMachine",
        ),
        (
            "internal.virtualization.deckhouse.io/v1",
            "InternalVirtualizationVirtualMachineInstance",
        ),
        (
            "internal.virtualization.deckhouse.io/v1alpha1",
            "InternalVirtualizationVirtualMachine",
        ),
        ("virtualization.deckhouse.io/v1alpha2", "VirtualMachine"),
        ("v1", "Pod"),
    ];
    let mut n = 0;
    let mut item = |labels: &[(&str, &str)]| {
        let labels: Map<String, Value> = labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        let (av, kind) = owners[n % owners.len()];
        n += 1;
        json!({
            "apiVersion": "internal.virtualization.deckhouse.io/v1",
            "kind": "InternalVirtualizationVirtualMachine",
            "metadata": {
                "name": "vm", "labels": labels, "annotations": labels,
                "ownerReferences": [{"apiVersion": av, "kind": kind, "name": "o"}, {"apiVersion": av, "name": "o"}],
            },
        })
    };
    let a = format!("{internal}/a");
    let b = format!("{internal}/b");
    let items = [
        item(&[("kubevirt.io/a", "1"), (&a, "2"), ("app", "x")]),
        item(&[("kubevirt.io/a", "3"), (&a, "4"), ("app", "y")]),
        item(&[("kubevirt.io/a", "5"), (&b, "6"), ("app", "z")]),
        item(&[(&a, "7"), ("kubevirt.io/a", "8")]),
        item(&[(&a, "9")]),
        item(&[
            (&a, "1"),
            ("kubevirt.io/a", "2"),
            ("app", "x"),
            ("kubevirt.io/b", "3"),
            (&b, "4"),
        ]),
        item(&[("kubevirt.io/a", "1"), (&a, "2"), ("app", "x")]),
    ];
    let list = |items: Vec<Vec<u8>>| {
        let mut b = br#"{"apiVersion":"v1","kind":"List","items":["#.to_vec();
        b.extend(items.join(&b','));
        b.extend(br#"],"metadata":{}}"#);
        b
    };
    let body = list(items.iter().map(|it| serde_json::to_vec(it).unwrap()).collect());
    for dir in [Direction::Restore, Direction::Rename] {
        let mut lr = ListRewriter::new(rules(), dir, Context::default());
        let mut out = Vec::new();
        lr.feed(&body, &mut out).unwrap();
        lr.finish(&mut out).unwrap();
        // Byte for byte: a key left twice would parse as the same value.
        let alone = list(
            items
                .iter()
                .map(|it| rw(dir, &serde_json::to_vec(it).unwrap()))
                .collect(),
        );
        assert_eq!(show(&out), show(&alone), "{dir:?}");
    }
}
