//! Skipping a subtree like one skipped before.
//!
//! The items of a LIST repeat each other: a VM's `spec` differs from the previous VM's in its
//! name and a few values, and most of its bytes are the same. A skip recorded once keeps the
//! subtree's bytes and, at each value start, the skip loop's state there (a [`Reference`]). A
//! later skip of the same place compares the input ahead with the reference wherever it stands
//! at a value start that matches a recorded one, and moves past what is equal in one step.
//!
//! That is sound because the skip loop is a function of its state and the bytes it reads: from
//! the same state, the same bytes up to a value start and its first byte lead to the same state
//! there (every token before a value start ends at the `:`, `,` or `[` and whitespace before it;
//! after a `[`, its first byte says whether a value starts at all), and the same bytes up to the
//! end of the reference close its last level. The reference was valid, so the bytes moved past
//! are valid, and errors are found by the plain loop where bytes differ, at the offsets it gives.
//! References are recorded only where the loop's depth limit cannot bind (fewer than
//! [`MAX_MARK_LEVEL`] levels, and room for the register's levels below [`MAX_SKIP_DEPTH`]).

use wide::u8x16;

use super::classify::plain_string_end;
use super::{MAX_SKIP_DEPTH, REGISTER_LEVELS, Result, Scanner, Step, Track};

/// Longest subtree kept as a reference.
const MAX_REFERENCE: usize = 16 * 1024;
/// Most value starts a reference keeps.
const MAX_MARKS: usize = MAX_REFERENCE / 8;
/// Most strings a reference keeps (further ones are not passed when they differ).
const MAX_STRINGS: usize = 4096;
/// Value starts this deep are not recorded (a reference then is not kept): the mask of a mark
/// holds 64 levels.
const MAX_MARK_LEVEL: u32 = 63;

/// A skipped subtree: its bytes and the skip loop's state at each of its value starts.
#[derive(Debug)]
pub(crate) struct Reference {
    bytes: Box<[u8]>,
    /// In the order of the bytes; the first is the subtree itself.
    marks: Box<[Mark]>,
    /// For each [`STRIDE`] bytes, the first mark at or after their start.
    strides: Box<[u16]>,
    /// Strings (keys and values): opening quote, one past the closing one; in order.
    strings: Box<[(u32, u32)]>,
    /// For each [`STRIDE`] bytes, the first string opening at or after their start.
    string_strides: Box<[u16]>,
    /// The marks by [`head_key`] bucket, each bucket in order: bucket `h` is
    /// `by_head[heads[h]..heads[h + 1]]`.
    by_head: Box<[u16]>,
    heads: Box<[u16]>,
}

/// A value start of a reference: its offset, and the loop's levels and object bits there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    at: u32,
    level: u32,
    objects: u64,
}

/// Bytes of a reference per entry of its offset index.
const STRIDE: usize = 32;

/// The bytes at a value start and its level, as a bucket of `bits` bits: what marks are found
/// by after the input left the one followed (a member added, an element more).
#[inline]
fn head_key(bytes: &[u8], level: u32, bits: u32) -> usize {
    let mut word = [0u8; 8];
    let n = bytes.len().min(8);
    word[..n].copy_from_slice(&bytes[..n]);
    let k = (u64::from_le_bytes(word) ^ u64::from(level)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (k >> (64 - bits)) as usize
}

impl Reference {
    fn new(bytes: Box<[u8]>, marks: Box<[Mark]>, strings: Box<[(u32, u32)]>) -> Self {
        // Counts and indexes stay within `MAX_MARKS` and `MAX_STRINGS`, which `u16` holds.
        let strides = stride_index(bytes.len(), marks.iter().map(|m| m.at));
        let string_strides = stride_index(bytes.len(), strings.iter().map(|s| s.0));
        let buckets = (marks.len() * 2).next_power_of_two().max(2);
        let bits = buckets.trailing_zeros();
        let keys: Vec<usize> = marks
            .iter()
            .map(|m| head_key(&bytes[m.at as usize..], m.level, bits))
            .collect();
        let mut heads = vec![0u16; buckets + 1];
        for &h in &keys {
            heads[h + 1] += 1;
        }
        for h in 0..buckets {
            heads[h + 1] += heads[h];
        }
        let mut fill = heads.clone();
        let mut by_head = vec![0u16; marks.len()];
        for (i, &h) in keys.iter().enumerate() {
            by_head[usize::from(fill[h])] = i as u16;
            fill[h] += 1;
        }
        Self {
            bytes,
            marks,
            strides,
            strings,
            string_strides,
            by_head: by_head.into(),
            heads: heads.into(),
        }
    }
}

/// For each [`STRIDE`] bytes of `len`, the index of the first of `offsets` (ascending) at or
/// after their start.
fn stride_index(len: usize, offsets: impl Iterator<Item = u32>) -> Box<[u16]> {
    let mut offsets = offsets.peekable();
    let mut i = 0u16;
    (0..len)
        .step_by(STRIDE)
        .map(|at| {
            while offsets.next_if(|&o| (o as usize) < at).is_some() {
                i += 1;
            }
            i
        })
        .collect()
}

/// Records the value starts of a skip.
struct Recorder {
    start: usize,
    marks: Vec<Mark>,
    /// Strings, up to [`MAX_STRINGS`].
    strings: Vec<(u32, u32)>,
    /// A value start was too deep, too far or one too many: no reference.
    refused: bool,
}

impl Track for Recorder {
    #[inline]
    fn value_start(&mut self, pos: usize, objects: u128, level: u32) -> Step {
        let at = pos - self.start;
        if self.refused {
            return Step::Go;
        }
        if level >= MAX_MARK_LEVEL || at >= MAX_REFERENCE || self.marks.len() == MAX_MARKS {
            self.refused = true;
        } else {
            self.marks.push(Mark {
                at: at as u32,
                level,
                // Below `MAX_MARK_LEVEL`, the register's higher bits are clear.
                objects: objects as u64,
            });
        }
        Step::Go
    }

    #[inline]
    fn string(&mut self, start: usize, end: usize) {
        let (start, end) = (start - self.start, end - self.start);
        if end <= MAX_REFERENCE && self.strings.len() < MAX_STRINGS {
            self.strings.push((start as u32, end as u32));
        }
    }
}

/// Follows a reference through a skip: at each value start, tries the mark after the last one
/// matched (right when values differ in length but not in shape), then the marks further on
/// that start with the same bytes at the same level (right when a member or an element was
/// added or left out). Where neither is equal, tries fewer and fewer value starts.
struct Follow<'r, 'a> {
    reference: &'r Reference,
    input: &'a [u8],
    /// The mark tried next.
    next: usize,
    /// Value starts left before the next try, and that count the next time a try fails.
    wait: u32,
    backoff: u32,
    /// Bytes found equal.
    compared: usize,
}

/// Marks of a bucket tried at a value start.
const MAX_TRIES: usize = 4;
/// Most value starts passed between tries.
const MAX_BACKOFF: u32 = 16;

impl Track for Follow<'_, '_> {
    #[inline]
    fn value_start(&mut self, pos: usize, objects: u128, level: u32) -> Step {
        if self.wait > 0 {
            self.wait -= 1;
            return Step::Go;
        }
        if let Some(step) = self.try_mark(self.next, pos, objects, level) {
            return step;
        }
        self.resync(pos, objects, level)
    }
}

impl Follow<'_, '_> {
    /// Looks for a mark further on that the input at `pos` starts like.
    #[inline(never)]
    fn resync(&mut self, pos: usize, objects: u128, level: u32) -> Step {
        let r = self.reference;
        let h = head_key(&self.input[pos..], level, (r.heads.len() - 1).trailing_zeros());
        let bucket = &r.by_head[usize::from(r.heads[h])..usize::from(r.heads[h + 1])];
        let from = bucket.partition_point(|&i| usize::from(i) <= self.next);
        for &i in bucket[from..].iter().take(MAX_TRIES) {
            if let Some(step) = self.try_mark(usize::from(i), pos, objects, level) {
                return step;
            }
        }
        self.wait = self.backoff;
        self.backoff = (self.backoff * 2 + 1).min(MAX_BACKOFF);
        Step::Go
    }

    /// Compares the input at `pos` with the reference at mark `i`, if the loop's state there is
    /// the mark's: where to go on from (`None` when nothing is equal).
    #[inline]
    fn try_mark(&mut self, i: usize, pos: usize, objects: u128, level: u32) -> Option<Step> {
        let m = *self.reference.marks.get(i)?;
        if m.level != level || u128::from(m.objects) != objects {
            return None;
        }
        let theirs = &self.reference.bytes[m.at as usize..];
        let ours = &self.input[pos..];
        // Most tries fail at once: a word compare before the longer one.
        if let (Some(a), Some(b)) = (theirs.first_chunk::<8>(), ours.first_chunk::<8>())
            && a != b
        {
            return None;
        }
        let n = common_prefix(theirs, ours);
        if n == 0 {
            return None;
        }
        self.compared += n;
        self.backoff = 0;
        if n == theirs.len() {
            return Some(Step::End(pos + n));
        }
        // Input offsets less reference offsets, and the first byte that differs (reference).
        let mut shift = pos as isize - m.at as isize;
        let mut end = m.at as usize + n;
        // The last value start found equal, and the shift there.
        let mut j = self.last_mark_before(i, end);
        let mut j_shift = shift;
        // A string that differs (a name, a uid, a key holding one) is passed in both, and
        // comparing goes on after it.
        while let Some((theirs_end, ours_end)) = self.string_around(end, shift) {
            let n = common_prefix(&self.reference.bytes[theirs_end..], &self.input[ours_end..]);
            self.compared += n;
            shift = ours_end as isize - theirs_end as isize;
            end = theirs_end + n;
            if end == self.reference.bytes.len() {
                return Some(Step::End(ours_end + n));
            }
            // Value starts after `j` are past the string (none is inside one).
            let k = self.last_mark_before(j, end);
            if k != j {
                (j, j_shift) = (k, shift);
            }
        }
        self.next = j + 1;
        let to = self.reference.marks[j];
        let at = (to.at as isize + j_shift) as usize;
        if at == pos {
            return Some(Step::Go);
        }
        Some(Step::Jump(at, u128::from(to.objects), to.level))
    }

    /// Where the string of the reference that holds offset `end` ends, and where the one at the
    /// same place of the input ends, if valid (`shift`: input offsets less reference offsets,
    /// equal up to `end`). An invalid one is left to the loop, which finds the same error.
    #[inline]
    fn string_around(&self, end: usize, shift: isize) -> Option<(usize, usize)> {
        let r = self.reference;
        let mut k = usize::from(*r.string_strides.get(end / STRIDE)?);
        while r.strings.get(k).is_some_and(|s| (s.0 as usize) < end) {
            k += 1;
        }
        let (open, close) = *r.strings.get(k.checked_sub(1)?)?;
        if end >= close as usize {
            return None;
        }
        // It opens within what was found equal.
        let ours = (open as isize + shift) as usize;
        debug_assert_eq!(self.input.get(ours), Some(&b'"'));
        let ours_end = plain_string_end(self.input, ours).or_else(|| {
            let mut sc = Scanner::new(self.input);
            sc.pos = ours;
            sc.skip_string().ok().map(|_| sc.pos)
        })?;
        Some((close as usize, ours_end))
    }

    /// The last mark from `i` on before `end`. Not at `end`: whether a value starts after a `[`
    /// depends on the byte there (`]` closes the array), so that byte must be equal too.
    #[inline]
    fn last_mark_before(&self, i: usize, end: usize) -> usize {
        let r = self.reference;
        // `end` is within the bytes (they were not all equal), so its stride is indexed.
        let mut j = usize::from(r.strides[end / STRIDE]).max(i + 1);
        while r.marks.get(j).is_some_and(|m| (m.at as usize) < end) {
            j += 1;
        }
        j - 1
    }
}

/// The length of the longest common prefix of `a` and `b`, 16 bytes (one vector compare) at a
/// time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let len = a.len().min(b.len());
    let (a, b) = (&a[..len], &b[..len]);
    let mut done = 0;
    for (x, y) in a.chunks_exact(16).zip(b.chunks_exact(16)) {
        let x = u8x16::new(x.try_into().expect("16 bytes"));
        let y = u8x16::new(y.try_into().expect("16 bytes"));
        let differ = !x.cmp_eq(y).move_mask() & 0xffff;
        if differ != 0 {
            return done + differ.trailing_zeros() as usize;
        }
        done += 16;
    }
    done + a[done..]
        .iter()
        .zip(&b[done..])
        .take_while(|(x, y)| x == y)
        .count()
}

impl Scanner<'_> {
    /// True when the value at the current position (after whitespace) is a container a
    /// reference can describe.
    fn trackable(&mut self) -> Result<bool> {
        Ok(matches!(self.peek()?, b'{' | b'[') && self.depth + REGISTER_LEVELS <= MAX_SKIP_DEPTH)
    }

    /// [`Scanner::skip_value`], keeping the value as a reference when it is a container small
    /// and shallow enough.
    pub(crate) fn skip_recording(&mut self) -> Result<((usize, usize), Option<Reference>)> {
        if !self.trackable()? {
            return Ok((self.skip_value()?, None));
        }
        let start = self.pos;
        let mut rec = Recorder {
            start,
            marks: Vec::new(),
            strings: Vec::new(),
            refused: false,
        };
        self.skip_loop(&mut rec)?;
        let end = self.pos;
        let reference = (!rec.refused && end - start <= MAX_REFERENCE)
            .then(|| Reference::new(self.buf[start..end].into(), rec.marks.into(), rec.strings.into()));
        Ok(((start, end), reference))
    }

    /// [`Scanner::skip_value`] (same span, same errors) moving past what equals `reference` in
    /// one step; also gives the count of bytes found equal.
    pub(crate) fn skip_like(&mut self, reference: &Reference) -> Result<((usize, usize), usize)> {
        if !self.trackable()? {
            return Ok((self.skip_value()?, 0));
        }
        let start = self.pos;
        let mut follow = Follow {
            reference,
            input: self.buf,
            next: 0,
            wait: 0,
            backoff: 0,
            compared: 0,
        };
        self.skip_loop(&mut follow)?;
        Ok(((start, self.pos), follow.compared))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `new` skipped like `reference`, and skipped plainly: the same outcome.
    fn same_as_plain(reference: &str, new: &str) -> usize {
        let mut sc = Scanner::new(reference.as_bytes());
        let (_, r) = sc.skip_recording().unwrap();
        let r = r.expect("a reference");
        let plain = Scanner::new(new.as_bytes()).skip_value();
        let like = Scanner::new(new.as_bytes()).skip_like(&r);
        assert_eq!(
            plain.as_ref().copied().map_err(|e| (e.offset, e.msg)),
            like.as_ref().map(|x| x.0).map_err(|e| (e.offset, e.msg)),
            "{new}"
        );
        like.map_or(0, |x| x.1)
    }

    #[test]
    fn equal_subtrees_are_compared_not_scanned() {
        let doc = r#"{"a":{"b":[1,2,{"c":"d"}],"e":true},"f":"g"}"#;
        assert_eq!(same_as_plain(doc, doc), doc.len());
        // Whitespace after it is not part of it.
        assert_eq!(same_as_plain(doc, &format!("{doc}  ")), doc.len());
    }

    #[test]
    fn differences_are_scanned_and_the_rest_followed() {
        let reference =
            r#"{"name":"vm-1","spec":{"cpu":{"cores":1},"disks":[{"name":"a","size":"10Gi"}]},"tail":"x"}"#;
        // Values longer and shorter: the rest is found equal.
        for new in [
            r#"{"name":"vm-10","spec":{"cpu":{"cores":1},"disks":[{"name":"a","size":"10Gi"}]},"tail":"x"}"#,
            r#"{"name":"v","spec":{"cpu":{"cores":2},"disks":[{"name":"a","size":"10Gi"}]},"tail":"x"}"#,
            r#"{"name":"vm-22","spec":{"cpu":{"cores":1},"disks":[{"name":"bb","size":"10Gi"}]},"tail":"x"}"#,
        ] {
            let compared = same_as_plain(reference, new);
            assert!(compared > new.len() * 3 / 4, "{compared} of {new}");
        }
        // Another shape: the same outcome.
        for new in [
            r#"{"name":"vm-1","x":1,"spec":{"cpu":{"cores":1},"disks":[{"name":"a","size":"10Gi"}]},"tail":"x"}"#,
            r#"{"name":"vm-1","spec":{"cpu":{"cores":1},"disks":[]},"tail":"x"}"#,
            r#"{"name":["vm-1"],"spec":{"cpu":{"cores":1},"disks":[{"name":"a","size":"10Gi"}]},"tail":"x"}"#,
            r#"["vm-1",{"cpu":{"cores":1},"disks":[{"name":"a","size":"10Gi"}]},"tail","x"]"#,
            // A string that differs, then a key: the loop goes on from the string.
            r#"{"name":"vm-22","spek":{"cpu":{"cores":1},"disks":[{"name":"a","size":"10Gi"}]},"tail":"x"}"#,
            r#"{"name":"vm-2","spec":{"cpu":{"cores":1},"disks":[{"name":"a","size":"10Gi"}]},"tail":"x""#,
            r#"{"name":"vm-2\u0041","spec":{"cpu":{"cores":1},"disks":[{"name":"a","size":"10Gi"}]}}"#,
        ] {
            same_as_plain(reference, new);
        }
    }

    #[test]
    fn errors_are_where_a_plain_skip_finds_them() {
        let reference = r#"{"a":{"b":[1,2,{"c":"d"}],"e":true},"f":"g"}"#;
        for new in [
            r#"{"a":{"b":[1,2,{"c":"d"}],"e":tru},"f":"g"}"#,
            r#"{"a":{"b":[1,2,{"c":"d"}],"e":true},"f":"g""#,
            r#"{"a":{"b":[1,2,{"c":"d"}],"e":true},"f":"g"]"#,
            r#"{"a":{"b":[1,2,{"c":"d"}],"e":true},"f":"g"#,
            r#"{"a":{"b":[1,2,{"c":"d"}],"e":true},"f""#,
            r#"{"a":{"b":[1,2,{"c":"d"}}],"e":true},"f":"g"}"#,
            r#"{"a":{"b":[1,2,{"c":"\x"}],"e":true},"f":"g"}"#,
            r#"{"a":{"b":[1,2,{"c":"d"}],"e":true},"f":"g"}"#,
            r#"["a",{"b":[1,2,{"c":"d"}],"e":true},"f","g"]"#,
        ] {
            same_as_plain(reference, new);
        }
    }

    #[test]
    fn deep_or_large_subtrees_are_not_kept() {
        let deep = format!("{}{}", "[".repeat(70), "]".repeat(70));
        assert!(
            Scanner::new(deep.as_bytes())
                .skip_recording()
                .unwrap()
                .1
                .is_none()
        );
        let large = format!("[{}1]", "1,".repeat(MAX_REFERENCE));
        assert!(
            Scanner::new(large.as_bytes())
                .skip_recording()
                .unwrap()
                .1
                .is_none()
        );
        let shallow = format!("{}{}", "[".repeat(60), "]".repeat(60));
        let r = Scanner::new(shallow.as_bytes())
            .skip_recording()
            .unwrap()
            .1
            .unwrap();
        // A deeper input is skipped plainly past the reference.
        same_as_plain(&shallow, &format!("{}{}", "[".repeat(200), "]".repeat(200)));
        assert_eq!(*r.bytes, *shallow.as_bytes());
    }

    #[test]
    fn common_prefix_counts_equal_bytes() {
        let a = b"0123456789abcdef0123456789abcdefXYZ";
        for n in 0..a.len() {
            let mut b = a.to_vec();
            b[n] = b'!';
            assert_eq!(common_prefix(a, &b), n);
            assert_eq!(common_prefix(&a[..n], a), n);
        }
    }
}
