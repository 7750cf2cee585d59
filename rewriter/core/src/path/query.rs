//! Percent-decoding that remembers where each decoded byte came from, Go-compatible escaping,
//! and the small query helpers the path rewriter needs.
//!
//! Selectors are rewritten token by token on the *decoded* text, but the output is spliced into
//! the *raw* text: only the changed tokens are re-encoded, everything else is kept byte for byte.
//! [`Decoded`] carries the mapping from decoded bytes back to raw byte offsets for that.

/// A decoded string whose bytes know their position in the raw text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decoded {
    /// The decoded bytes (not necessarily UTF-8).
    pub(crate) bytes: Vec<u8>,
    /// `starts[i]` is the raw offset where decoded byte `i` begins; `starts[bytes.len()]` is the raw
    /// length. Decoded bytes tile the raw text, so `starts[a]..starts[b]` is the raw span of `a..b`.
    pub(crate) starts: Vec<usize>,
}

impl Decoded {
    /// The text as it is (no decoding): every byte maps to itself.
    pub(crate) fn plain(s: &str) -> Decoded {
        Decoded {
            bytes: s.as_bytes().to_vec(),
            starts: (0..=s.len()).collect(),
        }
    }

    /// Decodes a query component as `application/x-www-form-urlencoded` (`+` is a space, `%XX` a
    /// byte). `None` on an invalid escape, like Go's `url.ParseQuery`, which drops such pairs.
    pub(crate) fn form(raw: &str) -> Option<Decoded> {
        let b = raw.as_bytes();
        let mut bytes = Vec::with_capacity(b.len());
        let mut starts = Vec::with_capacity(b.len() + 1);
        let mut i = 0;
        while i < b.len() {
            starts.push(i);
            match b[i] {
                b'+' => {
                    bytes.push(b' ');
                    i += 1;
                }
                b'%' => {
                    let hi = hex(*b.get(i + 1)?)?;
                    let lo = hex(*b.get(i + 2)?)?;
                    bytes.push((hi << 4) | lo);
                    i += 3;
                }
                c => {
                    bytes.push(c);
                    i += 1;
                }
            }
        }
        starts.push(b.len());
        Some(Decoded { bytes, starts })
    }

    /// The decoded text of `a..b` as UTF-8, if it is valid.
    pub(crate) fn text(&self, a: usize, b: usize) -> Option<&str> {
        std::str::from_utf8(self.bytes.get(a..b)?).ok()
    }

    /// Splices replacements into `raw` (the text this was decoded from). Each replacement is a
    /// decoded span `(a, b)` (may be empty, then it is an insertion) and the raw text to put there.
    /// `None` if spans overlap or do not fall on character boundaries of `raw` (the selector
    /// parsers never produce such spans; this keeps arbitrary input from panicking).
    pub(crate) fn splice(&self, raw: &str, mut repl: Vec<((usize, usize), String)>) -> Option<String> {
        repl.sort_by_key(|((a, b), _)| (*a, *b));
        let mut out = String::with_capacity(raw.len() + 32);
        let mut at = 0;
        for ((a, b), text) in repl {
            let (ra, rb) = (*self.starts.get(a)?, *self.starts.get(b)?);
            if ra < at || rb < ra {
                return None;
            }
            out.push_str(raw.get(at..ra)?);
            out.push_str(&text);
            at = rb;
        }
        out.push_str(raw.get(at..)?);
        Some(out)
    }
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Decodes a query key or value to a string (`+` is a space). `None` on an invalid escape or
/// invalid UTF-8.
pub(crate) fn decode_form(raw: &str) -> Option<String> {
    if !raw.contains(['%', '+']) {
        return Some(raw.to_owned());
    }
    String::from_utf8(Decoded::form(raw)?.bytes).ok()
}

/// Decodes a path segment (`%XX` only; `+` is a plus). `None` on an invalid escape or invalid
/// UTF-8.
pub(crate) fn decode_path_segment(raw: &str) -> Option<String> {
    if !raw.contains('%') {
        return Some(raw.to_owned());
    }
    let b = raw.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            out.push((hex(*b.get(i + 1)?)? << 4) | hex(*b.get(i + 2)?)?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Escapes a query component like Go's `url.QueryEscape`: `A-Za-z0-9-_.~` stay, a space becomes
/// `+`, every other byte becomes `%XX`.
pub(crate) fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for &c in s.as_bytes() {
        match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(c as char),
            b' ' => out.push('+'),
            _ => push_pct(&mut out, c),
        }
    }
    out
}

/// Escapes a path segment like Go's `url.PathEscape`: unreserved characters and the sub-delims
/// that are legal in a segment stay, `/`, `?`, `#`, `%`, spaces, controls and non-ASCII are escaped.
pub(crate) fn path_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s.as_bytes() {
        match c {
            b'A'..=b'Z'
            | b'a'..=b'z'
            | b'0'..=b'9'
            | b'-'
            | b'_'
            | b'.'
            | b'~'
            | b'!'
            | b'$'
            | b'&'
            | b'\''
            | b'('
            | b')'
            | b'*'
            | b'+'
            | b','
            | b';'
            | b'='
            | b':'
            | b'@' => out.push(c as char),
            _ => push_pct(&mut out, c),
        }
    }
    out
}

fn push_pct(out: &mut String, c: u8) {
    out.push('%');
    out.push(HEX[(c >> 4) as usize] as char);
    out.push(HEX[(c & 15) as usize] as char);
}

/// The first decoded value of query parameter `name` (pairs with invalid escapes are skipped, as
/// Go's `url.ParseQuery` does). A key without `=` has the value `""`.
pub(crate) fn first_value(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if pair.is_empty() || decode_form(k)? != name {
            return None;
        }
        decode_form(v)
    })
}

/// kube-apiserver's query boolean (`Convert_Slice_string_To_bool` in apimachinery): a present
/// parameter is true unless its first value is `0` or `false` in any case; an empty value is true.
pub(crate) fn kube_bool(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_decoding_keeps_raw_offsets() {
        let d = Decoded::form("a%2Fb+c").unwrap();
        assert_eq!(d.bytes, b"a/b c");
        assert_eq!(d.starts, vec![0, 1, 4, 5, 6, 7]);
        assert_eq!(
            d.splice("a%2Fb+c", vec![((2, 3), "XY".into())]).as_deref(),
            Some("a%2FXY+c")
        );
        let two = vec![((5, 5), "!".into()), ((0, 2), "z".into())];
        assert_eq!(d.splice("a%2Fb+c", two).as_deref(), Some("zb+c!"));
        assert_eq!(
            d.splice("a%2Fb+c", vec![((0, 2), "z".into()), ((1, 3), "y".into())]),
            None,
            "overlap"
        );
        assert_eq!(
            Decoded::plain("é").splice("é", vec![((1, 2), "x".into())]),
            None,
            "mid-character"
        );
    }

    #[test]
    fn invalid_escapes_are_rejected() {
        for bad in ["%", "%2", "%zz", "a%g1", "%%"] {
            assert!(Decoded::form(bad).is_none(), "{bad}");
            assert!(decode_path_segment(bad).is_none(), "{bad}");
        }
        assert_eq!(decode_form("%FF"), None, "invalid UTF-8");
        assert_eq!(decode_path_segment("a+b%20c").as_deref(), Some("a+b c"));
    }

    #[test]
    fn escaping_matches_go() {
        assert_eq!(
            query_escape("kubevirt.io/created-by=x,y in (a b)"),
            "kubevirt.io%2Fcreated-by%3Dx%2Cy+in+%28a+b%29"
        );
        assert_eq!(query_escape("a~_-.Z9"), "a~_-.Z9");
        assert_eq!(query_escape("é"), "%C3%A9");
        assert_eq!(path_escape("a/b c?d#%"), "a%2Fb%20c%3Fd%23%25");
        assert_eq!(path_escape("x:y@z=1"), "x:y@z=1");
    }

    #[test]
    fn first_value_and_bools() {
        let q = "a=1&watch=%31&watch=false&x";
        assert_eq!(first_value(q, "watch").as_deref(), Some("1"));
        assert_eq!(first_value(q, "x").as_deref(), Some(""));
        assert_eq!(first_value(q, "nope"), None);
        assert_eq!(
            first_value("watch=%zz&watch=true", "watch").as_deref(),
            Some("true")
        );
        for (v, want) in [
            ("true", true),
            ("1", true),
            ("True", true),
            ("", true),
            ("yes", true),
        ] {
            assert_eq!(kube_bool(v), want, "{v}");
        }
        for v in ["0", "false", "FALSE", "False"] {
            assert!(!kube_bool(v), "{v}");
        }
    }
}
