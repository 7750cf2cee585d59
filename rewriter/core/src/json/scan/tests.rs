//! The scanner against serde_json, at its limits, and on every block position of its fast paths.

use super::*;
use crate::json::escape::quote;

fn valid(s: &str) -> bool {
    let mut sc = Scanner::new(s.as_bytes());
    sc.skip_value().is_ok() && sc.end().is_ok()
}

#[test]
fn agrees_with_serde_json_on_samples() {
    for s in [
        r#"{"a":[1,2.5,-0,1e5,1E-2,true,false,null,"x\"y\u00e9\ud83d\ude00"],"b":{}}"#,
        "[]",
        " 0 ",
        r#""\u0000""#,
        "01",
        "1.",
        "-",
        r#"{"a" 1}"#,
        r#"{"a":1,}"#,
        "[1,]",
        "\"\u{1}\"",
        r#""\x""#,
        "tru",
        "{\"a\":\"\u{e9}\"}",
        // Surrogates: paired, lone leading, lone trailing, leading then leading (fuzz).
        r#""\ud83d\ude00""#,
        r#""\ud83dx""#,
        r#""\ude00""#,
        r#""trt\udaee\udaeez""#,
        r#""\ud83d\u0041""#,
        r#"[{"a":"\ud83d"}]"#,
    ] {
        let ours = valid(s);
        // A `Value` validates strings as text (what every consumer of the output does).
        let theirs = serde_json::from_str::<serde_json::Value>(s).is_ok();
        assert_eq!(ours, theirs, "{s:?}");
    }
}

#[test]
fn decodes_escapes_and_reports_offsets() {
    let mut sc = Scanner::new(br#""a\/b\n\u00e9\ud83d\ude00""#);
    assert_eq!(sc.string().unwrap().text, "a/b\né😀");
    let mut sc = Scanner::with_base(br#"{"a":tru}"#, 100);
    let e = sc.skip_value().unwrap_err();
    assert_eq!(e.offset, 105);
}

#[test]
fn walked_depth_is_limited() {
    // The walk's limit is serde_json's: 127 levels opened with `begin_*` pass, 128 do not.
    for (n, ok) in [(127, true), (128, false)] {
        let doc = "[".repeat(n) + &"]".repeat(n);
        let mut sc = Scanner::new(doc.as_bytes());
        let walked = (0..n).try_for_each(|_| sc.begin_array());
        assert_eq!(walked.is_ok(), ok, "{n}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&doc).is_ok(), ok, "{n}");
    }
}

/// `n` levels of arrays and objects alternating (the innermost holding `1`), wrapped so the
/// deep part is a subtree the walk skips.
fn nested(n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        s.push_str(if i % 2 == 0 { "[0," } else { "{\"k\":1,\"v\":" });
    }
    s.push('1');
    for i in (0..n).rev() {
        s.push_str(if i % 2 == 0 { ",2]" } else { ",\"z\":\"s\"}" });
    }
    s
}

#[test]
fn skipped_subtrees_nest_to_kube_apiserver_limit() {
    let max = MAX_SKIP_DEPTH as usize;
    for n in [1, 127, 128, 129, 130, 255, 256, 257, 1000, max] {
        let doc = nested(n);
        assert!(valid(&doc), "{n}");
        // Inside a walked object: the walk's own level counts toward the limit.
        let doc = format!("{{\"data\":{}}}", nested(n - 1));
        let mut sc = Scanner::new(doc.as_bytes());
        sc.begin_object().unwrap();
        let mut first = true;
        assert_eq!(sc.next_key(&mut first).unwrap().unwrap().text, "data");
        sc.skip_value().unwrap_or_else(|e| panic!("{n}: {e:?}"));
        assert!(sc.next_key(&mut first).unwrap().is_none());
    }
    for doc in [nested(max + 1), "[".repeat(max + 1) + &"]".repeat(max + 1)] {
        let e = Scanner::new(doc.as_bytes()).skip_value().unwrap_err();
        assert_eq!(
            (e.offset, e.msg),
            (offset_of_level(&doc, max), "recursion limit exceeded")
        );
    }
    // Counted from the document root: one walked level plus MAX_SKIP_DEPTH skipped ones.
    let doc = format!("{{\"data\":{}}}", nested(max));
    let mut sc = Scanner::new(doc.as_bytes());
    sc.begin_object().unwrap();
    let mut first = true;
    sc.next_key(&mut first).unwrap();
    assert_eq!(sc.skip_value().unwrap_err().msg, "recursion limit exceeded");
}

/// Offset of the bracket that opens level `n + 1` (0-based count of brackets before it).
fn offset_of_level(doc: &str, n: usize) -> usize {
    doc.bytes()
        .enumerate()
        .filter(|&(_, b)| b == b'[' || b == b'{')
        .nth(n)
        .map(|(i, _)| i)
        .expect("deep enough")
}

#[test]
fn deep_skips_check_brackets_across_nested_calls() {
    // A mismatched bracket deeper than one register holds is caught as the levels unwind.
    let n = 200;
    let mut doc = "[".repeat(60) + &"{\"a\":[".repeat(n) + "1";
    doc.push_str(&"]}".repeat(n - 1));
    doc.push_str("]]"); // `]` where `}` closes
    doc.push_str(&"]".repeat(59));
    assert!(!valid(&doc));
    let mut ok = "[".repeat(60) + &"{\"a\":[".repeat(n) + "1";
    ok.push_str(&"]}".repeat(n));
    ok.push_str(&"]".repeat(60));
    assert!(valid(&ok));
}

proptest::proptest! {
    /// Any nesting of objects and arrays up to 600 levels is accepted, and one closing
    /// bracket swapped for the other kind is refused, at any depth across nested calls.
    #[test]
    fn deep_brackets_match(kinds in proptest::collection::vec(proptest::bool::ANY, 1..600), flip in 0usize..600) {
        let mut doc = String::new();
        for &obj in &kinds {
            doc.push_str(if obj { "{\"k\":" } else { "[" });
        }
        doc.push_str("null");
        let mut bad = doc.clone();
        for (i, &obj) in kinds.iter().enumerate().rev() {
            doc.push(if obj { '}' } else { ']' });
            let swapped = if i == flip % kinds.len() { !obj } else { obj };
            bad.push(if swapped { '}' } else { ']' });
        }
        proptest::prop_assert!(valid(&doc));
        proptest::prop_assert!(!valid(&bad));
    }
}

#[test]
fn input_ending_inside_a_surrogate_pair_is_eof() {
    for doc in [r#""\ud83d"#, r#""\ud83d\"#, r#""\ud83d\u"#, r#""\ud83d\ude"#] {
        let e = Scanner::new(doc.as_bytes()).skip_value().unwrap_err();
        assert!(e.eof, "{doc}: {e:?}");
    }
}

/// Error offset and message of skipping `doc` as one document.
fn skip_err(doc: &[u8]) -> (usize, &'static str, bool) {
    let mut sc = Scanner::new(doc);
    let e = sc.skip_value().and_then(|_| sc.end()).unwrap_err();
    (e.offset, e.msg, e.eof)
}

#[test]
fn fast_paths_find_each_special_byte_at_every_block_position() {
    // Strings of every length across two 16-byte blocks, with the special byte at each
    // position, at the end of the input and inside an object (key and value).
    for len in 0..40 {
        for p in 0..=len {
            let body = |c: &str| format!("{}{c}{}", "a".repeat(p), "b".repeat(len - p));
            // Plain: the closing quote right at the end of the input or before more.
            let s = format!("\"{}\"", body(""));
            assert_eq!(Scanner::new(s.as_bytes()).skip_value().unwrap(), (0, s.len()));
            let o = format!("{{{s}:{s},{s}:[{s}]}}");
            assert!(valid(&o), "{o}");
            // An escape at p.
            let s = format!("\"{}\"", body("\\n"));
            let got = Scanner::new(s.as_bytes()).string().unwrap();
            assert_eq!((got.end, got.text.as_ref()), (s.len(), body("\n").as_str()));
            let s = format!("\"{}\"", body("\\u00e9\\ud83d\\ude00"));
            assert_eq!(Scanner::new(s.as_bytes()).string().unwrap().text, body("é😀"));
            // A control character at p.
            for c in ["\u{0}", "\u{1f}", "\n", "\t"] {
                let s = format!("\"{}\"", body(c));
                assert_eq!(
                    skip_err(s.as_bytes()),
                    (1 + p, "control character in string", false)
                );
            }
            // Non-ASCII at p: valid (2, 3, 4 bytes), invalid, or cut at the input's end.
            for c in ["é", "€", "😀", "\u{7f}"] {
                let s = format!("[\"{}\",1]", body(c));
                assert!(valid(&s), "{s:?}");
            }
            // After a non-ASCII byte the blocks look for ASCII specials only.
            let s = format!("\"é{}\u{1}\"", "a".repeat(p));
            assert_eq!(
                skip_err(s.as_bytes()),
                (3 + p, "control character in string", false)
            );
            let s = format!("[\"é{}\\n\"]", "a".repeat(p));
            assert!(valid(&s), "{s:?}");
            let mut s = format!("\"{}\"", body("é")).into_bytes();
            s[1 + p + 1] = b'a'; // a lead byte without its continuation
            assert_eq!(skip_err(&s), (1 + p, "invalid UTF-8 in string", false));
            let mut s = format!("\"{}\"", body("x")).into_bytes();
            s[1 + p] = 0xff;
            assert_eq!(skip_err(&s), (1 + p, "invalid UTF-8 in string", false));
            let s = format!("\"{}\\", body(""));
            assert!(skip_err(s.as_bytes()).2, "{s}");
        }
        // Unterminated: more input is needed, at every length.
        let s = format!("\"{}", "a".repeat(len));
        assert_eq!(skip_err(s.as_bytes()), (s.len(), "unexpected end of input", true));
        let s = format!("{{\"{}", "a".repeat(len));
        assert_eq!(skip_err(s.as_bytes()), (s.len(), "unexpected end of input", true));
    }
}

#[test]
fn whitespace_runs_of_every_length() {
    for n in 0..40 {
        for ws in [" ", "\n", "\r\n", "\t "] {
            let w = ws.repeat(n);
            let doc = format!("{w}{{{w}\"a\"{w}:{w}[{w}1{w},{w}\"x\"{w}]{w},{w}\"b\"{w}:{w}{{{w}}}{w}}}{w}");
            assert!(valid(&doc), "{doc:?}");
            let mut sc = Scanner::new(doc.as_bytes());
            let (start, end) = sc.skip_value().unwrap();
            assert_eq!((start, end), (w.len(), doc.len() - w.len()));
            let bad = format!("[{w}1{w}x]");
            assert_eq!(
                skip_err(bad.as_bytes()),
                (1 + 2 * w.len() + 1, "expected `,` or `]`", false)
            );
        }
    }
}

#[test]
fn every_prefix_of_a_document_needs_more_input() {
    let doc = r#"{"apiVersion":"v1","items":[{"a":"\u00e9\"x\\","b":-12.5e+3,"c":[true,false,null],"long key of more than sixteen bytes":"é€😀 and a long value past two blocks","d":{}}],"e":0}"#;
    assert!(valid(doc));
    let doc = doc.as_bytes();
    for n in 0..doc.len() {
        let (offset, msg, eof) = skip_err(&doc[..n]);
        assert!(eof, "{n}: {offset} {msg}");
        assert_eq!(offset, n, "{n}");
    }
}

#[test]
fn quotes_round_trip() {
    for s in ["plain", "q\"uote", "back\\slash", "ctl\u{1}\n", "é<>&"] {
        let q = quote(s);
        assert_eq!(serde_json::from_slice::<String>(&q).unwrap(), s);
    }
}
