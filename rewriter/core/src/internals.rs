//! Doc-hidden entry points into the JSON scanner, for the differential fuzz target (`scan_diff`)
//! and the benchmarks (a pure validating skip against serde_json's `IgnoredAny`). Built only
//! with the `internals` feature; not part of the API.

use crate::error::JsonError;
use crate::json::scan::Scanner;

/// What one scanner made of an input: the spans of the values it skipped one after another
/// (whitespace between them, as in a watch stream), then the error that stopped it, if any.
pub type Skips = (Vec<(usize, usize)>, Option<JsonError>);

macro_rules! entry_points {
    ($scanner:ident, $skip_document:ident, $skip_values:ident, $string:ident, $members:ident) => {
        /// Validates `buf` as one JSON document; its value's span.
        pub fn $skip_document(buf: &[u8]) -> Result<(usize, usize), JsonError> {
            let mut sc = $scanner::new(buf);
            let span = sc.skip_value()?;
            sc.end()?;
            Ok(span)
        }

        /// Skips values one after another until the input ends or one is invalid.
        pub fn $skip_values(buf: &[u8], base: usize) -> Skips {
            let mut sc = $scanner::with_base(buf, base);
            let mut spans = Vec::new();
            loop {
                sc.ws();
                if sc.pos() == buf.len() {
                    return (spans, None);
                }
                match sc.skip_value() {
                    Ok(span) => spans.push(span),
                    Err(e) => return (spans, Some(e)),
                }
            }
        }

        /// Reads one string value (decoded): its span and text.
        pub fn $string(buf: &[u8]) -> Result<(usize, usize, String), JsonError> {
            let s = $scanner::new(buf).string()?;
            Ok((s.start, s.end, s.text.into_owned()))
        }

        /// Walks one object: each member's key (span, decoded text) and value span.
        #[allow(clippy::type_complexity)]
        pub fn $members(buf: &[u8]) -> Result<Vec<(usize, usize, String, (usize, usize))>, JsonError> {
            let mut sc = $scanner::new(buf);
            sc.begin_object()?;
            let mut first = true;
            let mut out = Vec::new();
            while let Some(k) = sc.next_key(&mut first)? {
                let v = sc.skip_value()?;
                out.push((k.start, k.end, k.text.into_owned(), v));
            }
            sc.end()?;
            Ok(out)
        }
    };
}

entry_points!(Scanner, skip_document, skip_values, string, members);

/// Skips the value at the start of `new` like `reference` (a container recorded by a skip of
/// it), and plainly: both outcomes, which must be the same. `None` when `reference` is not one a
/// skip keeps.
#[allow(clippy::type_complexity)]
pub fn skip_like(
    reference: &[u8],
    new: &[u8],
) -> Option<(
    Result<(usize, usize), JsonError>,
    Result<(usize, usize), JsonError>,
)> {
    let reference = Scanner::new(reference).skip_recording().ok()?.1?;
    let like = Scanner::new(new).skip_like(&reference).map(|(span, _)| span);
    Some((like, Scanner::new(new).skip_value()))
}

/// The error's offset, message and whether the input ended early.
pub fn parts(e: &JsonError) -> (usize, &'static str, bool) {
    (e.offset, e.msg, e.eof)
}
