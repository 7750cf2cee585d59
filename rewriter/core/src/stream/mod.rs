//! Streaming rewriters for LIST bodies and WATCH event streams.
//!
//! Both are push-based state machines: feed them input in pieces of any size with
//! [`ListRewriter::feed`] / [`WatchRewriter::feed`], and they append rewritten output as soon
//! as a whole item or event is available. Memory stays bounded by the largest item plus one
//! piece of input. Splitting the input differently never changes the output.
//!
//! ```
//! use kube_api_rewriter::{Direction, Rules, object::Context, stream::ListRewriter};
//! let rules = Rules::builtin_kubevirt();
//! let body = br#"{"apiVersion":"internal.virtualization.deckhouse.io/v1","items":[{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachine","metadata":{"name":"a"}}],"kind":"InternalVirtualizationVirtualMachineList","metadata":{}}"#;
//! let mut lr = ListRewriter::new(&rules, Direction::Restore, Context::default());
//! let mut out = Vec::new();
//! for piece in body.chunks(7) {
//!     lr.feed(piece, &mut out).unwrap();
//! }
//! lr.finish(&mut out).unwrap();
//! assert_eq!(out, br#"{"apiVersion":"kubevirt.io/v1","items":[{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"a"}}],"kind":"VirtualMachineList","metadata":{}}"#);
//! ```

use std::ops::Deref;
use std::sync::Arc;

use crate::rules::Rules;

mod list;
mod watch;

pub use list::ListRewriter;
pub use watch::WatchRewriter;

/// The rules a stream rewriter holds: borrowed, or shared through an [`Arc`] so that the
/// rewriter owns them (is `'static`) and can move to another thread in the middle of a stream.
///
/// Both convert with `into()`, so [`ListRewriter::new`] and [`WatchRewriter::new`] take either:
///
/// ```
/// use std::sync::Arc;
/// use kube_api_rewriter::{Direction, Rules, object::Context, stream::ListRewriter};
/// let rules = Arc::new(Rules::builtin_kubevirt());
/// let lr: ListRewriter<'static> = ListRewriter::new(Arc::clone(&rules), Direction::Restore, Context::default());
/// std::thread::spawn(move || lr.held()).join().unwrap();
/// ```
#[derive(Debug, Clone)]
pub enum RulesRef<'r> {
    /// Rules that outlive the rewriter.
    Borrowed(&'r Rules),
    /// Rules the rewriter shares.
    Shared(Arc<Rules>),
}

impl Deref for RulesRef<'_> {
    type Target = Rules;

    fn deref(&self) -> &Rules {
        match self {
            RulesRef::Borrowed(r) => r,
            RulesRef::Shared(r) => r,
        }
    }
}

impl<'r> From<&'r Rules> for RulesRef<'r> {
    fn from(r: &'r Rules) -> Self {
        RulesRef::Borrowed(r)
    }
}

impl From<Arc<Rules>> for RulesRef<'_> {
    fn from(r: Arc<Rules>) -> Self {
        RulesRef::Shared(r)
    }
}

/// Largest head of a LIST response read before [`look_ahead`] gives up on it being a list.
pub const MAX_LOOK_AHEAD: usize = 4 << 20;

/// What the head of a LIST response shows the body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A list (a top-level `items` array): streamed item by item through a [`ListRewriter`].
    List,
    /// Anything else (a `Table`, a `Status`, a body that is not a list, or not JSON): read
    /// whole and rewritten as one document.
    Object,
}

/// The look-ahead that decides how a LIST response is rewritten, from the head of its body
/// read so far (`complete`: that is the whole body): `None` while more must be read. A head
/// over [`MAX_LOOK_AHEAD`] that still does not tell is rewritten whole.
///
/// ```
/// use kube_api_rewriter::stream::{Shape, look_ahead};
/// assert_eq!(look_ahead(br#"{"kind":"PodList","#, false), None);
/// assert_eq!(look_ahead(br#"{"kind":"PodList","items":["#, false), Some(Shape::List));
/// assert_eq!(look_ahead(br#"{"kind":"Table","rows":["#, false), Some(Shape::Object));
/// assert_eq!(look_ahead(br#"{"kind":"PodList","#, true), Some(Shape::Object));
/// ```
pub fn look_ahead(head: &[u8], complete: bool) -> Option<Shape> {
    match sniff_list(head) {
        Some(true) => Some(Shape::List),
        Some(false) => Some(Shape::Object),
        None if complete || head.len() > MAX_LOOK_AHEAD => Some(Shape::Object),
        None => None,
    }
}

/// Looks at the start of a body (nothing read yet counts as too little to tell):
/// `Some(true)` when it is a list (a top-level `items` array),
/// `Some(false)` when it is complete or its top-level `kind` says it is not a list, `None` when
/// more input is needed to tell.
pub(crate) fn sniff_list(prefix: &[u8]) -> Option<bool> {
    let mut sc = crate::json::Scanner::new(prefix);
    if let Err(e) = sc.begin_object() {
        return if e.eof { None } else { Some(false) };
    }
    let mut first = true;
    loop {
        let key = match sc.next_key(&mut first) {
            Ok(Some(k)) => k,
            Ok(None) => return Some(false),
            Err(e) => return if e.eof { None } else { Some(false) },
        };
        match key.text.as_ref() {
            "items" => {
                return match sc.peek() {
                    Ok(b) => Some(b == b'['),
                    Err(_) => None,
                };
            }
            "kind" => match sc.string_or_skip() {
                Ok(Some(k)) if !k.text.ends_with("List") => return Some(false),
                Ok(_) => {}
                Err(e) => return if e.eof { None } else { Some(false) },
            },
            _ => {
                if let Err(e) = sc.skip_value() {
                    return if e.eof { None } else { Some(false) };
                }
            }
        }
    }
}

/// A push rewriter's state machine over the input it holds: what [`feed`] drives.
trait Machine {
    /// The held input.
    fn input(&mut self) -> &mut Input;
    /// The value cut short by the end of the input so far, if the machine waits for one.
    fn pending(&self) -> &Pending;
    /// Runs over `buf` (the held input followed by the new piece), writing what is complete.
    fn run(&mut self, buf: &[u8], out: &mut Vec<u8>, eof: bool) -> crate::Result<()>;
    /// How much of the buffer is consumed (written) and can be forgotten.
    fn consumed(&self) -> usize;
    /// The first `n` bytes of the buffer were forgotten: shift positions down.
    fn shift(&mut self, n: usize);
}

/// Feeds `chunk` to `m`. The machine runs over the caller's piece itself wherever it can: only
/// the end of a value cut short by the previous piece joins the held bytes, and only the
/// unfinished tail of this piece is copied and held.
fn feed<M: Machine>(m: &mut M, chunk: &[u8], out: &mut Vec<u8>) -> crate::Result<()> {
    let mut held = std::mem::take(&mut m.input().buf);
    let mut rest = chunk;
    if !held.is_empty() {
        // Only the end of the value the machine waits for joins what it holds (found by a copy
        // of its framer); the rest of the piece is read in place. Copying whole pieces into the
        // held buffer was most of a streamed LIST's memmove, since items straddle every piece.
        let take = m.pending().end_in(held.len(), chunk).unwrap_or(chunk.len());
        held.extend_from_slice(&chunk[..take]);
        rest = &chunk[take..];
        let res = run_held(m, &mut held, out);
        if res.is_err() || rest.is_empty() {
            m.input().buf = held;
            return res;
        }
        if !held.is_empty() {
            // Not all of it was written (a separator still held): the rest joins it after all.
            held.extend_from_slice(rest);
            let res = run_held(m, &mut held, out);
            m.input().buf = held;
            return res;
        }
    }
    // Nothing held (the usual case between values): run over the piece itself and keep only
    // its unfinished tail.
    let res = m.run(rest, out, false);
    if res.is_ok() {
        let n = m.consumed();
        held.extend_from_slice(&rest[n..]);
        m.input().base += n;
        m.shift(n);
    }
    m.input().buf = held;
    res
}

/// Runs `m` over `held`, then forgets what it consumed.
fn run_held<M: Machine>(m: &mut M, held: &mut Vec<u8>, out: &mut Vec<u8>) -> crate::Result<()> {
    m.run(held, out, false)?;
    let n = m.consumed();
    held.drain(..n);
    m.input().base += n;
    m.shift(n);
    Ok(())
}

/// Runs `m` over what it holds, at the end of the input.
fn finish<M: Machine>(m: &mut M, out: &mut Vec<u8>) -> crate::Result<usize> {
    let held = std::mem::take(&mut m.input().buf);
    let res = m.run(&held, out, true);
    let len = held.len();
    m.input().buf = held;
    res.map(|()| len)
}

/// Input received but not yet consumed, and the edit buffer every value reuses.
#[derive(Debug, Default)]
struct Input {
    /// The unfinished tail of the input so far (empty between values).
    buf: Vec<u8>,
    /// Stream offset of `buf[0]`.
    base: usize,
    edits: crate::json::Edits,
    /// Leaf rewrites remembered across the values of the stream.
    memo: crate::object::memo::Memo,
    /// The walker's reusable buffers.
    scratch: crate::object::walk::Scratch,
}

impl Input {
    /// Walks the value at `start` with `walk`, recording its edits: its verdict and length, or
    /// `None` when the input ends inside it and more may come (`complete` says it cannot).
    #[allow(clippy::too_many_arguments)]
    fn walk(
        &mut self,
        buf: &[u8],
        rules: &Rules,
        dir: crate::Direction,
        ctx: &crate::object::Context,
        start: usize,
        complete: bool,
        walk: impl FnOnce(&mut crate::object::Walker<'_, '_>) -> crate::Result<crate::object::Verdict>,
    ) -> crate::Result<Option<(crate::object::Verdict, usize)>> {
        let raw = &buf[start..];
        let mut w = crate::object::Walker::new(rules, dir, raw);
        w.sc = crate::json::Scanner::with_base(raw, self.base + start);
        w.edits = std::mem::take(&mut self.edits);
        w.memo = std::mem::take(&mut self.memo);
        w.scratch = std::mem::take(&mut self.scratch);
        w.group_hint = ctx.group.as_deref();
        w.strip_row_objects = ctx.strip_row_objects;
        if let (Some(g), Some(k)) = (&ctx.group, &ctx.kind) {
            w.kind_hint = Some((g.as_str(), k.as_str()));
        }
        let res = walk(&mut w);
        let len = w.sc.pos();
        self.edits = std::mem::take(&mut w.edits);
        self.memo = std::mem::take(&mut w.memo);
        self.scratch = std::mem::take(&mut w.scratch);
        match res {
            Ok(v) => Ok(Some((v, len))),
            Err(crate::Error::Json(e)) if e.eof && !complete => {
                self.edits.clear();
                Ok(None)
            }
            Err(e) => {
                self.edits.clear();
                Err(e)
            }
        }
    }

    /// Writes the value walked at `start` (length `len`) with its edits, or drops the edits.
    fn emit(&mut self, buf: &[u8], start: usize, len: usize, out: Option<&mut Vec<u8>>) {
        if let Some(out) = out {
            self.edits.apply_range(&buf[start..], 0, len, out);
        }
        self.edits.clear();
    }
}

/// A value (list item, watch event) that did not fit in the input so far.
///
/// Values are first walked straight from the buffer. When the input ends inside one, the framer
/// takes over from the value's start and resumes at each new piece, so the walk is retried only
/// once the value is complete and every byte is framed at most once.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    framer: crate::json::frame::Framer,
    /// Where framing resumes (an index into the buffer), while waiting.
    at: Option<usize>,
}

impl Pending {
    /// Whether the value starting at `start` should be walked now: always on the first try,
    /// afterwards once the framer has found its end (or the input has ended).
    fn ready(&mut self, buf: &[u8], start: usize, eof: bool) -> bool {
        let Some(at) = self.at.as_mut() else { return true };
        if *at < start {
            *at = start;
        }
        self.framer.advance(buf, at, eof).is_some() || eof
    }

    /// Where the value being waited for ends in `piece`, the input that follows `held_len`
    /// bytes the framer has already scanned; `None` when it does not end there (or nothing is
    /// waited for, or the framer has not reached the end of what is held).
    fn end_in(&self, held_len: usize, piece: &[u8]) -> Option<usize> {
        if self.at != Some(held_len) {
            return None;
        }
        let mut at = 0;
        self.framer.clone().advance(piece, &mut at, false)
    }

    /// True while waiting for the rest of a value.
    fn waiting(&self) -> bool {
        self.at.is_some()
    }

    /// The walk ran out of input: frame from `start` on.
    fn wait(&mut self, start: usize) {
        self.framer = crate::json::frame::Framer::default();
        self.at = Some(start);
    }

    /// The value was rewritten.
    fn done(&mut self) {
        self.at = None;
    }

    /// The first `n` bytes of the buffer were dropped.
    fn shift(&mut self, n: usize) {
        if let Some(at) = self.at.as_mut() {
            *at -= n.min(*at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sniff_list;

    #[test]
    fn sniffing_waits_for_enough_input() {
        assert_eq!(sniff_list(b""), None);
        assert_eq!(sniff_list(b"  "), None);
        assert_eq!(sniff_list(br#"{"apiVersion":"v1","ite"#), None);
        assert_eq!(sniff_list(br#"{"apiVersion":"v1","items":["#), Some(true));
        assert_eq!(sniff_list(br#"{"kind":"Table","rows":["#), Some(false));
        assert_eq!(sniff_list(br#"{"kind":"PodList","#), None);
        assert_eq!(sniff_list(b"[1]"), Some(false));
        assert_eq!(sniff_list(br#"{"a":1}"#), Some(false));
    }
}
