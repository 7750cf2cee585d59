//! Byte-span edits over a document, applied in one pass so that untouched bytes are copied as is.

/// Replaces `input[start..end]` with the edit's bytes in the arena.
#[derive(Debug, Clone)]
struct Edit {
    start: usize,
    end: usize,
    /// The replacement: `arena[text.0..text.1]`.
    text: (usize, usize),
}

/// Edits collected while walking a document. Spans never overlap. Replacement bytes share one
/// buffer, so recording an edit does not allocate.
#[derive(Debug, Default)]
pub(crate) struct Edits {
    edits: Vec<Edit>,
    arena: Vec<u8>,
}

impl Edits {
    /// Records an edit.
    pub(crate) fn replace(&mut self, start: usize, end: usize, text: Vec<u8>) {
        self.replace_slice(start, end, &text);
    }

    /// Records an edit whose replacement is `s` as a JSON string.
    pub(crate) fn replace_quoted(&mut self, start: usize, end: usize, s: &str) {
        let from = self.arena.len();
        super::escape::write_str(&mut self.arena, s);
        self.record(start, end, from);
    }

    /// Records an edit whose replacement is the concatenation of `parts` as a JSON string
    /// (written straight into the arena: nothing is allocated).
    pub(crate) fn replace_quoted_parts(&mut self, start: usize, end: usize, parts: &[&str]) {
        let from = self.arena.len();
        self.arena.push(b'"');
        for p in parts {
            super::escape::escape_into(&mut self.arena, p);
        }
        self.arena.push(b'"');
        self.record(start, end, from);
    }

    /// Like [`Edits::replace_quoted_parts`] with `parts` written as they are: the caller knows
    /// they are valid JSON string content already (from unescaped input, from rules without
    /// characters to escape, or escaped by hand).
    pub(crate) fn replace_plain_parts(&mut self, start: usize, end: usize, parts: &[&str]) {
        let from = self.arena.len();
        self.arena.push(b'"');
        for p in parts {
            self.arena.extend_from_slice(p.as_bytes());
        }
        self.arena.push(b'"');
        self.record(start, end, from);
    }

    /// Records an edit whose replacement is `text`.
    pub(crate) fn replace_slice(&mut self, start: usize, end: usize, text: &[u8]) {
        let from = self.arena.len();
        self.arena.extend_from_slice(text);
        self.record(start, end, from);
    }

    /// `input[start..end]` with the edits recorded after `mark` applied (they must lie inside
    /// it), or `None` when there are none.
    pub(crate) fn render_since(
        &self,
        mark: usize,
        input: &[u8],
        start: usize,
        end: usize,
    ) -> Option<Vec<u8>> {
        let mut recent: Vec<&Edit> = self.edits.get(mark..)?.iter().collect();
        if recent.is_empty() {
            return None;
        }
        recent.sort_by_key(|e| e.start);
        let mut out = Vec::with_capacity(end - start + 64);
        let mut at = start;
        for e in recent {
            out.extend_from_slice(&input[at..e.start]);
            out.extend_from_slice(&self.arena[e.text.0..e.text.1]);
            at = e.end;
        }
        out.extend_from_slice(&input[at..end]);
        Some(out)
    }

    /// Records the edit whose replacement is the arena from `from` on.
    fn record(&mut self, start: usize, end: usize, from: usize) {
        self.edits.push(Edit {
            start,
            end,
            text: (from, self.arena.len()),
        });
    }

    /// Removes a span.
    pub(crate) fn delete(&mut self, start: usize, end: usize) {
        self.replace(start, end, Vec::new());
    }

    /// Forgets every edit, keeping the buffers for reuse.
    pub(crate) fn clear(&mut self) {
        self.edits.clear();
        self.arena.clear();
    }

    /// Number of edits (a mark for [`Edits::truncate`]).
    pub(crate) fn len(&self) -> usize {
        self.edits.len()
    }

    /// True when nothing was edited.
    pub(crate) fn is_empty(&self) -> bool {
        self.edits.is_empty()
    }

    /// Forgets edits recorded after `mark`.
    pub(crate) fn truncate(&mut self, mark: usize) {
        self.edits.truncate(mark);
    }

    /// Writes `input[from..to]` with the edits applied into `out`.
    pub(crate) fn apply_range(&mut self, input: &[u8], from: usize, to: usize, out: &mut Vec<u8>) {
        self.edits.sort_by_key(|e| e.start);
        let mut at = from;
        for e in self.edits.iter().filter(|e| e.start >= from && e.end <= to) {
            out.extend_from_slice(&input[at..e.start]);
            out.extend_from_slice(&self.arena[e.text.0..e.text.1]);
            at = e.end;
        }
        out.extend_from_slice(&input[at..to]);
    }
}
