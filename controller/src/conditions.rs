//! Conditions as `meta/v1` `Condition` defines them: `lastTransitionTime` moves only when the
//! status does.

use k8s_openapi::jiff::Timestamp;

use crate::resources::Condition;

/// `True` or `False`.
pub fn status_str(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// Now, as `lastTransitionTime` writes it (RFC 3339, seconds).
pub fn now() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A condition of `type_`, keeping the old `lastTransitionTime` from `old` when the status did
/// not change. `message` is never empty: a custom resource's empty string can be read back as
/// `null`, which a `string` field rejects.
pub fn condition(
    old: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: &str,
) -> Condition {
    let message = message.into();
    debug_assert!(!message.is_empty(), "{type_}: empty message");
    let status = status_str(status);
    let last_transition_time = old
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or_else(|| now.to_owned(), |c| c.last_transition_time.clone());
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time,
        observed_generation: generation,
    }
}

/// The condition of `type_` in `conditions`.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_with_the_status_only() {
        let c1 = condition(&[], "Running", true, "A", "m", Some(1), "t1");
        assert_eq!(c1.last_transition_time, "t1");
        let c2 = condition(
            std::slice::from_ref(&c1),
            "Running",
            true,
            "B",
            "m",
            Some(2),
            "t2",
        );
        assert_eq!(
            (c2.last_transition_time.as_str(), c2.reason.as_str()),
            ("t1", "B")
        );
        let c3 = condition(&[c2], "Running", false, "C", "m3", Some(2), "t3");
        assert_eq!(
            (c3.last_transition_time.as_str(), c3.status.as_str()),
            ("t3", "False")
        );
        assert!(now().ends_with('Z') && now().len() == 20, "{}", now());
    }
}
