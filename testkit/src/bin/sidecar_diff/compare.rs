//! Normalisation of an answer and the differences between two: what varies from object to
//! object by nature (resourceVersion, uid, timestamps, ages, the side's namespace) is masked,
//! the rest compared as JSON values where the body is JSON, as text otherwise.

use serde_json::Value;

use crate::answer::Answer;

/// Which part of the answer differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Facet {
    Status,
    Header,
    Body,
    /// The same JSON values, their object keys in another order.
    KeyOrder,
    /// The same watch events, separated otherwise (newline or nothing).
    WatchFraming,
    Stderr,
}

impl Facet {
    pub fn name(self) -> &'static str {
        match self {
            Facet::Status => "status",
            Facet::Header => "header",
            Facet::Body => "body",
            Facet::KeyOrder => "key order",
            Facet::WatchFraming => "watch framing",
            Facet::Stderr => "stderr",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Difference {
    pub facet: Facet,
    pub detail: String,
}

/// The two sides' namespaces (and the prefix of their cluster-scoped names).
pub const SIDES: [&str; 2] = ["diff-a", "diff-b"];
const SIDE_MASK: &str = "diff-X";
/// Members whose values differ from object to object by nature.
const VOLATILE: [&str; 13] = [
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "time",
    "lastTransitionTime",
    "lastUpdateTime",
    "lastHeartbeatTime",
    "firstTimestamp",
    "lastTimestamp",
    "eventTime",
    "continue",
    "k8s.io/initial-events-end-resource-version",
];

#[derive(Debug, PartialEq)]
enum Body {
    Empty,
    Json(Value),
    /// Concatenated documents (a watch); `true` when each ends with a newline.
    Stream(Vec<Value>, bool),
    Text(String),
    /// Binary (protobuf, CBOR): only the status and headers are compared.
    Binary,
}

fn mask_sides(s: &str) -> String {
    SIDES
        .iter()
        .fold(s.to_owned(), |acc, side| acc.replace(side, SIDE_MASK))
}

fn body(raw: &[u8]) -> Body {
    let Ok(text) = std::str::from_utf8(raw) else {
        return Body::Binary;
    };
    let text = mask_sides(text);
    if text.trim().is_empty() {
        return Body::Empty;
    }
    if let Ok(v) = serde_json::from_str::<Value>(&text) {
        return Body::Json(normalise(v));
    }
    let mut docs = Vec::new();
    let mut newline = true;
    let mut it = serde_json::Deserializer::from_str(&text).into_iter::<Value>();
    while let Some(Ok(v)) = it.next() {
        docs.push(normalise(v));
        let rest = &text[it.byte_offset()..];
        newline &= rest.starts_with('\n') || rest.is_empty() && text.ends_with('\n');
    }
    if docs.len() > 1 && text[it.byte_offset()..].trim().is_empty() {
        return Body::Stream(docs, newline);
    }
    Body::Text(normalise_text(&text))
}

/// Masks [`VOLATILE`] members and the `Age` cells of Tables (watch events hold them too).
fn normalise(mut v: Value) -> Value {
    mask(&mut v);
    v
}

/// A Table's `Age` cells; a watch's later Tables carry no column definitions, so there any
/// cell that reads as an age.
fn mask_age(table: &mut Value) {
    let age = table["columnDefinitions"]
        .as_array()
        .and_then(|c| c.iter().position(|d| d["name"] == "Age"));
    let Some(rows) = table["rows"].as_array_mut() else {
        return;
    };
    for r in rows {
        let Some(cells) = r["cells"].as_array_mut() else {
            continue;
        };
        for (i, cell) in cells.iter_mut().enumerate() {
            if age == Some(i) || age.is_none() && cell.as_str().is_some_and(is_age) {
                *cell = Value::String("AGE".into());
            }
        }
    }
}

fn mask(v: &mut Value) {
    if v.get("kind").and_then(Value::as_str) == Some("Table") {
        mask_age(v);
    }
    match v {
        Value::Object(m) => m.iter_mut().for_each(|(k, x)| mask_member(k, x)),
        Value::Array(a) => a.iter_mut().for_each(mask),
        _ => {}
    }
}

fn mask_member(k: &str, x: &mut Value) {
    if VOLATILE.contains(&k) && !x.is_object() && !x.is_array() {
        *x = Value::String("*".into());
        return;
    }
    mask(x);
    // kube-apiserver orders managedFields entries by time, to the second: writes in one second
    // or in two order them differently.
    if let ("managedFields", Value::Array(entries)) = (k, x) {
        entries.sort_by_cached_key(Value::to_string);
    }
}

/// kubectl's ages (`5s`, `2m3s`, `<invalid>`) become `AGE`; YAML's volatile members `*`.
fn normalise_text(t: &str) -> String {
    t.lines()
        .map(|l| {
            let member = l.trim_start().trim_start_matches("- ");
            if let Some((k, _)) = member.split_once(": ")
                && VOLATILE.contains(&k)
            {
                return format!("{}: *", &l[..l.len() - member.len() + k.len()]);
            }
            l.split(' ')
                .map(|w| if is_age(w) { "AGE" } else { w })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_age(w: &str) -> bool {
    if w == "<invalid>" {
        return true;
    }
    let mut digits = false;
    let mut units = 0;
    for c in w.chars() {
        if c.is_ascii_digit() {
            digits = true;
        } else if "smhd".contains(c) && digits {
            digits = false;
            units += 1;
        } else {
            return false;
        }
    }
    units > 0 && !digits
}

/// Every difference between `a` and `b`, status first.
pub fn diff(a: &Answer, b: &Answer) -> Vec<Difference> {
    let mut out = Vec::new();
    if a.status != b.status {
        out.push(d(Facet::Status, format!("{} | {}", a.status, b.status)));
    }
    let keys: std::collections::BTreeSet<_> = a.headers.keys().chain(b.headers.keys()).collect();
    for k in keys {
        let (x, y) = (a.headers.get(k), b.headers.get(k));
        if x != y {
            let show = |v: Option<&String>| v.map_or("-".to_owned(), |v| cut(v));
            out.push(d(Facet::Header, format!("{k}: {} | {}", show(x), show(y))));
        }
    }
    body_diff(&body(&a.body), &body(&b.body), &mut out);
    let (ea, eb) = (
        normalise_text(&mask_sides(&a.stderr)),
        normalise_text(&mask_sides(&b.stderr)),
    );
    if ea != eb {
        out.push(d(
            Facet::Stderr,
            format!("{} | {}", cut(ea.trim()), cut(eb.trim())),
        ));
    }
    out
}

fn body_diff(a: &Body, b: &Body, out: &mut Vec<Difference>) {
    match (a, b) {
        (Body::Json(x), Body::Json(y)) => json_diff(x, y, out),
        (Body::Stream(x, nx), Body::Stream(y, ny)) => {
            if x.len() != y.len() {
                out.push(d(Facet::Body, format!("{} events | {} events", x.len(), y.len())));
            }
            for (i, (ex, ey)) in x.iter().zip(y).enumerate() {
                let mut inner = Vec::new();
                json_diff(ex, ey, &mut inner);
                for mut e in inner {
                    e.detail = format!("event {i}: {}", e.detail);
                    out.push(e);
                }
            }
            if nx != ny {
                let show = |n: bool| {
                    if n {
                        "newline after each event"
                    } else {
                        "no separator"
                    }
                };
                out.push(d(Facet::WatchFraming, format!("{} | {}", show(*nx), show(*ny))));
            }
        }
        (Body::Text(x), Body::Text(y)) if x != y => {
            let line = x.lines().zip(y.lines()).find(|(l, m)| l != m);
            let detail = match line {
                Some((l, m)) => format!("{} | {}", cut(l), cut(m)),
                None => format!("{} lines | {} lines", x.lines().count(), y.lines().count()),
            };
            out.push(d(Facet::Body, detail));
        }
        (x, y) if x != y => out.push(d(Facet::Body, format!("{} | {}", kind(x), kind(y)))),
        _ => {}
    }
}

fn json_diff(x: &Value, y: &Value, out: &mut Vec<Difference>) {
    if x == y {
        let (sx, sy) = (x.to_string(), y.to_string());
        if sx != sy {
            out.push(d(Facet::KeyOrder, first_divergence(&sx, &sy)));
        }
        return;
    }
    let mut paths = Vec::new();
    paths_of(x, y, "$", &mut paths);
    let n = paths.len();
    let mut detail = paths.into_iter().take(3).collect::<Vec<_>>().join("; ");
    if n > 3 {
        detail.push_str(&format!("; ... {} more", n - 3));
    }
    out.push(d(Facet::Body, detail));
}

fn paths_of(x: &Value, y: &Value, at: &str, out: &mut Vec<String>) {
    match (x, y) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, va) in a {
                match b.get(k) {
                    Some(vb) => paths_of(va, vb, &format!("{at}.{k}"), out),
                    None => out.push(format!("{at}.{k}: {} | absent", cut(&va.to_string()))),
                }
            }
            for (k, vb) in b {
                if !a.contains_key(k) {
                    out.push(format!("{at}.{k}: absent | {}", cut(&vb.to_string())));
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (va, vb)) in a.iter().zip(b).enumerate() {
                paths_of(va, vb, &format!("{at}[{i}]"), out);
            }
        }
        _ if x != y => out.push(format!("{at}: {} | {}", cut(&x.to_string()), cut(&y.to_string()))),
        _ => {}
    }
}

fn first_divergence(a: &str, b: &str) -> String {
    let i = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    let at = a.floor_char_boundary(i.saturating_sub(20));
    let bt = b.floor_char_boundary(i.saturating_sub(20));
    format!("...{} | ...{}", cut(&a[at..]), cut(&b[bt..]))
}

fn kind(b: &Body) -> String {
    match b {
        Body::Empty => "empty".into(),
        Body::Json(_) => "JSON".into(),
        Body::Stream(v, _) => format!("{} JSON documents", v.len()),
        Body::Text(t) => format!("text: {}", cut(t.lines().next().unwrap_or(""))),
        Body::Binary => "binary".into(),
    }
}

fn d(facet: Facet, detail: String) -> Difference {
    Difference { facet, detail }
}

/// At most 100 characters of `s`, on one line.
pub fn cut(s: &str) -> String {
    let s = s.replace('\n', "\\n");
    match s.char_indices().nth(100) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(body: &str) -> Answer {
        Answer {
            status: "200".into(),
            body: body.as_bytes().to_vec(),
            ..Answer::default()
        }
    }

    #[test]
    fn volatile_members_and_sides_are_masked() {
        let a = answer(r#"{"metadata":{"namespace":"diff-a","resourceVersion":"1","uid":"u1"}}"#);
        let b = answer(r#"{"metadata":{"namespace":"diff-b","resourceVersion":"9","uid":"u2"}}"#);
        assert!(diff(&a, &b).is_empty());
    }

    #[test]
    fn key_order_and_framing_are_facets_of_their_own() {
        let a = answer("{\"a\":1,\"b\":2}\n{\"a\":3}\n");
        let b = answer("{\"b\":2,\"a\":1}{\"a\":3}");
        let facets: Vec<_> = diff(&a, &b).into_iter().map(|d| d.facet).collect();
        assert_eq!(facets, [Facet::KeyOrder, Facet::WatchFraming]);
    }

    #[test]
    fn a_changed_value_names_its_path() {
        let a = answer(r#"{"spec":{"group":"kubevirt.io"}}"#);
        let b = answer(r#"{"spec":{"group":"internal.virtualization.deckhouse.io"}}"#);
        let ds = diff(&a, &b);
        assert_eq!(ds[0].facet, Facet::Body);
        assert!(ds[0].detail.starts_with("$.spec.group: "), "{}", ds[0].detail);
    }

    #[test]
    fn ages_are_masked() {
        assert!(is_age("5s") && is_age("2m30s") && is_age("3d") && !is_age("vm1") && !is_age("s"));
    }
}
