//! LIST bodies, item by item.

use crate::Direction;
use crate::error::{JsonError, Result};
use crate::json::Scanner;
use crate::json::escape::quote;
use crate::json::frame::Framer;
use crate::object::{Context, Hint, Verdict};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    /// Before a key of the envelope (or its closing brace).
    Key {
        first: bool,
    },
    /// Inside a non-`items` member value of the envelope.
    Value,
    /// Before an element of `items` (or its closing bracket).
    Item {
        first: bool,
    },
    /// After a comma in `items`: an element must follow.
    ItemValue,
    /// Inside an element of `items`.
    InItem,
    Done,
}

/// Rewrites a LIST body (`{"kind":"...List","items":[...]}`) item by item.
pub struct ListRewriter<'r> {
    rules: super::RulesRef<'r>,
    dir: Direction,
    ctx: Context,
    input: super::Input,
    /// Parse position in the input buffer.
    pos: usize,
    state: State,
    framer: Framer,
    /// Start of the value being framed.
    start: usize,
    /// Key of the envelope member being read.
    key: String,
    api_version: Option<String>,
    kind: Option<String>,
    items_written: usize,
    items_dropped: usize,
    /// Items written to the current `items` array (a body may repeat the key).
    in_array: usize,
    /// Where the bytes between the previous item (or `[`) and the next one start.
    sep: usize,
    /// An item cut short by the end of the input so far.
    pending: super::Pending,
}

impl super::Machine for ListRewriter<'_> {
    fn input(&mut self) -> &mut super::Input {
        &mut self.input
    }

    fn pending(&self) -> &super::Pending {
        &self.pending
    }

    fn run(&mut self, buf: &[u8], out: &mut Vec<u8>, eof: bool) -> Result<()> {
        ListRewriter::run(self, buf, out, eof)
    }

    fn consumed(&self) -> usize {
        match self.state {
            State::Value => self.start,
            // Separator bytes before the next item are written with it.
            State::Item { .. } | State::ItemValue | State::InItem => self.sep,
            _ => self.pos,
        }
    }

    fn shift(&mut self, n: usize) {
        self.pos -= n;
        self.start -= n.min(self.start);
        self.sep -= n.min(self.sep);
        self.pending.shift(n);
    }
}

impl<'r> ListRewriter<'r> {
    /// A rewriter for one LIST body.
    pub fn new(rules: impl Into<super::RulesRef<'r>>, dir: Direction, ctx: Context) -> Self {
        Self {
            rules: rules.into(),
            dir,
            ctx,
            input: super::Input::default(),
            pos: 0,
            state: State::Start,
            framer: Framer::default(),
            start: 0,
            key: String::new(),
            api_version: None,
            kind: None,
            items_written: 0,
            items_dropped: 0,
            in_array: 0,
            sep: 0,
            pending: super::Pending::default(),
        }
    }

    /// Input bytes held between pieces: the unfinished tail (the item or event not yet
    /// complete). A caller bounds its memory by checking it after each piece.
    pub fn held(&self) -> usize {
        self.input.buf.len()
    }

    /// Items written and dropped (excluded) so far.
    pub fn counts(&self) -> (usize, usize) {
        (self.items_written, self.items_dropped)
    }

    fn err(&self, at: usize, msg: &'static str) -> JsonError {
        JsonError {
            offset: self.input.base + at,
            msg,
            eof: false,
        }
    }

    /// Feeds the next piece of the body; appends what can be written to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Result<()> {
        super::feed(self, chunk, out)
    }

    /// Ends the body; fails if it is incomplete.
    pub fn finish(mut self, out: &mut Vec<u8>) -> Result<()> {
        let held = super::finish(&mut self, out)?;
        if self.state != State::Done {
            return Err(JsonError {
                offset: self.input.base + held,
                msg: "unexpected end of input",
                eof: true,
            }
            .into());
        }
        Ok(())
    }

    /// The first non-whitespace index at or after `p`.
    fn ws_end(buf: &[u8], mut p: usize) -> usize {
        while matches!(buf.get(p), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            p += 1;
        }
        p
    }

    /// Runs the state machine over the buffered input. The envelope's bytes (whitespace,
    /// separators, keys) are copied as they came; nothing is consumed until it is written.
    fn run(&mut self, buf: &[u8], out: &mut Vec<u8>, eof: bool) -> Result<()> {
        loop {
            match self.state {
                State::Start => {
                    let p = Self::ws_end(buf, self.pos);
                    let Some(&b) = buf.get(p) else {
                        return Ok(());
                    };
                    if b != b'{' {
                        return Err(self.err(p, "expected `{` at the start of a list").into());
                    }
                    out.extend_from_slice(&buf[self.pos..=p]);
                    self.pos = p + 1;
                    self.state = State::Key { first: true };
                }
                State::Key { first } => {
                    let mut p = Self::ws_end(buf, self.pos);
                    let Some(&b) = buf.get(p) else {
                        return Ok(());
                    };
                    if b == b'}' {
                        out.extend_from_slice(&buf[self.pos..=p]);
                        self.pos = p + 1;
                        self.state = State::Done;
                        continue;
                    }
                    if !first {
                        if b != b',' {
                            return Err(self.err(p, "expected `,` or `}`").into());
                        }
                        p += 1;
                    }
                    // The key, its colon and the start of its value, read whole (keys are short).
                    let mut sc = Scanner::with_base(buf, self.input.base);
                    sc.seek(p);
                    let key = match sc.string() {
                        Ok(k) => k,
                        Err(e) if e.eof => return Ok(()),
                        Err(e) => return Err(e.into()),
                    };
                    match sc.peek() {
                        Err(e) if e.eof => return Ok(()),
                        Err(e) => return Err(e.into()),
                        Ok(b':') => {}
                        Ok(_) => return Err(self.err(sc.pos(), "expected `:`").into()),
                    }
                    sc.seek(sc.pos() + 1);
                    let v = match sc.peek() {
                        Err(e) if e.eof => return Ok(()),
                        Err(e) => return Err(e.into()),
                        Ok(v) => v,
                    };
                    let value_start = sc.pos();
                    self.key = key.text.into_owned();
                    if self.key == "items" && v == b'[' {
                        out.extend_from_slice(&buf[self.pos..=value_start]);
                        self.pos = value_start + 1;
                        self.sep = self.pos;
                        self.in_array = 0;
                        self.state = State::Item { first: true };
                    } else {
                        out.extend_from_slice(&buf[self.pos..value_start]);
                        self.pos = value_start;
                        self.start = value_start;
                        self.state = State::Value;
                    }
                }
                State::Value => {
                    let Some(end) = self.framer.advance(buf, &mut self.pos, eof) else {
                        return Ok(());
                    };
                    self.member(buf, self.start, end, out)?;
                    self.pos = end;
                    self.state = State::Key { first: false };
                }
                State::Item { first } => {
                    let p = Self::ws_end(buf, self.pos);
                    let Some(&b) = buf.get(p) else {
                        return Ok(());
                    };
                    if b == b']' {
                        out.extend_from_slice(&buf[self.sep..=p]);
                        self.pos = p + 1;
                        self.state = State::Key { first: false };
                    } else if first {
                        self.pos = p;
                        self.state = State::ItemValue;
                    } else if b == b',' {
                        self.pos = p + 1;
                        self.state = State::ItemValue;
                    } else {
                        return Err(self.err(p, "expected `,` or `]`").into());
                    }
                }
                State::ItemValue => {
                    let p = Self::ws_end(buf, self.pos);
                    let Some(&b) = buf.get(p) else {
                        return Ok(());
                    };
                    if matches!(b, b']' | b',') {
                        return Err(self.err(p, "expected a value").into());
                    }
                    self.pos = p;
                    self.start = p;
                    self.state = State::InItem;
                }
                State::InItem => {
                    if !self.pending.ready(buf, self.start, eof) {
                        self.pos = buf.len();
                        return Ok(());
                    }
                    let complete = eof || self.pending.waiting();
                    match self.item(buf, self.start, complete, out)? {
                        Some(end) => {
                            self.pending.done();
                            self.pos = end;
                            self.state = State::Item { first: false };
                        }
                        None => self.pending.wait(self.start),
                    }
                }
                State::Done => {
                    let p = Self::ws_end(buf, self.pos);
                    out.extend_from_slice(&buf[self.pos..p]);
                    self.pos = p;
                    if p < buf.len() {
                        return Err(self.err(p, "trailing characters").into());
                    }
                    return Ok(());
                }
            }
        }
    }

    /// An envelope member other than `items`.
    fn member(&mut self, buf: &[u8], start: usize, end: usize, out: &mut Vec<u8>) -> Result<()> {
        let raw = &buf[start..end];
        let mut sc = Scanner::with_base(raw, self.input.base + start);
        let mut text = None;
        if sc.peek()? == b'"' {
            text = Some(sc.string()?.text.into_owned());
        } else {
            sc.skip_value()?;
        }
        sc.end()?;
        let new = match (self.key.as_str(), text) {
            ("apiVersion", Some(av)) => {
                self.api_version = Some(av.clone());
                let kind = self.kind.clone().or_else(|| self.ctx_list_kind());
                crate::rules::gvk::rewrite_gvk(
                    &self.rules,
                    self.dir,
                    Some(&av),
                    kind.as_deref(),
                    self.ctx.group.as_deref(),
                )
                .0
            }
            ("kind", Some(k)) => {
                self.kind = Some(k.clone());
                let av = self.api_version.clone().or_else(|| self.ctx_api_version());
                crate::rules::gvk::rewrite_gvk(
                    &self.rules,
                    self.dir,
                    av.as_deref(),
                    Some(&k),
                    self.ctx.group.as_deref(),
                )
                .1
            }
            _ => None,
        };
        match new {
            Some(n) => out.extend_from_slice(&quote(&n)),
            None => out.extend_from_slice(raw),
        }
        Ok(())
    }

    /// The list kind as the server names it, from the request context.
    fn ctx_list_kind(&self) -> Option<String> {
        let k = self.ctx.kind.as_ref()?;
        Some(match self.dir {
            Direction::Restore
                if self
                    .ctx
                    .group
                    .as_deref()
                    .and_then(|g| self.rules.group(g))
                    .is_some() =>
            {
                format!("{}{k}List", self.rules.kind_prefix)
            }
            _ => format!("{k}List"),
        })
    }

    /// A server-side apiVersion guess for a kind that came before apiVersion.
    fn ctx_api_version(&self) -> Option<String> {
        let g = self.ctx.group.as_deref()?;
        let grp = self.rules.group(g)?;
        let name = match self.dir {
            Direction::Restore => &grp.renamed,
            Direction::Rename => &grp.original,
        };
        Some(format!("{name}/v"))
    }

    /// Rewrites the item starting at `start`; `None` if the input ends inside it (unless
    /// `complete` says the whole item is there).
    fn item(&mut self, buf: &[u8], start: usize, complete: bool, out: &mut Vec<u8>) -> Result<Option<usize>> {
        let list_kind = self.kind.as_deref().and_then(|k| k.strip_suffix("List"));
        let item_kind = list_kind.or(match self.dir {
            Direction::Rename => self.ctx.kind.as_deref(),
            Direction::Restore => None,
        });
        let hint = Hint {
            kind: item_kind,
            api_version: self.api_version.as_deref(),
            top: true,
        };
        let walked = self
            .input
            .walk(buf, &self.rules, self.dir, &self.ctx, start, complete, |w| {
                w.object(&hint)
            })?;
        let Some((verdict, len)) = walked else {
            return Ok(None);
        };
        // A scalar item that reaches the end of the input may continue in the next piece.
        let raw = &buf[start..];
        if len == raw.len() && !complete && !matches!(raw.last(), Some(b'}' | b']' | b'"')) {
            self.input.emit(buf, start, len, None);
            return Ok(None);
        }
        match verdict {
            Verdict::Keep => {
                // The separator as it came; before the first item written, without its comma
                // (the items before it were dropped).
                let sep = &buf[self.sep..start];
                if self.in_array == 0 {
                    out.extend(sep.iter().filter(|&&b| b != b','));
                } else {
                    out.extend_from_slice(sep);
                }
                self.in_array += 1;
                self.input.emit(buf, start, len, Some(out));
                self.items_written += 1;
            }
            Verdict::Excluded => {
                self.input.emit(buf, start, len, None);
                self.items_dropped += 1;
            }
        }
        self.sep = start + len;
        Ok(Some(start + len))
    }
}
