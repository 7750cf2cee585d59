//! `Status` bodies (errors): the renamed group, resource and kind in `details` and `message`.

use serde_json::Value;

use crate::Direction;
use crate::rules::Rules;

/// Restores the names in a Status; renaming leaves it alone (clients do not send Status).
pub(crate) fn restore(rules: &Rules, dir: Direction, v: &mut Value) -> bool {
    if dir == Direction::Rename {
        return false;
    }
    let mut changed = false;
    if let Some(details) = v.get_mut("details").and_then(Value::as_object_mut) {
        let group = details.get("group").and_then(Value::as_str).map(str::to_owned);
        let kind = details.get("kind").and_then(Value::as_str).map(str::to_owned);
        if let Some(g) = group.as_deref().filter(|g| rules.is_renamed_group(g)) {
            let stripped_kind = kind.as_deref().map(|k| {
                k.strip_prefix(rules.kind_prefix.as_str())
                    .or_else(|| k.strip_prefix(rules.resource_prefix.as_str()))
                    .unwrap_or(k)
            });
            let grp = rules
                .groups_renamed_to(g)
                .find(|grp| {
                    stripped_kind
                        .is_some_and(|k| grp.resources.contains_key(k) || grp.resource_by_kind(k).is_some())
                })
                .or_else(|| rules.groups_renamed_to(g).next());
            if let Some(grp) = grp {
                details.insert("group".into(), Value::String(grp.original.clone()));
                if let (Some(k), Some(sk)) = (kind.as_deref(), stripped_kind)
                    && k != sk
                    && (grp.resources.contains_key(sk) || grp.resource_by_kind(sk).is_some())
                {
                    details.insert("kind".into(), Value::String(sk.to_owned()));
                }
                changed = true;
            }
        }
    }
    let mut texts: Vec<&mut Value> = Vec::new();
    if let Some(obj) = v.as_object_mut() {
        let (message, details): (Vec<_>, Vec<_>) = obj
            .iter_mut()
            .filter(|(k, _)| *k == "message" || *k == "details")
            .partition(|(k, _)| *k == "message");
        texts.extend(message.into_iter().map(|(_, m)| m));
        for (_, d) in details {
            for cause in d
                .get_mut("causes")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(c) = cause.as_object_mut() {
                    texts.extend(
                        c.iter_mut()
                            .filter(|(k, _)| *k == "message" || *k == "field")
                            .map(|(_, t)| t),
                    );
                }
            }
        }
    }
    for t in texts {
        if let Some(old) = t.as_str() {
            let new = restore_text(rules, old);
            if new != old {
                *t = Value::String(new);
                changed = true;
            }
        }
    }
    changed
}

/// Replaces renamed resource, kind and group names in free text, whole words only.
pub(crate) fn restore_text(rules: &Rules, text: &str) -> String {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for g in rules.groups() {
        for r in g.resources.values() {
            let rp = &rules.resource_prefix;
            let kp = &rules.kind_prefix;
            pairs.push((
                format!("{rp}{}.{}", r.plural, g.renamed),
                format!("{}.{}", r.plural, g.original),
            ));
            pairs.push((
                format!("{kp}{}.{}", r.kind, g.renamed),
                format!("{}.{}", r.kind, g.original),
            ));
            pairs.push((format!("{rp}{}", r.plural), r.plural.clone()));
            pairs.push((format!("{kp}{}", r.kind), r.kind.clone()));
        }
        if rules.groups_renamed_to(&g.renamed).count() == 1 {
            pairs.push((g.renamed.clone(), g.original.clone()));
        }
    }
    pairs.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
    let mut out = text.to_owned();
    for (from, to) in &pairs {
        if out.contains(from.as_str()) {
            out = replace_words(&out, from, to);
        }
    }
    // Label, annotation and finalizer keys (`.metadata.labels.kubevirt.internal…/x` in field
    // paths of apply conflicts), longest prefix first.
    let mut prefixes: Vec<(String, String)> = [&rules.labels, &rules.annotations, &rules.finalizers]
        .iter()
        .flat_map(|r| r.renamed_prefixes())
        .map(|(renamed, original)| (format!("{renamed}/"), format!("{original}/")))
        .collect();
    prefixes.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
    prefixes.dedup();
    for (from, to) in &prefixes {
        if out.contains(from.as_str()) {
            out = replace_prefixes(&out, from, to);
        }
    }
    out
}

/// Replaces `from` where it starts a name (not preceded by a letter, digit or `-`).
fn replace_prefixes(s: &str, from: &str, to: &str) -> String {
    replace_where(s, from, to, |before, _| {
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

/// Replaces `from` where it is a whole name (a trailing `.` ending a sentence is not part of it).
fn replace_words(s: &str, from: &str, to: &str) -> String {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    replace_where(s, from, to, |before, after| {
        let mut chars = after.chars();
        let next = chars.next();
        let sentence_end = next == Some('.') && !word(chars.next());
        let longer_name = word(next) && !sentence_end;
        !word(before) && !longer_name
    })
}

/// Replaces each `from` for which `ok(char before, text after)` holds.
fn replace_where(s: &str, from: &str, to: &str, ok: impl Fn(Option<char>, &str) -> bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(from) {
        let before = rest[..i].chars().next_back().or_else(|| out.chars().next_back());
        out.push_str(&rest[..i]);
        rest = &rest[i + from.len()..];
        out.push_str(if ok(before, rest) { to } else { from });
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restores_messages_and_details() {
        let rules = Rules::builtin_kubevirt();
        let mut v: Value = serde_json::from_str(
            r#"{"kind":"Status","apiVersion":"v1","message":"internalvirtualizationvirtualmachines.internal.virtualization.deckhouse.io is forbidden: User \"user1\" cannot list resource \"internalvirtualizationvirtualmachines\" in API group \"internal.virtualization.deckhouse.io\" in the namespace \"bulk\"","details":{"group":"internal.virtualization.deckhouse.io","kind":"internalvirtualizationvirtualmachines"},"code":403}"#,
        )
        .unwrap();
        assert!(restore(&rules, Direction::Restore, &mut v));
        assert_eq!(
            v["message"],
            "virtualmachines.kubevirt.io is forbidden: User \"user1\" cannot list resource \"virtualmachines\" in API group \"kubevirt.io\" in the namespace \"bulk\""
        );
        assert_eq!(v["details"]["group"], "kubevirt.io");
        assert_eq!(v["details"]["kind"], "virtualmachines");
    }

    #[test]
    fn restores_label_keys_in_apply_conflicts() {
        let rules = Rules::builtin_kubevirt();
        let mut v: Value = serde_json::from_str(
            r#"{"kind":"Status","apiVersion":"v1","message":"Apply failed with 1 conflict: conflict with \"kubectl\": .metadata.labels.kubevirt.internal.virtualization.deckhouse.io/created-by","reason":"Conflict","details":{"causes":[{"reason":"FieldManagerConflict","message":"conflict with \"kubectl\"","field":".metadata.labels.vm.kubevirt.internal.virtualization.deckhouse.io/name"}]},"code":409}"#,
        )
        .unwrap();
        assert!(restore(&rules, Direction::Restore, &mut v));
        assert_eq!(
            v["message"],
            "Apply failed with 1 conflict: conflict with \"kubectl\": .metadata.labels.kubevirt.io/created-by"
        );
        assert_eq!(
            v["details"]["causes"][0]["field"],
            ".metadata.labels.vm.kubevirt.io/name"
        );
    }

    #[test]
    fn leaves_longer_words_alone() {
        let rules = Rules::builtin_kubevirt();
        let t = "xinternalvirtualizationvirtualmachines internalvirtualizationvirtualmachinesx";
        assert_eq!(restore_text(&rules, t), t);
    }
}
