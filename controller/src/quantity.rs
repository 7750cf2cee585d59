//! Kubernetes resource quantities (`500m`, `1`, `256Mi`, `1.5Gi`) compared by value. Go clients
//! write a quantity in its canonical form, so what KubeVirt copies from a VM's template into its
//! instance may be spelt differently (`1000m` becomes `1`, `1024Mi` becomes `1Gi`) and still be
//! the same amount. Written here because k8s-openapi's `Quantity` is a string without
//! arithmetic and no maintained crate parses the format alone.

/// The amount `s` stands for, in thousandths of its unit; `None` if `s` is not a quantity this
/// reads (signs and exponents such as `1e3` are not: the controller writes neither) or the
/// amount is not a whole number of thousandths.
pub(crate) fn millis(s: &str) -> Option<i128> {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let scale: i128 = match suffix {
        "m" => 1,
        "" => 1_000,
        "k" => 1_000_000,
        "M" => 1_000_000_000,
        "G" => 1_000_000_000_000,
        "T" => 1_000_000_000_000_000,
        "P" => 1_000_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000_000,
        "Ki" => 1_000 << 10,
        "Mi" => 1_000 << 20,
        "Gi" => 1_000 << 30,
        "Ti" => 1_000 << 40,
        "Pi" => 1_000 << 50,
        "Ei" => 1_000 << 60,
        _ => return None,
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && frac.is_empty() || frac.contains('.') || frac.len() > 18 {
        return None;
    }
    let digits = |d: &str| {
        if d.is_empty() {
            Some(0)
        } else {
            d.parse::<i128>().ok()
        }
    };
    let value = digits(whole)?.checked_mul(scale)?;
    let den = 10_i128.pow(u32::try_from(frac.len()).ok()?);
    let part = digits(frac)?.checked_mul(scale)?;
    (part % den == 0).then(|| value + part / den)
}

/// Whether `a` and `b` are the same quantity, however spelt.
pub(crate) fn same(a: &str, b: &str) -> bool {
    a == b || matches!((millis(a), millis(b)), (Some(x), Some(y)) if x == y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_amount_are_the_same() {
        for (a, b) in [
            ("1000m", "1"),
            ("1024Mi", "1Gi"),
            ("0.5", "500m"),
            ("1.5Gi", "1536Mi"),
            ("2k", "2000"),
            ("256Mi", "268435456"),
        ] {
            assert!(same(a, b), "{a} = {b}");
        }
        for (a, b) in [("1", "1m"), ("1Gi", "1G"), ("500m", "0.4"), ("web", "1")] {
            assert!(!same(a, b), "{a} != {b}");
        }
    }

    #[test]
    fn what_is_not_a_quantity_reads_as_none() {
        for s in [
            "",
            ".",
            "1.2.3",
            "abc",
            "1x",
            "-1",
            "1e3",
            "1.0000000000000000001",
        ] {
            assert_eq!(millis(s), None, "{s:?}");
        }
        assert_eq!(millis("1.5m"), None, "no thousandth of a thousandth");
    }
}
