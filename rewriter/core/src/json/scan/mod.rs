//! A validating JSON scanner over a complete byte slice.
//!
//! Hand-written on purpose: the rewriter must walk a document once, skip every subtree no rule
//! touches at memchr speed while still validating it, and know the exact byte span of every value
//! it edits so that untouched bytes (key order, whitespace, number text, escapes) are copied as
//! the server sent them. serde_json validates but does not expose spans of nested values, and a
//! DOM round trip is an order of magnitude slower than a scan (see `benches/`).

use std::borrow::Cow;

use super::escape::{hex4, unescape};
use crate::error::JsonError;
use classify::{BLOCK, plain_string_end, specials};
pub(crate) use delta::Reference;

mod classify;
mod delta;
mod scalar;

/// Nesting this deep is rejected where the document is walked, as serde_json does (127 levels
/// pass).
pub(crate) const MAX_DEPTH: u32 = 128;

/// Deepest nesting accepted inside a skipped subtree, counted from where the scanner started:
/// kube-apiserver's own limit (Go's `encoding/json`, `maxNestingDepth`), so arbitrary JSON the
/// server stores (`ControllerRevision.data`, CR fields without a schema) is never refused here.
pub(crate) const MAX_SKIP_DEPTH: u32 = 10_000;

/// Levels one skip loop tracks in its register.
const REGISTER_LEVELS: u32 = u128::BITS;

/// Result of scanner operations.
pub(crate) type Result<T, E = JsonError> = std::result::Result<T, E>;

/// A cursor over a JSON document held in memory.
#[derive(Clone)]
pub(crate) struct Scanner<'a> {
    buf: &'a [u8],
    pos: usize,
    depth: u32,
    /// Added to positions in errors, for documents cut out of a larger stream.
    base: usize,
}

/// A string token: its span (quotes included) and its decoded text.
#[derive(Debug, Clone)]
pub(crate) struct Str<'a> {
    /// Offset of the opening quote.
    pub(crate) start: usize,
    /// Offset one past the closing quote.
    pub(crate) end: usize,
    /// Decoded text.
    pub(crate) text: Cow<'a, str>,
}

/// A string token read without decoding: its span (quotes included) and its bytes between the
/// quotes. Without escapes, those bytes are the text (valid UTF-8, checked by the scan).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawStr<'a> {
    /// Offset of the opening quote.
    pub(crate) start: usize,
    /// Offset one past the closing quote.
    pub(crate) end: usize,
    /// The bytes between the quotes.
    pub(crate) raw: &'a [u8],
    /// The string has backslash escapes (`raw` is not its text).
    pub(crate) escaped: bool,
}

impl RawStr<'_> {
    /// True when the string's text is `s` (decided without decoding when it has no escapes;
    /// an escaped string never equals `s` here, callers decode those).
    #[inline]
    pub(crate) fn is(&self, s: &str) -> bool {
        !self.escaped && self.raw == s.as_bytes()
    }
}

impl<'a> Scanner<'a> {
    /// A scanner at the start of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self {
            buf,
            pos: 0,
            depth: 0,
            base: 0,
        }
    }

    /// A scanner whose error offsets are shifted by `base`.
    pub(crate) fn with_base(buf: &'a [u8], base: usize) -> Self {
        Self {
            buf,
            pos: 0,
            depth: 0,
            base,
        }
    }

    /// The whole input.
    pub(crate) fn input(&self) -> &'a [u8] {
        self.buf
    }

    /// Current offset.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Moves to `pos` (which must be a token boundary).
    pub(crate) fn seek(&mut self, pos: usize) {
        self.pos = pos;
    }

    /// An error at the current position.
    pub(crate) fn err(&self, msg: &'static str) -> JsonError {
        JsonError {
            offset: self.base + self.pos,
            msg,
            eof: false,
        }
    }

    fn eof(&self) -> JsonError {
        JsonError {
            offset: self.base + self.pos,
            msg: "unexpected end of input",
            eof: true,
        }
    }

    /// Skips whitespace.
    #[inline]
    pub(crate) fn ws(&mut self) {
        if let Some(b' ' | b'\n' | b'\r' | b'\t') = self.buf.get(self.pos) {
            self.pos = skip_ws(self.buf, self.pos);
        }
    }

    /// The next non-whitespace byte, not consumed.
    #[inline]
    pub(crate) fn peek(&mut self) -> Result<u8> {
        self.ws();
        self.buf.get(self.pos).copied().ok_or_else(|| self.eof())
    }

    /// Consumes `b` (after whitespace) or fails.
    #[inline]
    pub(crate) fn expect(&mut self, b: u8, msg: &'static str) -> Result<()> {
        if self.peek()? == b {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(msg))
        }
    }

    /// Checks that only whitespace is left.
    pub(crate) fn end(&mut self) -> Result<()> {
        self.ws();
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(self.err("trailing characters"))
        }
    }

    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth >= MAX_DEPTH {
            Err(self.err("recursion limit exceeded"))
        } else {
            Ok(())
        }
    }

    /// Opens an object: consumes `{`. Then call [`Scanner::next_key`] until it returns `None`.
    pub(crate) fn begin_object(&mut self) -> Result<()> {
        self.expect(b'{', "expected `{`")?;
        self.enter()
    }

    /// Moves past the separator before the next entry of a container: false after its closing
    /// byte `close`.
    fn step(&mut self, first: &mut bool, close: u8, expected: &'static str) -> Result<bool> {
        let b = self.peek()?;
        if b == close {
            self.pos += 1;
            self.depth -= 1;
            return Ok(false);
        }
        if !std::mem::replace(first, false) {
            if b != b',' {
                return Err(self.err(expected));
            }
            self.pos += 1;
        }
        Ok(true)
    }

    /// Moves to the next member of an object: false after the closing `}`, otherwise positioned
    /// on the member's key.
    fn member(&mut self, first: &mut bool) -> Result<bool> {
        if !self.step(first, b'}', "expected `,` or `}`")? {
            return Ok(false);
        }
        if self.peek()? != b'"' {
            return Err(self.err("expected a key"));
        }
        Ok(true)
    }

    /// The next key of an object (its `:` consumed), or `None` after the closing `}`.
    pub(crate) fn next_key(&mut self, first: &mut bool) -> Result<Option<Str<'a>>> {
        match self.next_key_raw(first)? {
            Some(raw) => self.decode(&raw).map(Some),
            None => Ok(None),
        }
    }

    /// Like [`Scanner::next_key`] without decoding the key: its raw bytes (between the quotes,
    /// escapes as written), or `None` after the closing `}`.
    #[inline]
    pub(crate) fn next_key_raw(&mut self, first: &mut bool) -> Result<Option<RawStr<'a>>> {
        // Compact JSON first: `,"key":` (or `"key":` for the first member) with a plain key.
        let buf = self.buf;
        let start = self.pos + usize::from(!*first);
        if (*first || buf.get(self.pos) == Some(&b','))
            && buf.get(start) == Some(&b'"')
            && let Some(end) = plain_string_end(buf, start)
            && buf.get(end) == Some(&b':')
        {
            *first = false;
            self.pos = end + 1;
            return Ok(Some(RawStr {
                start,
                end,
                raw: &buf[start + 1..end - 1],
                escaped: false,
            }));
        }
        self.next_key_raw_slow(first)
    }

    fn next_key_raw_slow(&mut self, first: &mut bool) -> Result<Option<RawStr<'a>>> {
        if !self.member(first)? {
            return Ok(None);
        }
        let start = self.pos;
        let (end, escaped) = self.skip_str()?;
        self.expect(b':', "expected `:`")?;
        Ok(Some(RawStr {
            start,
            end,
            raw: &self.buf[start + 1..end - 1],
            escaped,
        }))
    }

    /// A key's bytes for comparison: borrowed when it has no escapes, decoded into `decoded`
    /// (rare) otherwise. A slot rather than a `Cow` keeps the common case free of a drop check.
    #[inline(always)]
    pub(crate) fn key_bytes<'s>(
        &self,
        s: &'s RawStr<'a>,
        decoded: &'s mut Option<Str<'a>>,
    ) -> Result<&'s [u8]> {
        if s.escaped {
            Ok(decoded.insert(self.decode(s)?).text.as_bytes())
        } else {
            Ok(s.raw)
        }
    }

    /// Decodes a string read raw.
    pub(crate) fn decode(&self, s: &RawStr<'a>) -> Result<Str<'a>> {
        let text = if s.escaped {
            Cow::Owned(unescape(s.raw).map_err(|(i, msg)| JsonError {
                offset: self.base + s.start + 1 + i,
                msg,
                eof: false,
            })?)
        } else {
            Cow::Borrowed(std::str::from_utf8(s.raw).map_err(|_| JsonError {
                offset: self.base + s.start,
                msg: "invalid UTF-8",
                eof: false,
            })?)
        };
        Ok(Str {
            start: s.start,
            end: s.end,
            text,
        })
    }

    /// Opens an array: consumes `[`. Then call [`Scanner::next_elem`] until it returns false.
    pub(crate) fn begin_array(&mut self) -> Result<()> {
        self.expect(b'[', "expected `[`")?;
        self.enter()
    }

    /// Moves to the next element; false after the closing `]`.
    pub(crate) fn next_elem(&mut self, first: &mut bool) -> Result<bool> {
        let more = self.step(first, b']', "expected `,` or `]`")?;
        self.ws();
        Ok(more)
    }

    /// Reads a string value and decodes it.
    pub(crate) fn string(&mut self) -> Result<Str<'a>> {
        if self.peek()? != b'"' {
            return Err(self.err("expected a string"));
        }
        let start = self.pos;
        let (end, escaped) = self.skip_str()?;
        let raw = &self.buf[start + 1..end - 1];
        let text = if escaped {
            Cow::Owned(unescape(raw).map_err(|(i, msg)| JsonError {
                offset: self.base + start + 1 + i,
                msg,
                eof: false,
            })?)
        } else {
            // skip_string validated UTF-8.
            Cow::Borrowed(std::str::from_utf8(raw).map_err(|_| self.err("invalid UTF-8"))?)
        };
        Ok(Str { start, end, text })
    }

    /// Reads a string without decoding it if the next value is one; otherwise skips the value
    /// and returns `None`. Its escapes and UTF-8 are validated: decoding it cannot fail.
    pub(crate) fn raw_string_or_skip(&mut self) -> Result<Option<RawStr<'a>>> {
        if self.peek()? != b'"' {
            self.skip_value()?;
            return Ok(None);
        }
        let start = self.pos;
        let (end, escaped) = self.skip_str()?;
        Ok(Some(RawStr {
            start,
            end,
            raw: &self.buf[start + 1..end - 1],
            escaped,
        }))
    }

    /// Reads a string if the next value is one; otherwise skips the value and returns `None`.
    pub(crate) fn string_or_skip(&mut self) -> Result<Option<Str<'a>>> {
        if self.peek()? == b'"' {
            self.string().map(Some)
        } else {
            self.skip_value()?;
            Ok(None)
        }
    }

    /// [`Scanner::skip_string`] with the common case inlined: a plain ASCII string (no escapes)
    /// whose closing quote is the first special byte. Anything else takes the full path.
    #[inline(always)]
    fn skip_str(&mut self) -> Result<(usize, bool)> {
        match plain_string_end(self.buf, self.pos) {
            Some(end) => {
                self.pos = end;
                Ok((end, false))
            }
            None => self.skip_string(),
        }
    }

    /// Skips a string at the current position; returns its end and whether it has escapes.
    ///
    /// A block at a time while no byte is a quote, a backslash, a control character or (until
    /// the first one) non-ASCII; the rest of the string is UTF-8 validated at its end, so the
    /// first non-ASCII byte turns the block test to ASCII specials only.
    #[inline(never)]
    fn skip_string(&mut self) -> Result<(usize, bool)> {
        debug_assert_eq!(self.buf.get(self.pos), Some(&b'"'));
        let buf = self.buf;
        let start = self.pos + 1;
        let mut i = start;
        let mut escaped = false;
        let mut non_ascii = false;
        loop {
            while let Some(m) = specials(buf, i, non_ascii) {
                if m.any() {
                    i += m.first();
                    break;
                }
                i += BLOCK;
            }
            let Some(&b) = buf.get(i) else {
                self.pos = buf.len();
                return Err(self.eof());
            };
            match b {
                b'"' => {
                    if non_ascii {
                        std::str::from_utf8(&buf[start..i]).map_err(|e| JsonError {
                            offset: self.base + start + e.valid_up_to(),
                            msg: "invalid UTF-8 in string",
                            eof: false,
                        })?;
                    }
                    self.pos = i + 1;
                    return Ok((i + 1, escaped));
                }
                b'\\' => {
                    escaped = true;
                    let Some(&e) = buf.get(i + 1) else {
                        self.pos = buf.len();
                        return Err(self.eof());
                    };
                    match e {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                        b'u' => {
                            let hi = self.hex_escape(i)?;
                            i += 6;
                            if (0xDC00..0xE000).contains(&hi) {
                                self.pos = i - 6;
                                return Err(self.err("lone trailing surrogate in \\u escape"));
                            }
                            if (0xD800..0xDC00).contains(&hi) {
                                // A leading surrogate needs a trailing one right after it.
                                match buf.get(i..i + 2) {
                                    Some(b"\\u") => {}
                                    Some(_) => {
                                        self.pos = i - 6;
                                        return Err(self.err("lone leading surrogate in \\u escape"));
                                    }
                                    None if buf.get(i).is_some_and(|&b| b != b'\\') => {
                                        self.pos = i - 6;
                                        return Err(self.err("lone leading surrogate in \\u escape"));
                                    }
                                    None => {
                                        self.pos = buf.len();
                                        return Err(self.eof());
                                    }
                                }
                                let lo = self.hex_escape(i)?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    self.pos = i;
                                    return Err(self.err("invalid low surrogate in \\u escape"));
                                }
                                i += 6;
                            }
                        }
                        _ => {
                            self.pos = i + 1;
                            return Err(self.err("invalid escape"));
                        }
                    }
                }
                0..=0x1f => {
                    self.pos = i;
                    return Err(self.err("control character in string"));
                }
                0x80.. => {
                    non_ascii = true;
                    i += 1;
                }
                _ => i += 1,
            }
        }
    }

    /// The value of the `\\uXXXX` escape at `i` (its backslash).
    fn hex_escape(&mut self, i: usize) -> Result<u32> {
        let Some(h) = self.buf.get(i + 2..i + 6) else {
            self.pos = self.buf.len();
            return Err(self.eof());
        };
        if !h.iter().all(u8::is_ascii_hexdigit) {
            self.pos = i + 2;
            return Err(self.err("invalid \\u escape"));
        }
        Ok(hex4(h))
    }

    /// Skips any value, validating it. Returns its span.
    pub(crate) fn skip_value(&mut self) -> Result<(usize, usize)> {
        let b = self.peek()?;
        let start = self.pos;
        match b {
            b'{' | b'[' => self.skip_container()?,
            _ => self.skip_scalar(b)?,
        }
        Ok((start, self.pos))
    }

    /// Skips a string, literal or number starting with `b`.
    #[inline(always)]
    fn skip_scalar(&mut self, b: u8) -> Result<()> {
        match b {
            b'"' => {
                self.skip_str()?;
            }
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            b'n' => self.literal(b"null")?,
            b'-' | b'0'..=b'9' => self.number()?,
            _ => return Err(self.err("expected a value")),
        }
        Ok(())
    }

    /// Skips the object or array at the current position in one loop: one bit per open level
    /// says object or array. Most of a document is skipped here, so the common path works on a
    /// local position and inlines plain strings; anything unusual (escapes, non-ASCII, literals,
    /// numbers, errors) goes through the general methods.
    ///
    /// The bits live in a `u128`. A value nested deeper than that holds is skipped by a nested
    /// call ([`Scanner::skip_deeper`]), one call per 127 levels: at most 79 frames for
    /// [`MAX_SKIP_DEPTH`], no heap, and the common path keeps the single depth comparison it
    /// always had.
    fn skip_container(&mut self) -> Result<()> {
        self.skip_loop(&mut NoTrack)
    }

    /// [`Scanner::skip_container`] with `track` told of every value start (see [`Track`]).
    #[inline(always)]
    fn skip_loop<T: Track>(&mut self, track: &mut T) -> Result<()> {
        let buf = self.buf;
        let mut pos = self.pos;
        let mut objects: u128 = 0;
        let mut level: u32 = 0;
        // Levels this call may open: what the register holds, or fewer near the limit.
        let room = (REGISTER_LEVELS - 1).min(MAX_SKIP_DEPTH.saturating_sub(self.depth));
        // Moves past the string at `pos` (its opening quote).
        macro_rules! string {
            () => {{
                match plain_string_end(buf, pos) {
                    Some(end) => {
                        track.string(pos, end);
                        pos = end;
                    }
                    None => {
                        let start = pos;
                        self.pos = pos;
                        self.skip_string()?;
                        pos = self.pos;
                        track.string(start, pos);
                    }
                }
            }};
        }
        // Fails unless the byte at `pos`, after any whitespace, is `b` (at the end of the input:
        // more is needed). Compact JSON (what kube-apiserver sends) has no whitespace, so the
        // byte is compared first and whitespace looked for only when it differs.
        macro_rules! need {
            ($b:expr, $msg:expr) => {
                if buf.get(pos) != Some(&$b) {
                    pos = skip_ws(buf, pos);
                    if buf.get(pos) != Some(&$b) {
                        self.pos = pos;
                        return Err(if pos == buf.len() {
                            self.eof()
                        } else {
                            self.err($msg)
                        });
                    }
                }
            };
        }
        // At the start of a value: `track` may move the loop on.
        macro_rules! value_start {
            () => {
                match track.value_start(pos, objects, level) {
                    Step::Go => {}
                    Step::Jump(p, o, l) => {
                        pos = p;
                        objects = o;
                        level = l;
                    }
                    Step::End(p) => {
                        self.pos = p;
                        return Ok(());
                    }
                }
            };
        }
        // A member's key and its colon.
        macro_rules! key {
            () => {{
                need!(b'"', "expected a key");
                string!();
                need!(b':', "expected `:`");
                pos += 1;
                value_start!();
            }};
        }
        value_start!();
        'value: loop {
            let Some(&b) = buf.get(pos) else {
                self.pos = pos;
                return Err(self.eof());
            };
            match b {
                b'"' => string!(),
                b'{' | b'[' if level >= room => {
                    self.pos = pos;
                    self.skip_deeper(level)?;
                    pos = self.pos;
                }
                b'{' | b'[' => {
                    let is_object = b == b'{';
                    objects = (objects << 1) | u128::from(is_object);
                    level += 1;
                    pos += 1;
                    if let Some(b' ' | b'\n' | b'\r' | b'\t') = buf.get(pos) {
                        pos = skip_ws(buf, pos);
                    }
                    let close = if is_object { b'}' } else { b']' };
                    match buf.get(pos) {
                        None => {
                            self.pos = pos;
                            return Err(self.eof());
                        }
                        Some(&c) if c == close => {
                            pos += 1;
                            objects >>= 1;
                            level -= 1;
                        }
                        Some(_) => {
                            if is_object {
                                key!();
                            } else {
                                value_start!();
                            }
                            continue 'value;
                        }
                    }
                }
                b' ' | b'\n' | b'\r' | b'\t' => {
                    pos = skip_ws(buf, pos);
                    continue 'value;
                }
                _ => {
                    self.pos = pos;
                    self.skip_scalar(b)?;
                    pos = self.pos;
                }
            }
            // After a value: a separator (then the next value) or closing brackets, each looked
            // for before whitespace.
            loop {
                if level == 0 {
                    self.pos = pos;
                    return Ok(());
                }
                let is_object = objects & 1 == 1;
                match buf.get(pos) {
                    Some(b',') => {
                        pos += 1;
                        if is_object {
                            key!();
                        } else {
                            value_start!();
                        }
                        continue 'value;
                    }
                    Some(&c) if c == if is_object { b'}' } else { b']' } => {
                        pos += 1;
                        objects >>= 1;
                        level -= 1;
                    }
                    Some(b' ' | b'\n' | b'\r' | b'\t') => pos = skip_ws(buf, pos),
                    None => {
                        self.pos = pos;
                        return Err(self.eof());
                    }
                    Some(_) => {
                        self.pos = pos;
                        return Err(self.err(if is_object {
                            "expected `,` or `}`"
                        } else {
                            "expected `,` or `]`"
                        }));
                    }
                }
            }
        }
    }

    /// Skips the container at the current position, which opens level `level + 1` of the
    /// caller's skip loop: with the caller's levels counted as depth, so the limit holds across
    /// calls. Rare (only past 127 levels), so kept out of the loop.
    #[cold]
    #[inline(never)]
    fn skip_deeper(&mut self, level: u32) -> Result<()> {
        if self.depth + level + 1 > MAX_SKIP_DEPTH {
            return Err(self.err("recursion limit exceeded"));
        }
        self.depth += level;
        let res = self.skip_container();
        self.depth -= level;
        res
    }
}

/// Told of each value start of a skip loop: where it is, and the loop's state there (one bit
/// per open level, set for objects, and the number of open levels).
pub(crate) trait Track {
    /// What the loop does next.
    fn value_start(&mut self, pos: usize, objects: u128, level: u32) -> Step;

    /// A string (key or value), from its opening quote to one past its closing one.
    #[inline(always)]
    fn string(&mut self, _start: usize, _end: usize) {}
}

/// What a skip loop does after a value start.
pub(crate) enum Step {
    /// Goes on scanning.
    Go,
    /// Goes on from another value start: its position and the loop's state there.
    Jump(usize, u128, u32),
    /// Stops: the skipped value ends at this position.
    End(usize),
}

/// The plain skip: nothing tracked.
struct NoTrack;

impl Track for NoTrack {
    #[inline(always)]
    fn value_start(&mut self, _: usize, _: u128, _: u32) -> Step {
        Step::Go
    }
}

/// The end of the whitespace run at `pos`. Compact JSON (what kube-apiserver sends) has none and
/// never gets here; indented JSON has runs of spaces after each newline, skipped 8 at a time.
fn skip_ws(buf: &[u8], mut pos: usize) -> usize {
    loop {
        match buf.get(pos) {
            Some(b' ') => {
                pos += 1;
                while buf.get(pos..pos + 8) == Some(b"        ") {
                    pos += 8;
                }
            }
            Some(b'\n' | b'\r' | b'\t') => pos += 1,
            _ => return pos,
        }
    }
}

#[cfg(test)]
mod tests;
