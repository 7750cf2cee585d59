//! Finds where top-level JSON values end in input that arrives in pieces.
//!
//! It tracks only nesting, strings and escapes; validation happens when the complete value is
//! rewritten. State survives between calls, so a large value split over many chunks is scanned
//! once.

use wide::{CmpEq, i8x16};

/// Boundary finder for one value at a time.
#[derive(Debug, Default, Clone)]
pub(crate) struct Framer {
    depth: u32,
    in_str: bool,
    esc: bool,
    mode: Mode,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Mode {
    #[default]
    Idle,
    Container,
    Str,
    Scalar,
}

impl Framer {
    /// Scans from `*pos` (where a value starts, whitespace already skipped) and returns the end
    /// of the value if it is complete in `buf`; `*pos` is where scanning stopped. With `eof`, a
    /// trailing scalar ends at the end of the input.
    pub(crate) fn advance(&mut self, buf: &[u8], pos: &mut usize, eof: bool) -> Option<usize> {
        if self.mode == Mode::Idle {
            let &b = buf.get(*pos)?;
            *pos += 1;
            self.mode = match b {
                b'{' | b'[' => {
                    self.depth = 1;
                    Mode::Container
                }
                b'"' => {
                    self.in_str = true;
                    Mode::Str
                }
                _ => Mode::Scalar,
            };
        }
        let end = match self.mode {
            Mode::Scalar => {
                while let Some(&b) = buf.get(*pos) {
                    if matches!(
                        b,
                        b' ' | b'\t' | b'\r' | b'\n' | b',' | b']' | b'}' | b'{' | b'[' | b'"'
                    ) {
                        return self.done(*pos);
                    }
                    *pos += 1;
                }
                return if eof { self.done(*pos) } else { None };
            }
            _ => self.scan(buf, pos)?,
        };
        self.done(end)
    }

    fn done(&mut self, end: usize) -> Option<usize> {
        *self = Self::default();
        Some(end)
    }

    fn scan(&mut self, buf: &[u8], pos: &mut usize) -> Option<usize> {
        loop {
            if self.in_str {
                if self.esc {
                    if *pos >= buf.len() {
                        return None;
                    }
                    *pos += 1;
                    self.esc = false;
                }
                let Some(j) = find_quote_or_backslash(buf, *pos) else {
                    *pos = buf.len();
                    return None;
                };
                *pos = j + 1;
                if buf[j] == b'\\' {
                    self.esc = true;
                } else {
                    self.in_str = false;
                    if self.mode == Mode::Str {
                        return Some(*pos);
                    }
                }
                continue;
            }
            let Some(j) = find_quote_or_bracket(buf, *pos) else {
                *pos = buf.len();
                return None;
            };
            *pos = j + 1;
            match buf[j] {
                b'"' => self.in_str = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return Some(*pos);
                    }
                }
                _ => {}
            }
        }
    }
}

/// The next `"` or `\\` at or after `i`, 16 bytes at a time (strings in Kubernetes objects
/// are short, so this beats a memchr call per string).
#[inline]
fn find_quote_or_backslash(buf: &[u8], i: usize) -> Option<usize> {
    find(
        buf,
        i,
        |v| v.cmp_eq(splat(b'"')) | v.cmp_eq(splat(b'\\')),
        |b| b == b'"' || b == b'\\',
    )
}

/// The next `"`, `{`, `[`, `}` or `]` at or after `i`, 16 bytes at a time: between strings,
/// the only bytes that change the framer's state.
#[inline]
fn find_quote_or_bracket(buf: &[u8], i: usize) -> Option<usize> {
    find(
        buf,
        i,
        |v| {
            // Setting bit 5 maps `[` onto `{` and `]` onto `}`, and no other byte onto either.
            let folded = v | splat(0x20);
            v.cmp_eq(splat(b'"')) | folded.cmp_eq(splat(b'{')) | folded.cmp_eq(splat(b'}'))
        },
        |b| matches!(b, b'"' | b'{' | b'[' | b'}' | b']'),
    )
}

fn splat(b: u8) -> i8x16 {
    i8x16::splat(b as i8)
}

/// The first byte at or after `i` that `hits` flags (a vector of 16 bytes at a time) or, in the
/// last bytes, that `is_hit` accepts.
#[inline(always)]
fn find(
    buf: &[u8],
    mut i: usize,
    hits: impl Fn(i8x16) -> i8x16,
    is_hit: impl Fn(u8) -> bool,
) -> Option<usize> {
    while let Some(chunk) = buf.get(i..i + 16) {
        let v = i8x16::new(<[u8; 16]>::try_from(chunk).expect("16 bytes").map(|c| c as i8));
        let m = hits(v).move_mask();
        if m != 0 {
            return Some(i + m.trailing_zeros() as usize);
        }
        i += 16;
    }
    buf.get(i..)?.iter().position(|&b| is_hit(b)).map(|p| i + p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_ends_across_any_split() {
        let short = br#"{"a":"x}\"{","b":[1,{"c":2}]}"#;
        // Long enough that strings, escapes and brackets fall on every offset of a vector.
        let long = format!(
            r#"{{"s":"{}\\","t":"a\"b]}}","u":[{}],"v":"{{[\"}}]"}}"#,
            "p".repeat(37),
            r#"{"k":"]}","n":[1,2,{}]}"#.repeat(7).replace("}{", "},{")
        );
        assert!(serde_json::from_str::<serde_json::Value>(&long).is_ok(), "{long}");
        for doc in [&short[..], long.as_bytes()] {
            finds_end_across_any_split(doc);
        }
    }

    fn finds_end_across_any_split(doc: &[u8]) {
        for split in 0..doc.len() {
            let mut f = Framer::default();
            let mut buf = doc[..split].to_vec();
            let mut pos = 0;
            let first = f.advance(&buf, &mut pos, false);
            assert!(first.is_none() || split == doc.len(), "split {split}");
            buf.extend_from_slice(&doc[split..]);
            assert_eq!(f.advance(&buf, &mut pos, false), Some(doc.len()), "split {split}");
        }
    }

    #[test]
    fn scalars_need_a_delimiter_or_eof() {
        let mut f = Framer::default();
        let mut pos = 0;
        assert_eq!(f.advance(b"123", &mut pos, false), None);
        assert_eq!(f.advance(b"123", &mut pos, true), Some(3));
        let mut pos = 0;
        assert_eq!(Framer::default().advance(b"12,", &mut pos, false), Some(2));
    }
}
