//! Tables (`as=Table`): row objects rewritten by their kind, rows of hidden objects dropped, and
//! row objects answered as `null` for `includeObject=None`.

use super::{Element, Hint, Verdict, Walker, drop_elements};
use crate::error::Result;

impl Walker<'_, '_> {
    /// A Table: each row's object is rewritten, and rows whose object is hidden are dropped.
    pub(super) fn table(&mut self) -> Result<()> {
        self.sc.begin_object()?;
        let mut first = true;
        while let Some(key) = self.sc.next_key(&mut first)? {
            if key.text != "rows" || self.sc.peek()? != b'[' {
                self.sc.skip_value()?;
                continue;
            }
            self.sc.begin_array()?;
            let mut first = true;
            let mut spans: Vec<Element> = Vec::new();
            while self.sc.next_elem(&mut first)? {
                self.sc.ws();
                let start = self.sc.pos();
                let mark = self.edits.len();
                let v = self.row()?;
                if v == Verdict::Excluded {
                    self.edits.truncate(mark);
                }
                spans.push(Element {
                    start,
                    end: self.sc.pos(),
                    dropped: v == Verdict::Excluded,
                });
            }
            drop_elements(&mut self.edits, &spans);
        }
        Ok(())
    }

    /// One Table row: its `object` decides.
    fn row(&mut self) -> Result<Verdict> {
        if self.sc.peek()? != b'{' {
            self.sc.skip_value()?;
            return Ok(Verdict::Keep);
        }
        self.sc.begin_object()?;
        let mut first = true;
        let mut verdict = Verdict::Keep;
        while let Some(key) = self.sc.next_key(&mut first)? {
            if key.text == "object" {
                self.sc.ws();
                let start = self.sc.pos();
                let mark = self.edits.len();
                verdict = self.object(&Hint {
                    top: true,
                    ..Hint::default()
                })?;
                if self.strip_row_objects {
                    // As kube-apiserver answers `includeObject=None`.
                    self.edits.truncate(mark);
                    self.edits.replace_slice(start, self.sc.pos(), b"null");
                }
            } else {
                self.sc.skip_value()?;
            }
        }
        Ok(verdict)
    }
}
