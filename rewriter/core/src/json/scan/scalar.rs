//! Literals (`true`, `false`, `null`) and numbers, validated as JSON's grammar has them.

use super::{Result, Scanner};

impl Scanner<'_> {
    /// Moves past `lit`. Sized, so the compare is a word compare rather than a `memcmp` call
    /// (1% of a LIST's restore in the profile, for four bytes at a time); kept out of line, off
    /// the skip loop's registers.
    #[inline(never)]
    pub(super) fn literal<const N: usize>(&mut self, lit: &[u8; N]) -> Result<()> {
        let end = self.pos + N;
        match self.buf.get(self.pos..end).map(<&[u8; N]>::try_from) {
            Some(Ok(b)) if b == lit => {
                self.pos = end;
                Ok(())
            }
            Some(_) => Err(self.err("expected a value")),
            None if lit.starts_with(&self.buf[self.pos..]) => {
                self.pos = self.buf.len();
                Err(self.eof())
            }
            None => Err(self.err("expected a value")),
        }
    }

    fn digits(&mut self) -> usize {
        let s = self.pos;
        while self.buf.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        self.pos - s
    }

    /// At least one digit, as a fraction and an exponent need.
    fn some_digits(&mut self) -> Result<()> {
        if self.digits() > 0 {
            Ok(())
        } else if self.pos == self.buf.len() {
            Err(self.eof())
        } else {
            Err(self.err("invalid number"))
        }
    }

    pub(super) fn number(&mut self) -> Result<()> {
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
            self.some_digits()?;
        }
        if matches!(self.buf.get(self.pos), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.buf.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            self.some_digits()?;
        }
        Ok(())
    }
}
