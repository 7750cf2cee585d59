//! The differences expected between two correct sidecars: each names what it matches and why
//! a client cannot tell. A difference no matcher names is reported as unexpected.

use crate::compare::{Difference, Facet};
use crate::corpus::Case;

pub struct Matcher {
    pub name: &'static str,
    pub reason: &'static str,
    applies: fn(&Case, &Difference) -> bool,
}

impl Matcher {
    pub fn matches(&self, case: &Case, d: &Difference) -> bool {
        (self.applies)(case, d)
    }
}

/// The table of expected differences.
pub const EXPECTED: &[Matcher] = &[
    Matcher {
        name: "key order",
        reason: "a sidecar that re-marshals JSON may order object keys otherwise; JSON objects are unordered and every Kubernetes client decodes by key",
        applies: |_, d| d.facet == Facet::KeyOrder,
    },
    Matcher {
        name: "watch framing",
        reason: "watch events with or without a newline between them; client-go, kubectl and kube-rs decode a stream of JSON documents either way",
        applies: |_, d| d.facet == Facet::WatchFraming,
    },
    Matcher {
        name: "body framing",
        reason: "a body sent chunked or with a Content-Length is the same body; HTTP framing, not content",
        applies: |_, d| d.facet == Facet::Header && d.detail.starts_with("framing:"),
    },
];

/// The matcher that expects `d`, if any.
pub fn expected(case: &Case, d: &Difference) -> Option<&'static Matcher> {
    EXPECTED.iter().find(|m| m.matches(case, d))
}
