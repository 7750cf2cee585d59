//! Group, kind, version and resource names: the renames every special kind, the walker, the
//! protobuf rewriter and patches share.

use serde_json::Value;

use crate::Direction;
use crate::rules::Rules;

/// Rewrites an (`apiVersion`, `kind`) pair; `None` where a part is unchanged.
pub(crate) fn rewrite_gvk(
    rules: &Rules,
    dir: Direction,
    api_version: Option<&str>,
    kind: Option<&str>,
    group_hint: Option<&str>,
) -> (Option<String>, Option<String>) {
    let Some(av) = api_version else {
        return (None, None);
    };
    let (group, version) = av.split_once('/').unwrap_or(("", av));
    let (g, k) = rewrite_group_kind(rules, dir, Some(group), kind, group_hint);
    let new_av = g.map(|g| {
        let grp = match dir {
            Direction::Rename => rules.group(group),
            Direction::Restore => rules.groups().iter().find(|x| x.original == g),
        };
        let v = match (dir, grp) {
            (Direction::Rename, Some(grp)) => grp.rename_version(version),
            (Direction::Restore, Some(grp)) => grp.restore_version(version),
            _ => version,
        };
        format!("{g}/{v}")
    });
    (new_av, k)
}

/// Rewrites a (`group`, `kind`) pair; `None` where a part is unchanged.
pub(crate) fn rewrite_group_kind(
    rules: &Rules,
    dir: Direction,
    group: Option<&str>,
    kind: Option<&str>,
    group_hint: Option<&str>,
) -> (Option<String>, Option<String>) {
    let Some(group) = group else { return (None, None) };
    match dir {
        Direction::Rename => {
            let Some(grp) = rules.group(group) else {
                return (None, None);
            };
            let k = kind
                .filter(|k| grp.resource_by_kind(k).is_some())
                .map(|k| format!("{}{k}", rules.kind_prefix));
            (Some(grp.renamed.clone()), k)
        }
        Direction::Restore => match restore_group_kind(rules, group, kind, group_hint) {
            Some((g, k)) => (Some(g.original.clone()), k.map(str::to_owned)),
            None => (None, None),
        },
    }
}

/// A renamed (`group`, `kind`) pair restored without allocating: the original group and, when
/// the kind is one of its renamed kinds, the original kind. `None` for groups not renamed.
pub(crate) fn restore_group_kind<'r, 'k>(
    rules: &'r Rules,
    group: &str,
    kind: Option<&'k str>,
    group_hint: Option<&str>,
) -> Option<(&'r crate::rules::Group, Option<&'k str>)> {
    let first = rules.groups_renamed_to(group).next()?;
    let Some(kind) = kind else {
        let hinted = group_hint
            .and_then(|h| rules.group(h))
            .filter(|g| g.renamed == group);
        return Some((hinted.unwrap_or(first), None));
    };
    let stripped = kind.strip_prefix(rules.kind_prefix.as_str());
    Some(match rules.group_with_kind(group, stripped.unwrap_or(kind)) {
        // The group has the kind, so a prefixed kind restores to it.
        Some(g) => (g, stripped),
        None => (first, None),
    })
}

/// Rewrites a bare group name.
pub(crate) fn rewrite_group<'s>(rules: &'s Rules, dir: Direction, g: &'s str, hint: Option<&str>) -> &'s str {
    match dir {
        Direction::Rename => rules.rename_group(g).unwrap_or(g),
        Direction::Restore => {
            if let Some(h) = hint.and_then(|h| rules.group(h)).filter(|x| x.renamed == g) {
                return &h.original;
            }
            rules
                .restore_group_for(g, None)
                .map_or(g, |x| x.original.as_str())
        }
    }
}

/// Rewrites a resource name (`plural` or `plural/sub`) of a group given on the input side.
pub(crate) fn rewrite_resource(
    rules: &Rules,
    dir: Direction,
    input_group: &str,
    res: &str,
) -> Option<String> {
    let (plural, sub) = match res.split_once('/') {
        Some((p, s)) => (p, Some(s)),
        None => (res, None),
    };
    let new = match dir {
        Direction::Rename => {
            let g = rules.group(input_group)?;
            g.resources.get(plural)?;
            format!("{}{plural}", rules.resource_prefix)
        }
        Direction::Restore => {
            let stripped = plural.strip_prefix(rules.resource_prefix.as_str())?;
            rules
                .groups_renamed_to(input_group)
                .find(|g| g.resources.contains_key(stripped))?;
            stripped.to_owned()
        }
    };
    Some(match sub {
        Some(s) => format!("{new}/{s}"),
        None => new,
    })
}

/// An RBAC `PolicyRule` or an admission `RuleWithOperations`: groups and resources together.
pub(crate) fn policy_rule(rules: &Rules, dir: Direction, v: &mut Value) -> bool {
    let Some(obj) = v.as_object_mut() else {
        return false;
    };
    let groups: Vec<String> = obj
        .get("apiGroups")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|g| g.as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let ruled = |g: &str| match dir {
        Direction::Rename => rules.group(g).is_some(),
        Direction::Restore => rules.is_renamed_group(g),
    };
    if !groups.iter().any(|g| ruled(g) || g == "*") {
        return false;
    }
    let mut changed = false;
    // Resources: renamed when some ruled group of the rule (or any, with `*`) has them.
    if let Some(res) = obj.get_mut("resources").and_then(Value::as_array_mut) {
        for r in res.iter_mut() {
            let Some(s) = r.as_str() else { continue };
            if s == "*" || s.starts_with("*/") {
                continue;
            }
            let new = groups
                .iter()
                .filter(|g| ruled(g))
                .find_map(|g| rewrite_resource(rules, dir, g, s))
                .or_else(|| {
                    if !groups.iter().any(|g| g == "*") {
                        return None;
                    }
                    let pick = match dir {
                        Direction::Rename => {
                            let plural = s.split('/').next().unwrap_or(s);
                            rules
                                .resource_by_plural_any(plural)
                                .map(|(g, _)| g.original.clone())
                        }
                        Direction::Restore => {
                            let plural = s.split('/').next().unwrap_or(s);
                            let stripped = plural.strip_prefix(rules.resource_prefix.as_str())?;
                            rules
                                .resource_by_plural_any(stripped)
                                .map(|(g, _)| g.renamed.clone())
                        }
                    }?;
                    rewrite_resource(rules, dir, &pick, s)
                });
            if let Some(n) = new {
                *r = Value::String(n);
                changed = true;
            }
        }
    }
    // Groups: each ruled group is mapped; a renamed group shared by several originals fans out.
    if let Some(arr) = obj.get_mut("apiGroups").and_then(Value::as_array_mut) {
        let mut out: Vec<Value> = Vec::new();
        for g in arr.iter() {
            let Some(s) = g.as_str() else {
                out.push(g.clone());
                continue;
            };
            let mapped: Vec<String> = match dir {
                Direction::Rename => rules
                    .rename_group(s)
                    .map(|x| vec![x.to_owned()])
                    .unwrap_or_default(),
                Direction::Restore => rules.groups_renamed_to(s).map(|x| x.original.clone()).collect(),
            };
            if mapped.is_empty() {
                out.push(g.clone());
            } else {
                changed = true;
                for m in mapped {
                    if !out.iter().any(|o| o.as_str() == Some(&m)) {
                        out.push(Value::String(m));
                    }
                }
            }
        }
        *arr = out;
    }
    changed
}

/// `resourceAttributes` of access reviews: `group`, `version`, `resource` together.
pub(crate) fn resource_attributes(rules: &Rules, dir: Direction, v: &mut Value) -> bool {
    let Some(obj) = v.as_object_mut() else {
        return false;
    };
    let Some(group) = obj.get("group").and_then(Value::as_str).map(str::to_owned) else {
        return false;
    };
    let resource = obj
        .get("resource")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let (grp, new_group) = match dir {
        Direction::Rename => match rules.group(&group) {
            Some(g) => (g, g.renamed.clone()),
            None => return false,
        },
        Direction::Restore => {
            let stripped = resource
                .strip_prefix(rules.resource_prefix.as_str())
                .unwrap_or(&resource);
            let Some(g) = rules
                .groups_renamed_to(&group)
                .find(|g| g.resources.contains_key(stripped))
                .or_else(|| rules.groups_renamed_to(&group).next())
            else {
                return false;
            };
            (g, g.original.clone())
        }
    };
    if !resource.is_empty()
        && let Some(n) = rewrite_resource(rules, dir, &group, &resource)
    {
        obj.insert("resource".into(), Value::String(n));
    }
    if let Some(v) = obj.get("version").and_then(Value::as_str) {
        let nv = match dir {
            Direction::Rename => grp.rename_version(v),
            Direction::Restore => grp.restore_version(v),
        }
        .to_owned();
        obj.insert("version".into(), Value::String(nv));
    }
    obj.insert("group".into(), Value::String(new_group));
    true
}
