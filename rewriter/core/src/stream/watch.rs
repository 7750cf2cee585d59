//! WATCH streams, event by event.

use crate::Direction;
use crate::error::{Error, Result};
use crate::json::Scanner;
use crate::object::{Context, Hint, Verdict, Walker};
use crate::rules::Rules;

/// Rewrites a stream of watch events (`{"type":..,"object":..}` values, newline-delimited or
/// back to back); each event is written followed by `\n`.
pub struct WatchRewriter<'r> {
    rules: &'r Rules,
    dir: Direction,
    ctx: Context,
    buf: Vec<u8>,
    base: usize,
    pos: usize,
    start: Option<usize>,
    events: usize,
    dropped: usize,
    /// An event cut short by the end of the input so far.
    pending: super::Pending,
    /// The edit buffer, reused from item to item.
    edits: crate::json::Edits,
}

impl<'r> WatchRewriter<'r> {
    /// A rewriter for one watch stream.
    pub fn new(rules: &'r Rules, dir: Direction, ctx: Context) -> Self {
        Self {
            rules,
            dir,
            ctx,
            buf: Vec::new(),
            base: 0,
            pos: 0,
            start: None,
            events: 0,
            dropped: 0,
            pending: super::Pending::default(),
            edits: crate::json::Edits::default(),
        }
    }

    /// Events written and dropped (excluded objects) so far.
    pub fn counts(&self) -> (usize, usize) {
        (self.events, self.dropped)
    }

    /// Feeds the next piece of the stream; appends every complete event to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.buf.extend_from_slice(chunk);
        self.run(out, false)?;
        let keep_from = self.start.unwrap_or(self.pos);
        if keep_from > 0 {
            self.buf.drain(..keep_from);
            self.base += keep_from;
            self.pos -= keep_from;
            self.start = self.start.map(|s| s - keep_from);
            self.pending.shift(keep_from);
        }
        Ok(())
    }

    /// Ends the stream; fails if an event is cut short.
    pub fn finish(mut self, out: &mut Vec<u8>) -> Result<()> {
        self.run(out, true)?;
        if self.start.is_some() {
            let offset = self.base + self.buf.len();
            return Err(crate::JsonError {
                offset,
                msg: "unexpected end of input",
                eof: true,
            }
            .into());
        }
        Ok(())
    }

    fn run(&mut self, out: &mut Vec<u8>, eof: bool) -> Result<()> {
        loop {
            if self.start.is_none() {
                while let Some(&b) = self.buf.get(self.pos) {
                    if matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
                if self.pos == self.buf.len() {
                    return Ok(());
                }
                self.start = Some(self.pos);
            }
            let start = self.start.expect("set above");
            if !self.pending.ready(&self.buf, start, eof) {
                return Ok(());
            }
            let complete = eof || self.pending.waiting();
            match self.event(start, complete, out)? {
                Some(end) => {
                    self.pending.done();
                    self.pos = end;
                    self.start = None;
                }
                None => self.pending.wait(start),
            }
        }
    }

    /// Rewrites the event starting at `start`; `None` if the input ends inside it.
    fn event(&mut self, start: usize, eof: bool, out: &mut Vec<u8>) -> Result<Option<usize>> {
        let raw = &self.buf[start..];
        let mut w = Walker::new(self.rules, self.dir, raw);
        w.sc = Scanner::with_base(raw, self.base + start);
        // One edit buffer serves every item.
        w.edits = std::mem::take(&mut self.edits);
        w.group_hint = self.ctx.group.as_deref();
        if let (Some(g), Some(k)) = (&self.ctx.group, &self.ctx.kind) {
            w.kind_hint = Some((g.as_str(), k.as_str()));
        }
        let verdict = match walk_event(&mut w) {
            Ok(v) => v,
            Err(Error::Json(e)) if e.eof && !eof => return Ok(None),
            Err(e) => return Err(e),
        };
        let len = w.sc.pos();
        match verdict {
            Verdict::Keep => {
                w.edits.apply_range(raw, 0, len, out);
                out.push(b'\n');
                self.events += 1;
            }
            Verdict::Excluded => self.dropped += 1,
        }
        self.edits = std::mem::take(&mut w.edits);
        self.edits.clear();
        Ok(Some(start + len))
    }
}

/// One `{"type":..,"object":..}` event; an excluded object drops the event.
fn walk_event(w: &mut Walker<'_, '_>) -> Result<Verdict> {
    w.sc.begin_object()?;
    let mut first = true;
    let mut verdict = Verdict::Keep;
    while let Some(k) = w.sc.next_key(&mut first)? {
        if k.text == "object" {
            verdict = w.object(&Hint {
                kind: None,
                api_version: None,
                top: true,
            })?;
        } else {
            w.sc.skip_value()?;
        }
    }
    Ok(verdict)
}
