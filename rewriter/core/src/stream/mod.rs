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

mod list;
mod watch;

pub use list::ListRewriter;
pub use watch::WatchRewriter;

/// Looks at the start of a body (nothing read yet counts as too little to tell):
/// `Some(true)` when it is a list (a top-level `items` array),
/// `Some(false)` when it is complete or its top-level `kind` says it is not a list, `None` when
/// more input is needed to tell.
pub fn sniff_list(prefix: &[u8]) -> Option<bool> {
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

/// A value (list item, watch event) that did not fit in the input so far.
///
/// Values are first walked straight from the buffer. When the input ends inside one, the framer
/// takes over from the value's start and resumes at each new piece, so the walk is retried only
/// once the value is complete and every byte is framed at most once.
#[derive(Debug, Default)]
struct Pending {
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
