//! WATCH streams, event by event.
//!
//! Excludes hold over time: an object that becomes hidden (a `MODIFIED` event whose object the
//! rules now hide) is announced as `DELETED`, carrying its current object restored (and so that
//! event's resourceVersion); later events about it are dropped while it stays hidden, its own
//! `DELETED` included; when it stops being hidden, its next event is sent as `ADDED`. The only
//! state is the set of UIDs currently hidden, and an object's UID is read only for hidden
//! objects or while that set is not empty.

use std::collections::HashSet;

use crate::Direction;
use crate::error::Result;
use crate::json::Scanner;
use crate::object::{Context, Hint, Verdict, Walker};

/// Rewrites a stream of watch events (`{"type":..,"object":..}` values, newline-delimited or
/// back to back); each event is written followed by `\n`.
pub struct WatchRewriter<'r> {
    rules: super::RulesRef<'r>,
    dir: Direction,
    ctx: Context,
    input: super::Input,
    pos: usize,
    start: Option<usize>,
    events: usize,
    dropped: usize,
    /// UIDs of the objects this watch has seen hidden and not yet deleted.
    hidden: HashSet<String>,
    /// An event cut short by the end of the input so far.
    pending: super::Pending,
}

impl super::Machine for WatchRewriter<'_> {
    fn input(&mut self) -> &mut super::Input {
        &mut self.input
    }

    fn pending(&self) -> &super::Pending {
        &self.pending
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
    pub fn new(rules: impl Into<super::RulesRef<'r>>, dir: Direction, ctx: Context) -> Self {
        Self {
            rules: rules.into(),
            dir,
            ctx,
            input: super::Input::default(),
            pos: 0,
            start: None,
            events: 0,
            dropped: 0,
            hidden: HashSet::new(),
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

    /// UIDs of the objects currently hidden from this watch.
    pub fn hidden(&self) -> usize {
        self.hidden.len()
    }

    /// Rewrites the event starting at `start`; `None` if the input ends inside it.
    fn event(
        &mut self,
        buf: &[u8],
        start: usize,
        complete: bool,
        out: &mut Vec<u8>,
    ) -> Result<Option<usize>> {
        let want_uid = !self.hidden.is_empty();
        let mut seen = Seen::default();
        let Some((verdict, len)) =
            self.input
                .walk(buf, &self.rules, self.dir, &self.ctx, start, complete, |w| {
                    walk_event(w, want_uid, None, &mut seen)
                })?
        else {
            return Ok(None);
        };
        match self.decide(verdict, &seen) {
            Action::Keep => self.keep(buf, start, len, out),
            Action::Drop => {
                self.input.emit(buf, start, len, None);
                self.dropped += 1;
            }
            Action::Added => {
                if let Some((s, e)) = seen.type_span {
                    self.input.edits.replace_quoted(s, e, "ADDED");
                }
                self.keep(buf, start, len, out);
            }
            Action::Deleted => {
                // Walked again with excludes off: the object as the client last sees it.
                self.input.emit(buf, start, len, None);
                let mut ignored = Seen::default();
                let walked = self
                    .input
                    .walk(buf, &self.rules, self.dir, &self.ctx, start, true, |w| {
                        walk_event(w, false, Some("DELETED"), &mut ignored)
                    })?;
                match walked {
                    Some((_, len)) => self.keep(buf, start, len, out),
                    None => self.input.emit(buf, start, len, None),
                }
            }
        }
        Ok(Some(start + len))
    }

    fn keep(&mut self, buf: &[u8], start: usize, len: usize, out: &mut Vec<u8>) {
        self.input.emit(buf, start, len, Some(out));
        out.push(b'\n');
        self.events += 1;
    }

    /// What to send for an event, and the hidden set after it.
    fn decide(&mut self, verdict: Verdict, seen: &Seen) -> Action {
        let ty = seen.ty;
        match (verdict, &seen.uid) {
            (Verdict::Excluded, None) => Action::Drop,
            (Verdict::Excluded, Some(uid)) => match ty {
                Some(EventType::Deleted) => {
                    self.hidden.remove(uid);
                    Action::Drop
                }
                // The client has it: it goes away now.
                Some(EventType::Modified) if self.hidden.insert(uid.clone()) => Action::Deleted,
                Some(EventType::Added | EventType::Modified) => {
                    self.hidden.insert(uid.clone());
                    Action::Drop
                }
                _ => Action::Drop,
            },
            (Verdict::Keep, Some(uid)) if self.hidden.remove(uid) => match ty {
                Some(EventType::Modified) => Action::Added,
                // Deleted while hidden, or already announced: the client does not have it.
                Some(EventType::Deleted) => Action::Drop,
                _ => Action::Keep,
            },
            (Verdict::Keep, _) => Action::Keep,
        }
    }
}

/// What [`WatchRewriter`] does with one event.
enum Action {
    Keep,
    Drop,
    /// Send it as `ADDED` (the object stopped being hidden).
    Added,
    /// Send it as `DELETED` with the object restored (the object became hidden).
    Deleted,
}

/// What walking an event found out.
#[derive(Default)]
struct Seen {
    /// The event type.
    ty: Option<EventType>,
    /// The span of the type string.
    type_span: Option<(usize, usize)>,
    /// The object's `metadata.uid`, when asked for or when the object is hidden.
    uid: Option<String>,
}

/// The types of event that hiding objects looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventType {
    Added,
    Modified,
    Deleted,
    /// `BOOKMARK`, `ERROR`, or any other.
    Other,
}

impl EventType {
    fn of(ty: &str) -> EventType {
        match ty {
            "ADDED" => EventType::Added,
            "MODIFIED" => EventType::Modified,
            "DELETED" => EventType::Deleted,
            _ => EventType::Other,
        }
    }
}

/// One `{"type":..,"object":..}` event; an excluded object drops the event. With `force`, the
/// type is replaced and excludes do not apply.
fn walk_event(
    w: &mut Walker<'_, '_>,
    want_uid: bool,
    force: Option<&str>,
    seen: &mut Seen,
) -> Result<Verdict> {
    w.sc.begin_object()?;
    let mut first = true;
    let mut verdict = Verdict::Keep;
    while let Some(raw) = w.sc.next_key_raw(&mut first)? {
        let mut decoded = None;
        let key = w.sc.key_bytes(&raw, &mut decoded)?;
        if key == b"object" {
            let at = w.sc.clone();
            verdict = w.object(&Hint {
                kind: None,
                api_version: None,
                top: force.is_none(),
            })?;
            if want_uid || verdict == Verdict::Excluded {
                seen.uid = uid(at)?;
            }
        } else if key == b"type" {
            if let Some(s) = w.sc.string_or_skip()? {
                if let Some(t) = force {
                    w.edits.replace_quoted(s.start, s.end, t);
                }
                seen.type_span = Some((s.start, s.end));
                seen.ty = Some(EventType::of(&s.text));
            }
        } else {
            w.sc.skip_value()?;
        }
    }
    Ok(verdict)
}

/// `metadata.uid` of the object at the scanner's position (already validated by the walk).
fn uid(mut sc: Scanner<'_>) -> Result<Option<String>> {
    if sc.peek()? != b'{' {
        return Ok(None);
    }
    sc.begin_object()?;
    let mut first = true;
    while let Some(k) = sc.next_key(&mut first)? {
        if k.text != "metadata" || sc.peek()? != b'{' {
            sc.skip_value()?;
            continue;
        }
        sc.begin_object()?;
        let mut first = true;
        while let Some(k) = sc.next_key(&mut first)? {
            if k.text == "uid" {
                return Ok(sc.string_or_skip()?.map(|s| s.text.into_owned()));
            }
            sc.skip_value()?;
        }
        return Ok(None);
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{Rules, Source};

    fn rules() -> Rules {
        let text = "excludes:\n  - kinds: [ConfigMap]\n    matchLabels: {hide: \"yes\"}\n";
        Rules::parse(&[Source { name: "x", text }]).unwrap()
    }

    fn ev(ty: &str, uid: &str, rv: u32, hidden: bool) -> String {
        let labels = if hidden { r#","labels":{"hide":"yes"}"# } else { "" };
        format!(
            r#"{{"type":"{ty}","object":{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"c{uid}","uid":"{uid}","resourceVersion":"{rv}"{labels}}}}}}}"#
        )
    }

    /// Feeds `events` one piece each; the (type, uid, resourceVersion) of what comes out.
    fn run(w: &mut WatchRewriter<'_>, events: &[String]) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for e in events {
            w.feed(format!("{e}\n").as_bytes(), &mut out).unwrap();
        }
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let m = &v["object"]["metadata"];
                (
                    v["type"].as_str().unwrap().to_owned(),
                    m["uid"].as_str().unwrap().to_owned(),
                    m["resourceVersion"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    fn t(ty: &str, uid: &str, rv: &str) -> (String, String, String) {
        (ty.into(), uid.into(), rv.into())
    }

    #[test]
    fn objects_that_become_hidden_are_deleted_and_come_back_as_added() {
        let rules = rules();
        let mut w = WatchRewriter::new(&rules, Direction::Restore, Context::default());
        let got = run(
            &mut w,
            &[
                ev("ADDED", "a", 1, false),
                ev("ADDED", "b", 2, true),    // hidden from the start: never sent
                ev("MODIFIED", "a", 3, true), // becomes hidden
                ev("MODIFIED", "a", 4, true), // stays hidden
                ev("MODIFIED", "b", 5, true),
            ],
        );
        assert_eq!(got, [t("ADDED", "a", "1"), t("DELETED", "a", "3")]);
        assert_eq!(w.hidden(), 2);
        let got = run(
            &mut w,
            &[
                ev("MODIFIED", "a", 6, false), // visible again
                ev("MODIFIED", "a", 7, false),
                ev("DELETED", "b", 8, true), // its own DELETED while hidden
                ev("MODIFIED", "a", 9, true),
                ev("DELETED", "a", 10, true),
            ],
        );
        assert_eq!(
            got,
            [
                t("ADDED", "a", "6"),
                t("MODIFIED", "a", "7"),
                t("DELETED", "a", "9")
            ]
        );
        assert_eq!(w.hidden(), 0, "deleted objects are forgotten");
        assert_eq!(w.counts(), (5, 5));
    }

    #[test]
    fn the_deleted_event_carries_the_restored_object() {
        let text = "excludes:\n  - kinds: [InternalVirtualizationVirtualMachine]\n    matchLabels: {hide: \"yes\"}\n";
        let mut rules = Rules::builtin_kubevirt();
        rules
            .excludes
            .extend(Rules::parse(&[Source { name: "x", text }]).unwrap().excludes);
        let vm = |ty: &str, label: &str| {
            format!(
                r#"{{"type":"{ty}","object":{{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachine","metadata":{{"name":"v","uid":"u","labels":{{"kubevirt.internal.virtualization.deckhouse.io/x":"1"{label}}}}}}}}}"#
            )
        };
        let mut w = WatchRewriter::new(&rules, Direction::Restore, Context::default());
        let mut out = Vec::new();
        for e in [vm("ADDED", ""), vm("MODIFIED", r#","hide":"yes""#)] {
            w.feed(e.as_bytes(), &mut out).unwrap();
        }
        w.finish(&mut out).unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["type"], "DELETED");
        let o = &lines[1]["object"];
        assert_eq!(o["apiVersion"], "kubevirt.io/v1");
        assert_eq!(o["kind"], "VirtualMachine");
        assert_eq!(o["metadata"]["labels"]["kubevirt.io/x"], "1");
    }
}
