//! Shared oracles for the fuzz targets: each target is a thin wrapper that calls one of these.

pub mod scan_ref;

use kube_api_rewriter::object::{self, Context, Outcome};
use kube_api_rewriter::patch::{self, PatchType};
use kube_api_rewriter::rules::Source;
use kube_api_rewriter::stream::{ListRewriter, WatchRewriter};
use kube_api_rewriter::{Direction, Error, Rules};
use serde_json::Value;
use std::sync::OnceLock;

/// The built-in KubeVirt rules, built once.
pub fn rules() -> &'static Rules {
    static R: OnceLock<Rules> = OnceLock::new();
    R.get_or_init(Rules::builtin_kubevirt)
}

/// serde_json's verdict on a whole document: `Some(v)` accepted, `None` rejected, and
/// `Err(())` when it rejects for a reason we document as a difference (we do not check those).
pub fn serde_verdict(data: &[u8]) -> Result<Option<Value>, ()> {
    if has_serde_token(data) {
        return Err(());
    }
    match serde_json::from_slice::<Value>(data) {
        Ok(v) => Ok(Some(v)),
        Err(e) if documented_difference(&e) => Err(()),
        Err(_) => Ok(None),
    }
}

/// Reasons serde_json rejects input that we do not hold the rewriter to.
/// * nesting: the envelope of a list or event adds levels the rewriter does not count;
/// * numbers: the rewriter copies number text and never converts it, so `1e400` passes.
pub fn documented_difference(e: &serde_json::Error) -> bool {
    let m = e.to_string();
    m.contains("recursion limit exceeded") || m.contains("number out of range")
}

/// serde_json (with `raw_value`) takes an object whose key is its private raw-value token for
/// a `RawValue` and rejects valid JSON such as `{"$serde_json::private::RawValue":4}`; the
/// rewriter treats the key as any other. Inputs that mention it get no serde_json verdict.
pub fn has_serde_token(data: &[u8]) -> bool {
    const TOKEN: &[u8] = b"$serde_json::private::RawValue";
    data.windows(TOKEN.len()).any(|w| w == TOKEN)
}

fn is_json_err(e: &Error) -> bool {
    matches!(e, Error::Json(_))
}

/// Direction from a flag bit.
pub fn dir(bit: bool) -> Direction {
    if bit {
        Direction::Restore
    } else {
        Direction::Rename
    }
}

fn assert_json(out: &[u8], what: &str, input: &[u8]) {
    if has_serde_token(out) {
        return;
    }
    if let Err(e) = serde_json::from_slice::<Value>(out) {
        if !documented_difference(&e) {
            panic!(
                "{what}: output is not JSON ({e})\ninput:  {:?}\noutput: {:?}",
                String::from_utf8_lossy(input),
                String::from_utf8_lossy(out)
            );
        }
    }
}

fn assert_ndjson(out: &[u8], events: usize, input: &[u8]) {
    if has_serde_token(out) {
        return;
    }
    let mut n = 0;
    for v in serde_json::Deserializer::from_slice(out).into_iter::<Value>() {
        match v {
            Ok(_) => n += 1,
            Err(e) if documented_difference(&e) => return,
            Err(e) => panic!(
                "watch: output is not NDJSON ({e})\ninput:  {:?}\noutput: {:?}",
                String::from_utf8_lossy(input),
                String::from_utf8_lossy(out)
            ),
        }
    }
    assert_eq!(n, events, "watch: event count of the output");
}

/// Runs a streaming rewriter over `body` cut into `pieces`.
fn run_list(dir: Direction, body: &[u8], cuts: &[usize]) -> (Vec<u8>, Result<(), Error>) {
    let mut lr = ListRewriter::new(rules(), dir, Context::default());
    let mut out = Vec::new();
    let mut prev = 0;
    for &c in cuts.iter().chain(std::iter::once(&body.len())) {
        if let Err(e) = lr.feed(&body[prev..c], &mut out) {
            return (out, Err(e));
        }
        prev = c;
    }
    let r = lr.finish(&mut out);
    (out, r)
}

fn run_watch(dir: Direction, body: &[u8], cuts: &[usize]) -> (Vec<u8>, Result<(), Error>, usize) {
    let mut wr = WatchRewriter::new(rules(), dir, Context::default());
    let mut out = Vec::new();
    let mut prev = 0;
    for &c in cuts.iter().chain(std::iter::once(&body.len())) {
        if let Err(e) = wr.feed(&body[prev..c], &mut out) {
            return (out, Err(e), 0);
        }
        prev = c;
    }
    let r = wr.finish(&mut out);
    (out, r, 0)
}

fn same(
    what: &str,
    body: &[u8],
    cut: &str,
    a: &(Vec<u8>, Result<(), Error>),
    b: &(Vec<u8>, Result<(), Error>),
) {
    match (&a.1, &b.1) {
        (Ok(()), Ok(())) => assert!(
            a.0 == b.0,
            "{what}: output differs when split {cut}\ninput: {:?}\nwhole: {:?}\nsplit: {:?}",
            String::from_utf8_lossy(body),
            String::from_utf8_lossy(&a.0),
            String::from_utf8_lossy(&b.0)
        ),
        (Err(x), Err(y)) => assert_eq!(
            x.metric_label(),
            y.metric_label(),
            "{what}: error differs when split {cut}: {x} vs {y}\ninput: {:?}",
            String::from_utf8_lossy(body)
        ),
        _ => panic!(
            "{what}: whole gives {:?}, split {cut} gives {:?}\ninput: {:?}",
            a.1,
            b.1,
            String::from_utf8_lossy(body)
        ),
    }
}

/// True when a JSON object repeats a top-level key (serde_json keeps the last, the streaming
/// rewriter sees them in order: such documents have no single meaning to compare against).
pub fn has_duplicate_top_level_keys(body: &[u8]) -> bool {
    struct Dup;
    impl<'de> serde::de::Visitor<'de> for Dup {
        type Value = bool;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<bool, A::Error> {
            let mut seen = std::collections::HashSet::new();
            let mut dup = false;
            while let Some(k) = m.next_key::<String>()? {
                dup |= !seen.insert(k);
                m.next_value::<serde::de::IgnoredAny>()?;
            }
            Ok(dup)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    serde::Deserializer::deserialize_map(&mut de, Dup).unwrap_or(false)
}

/// Input layout for the stream targets: byte 0 = flags (bit 0: direction), byte 1 = where to
/// cut (as a fraction of the body), the rest = the body.
pub fn list_stream(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let (d, body) = (dir(data[0] & 1 == 1), &data[2..]);
    let cut = body.len() * data[1] as usize / 255;
    let whole = run_list(d, body, &[]);
    let split = run_list(d, body, &[cut]);
    same("list", body, &format!("at {cut}"), &whole, &split);
    let bytes: Vec<usize> = (1..body.len()).collect();
    let ones = run_list(d, body, &bytes);
    same("list", body, "into 1-byte pieces", &whole, &ones);
    let Ok(verdict) = serde_verdict(body) else { return };
    match (&verdict, &whole.1) {
        (Some(Value::Object(_)), Err(e)) if is_json_err(e) => panic!(
            "list: serde_json accepts, we reject: {e}\ninput: {:?}",
            String::from_utf8_lossy(body)
        ),
        (None, Ok(())) => panic!(
            "list: serde_json rejects, we accept\ninput:  {:?}\noutput: {:?}",
            String::from_utf8_lossy(body),
            String::from_utf8_lossy(&whole.0)
        ),
        _ => {}
    }
    if whole.1.is_ok() {
        assert_json(&whole.0, "list", body);
    }
    // Differential: a real list streamed must equal the whole-document rewrite.
    let is_list = !has_duplicate_top_level_keys(body)
        && matches!(&verdict, Some(Value::Object(o))
        if o.get("items").is_some_and(Value::is_array)
            && o.get("kind").and_then(Value::as_str).is_some_and(|k| k.ends_with("List")));
    if is_list && whole.1.is_ok() {
        match object::rewrite(rules(), d, body, &Context::default()) {
            Ok(Outcome::Object(doc)) => {
                let a: Result<Value, _> = serde_json::from_slice(&whole.0);
                let b: Result<Value, _> = serde_json::from_slice(&doc);
                if let (Ok(a), Ok(b)) = (a, b) {
                    assert!(
                        a == b,
                        "list: stream and whole-document rewrite differ\ninput:  {:?}\nstream: {a}\nwhole:  {b}",
                        String::from_utf8_lossy(body)
                    );
                }
            }
            Ok(Outcome::Excluded) => {}
            Err(e) => panic!(
                "list: stream accepts, whole-document rewrite fails: {e}\ninput: {:?}",
                String::from_utf8_lossy(body)
            ),
        }
    }
}

/// Same layout as [`list_stream`], for WATCH streams (concatenated or NDJSON events).
pub fn watch_stream(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let (d, body) = (dir(data[0] & 1 == 1), &data[2..]);
    let cut = body.len() * data[1] as usize / 255;
    let w = run_watch(d, body, &[]);
    let whole = (w.0, w.1);
    let s = run_watch(d, body, &[cut]);
    same("watch", body, &format!("at {cut}"), &whole, &(s.0, s.1));
    let bytes: Vec<usize> = (1..body.len()).collect();
    let o = run_watch(d, body, &bytes);
    same("watch", body, "into 1-byte pieces", &whole, &(o.0, o.1));
    // Oracle: serde_json's stream reader over the whole body.
    if has_serde_token(body) {
        return;
    }
    let mut all_objects = true;
    let mut verdict = Some(());
    let mut events = 0;
    for v in serde_json::Deserializer::from_slice(body).into_iter::<Value>() {
        match v {
            Ok(v) => {
                all_objects &= v.is_object();
                events += 1;
            }
            Err(e) if documented_difference(&e) => return,
            Err(_) => {
                verdict = None;
                break;
            }
        }
    }
    match (verdict, &whole.1) {
        (Some(()), Err(e)) if all_objects && is_json_err(e) => panic!(
            "watch: serde_json accepts, we reject: {e}\ninput: {:?}",
            String::from_utf8_lossy(body)
        ),
        (None, Ok(())) => panic!(
            "watch: serde_json rejects, we accept\ninput:  {:?}\noutput: {:?}",
            String::from_utf8_lossy(body),
            String::from_utf8_lossy(&whole.0)
        ),
        _ => {}
    }
    // The built-in rules exclude nothing, so every event comes out.
    if whole.1.is_ok() && verdict.is_some() {
        assert_ndjson(&whole.0, events, body);
    }
    let _ = w.2;
}

/// Contexts a request path could give.
pub fn context(sel: u8) -> Context {
    let (g, k) = match sel % 6 {
        0 => return Context::default(),
        1 => ("kubevirt.io", "VirtualMachine"),
        2 => ("kubevirt.io", "VirtualMachineInstance"),
        3 => ("", "Pod"),
        4 => ("apiextensions.k8s.io", "CustomResourceDefinition"),
        _ => ("admission.k8s.io", "AdmissionReview"),
    };
    // Bit 6: a Table asked for with `includeObject=None` (row objects stripped).
    Context {
        group: Some(g.into()),
        kind: Some(k.into()),
        strip_row_objects: sel & 0x40 != 0,
    }
}

/// byte 0: bit 0 direction, bits 1..: context; the rest is the document.
pub fn object(data: &[u8]) {
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    let ctx = context(flags >> 1);
    for d in [dir(flags & 1 == 1), dir(flags & 1 == 0)] {
        let r = object::rewrite(rules(), d, body, &ctx);
        let Ok(verdict) = serde_verdict(body) else {
            continue;
        };
        match (&verdict, &r) {
            (Some(_), Err(e)) if is_json_err(e) => panic!(
                "object {d:?}: serde_json accepts, we reject: {e}\ninput: {:?}",
                String::from_utf8_lossy(body)
            ),
            (None, Ok(_)) => panic!(
                "object {d:?}: serde_json rejects, we accept\ninput: {:?}",
                String::from_utf8_lossy(body)
            ),
            _ => {}
        }
        if let Ok(Outcome::Object(out)) = &r {
            assert_json(out, "object", body);
        }
    }
}

/// byte 0: bits 0..1 patch type, bit 2 direction, bits 3.. plan; the rest is the patch.
pub fn patch(data: &[u8]) {
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    let ty = [
        PatchType::Json,
        PatchType::Merge,
        PatchType::Strategic,
        PatchType::Apply,
    ][(flags & 3) as usize];
    let d = dir(flags & 4 != 0);
    let (g, k) = match (flags >> 3) % 5 {
        0 => ("kubevirt.io", "VirtualMachine"),
        1 => ("", ""),
        2 => ("", "Pod"),
        3 => ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
        _ => ("apiextensions.k8s.io", "CustomResourceDefinition"),
    };
    let plan = if k == "CustomResourceDefinition" {
        // A patch of one CRD the rules name (its spec, names and group renamed).
        patch::plan_for_crd(rules(), "virtualmachines.kubevirt.io")
    } else {
        patch::plan_for(rules(), g, k)
    };
    let r = patch::rewrite(rules(), d, ty, body, plan);
    let yaml = ty == PatchType::Apply && body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{');
    if !yaml {
        if let Ok(verdict) = serde_verdict(body) {
            match (&verdict, &r) {
                (Some(_), Err(e)) if is_json_err(e) => panic!(
                    "patch {ty:?}: serde_json accepts, we reject: {e}\ninput: {:?}",
                    String::from_utf8_lossy(body)
                ),
                (None, Ok(_)) => panic!(
                    "patch {ty:?}: serde_json rejects, we accept\ninput: {:?}",
                    String::from_utf8_lossy(body)
                ),
                _ => {}
            }
        }
    }
    if let Ok(out) = &r {
        assert_json(out, "patch", body);
    }
}

/// The rule loader on arbitrary text: errors are fine, panics are not.
pub fn rules_load(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = Rules::parse(&[Source {
        name: "fuzz.yaml",
        text,
    }]);
}

/// The path rewriter, both ways; a renamed path restores to something that renames again
/// to itself (idempotence through the pair is not required; only no panics).
pub fn path_rewrite(data: &[u8]) {
    let Ok(p) = std::str::from_utf8(data) else { return };
    // Encoded slashes are decoded to a fixed point, and routing never panics.
    if let Some(decoded) = kube_api_rewriter::path::decode_route_slashes(p) {
        assert_eq!(
            kube_api_rewriter::path::decode_route_slashes(&decoded),
            None,
            "{p:?}"
        );
    }
    for m in ["GET", "PATCH"] {
        let r = kube_api_rewriter::Route::new(rules(), kube_api_rewriter::ProxyMode::Api, m, p);
        let _ = r.patch_target(rules());
    }
    for d in [Direction::Rename, Direction::Restore] {
        if let Ok(out) = kube_api_rewriter::path::rewrite(rules(), d, p) {
            let _ = kube_api_rewriter::path::rewrite(rules(), d.reverse(), &out);
        }
    }
}

/// byte 0: bit 0 direction, bits 1..2 patch type; then the embedded object, a 0xFF byte, and
/// the raw patch (base64-encoded into `response.patch`).
pub fn admission(data: &[u8]) {
    use base64::Engine as _;
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let (obj, raw) = match rest.iter().position(|&b| b == 0xff) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (&b"{}"[..], rest),
    };
    let obj_ok = serde_json::from_slice::<Value>(obj).is_ok_and(|v| v.is_object());
    let obj = if obj_ok { obj } else { &b"{}"[..] };
    let ptype = ["JSONPatch", "JSONPatch", "MergePatch", "x"][((flags >> 1) & 3) as usize];
    let b64 = base64::engine::general_purpose::STANDARD.encode(raw);
    let mut review = Vec::new();
    review.extend_from_slice(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","kind":{"group":"kubevirt.io","version":"v1","kind":"VirtualMachine"},"resource":{"group":"kubevirt.io","version":"v1","resource":"virtualmachines"},"requestKind":{"group":"kubevirt.io","version":"v1","kind":"VirtualMachine"},"name":"vm1","namespace":"demo","operation":"UPDATE","object":"#);
    review.extend_from_slice(obj);
    review.extend_from_slice(br#","oldObject":null},"response":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","allowed":true,"patchType":""#);
    review.extend_from_slice(ptype.as_bytes());
    review.extend_from_slice(br#"","patch":""#);
    review.extend_from_slice(b64.as_bytes());
    review.extend_from_slice(br#""}}"#);
    let patch_is_json = serde_json::from_slice::<Vec<serde_json::Map<String, Value>>>(raw).is_ok();
    let ctx = Context {
        group: Some("kubevirt.io".into()),
        kind: Some("VirtualMachine".into()),
        ..Context::default()
    };
    for d in [dir(flags & 1 == 1), dir(flags & 1 == 0)] {
        let r = object::rewrite(rules(), d, &review, &ctx);
        match &r {
            Err(e) if is_json_err(e) && patch_is_json => panic!(
                "admission {d:?}: valid review and patch, we reject: {e}\nobject: {:?}\npatch: {:?}",
                String::from_utf8_lossy(obj),
                String::from_utf8_lossy(raw)
            ),
            Ok(Outcome::Object(out)) => {
                assert_json(out, "admission", &review);
                let v: Value = serde_json::from_slice(out).expect("checked above");
                let p = v["response"]["patch"].as_str().expect("patch stays a string");
                let dec = base64::engine::general_purpose::STANDARD
                    .decode(p)
                    .expect("patch stays base64");
                if patch_is_json {
                    assert_json(&dec, "admission patch", raw);
                }
            }
            _ => {}
        }
    }
}

/// `proto`: protobuf request bodies (`k8s\0` + runtime.Unknown) in both directions. Never a
/// panic; whatever is accepted must come back to the same bytes when rewritten back.
pub fn proto(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let mut input = kube_api_rewriter::proto::MAGIC.to_vec();
    input.extend_from_slice(body);
    let d = dir(sel & 1 == 1);
    if let Ok(out) = kube_api_rewriter::proto::rewrite(rules(), d, &input) {
        let _ = kube_api_rewriter::proto::rewrite(rules(), d.reverse(), &out);
    }
}

/// `openapi_proto`: [`kube_api_rewriter::openapi::proto::restore`] of arbitrary bytes as an
/// OpenAPI v2 protobuf document. Oracle: no panic; a document it rewrote is valid for it again
/// and has nothing more to restore (restoring is idempotent) and differs from the input.
pub fn openapi_proto(data: &[u8]) {
    use kube_api_rewriter::openapi::proto::restore;
    if let Ok(Some(out)) = restore(rules(), data) {
        assert_ne!(
            out.as_slice(),
            data,
            "a rewrite that changes nothing must say None"
        );
        match restore(rules(), &out) {
            Ok(None) => {}
            Ok(Some(_)) => panic!("restoring twice changed the document again"),
            Err(e) => panic!("the rewritten document is invalid: {e}"),
        }
    }
}

/// `yaml::json_to_yaml`. byte 0: bit 0 clear, the rest is a JSON document; set, the rest (as
/// UTF-8, lossy) is a string placed as a value, a list item and a key, so the fuzzer works on
/// the emitter's quoting directly. Oracle: serde_json accepts ⇒ YAML comes out and reads back,
/// as YAML 1.2 and as kube-apiserver's YAML 1.1 reading of request bodies, to the same value;
/// rejects ⇒ an error.
pub fn yaml(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let doc: Vec<u8> = if flags & 1 == 0 {
        rest.to_vec()
    } else {
        let s = String::from_utf8_lossy(rest);
        serde_json::to_vec(&serde_json::json!({ "k": s, "l": [s, {"m": s}], s.as_ref(): 1 }))
            .expect("a Value serializes")
    };
    let r = kube_api_rewriter::yaml::json_to_yaml(&doc);
    let want = match serde_json::from_slice::<Value>(&doc) {
        Ok(v) => v,
        Err(_) => {
            assert!(
                r.is_err(),
                "serde_json rejects, YAML came out: {:?}",
                String::from_utf8_lossy(&doc)
            );
            return;
        }
    };
    let yaml = r.unwrap_or_else(|e| panic!("{e}\ninput: {:?}", String::from_utf8_lossy(&doc)));
    let legacy = serde_saphyr::options! { legacy_octal_numbers: true };
    for (how, back) in [
        ("YAML", serde_saphyr::from_str::<Value>(&yaml)),
        (
            "YAML 1.1",
            serde_saphyr::from_str_with_options::<Value>(&yaml, legacy),
        ),
    ] {
        let back =
            back.unwrap_or_else(|e| panic!("{how} does not read back: {e}\njson: {want}\nyaml: {yaml:?}"));
        assert!(
            back == want,
            "{how} reads back another value\njson: {want}\nback: {back}\nyaml: {yaml:?}"
        );
    }
}

/// Differential oracle for the scanner's fast paths: the core's scanner and the
/// scanner as it was before them must agree on every verdict, span, error offset and message,
/// for a whole document, a stream of values (with a fuzzer-chosen error base), a string value
/// and an object walked member by member. The whole-document verdict must also be serde_json's
/// (validating `Value` parse), except for the documented differences. An input with a 0xff byte
/// also has what follows it skipped like the subtree before it, which a plain skip must match.
pub fn scan_diff(data: &[u8]) {
    use kube_api_rewriter::internals as i;
    let base = data.first().map_or(0, |&b| usize::from(b) * 1000);
    let doc = i::skip_document(data);
    assert_eq!(
        doc.as_ref().map_err(i::parts),
        scan_ref::skip_document(data)
            .as_ref()
            .map_err(scan_ref::JsonError::parts),
        "document"
    );
    let (ours, theirs) = (i::skip_values(data, base), scan_ref::skip_values(data, base));
    assert_eq!(ours.0, theirs.0, "stream spans");
    assert_eq!(
        ours.1.as_ref().map(i::parts),
        theirs.1.as_ref().map(scan_ref::JsonError::parts),
        "stream error"
    );
    assert_eq!(
        i::string(data).map_err(|e| i::parts(&e)),
        scan_ref::string(data).map_err(|e| e.parts()),
        "string"
    );
    assert_eq!(
        i::members(data).map_err(|e| i::parts(&e)),
        scan_ref::members(data).map_err(|e| e.parts()),
        "members"
    );
    if let Ok(verdict) = serde_verdict(data) {
        assert_eq!(doc.is_ok(), verdict.is_some(), "serde_json verdict: {doc:?}");
    }
    // Before a 0xff byte (never in valid JSON), a subtree skipped before: what follows it
    // skipped like that one and plainly must come out the same.
    if let Some(k) = data.iter().position(|&b| b == 0xff)
        && let Some((like, plain)) = i::skip_like(&data[..k], &data[k + 1..])
    {
        assert_eq!(
            like.as_ref().map_err(i::parts),
            plain.as_ref().map_err(i::parts),
            "skip like a reference"
        );
    }
}
