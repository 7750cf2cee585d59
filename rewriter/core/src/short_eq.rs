//! Equality of short byte strings, inline.
//!
//! The walk compares many names, keys and remembered values of a few dozen bytes. `[u8] ==
//! [u8]` calls libc's `memcmp` for each (through the PLT, with its own length dispatch), which
//! costs more than the compare itself at these lengths. Two words loaded from both ends of the
//! strings cover every length up to 32 bytes in two compares; longer ones still go to `memcmp`.

/// True when `a` and `b` hold the same bytes.
#[inline]
pub(crate) fn eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0 => true,
        // Bytes 0, n/2 and n-1 are every byte for 1 to 3.
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, n - 4) == word::<4>(b, n - 4),
        8..=16 => word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, n - 8) == word::<8>(b, n - 8),
        17..=32 => word::<16>(a, 0) == word::<16>(b, 0) && word::<16>(a, n - 16) == word::<16>(b, n - 16),
        _ => a == b,
    }
}

/// True when `haystack` starts with `prefix`.
#[inline]
pub(crate) fn starts_with(haystack: &[u8], prefix: &[u8]) -> bool {
    haystack.get(..prefix.len()).is_some_and(|h| eq(h, prefix))
}

/// True when `haystack` ends with `suffix`.
#[inline]
pub(crate) fn ends_with(haystack: &[u8], suffix: &[u8]) -> bool {
    haystack
        .len()
        .checked_sub(suffix.len())
        .is_some_and(|at| eq(&haystack[at..], suffix))
}

/// The `N` bytes of `s` at `at`, which the caller has checked are there.
#[inline(always)]
fn word<const N: usize>(s: &[u8], at: usize) -> [u8; N] {
    let mut w = [0; N];
    w.copy_from_slice(&s[at..at + N]);
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_slice_equality_at_every_length_and_difference() {
        for n in 0..=40usize {
            let a: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(7) ^ 0x5a).collect();
            assert!(eq(&a, &a.clone()), "n={n}");
            for i in 0..n {
                let mut b = a.clone();
                b[i] ^= 1;
                assert!(!eq(&a, &b), "n={n} differing at {i}");
            }
            assert!(!eq(&a, &[a.as_slice(), b"x"].concat()), "n={n} against n+1");
        }
    }

    #[test]
    fn prefixes_and_suffixes() {
        assert!(starts_with(b"kubevirt.io/name", b"kubevirt.io/"));
        assert!(!starts_with(b"kubevirt.io/name", b"kubevirt.iox"));
        assert!(!starts_with(b"kube", b"kubevirt"));
        assert!(starts_with(b"", b""));
        assert!(ends_with(b"kubevirt.io/name", b"/name"));
        assert!(!ends_with(b"kubevirt.io/name", b"/namf"));
        assert!(!ends_with(b"name", b"a name"));
    }
}
