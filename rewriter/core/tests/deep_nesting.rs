//! Values nested far deeper than the walk's limit, inside subtrees the rules do not touch
//! (`ControllerRevision.data` holds arbitrary JSON), pass through LIST and WATCH streams
//! untouched while the rest of the item is still restored; kube-apiserver's own limit
//! (10,000 levels) is where the rewriter stops too.

use kube_api_rewriter::object::Context;
use kube_api_rewriter::stream::{ListRewriter, WatchRewriter};
use kube_api_rewriter::{Direction, Rules};

const INTERNAL: &str = "internal.virtualization.deckhouse.io/v1";

/// `n` levels of objects and arrays alternating.
fn nested(n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        s.push_str(if i % 2 == 0 { "{\"a\":" } else { "[" });
    }
    s.push_str("true");
    for i in (0..n).rev() {
        s.push(if i % 2 == 0 { '}' } else { ']' });
    }
    s
}

/// A ControllerRevision owned by a VirtualMachine (as the server holds it) with `data` nested
/// `n` levels deep.
fn revision(name: &str, n: usize) -> String {
    format!(
        r#"{{"kind":"ControllerRevision","apiVersion":"apps/v1","metadata":{{"name":"{name}","namespace":"ns","ownerReferences":[{{"apiVersion":"{INTERNAL}","kind":"InternalVirtualizationVirtualMachine","name":"vm","uid":"u1"}}]}},"data":{},"revision":1}}"#,
        nested(n)
    )
}

fn ctx() -> Context {
    Context {
        group: Some("apps".into()),
        kind: Some("ControllerRevision".into()),
        ..Context::default()
    }
}

/// Feeds `body` in 4 KiB pieces.
fn feed_list(rules: &Rules, body: &str) -> kube_api_rewriter::Result<String> {
    let mut rw = ListRewriter::new(rules, Direction::Restore, ctx());
    let mut out = Vec::new();
    for piece in body.as_bytes().chunks(4096) {
        rw.feed(piece, &mut out)?;
    }
    rw.finish(&mut out)?;
    Ok(String::from_utf8(out).expect("utf-8"))
}

fn feed_watch(rules: &Rules, body: &str) -> kube_api_rewriter::Result<String> {
    let mut rw = WatchRewriter::new(rules, Direction::Restore, ctx());
    let mut out = Vec::new();
    for piece in body.as_bytes().chunks(4096) {
        rw.feed(piece, &mut out)?;
    }
    rw.finish(&mut out)?;
    Ok(String::from_utf8(out).expect("utf-8"))
}

#[test]
fn deep_data_passes_lists_and_watches() {
    let rules = Rules::builtin_kubevirt();
    for n in [127, 128, 129, 1000, 9_990] {
        let list = format!(
            r#"{{"kind":"ControllerRevisionList","apiVersion":"apps/v1","metadata":{{"resourceVersion":"5"}},"items":[{},{}]}}"#,
            revision("a", n),
            revision("b", 3)
        );
        let out = feed_list(&rules, &list).unwrap_or_else(|e| panic!("{n}: {e}"));
        assert!(
            out.contains(&nested(n)),
            "{n}: the deep value is copied as it was"
        );
        assert_eq!(
            out.matches(r#""apiVersion":"kubevirt.io/v1","kind":"VirtualMachine""#)
                .count(),
            2,
            "{n}"
        );
        assert!(!out.contains(INTERNAL), "{n}");

        let watch = format!(
            "{{\"type\":\"ADDED\",\"object\":{}}}\n{{\"type\":\"MODIFIED\",\"object\":{}}}\n",
            revision("a", n),
            revision("b", 3)
        );
        let out = feed_watch(&rules, &watch).unwrap_or_else(|e| panic!("{n}: {e}"));
        assert_eq!(out.lines().count(), 2, "{n}");
        assert!(out.contains(&nested(n)), "{n}");
        assert!(!out.contains(INTERNAL), "{n}");
    }
}

#[test]
fn deeper_than_kube_apiserver_accepts_is_refused() {
    let rules = Rules::builtin_kubevirt();
    let watch = format!("{{\"type\":\"ADDED\",\"object\":{}}}\n", revision("a", 10_001));
    let e = feed_watch(&rules, &watch).unwrap_err();
    assert!(e.to_string().contains("recursion limit exceeded"), "{e}");
}
