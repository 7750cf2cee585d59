//! What the parts make of their measurements: best runs, medians, rates, and the load average
//! printed along the way.

use kube_api_rewriter_testkit::procfs;

use crate::client::Read;

/// The fastest of the runs.
pub(crate) fn best(v: &[Read]) -> Read {
    *v.iter()
        .min_by(|a, b| a.secs.total_cmp(&b.secs))
        .expect("at least one run")
}

/// The median (sorts `v`): for an even count, the mean of the middle two.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[m - 1] + v[m]) / 2.0
    } else {
        v[m]
    }
}

/// Megabytes per second of a run.
pub(crate) fn mbps(r: Read) -> f64 {
    r.bytes as f64 / 1e6 / r.secs
}

/// The machine's load averages (1, 5, 15 minutes), or `?`.
pub(crate) fn loadavg() -> String {
    procfs::loadavg().unwrap_or_else(|| "?".into())
}

/// Seconds with three decimals.
pub(crate) fn secs(s: f64) -> String {
    format!("{s:.3} s")
}
