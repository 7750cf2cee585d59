//! Blocks of a string classified at once: quotes, backslashes, control characters and
//! non-ASCII bytes, 16 at a time.

use wide::{CmpEq, CmpGt, CmpLt, i8x16};

/// Bytes the string loops classify at a time: one SSE2/NEON register.
///
/// Through `wide`'s safe vector types, because `std::arch` needs `unsafe` at the call (SSE2
/// being the x86_64 baseline does not lift that) and the workspace forbids it; plain loops over
/// a `[u8; 16]` do vectorize, but LLVM then has no movemask and moves the flags to integers
/// through the stack, a store-forwarding stall on the scan's critical path (fewer instructions
/// than the `u64` bit tricks this replaced, yet slower).
pub(super) const BLOCK: usize = 16;

/// The flags of the block at `i` (`None` near the end of the input, where the caller goes byte
/// by byte).
#[inline(always)]
pub(super) fn specials(buf: &[u8], i: usize, ascii_only: bool) -> Option<Flags> {
    let b: &[u8; BLOCK] = buf.get(i..i + BLOCK)?.try_into().ok()?;
    Some(classify(b, ascii_only))
}

/// One bit per byte of a block: set for `"`, `\\`, control characters and, unless the block
/// was classified `ascii_only`, non-ASCII bytes.
#[derive(Clone, Copy)]
pub(super) struct Flags(u32);

impl Flags {
    #[inline(always)]
    pub(super) fn any(self) -> bool {
        self.0 != 0
    }

    /// Offset in the block of the first flagged byte (the block has one).
    #[inline(always)]
    pub(super) fn first(self) -> usize {
        self.0.trailing_zeros() as usize
    }
}

#[inline(always)]
fn classify(b: &[u8; BLOCK], ascii_only: bool) -> Flags {
    let v = i8x16::new(b.map(|c| c as i8));
    let splat = |c: u8| i8x16::splat(c as i8);
    // Signed: below 0x20 is a control character or (negative) non-ASCII.
    let mut m = v.cmp_eq(splat(b'"')) | v.cmp_eq(splat(b'\\')) | v.cmp_lt(splat(0x20));
    if ascii_only {
        m &= v.cmp_gt(i8x16::splat(-1));
    }
    Flags(m.move_mask() as u32)
}

/// The end (one past the closing quote) of the string whose opening quote is at `start`, when
/// it is plain ASCII without escapes; `None` for anything else (the caller takes the full path).
#[inline(always)]
pub(super) fn plain_string_end(buf: &[u8], start: usize) -> Option<usize> {
    let body = buf.get(start + 1..)?;
    let mut at = start + 1;
    for block in body.chunks_exact(BLOCK) {
        let v = i8x16::new(<[u8; BLOCK]>::try_from(block).expect("a block").map(|c| c as i8));
        let quotes = v.cmp_eq(i8x16::splat(b'"' as i8));
        let m = (quotes | v.cmp_eq(i8x16::splat(b'\\' as i8)) | v.cmp_lt(i8x16::splat(0x20))).move_mask();
        if m != 0 {
            // Plain when the first special byte is the closing quote (a bit test rather than
            // a load of that byte: this is on the scan's critical path).
            let k = m.trailing_zeros() as usize;
            return (quotes.move_mask() >> k & 1 == 1).then_some(at + k + 1);
        }
        at += BLOCK;
    }
    None
}
