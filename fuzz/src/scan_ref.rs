//! The oracle of the `scan_diff` target: the core's JSON scanner as it was before its fast
//! paths, kept verbatim but for its error type (the core's `JsonError` cannot be built outside
//! the core) and the methods the oracle never calls. The core's current scanner must agree with
//! it on every input.

use std::borrow::Cow;

/// Where and why the input is not JSON, as the core's `JsonError` says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// Byte offset into the input.
    pub offset: usize,
    /// What is wrong.
    pub msg: &'static str,
    /// True when the input ended early.
    pub eof: bool,
}

impl JsonError {
    /// Offset, message and early end, as `kube_api_rewriter::internals::parts` gives them.
    pub fn parts(&self) -> (usize, &'static str, bool) {
        (self.offset, self.msg, self.eof)
    }
}

/// Validates `buf` as one JSON document; its value's span.
pub fn skip_document(buf: &[u8]) -> Result<(usize, usize), JsonError> {
    let mut sc = Scanner::new(buf);
    let span = sc.skip_value()?;
    sc.end()?;
    Ok(span)
}

/// Skips values one after another until the input ends or one is invalid.
pub fn skip_values(buf: &[u8], base: usize) -> (Vec<(usize, usize)>, Option<JsonError>) {
    let mut sc = Scanner::with_base(buf, base);
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
pub fn string(buf: &[u8]) -> Result<(usize, usize, String), JsonError> {
    let s = Scanner::new(buf).string()?;
    Ok((s.start, s.end, s.text.into_owned()))
}

/// Walks one object: each member's key (span, decoded text) and value span.
#[allow(clippy::type_complexity)]
pub fn members(buf: &[u8]) -> Result<Vec<(usize, usize, String, (usize, usize))>, JsonError> {
    let mut sc = Scanner::new(buf);
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

    /// Current offset.
    pub(crate) fn pos(&self) -> usize {
        self.pos
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
        while let Some(&b) = self.buf.get(self.pos) {
            if matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                self.pos += 1;
            } else {
                break;
            }
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
    /// Eight bytes at a time while no byte is a quote, a backslash, a control character or
    /// non-ASCII; byte by byte otherwise. Non-ASCII runs are UTF-8 validated at the end.
    #[inline(never)]
    fn skip_string(&mut self) -> Result<(usize, bool)> {
        debug_assert_eq!(self.buf.get(self.pos), Some(&b'"'));
        let buf = self.buf;
        let start = self.pos + 1;
        let mut i = start;
        let mut escaped = false;
        let mut non_ascii = false;
        loop {
            while let Some(chunk) = buf.get(i..i + 8) {
                let m = special(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
                if m != 0 {
                    // The lowest flagged byte is exact (later ones may be false positives).
                    i += (m.trailing_zeros() / 8) as usize;
                    break;
                }
                i += 8;
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
        let buf = self.buf;
        let mut pos = self.pos;
        let mut objects: u128 = 0;
        let mut level: u32 = 0;
        // Levels this call may open: what the register holds, or fewer near the limit.
        let room = (REGISTER_LEVELS - 1).min(MAX_SKIP_DEPTH.saturating_sub(self.depth));
        macro_rules! ws {
            () => {
                while let Some(b' ' | b'\n' | b'\r' | b'\t') = buf.get(pos) {
                    pos += 1;
                }
            };
        }
        // Moves past the string at `pos` (its opening quote).
        macro_rules! string {
            () => {{
                match plain_string_end(buf, pos) {
                    Some(end) => pos = end,
                    None => {
                        self.pos = pos;
                        self.skip_string()?;
                        pos = self.pos;
                    }
                }
            }};
        }
        // Fails unless the byte at `pos` is `b` (at the end of the input: more is needed).
        macro_rules! need {
            ($b:expr, $msg:expr) => {
                if buf.get(pos) != Some(&$b) {
                    self.pos = pos;
                    return Err(if pos == buf.len() {
                        self.eof()
                    } else {
                        self.err($msg)
                    });
                }
            };
        }
        // A member's key and its colon.
        macro_rules! key {
            () => {{
                ws!();
                need!(b'"', "expected a key");
                string!();
                ws!();
                need!(b':', "expected `:`");
                pos += 1;
            }};
        }
        'value: loop {
            ws!();
            let Some(&b) = buf.get(pos) else {
                self.pos = pos;
                return Err(self.eof());
            };
            match b {
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
                    ws!();
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
                            }
                            continue 'value;
                        }
                    }
                }
                b'"' => string!(),
                _ => {
                    self.pos = pos;
                    self.skip_scalar(b)?;
                    pos = self.pos;
                }
            }
            // After a value: a separator (then the next value) or closing brackets.
            loop {
                if level == 0 {
                    self.pos = pos;
                    return Ok(());
                }
                ws!();
                let is_object = objects & 1 == 1;
                match buf.get(pos) {
                    Some(b',') => {
                        pos += 1;
                        if is_object {
                            key!();
                        }
                        continue 'value;
                    }
                    Some(&c) if c == if is_object { b'}' } else { b']' } => {
                        pos += 1;
                        objects >>= 1;
                        level -= 1;
                    }
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

    fn literal(&mut self, lit: &'static [u8]) -> Result<()> {
        let end = self.pos + lit.len();
        if self.buf.len() < end {
            if lit.starts_with(&self.buf[self.pos..]) {
                self.pos = self.buf.len();
                return Err(self.eof());
            }
            return Err(self.err("expected a value"));
        }
        if &self.buf[self.pos..end] != lit {
            return Err(self.err("expected a value"));
        }
        self.pos = end;
        Ok(())
    }

    fn digits(&mut self) -> usize {
        let s = self.pos;
        while self.buf.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        self.pos - s
    }

    fn number(&mut self) -> Result<()> {
        if self.buf[self.pos] == b'-' {
            self.pos += 1;
        }
        match self.buf.get(self.pos) {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            Some(_) => return Err(self.err("invalid number")),
            None => return Err(self.eof()),
        }
        if self.buf.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(if self.pos == self.buf.len() {
                    self.eof()
                } else {
                    self.err("invalid number")
                });
            }
        }
        if matches!(self.buf.get(self.pos), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.buf.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(if self.pos == self.buf.len() {
                    self.eof()
                } else {
                    self.err("invalid number")
                });
            }
        }
        Ok(())
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The end (one past the closing quote) of the string whose opening quote is at `start`, when
/// it is plain ASCII without escapes; `None` for anything else (the caller takes the full path).
#[inline(always)]
fn plain_string_end(buf: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    loop {
        let chunk = buf.get(i..i + 8)?;
        let m = special(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        if m != 0 {
            let j = i + (m.trailing_zeros() / 8) as usize;
            return (buf[j] == b'"').then_some(j + 1);
        }
        i += 8;
    }
}

/// A mask with the high bit set in bytes of `w` that are `"`, `\\`, below 0x20 or non-ASCII
/// (Mycroft's trick; the lowest set byte is exact).
#[inline(always)]
fn special(w: u64) -> u64 {
    let zero = |v: u64| v.wrapping_sub(ONES) & !v;
    let quote = zero(w ^ (ONES * u64::from(b'"')));
    let backslash = zero(w ^ (ONES * u64::from(b'\\')));
    let control = w.wrapping_sub(ONES * 0x20) & !w;
    (quote | backslash | control | w) & HIGHS
}

/// Decodes the escapes of a validated string body.
fn unescape(raw: &[u8]) -> Result<String, (usize, &'static str)> {
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let Some(off) = memchr::memchr(b'\\', &raw[i..]) else {
            out.push_str(std::str::from_utf8(&raw[i..]).map_err(|_| (i, "invalid UTF-8 in string"))?);
            break;
        };
        out.push_str(std::str::from_utf8(&raw[i..i + off]).map_err(|_| (i, "invalid UTF-8 in string"))?);
        let j = i + off;
        let e = raw[j + 1];
        i = j + 2;
        let c = match e {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            _ => {
                let hi = hex4(&raw[j + 2..j + 6]);
                i = j + 6;
                if (0xD800..0xDC00).contains(&hi) {
                    if raw.get(i) != Some(&b'\\') || raw.get(i + 1) != Some(&b'u') || raw.len() < i + 6 {
                        return Err((j, "lone leading surrogate in \\u escape"));
                    }
                    let lo = hex4(&raw[i + 2..i + 6]);
                    if !(0xDC00..0xE000).contains(&lo) {
                        return Err((i, "invalid low surrogate in \\u escape"));
                    }
                    i += 6;
                    let c = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                    char::from_u32(c).ok_or((j, "invalid \\u escape"))?
                } else if (0xDC00..0xE000).contains(&hi) {
                    return Err((j, "lone trailing surrogate in \\u escape"));
                } else {
                    char::from_u32(hi).ok_or((j, "invalid \\u escape"))?
                }
            }
        };
        out.push(c);
    }
    Ok(out)
}

fn hex4(h: &[u8]) -> u32 {
    h.iter()
        .fold(0, |acc, &b| acc * 16 + (b as char).to_digit(16).unwrap_or(0))
}
