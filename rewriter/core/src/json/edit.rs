//! Byte-span edits over a document, applied in one pass so that untouched bytes are copied as is.

/// Replaces `input[start..end]` with `text`.
#[derive(Debug, Clone)]
pub struct Edit {
    /// Start of the replaced span.
    pub start: usize,
    /// End of the replaced span.
    pub end: usize,
    /// Replacement bytes.
    pub text: Vec<u8>,
}

/// Edits collected while walking a document. Spans never overlap.
#[derive(Debug, Default)]
pub struct Edits(Vec<Edit>);

impl Edits {
    /// Records an edit.
    pub fn replace(&mut self, start: usize, end: usize, text: Vec<u8>) {
        self.0.push(Edit { start, end, text });
    }

    /// Removes a span.
    pub fn delete(&mut self, start: usize, end: usize) {
        self.replace(start, end, Vec::new());
    }

    /// Number of edits (a mark for [`Edits::truncate`]).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when nothing was edited.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Forgets edits recorded after `mark`.
    pub fn truncate(&mut self, mark: usize) {
        self.0.truncate(mark);
    }

    /// Drops edits inside `[start, end)` recorded after `mark`.
    pub fn discard_within(&mut self, mark: usize, start: usize, end: usize) {
        let mut i = mark;
        while i < self.0.len() {
            if self.0[i].start >= start && self.0[i].end <= end {
                self.0.remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Writes `input[from..to]` with the edits applied into `out`.
    pub fn apply_range(&mut self, input: &[u8], from: usize, to: usize, out: &mut Vec<u8>) {
        self.0.sort_by_key(|e| e.start);
        let mut at = from;
        for e in self.0.iter().filter(|e| e.start >= from && e.end <= to) {
            out.extend_from_slice(&input[at..e.start]);
            out.extend_from_slice(&e.text);
            at = e.end;
        }
        out.extend_from_slice(&input[at..to]);
    }
}
