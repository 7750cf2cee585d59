//! `rules diff OLD NEW`: which names two rule sets map differently.

use std::collections::BTreeMap;

use super::Rules;

/// What a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum NameKind {
    /// An API group.
    Group,
    /// A kind or list kind (`group/Kind`).
    Kind,
    /// A plural, singular or short name (`group/name`).
    Resource,
    /// A label key (or `key=value`, or `prefix/*`).
    Label,
    /// An annotation key.
    Annotation,
    /// A finalizer.
    Finalizer,
}

impl NameKind {
    /// The word printed for it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            NameKind::Group => "group",
            NameKind::Kind => "kind",
            NameKind::Resource => "resource",
            NameKind::Label => "label",
            NameKind::Annotation => "annotation",
            NameKind::Finalizer => "finalizer",
        }
    }
}

/// Every original name the rules map, with what it maps to.
pub(crate) fn mappings(rules: &Rules) -> BTreeMap<(NameKind, String), String> {
    let mut m = BTreeMap::new();
    for g in rules.groups() {
        m.insert((NameKind::Group, g.original.clone()), g.renamed.clone());
        for r in g.resources.values() {
            for k in [&r.kind, &r.list_kind].into_iter().filter(|k| !k.is_empty()) {
                m.insert(
                    (NameKind::Kind, format!("{}/{k}", g.original)),
                    format!("{}/{}{k}", g.renamed, rules.kind_prefix),
                );
            }
            for n in [&r.plural, &r.singular].into_iter().filter(|n| !n.is_empty()) {
                m.insert(
                    (NameKind::Resource, format!("{}/{n}", g.original)),
                    format!("{}/{}{n}", g.renamed, rules.resource_prefix),
                );
            }
            for s in r.short_names.iter().flatten() {
                m.insert(
                    (NameKind::Resource, format!("{}/{s}", g.original)),
                    format!("{}/{}{s}", g.renamed, rules.short_name_prefix),
                );
            }
        }
    }
    for (kind, names) in [
        (NameKind::Label, &rules.labels),
        (NameKind::Annotation, &rules.annotations),
        (NameKind::Finalizer, &rules.finalizers),
    ] {
        for (o, r) in names.mappings() {
            m.insert((kind, o), r);
        }
    }
    m
}

/// One line per name that maps differently: `- kind name -> old` and/or `+ kind name -> new`
/// (a name only one side maps has only that side's line). Empty when the rule sets map every
/// name alike.
pub fn diff(old: &Rules, new: &Rules) -> Vec<String> {
    let (a, b) = (mappings(old), mappings(new));
    let mut keys: Vec<&(NameKind, String)> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = Vec::new();
    for k in keys {
        let (x, y) = (a.get(k), b.get(k));
        if x == y {
            continue;
        }
        if let Some(x) = x {
            out.push(format!("- {} {} -> {x}", k.0.as_str(), k.1));
        }
        if let Some(y) = y {
            out.push(format!("+ {} {} -> {y}", k.0.as_str(), k.1));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Source;

    fn rules(text: &str) -> Rules {
        Rules::parse(&[Source { name: "t.yaml", text }]).expect("valid")
    }

    const A: &str = "kindPrefix: X\nresourceTypePrefix: x\nshortNamePrefix: x\nrules:\n  a.example.com:\n    groupRule: {group: a.example.com, versions: [v1], preferredVersion: v1, renamed: a.internal.example.com}\n    resourceRules:\n      things: {kind: Thing, listKind: ThingList, plural: things, singular: thing, shortNames: [th], versions: [v1], preferredVersion: v1}\nlabels:\n  prefixes:\n    - {original: a.example.com, renamed: a.internal.example.com}\nfinalizers:\n  names:\n    - {original: a.example.com/f, renamed: a.internal.example.com/f}\n";

    #[test]
    fn same_rules_no_lines() {
        assert!(diff(&rules(A), &rules(A)).is_empty());
        let b = Rules::builtin_kubevirt();
        assert!(diff(&b, &b).is_empty());
        assert!(mappings(&b).len() > 50);
    }

    #[test]
    fn changed_names() {
        let b = A
            .replace(
                "renamed: a.internal.example.com}\n    resourceRules",
                "renamed: b.internal.example.com}\n    resourceRules",
            )
            .replace(
                "- {original: a.example.com/f, renamed: a.internal.example.com/f}",
                "- {original: a.example.com/g, renamed: a.internal.example.com/g}",
            );
        let d = diff(&rules(A), &rules(&b));
        assert!(
            d.contains(&"- group a.example.com -> a.internal.example.com".to_owned()),
            "{d:#?}"
        );
        assert!(
            d.contains(&"+ group a.example.com -> b.internal.example.com".to_owned()),
            "{d:#?}"
        );
        assert!(
            d.contains(&"- kind a.example.com/Thing -> a.internal.example.com/XThing".to_owned()),
            "{d:#?}"
        );
        assert!(
            d.contains(&"+ resource a.example.com/th -> b.internal.example.com/xth".to_owned()),
            "{d:#?}"
        );
        assert!(
            d.contains(&"- finalizer a.example.com/f -> a.internal.example.com/f".to_owned()),
            "{d:#?}"
        );
        assert!(
            d.contains(&"+ finalizer a.example.com/g -> a.internal.example.com/g".to_owned()),
            "{d:#?}"
        );
        // The label prefix did not change.
        assert!(!d.iter().any(|l| l.contains(" label ")), "{d:#?}");
    }
}
