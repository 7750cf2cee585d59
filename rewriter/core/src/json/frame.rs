//! Finds where top-level JSON values end in input that arrives in pieces.
//!
//! It tracks only nesting, strings and escapes; validation happens when the complete value is
//! rewritten. State survives between calls, so a large value split over many chunks is scanned
//! once.

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
            let &b = buf.get(*pos)?;
            *pos += 1;
            match b {
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

/// The next `"` or `\\` at or after `from`: eight bytes at a time (strings in Kubernetes
/// objects are short, so this beats a memchr call per string).
#[inline]
fn find_quote_or_backslash(buf: &[u8], mut i: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    while let Some(chunk) = buf.get(i..i + 8) {
        let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        if (zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\')))) != 0 {
            break;
        }
        i += 8;
    }
    buf[i..]
        .iter()
        .position(|&b| b == b'"' || b == b'\\')
        .map(|p| i + p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_ends_across_any_split() {
        let doc = br#"{"a":"x}\"{","b":[1,{"c":2}]}"#;
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
