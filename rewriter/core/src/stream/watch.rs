//! WATCH streams, event by event.

use crate::Direction;
use crate::error::Result;
use crate::object::{Context, Hint, Verdict, Walker};
use crate::rules::Rules;

/// Rewrites a stream of watch events (`{"type":..,"object":..}` values, newline-delimited or
/// back to back); each event is written followed by `\n`.
pub struct WatchRewriter<'r> {
    rules: &'r Rules,
    dir: Direction,
    ctx: Context,
    input: super::Input,
    pos: usize,
    start: Option<usize>,
    events: usize,
    dropped: usize,
    /// An event cut short by the end of the input so far.
    pending: super::Pending,
}

impl super::Machine for WatchRewriter<'_> {
    fn input(&mut self) -> &mut super::Input {
        &mut self.input
    }

    fn run(&mut self, buf: &[u8], out: &mut Vec<u8>, eof: bool) -> Result<()> {
        WatchRewriter::run(self, buf, out, eof)
    }

    fn consumed(&self) -> usize {
        self.start.unwrap_or(self.pos)
    }

    fn shift(&mut self, n: usize) {
        self.pos -= n;
        self.start = self.start.map(|s| s - n);
        self.pending.shift(n);
    }
}

impl<'r> WatchRewriter<'r> {
    /// A rewriter for one watch stream.
    pub fn new(rules: &'r Rules, dir: Direction, ctx: Context) -> Self {
        Self {
            rules,
            dir,
            ctx,
            input: super::Input::default(),
            pos: 0,
            start: None,
            events: 0,
            dropped: 0,
            pending: super::Pending::default(),
        }
    }

    /// Input bytes held between pieces: the unfinished tail (the item or event not yet
    /// complete). A caller bounds its memory by checking it after each piece.
    pub fn held(&self) -> usize {
        self.input.buf.len()
    }

    /// Events written and dropped (excluded objects) so far.
    pub fn counts(&self) -> (usize, usize) {
        (self.events, self.dropped)
    }

    /// Feeds the next piece of the stream; appends every complete event to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Result<()> {
        super::feed(self, chunk, out)
    }

    /// Ends the stream; fails if an event is cut short.
    pub fn finish(mut self, out: &mut Vec<u8>) -> Result<()> {
        let held = super::finish(&mut self, out)?;
        if self.start.is_some() {
            let offset = self.input.base + held;
            return Err(crate::JsonError {
                offset,
                msg: "unexpected end of input",
                eof: true,
            }
            .into());
        }
        Ok(())
    }

    fn run(&mut self, buf: &[u8], out: &mut Vec<u8>, eof: bool) -> Result<()> {
        loop {
            if self.start.is_none() {
                while let Some(&b) = buf.get(self.pos) {
                    if matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
                if self.pos == buf.len() {
                    return Ok(());
                }
                self.start = Some(self.pos);
            }
            let start = self.start.expect("set above");
            if !self.pending.ready(buf, start, eof) {
                return Ok(());
            }
            let complete = eof || self.pending.waiting();
            match self.event(buf, start, complete, out)? {
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
    fn event(
        &mut self,
        buf: &[u8],
        start: usize,
        complete: bool,
        out: &mut Vec<u8>,
    ) -> Result<Option<usize>> {
        let Some((verdict, len)) = self
            .input
            .walk(buf, self.rules, self.dir, &self.ctx, start, complete, walk_event)?
        else {
            return Ok(None);
        };
        match verdict {
            Verdict::Keep => {
                self.input.emit(buf, start, len, Some(out));
                out.push(b'\n');
                self.events += 1;
            }
            Verdict::Excluded => {
                self.input.emit(buf, start, len, None);
                self.dropped += 1;
            }
        }
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
