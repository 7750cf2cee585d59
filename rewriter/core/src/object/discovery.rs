//! Discovery documents: `APIGroupList`, `APIGroup`, `APIResourceList` and the aggregated
//! `APIGroupDiscoveryList` (apidiscovery.k8s.io v2 and v2beta1).
//!
//! Clients never send these, so only restoring changes them.

use serde_json::{Map, Value};

use crate::Direction;
use crate::rules::{Group, Rules};

/// Restores a discovery document in place; true if anything changed.
pub(crate) fn rewrite(rules: &Rules, dir: Direction, v: &mut Value, hint: Option<&str>) -> bool {
    if dir == Direction::Rename {
        return false;
    }
    match v.get("kind").and_then(Value::as_str) {
        Some("APIGroupList") => group_list(rules, v),
        Some("APIGroup") => group(rules, v, hint),
        Some("APIResourceList") => resource_list(rules, v, hint),
        Some("APIGroupDiscoveryList") => aggregated(rules, v),
        _ => false,
    }
}

fn set_group_versions(obj: &mut Map<String, Value>, g: &Group) {
    obj.insert("name".into(), Value::String(g.original.clone()));
    let fix = |gv: &mut Value| {
        if let Some(o) = gv.as_object_mut() {
            let v = o
                .get("version")
                .and_then(Value::as_str)
                .map(|v| g.restore_version(v).to_owned());
            if let Some(v) = v {
                o.insert(
                    "groupVersion".into(),
                    Value::String(format!("{}/{v}", g.original)),
                );
                o.insert("version".into(), Value::String(v));
            }
        }
    };
    if let Some(vs) = obj.get_mut("versions").and_then(Value::as_array_mut) {
        vs.iter_mut().for_each(fix);
    }
    if let Some(p) = obj.get_mut("preferredVersion") {
        fix(p);
    }
}

fn group_list(rules: &Rules, v: &mut Value) -> bool {
    let Some(groups) = v.get_mut("groups").and_then(Value::as_array_mut) else {
        return false;
    };
    let mut out = Vec::with_capacity(groups.len());
    let mut changed = false;
    for g in groups.drain(..) {
        let name = g.get("name").and_then(Value::as_str).unwrap_or("").to_owned();
        if rules.group(&name).is_some() {
            changed = true; // an original group served upstream: hidden, ours takes its name
            continue;
        }
        if rules.is_renamed_group(&name) {
            changed = true;
            for grp in rules.groups_renamed_to(&name) {
                let mut item = g.clone();
                if let Some(o) = item.as_object_mut() {
                    set_group_versions(o, grp);
                }
                out.push(item);
            }
            continue;
        }
        out.push(g);
    }
    *groups = out;
    changed
}

fn pick<'r>(rules: &'r Rules, renamed: &str, hint: Option<&str>) -> Option<&'r Group> {
    hint.and_then(|h| rules.group(h))
        .filter(|g| g.renamed == renamed)
        .or_else(|| rules.groups_renamed_to(renamed).next())
}

fn group(rules: &Rules, v: &mut Value, hint: Option<&str>) -> bool {
    let name = v.get("name").and_then(Value::as_str).unwrap_or("").to_owned();
    let Some(g) = pick(rules, &name, hint) else {
        return false;
    };
    if let Some(o) = v.as_object_mut() {
        set_group_versions(o, g);
    }
    true
}

/// Restores one resource entry of a renamed group; false if it has no rule in `g`.
fn restore_resource_fields(rules: &Rules, g: &Group, o: &mut Map<String, Value>, name_key: &str) -> bool {
    let Some(name) = o.get(name_key).and_then(Value::as_str).map(str::to_owned) else {
        return false;
    };
    let (plural, sub) = match name.split_once('/') {
        Some((p, s)) => (p.to_owned(), Some(s.to_owned())),
        None => (name.clone(), None),
    };
    let Some(stripped) = plural.strip_prefix(rules.resource_prefix.as_str()) else {
        return false;
    };
    let Some(r) = g.resources.get(stripped) else {
        return false;
    };
    let new_name = match sub {
        Some(s) => format!("{stripped}/{s}"),
        None => stripped.to_owned(),
    };
    o.insert(name_key.into(), Value::String(new_name));
    if let Some(k) = o.get("kind").and_then(Value::as_str)
        && let Some(sk) = k.strip_prefix(rules.kind_prefix.as_str())
        && g.resource_by_kind(sk).is_some()
    {
        o.insert("kind".into(), Value::String(sk.to_owned()));
    }
    for key in ["singularName", "singularResource"] {
        if let Some(s) = o.get(key).and_then(Value::as_str)
            && let Some(x) = s.strip_prefix(rules.resource_prefix.as_str())
        {
            o.insert(key.into(), Value::String(x.to_owned()));
        }
    }
    if let Some(sn) = o.get_mut("shortNames").and_then(Value::as_array_mut) {
        for s in sn.iter_mut() {
            if let Some(x) = s
                .as_str()
                .and_then(|x| x.strip_prefix(rules.short_name_prefix.as_str()))
            {
                *s = Value::String(x.to_owned());
            }
        }
    }
    if o.contains_key("categories") {
        o.insert("categories".into(), serde_json::json!(r.categories));
    }
    true
}

fn resource_list(rules: &Rules, v: &mut Value, hint: Option<&str>) -> bool {
    let Some(gv) = v.get("groupVersion").and_then(Value::as_str).map(str::to_owned) else {
        return false;
    };
    let Some((gname, ver)) = gv.split_once('/') else {
        return false;
    };
    let Some(g) = pick(rules, gname, hint) else {
        return false;
    };
    let shared = rules.groups_renamed_to(gname).count() > 1;
    v["groupVersion"] = Value::String(format!("{}/{}", g.original, g.restore_version(ver)));
    if let Some(res) = v.get_mut("resources").and_then(Value::as_array_mut) {
        // A renamed group shared by several originals lists all their resources: keep ours.
        res.retain_mut(|r| {
            let Some(o) = r.as_object_mut() else { return true };
            restore_resource_fields(rules, g, o, "name") || !shared
        });
    }
    true
}

fn restore_kind_ref(rules: &Rules, g: &Group, rk: &mut Value) {
    let Some(o) = rk.as_object_mut() else { return };
    let Some(k) = o.get("kind").and_then(Value::as_str) else {
        return;
    };
    let Some(sk) = k.strip_prefix(rules.kind_prefix.as_str()) else {
        return;
    };
    if g.resource_by_kind(sk).is_none() || o.get("group").and_then(Value::as_str) != Some(g.renamed.as_str())
    {
        return; // e.g. `Scale` of autoscaling: already right
    }
    o.insert("kind".into(), Value::String(sk.to_owned()));
    o.insert("group".into(), Value::String(g.original.clone()));
    if let Some(ver) = o
        .get("version")
        .and_then(Value::as_str)
        .map(|v| g.restore_version(v).to_owned())
    {
        o.insert("version".into(), Value::String(ver));
    }
}

/// A version entry (its fields, resources emptied) and the resources re-grouped into it.
type VersionBucket = (Value, Vec<Value>);

fn aggregated(rules: &Rules, v: &mut Value) -> bool {
    let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) else {
        return false;
    };
    let mut out = Vec::with_capacity(items.len());
    let mut changed = false;
    for item in items.drain(..) {
        let name = item
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if rules.group(&name).is_some() {
            changed = true;
            continue;
        }
        if !rules.is_renamed_group(&name) {
            out.push(item);
            continue;
        }
        changed = true;
        // Re-group the resources by original group, keeping the order of first appearance.
        let mut buckets: Vec<(String, Vec<VersionBucket>)> = Vec::new();
        for ver in item
            .get("versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let vname = ver.get("version").and_then(Value::as_str).unwrap_or("");
            for res in ver
                .get("resources")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let mut res = res.clone();
                let plural = res.get("resource").and_then(Value::as_str).unwrap_or("");
                let stripped = plural
                    .strip_prefix(rules.resource_prefix.as_str())
                    .unwrap_or(plural);
                let g = rules
                    .groups_renamed_to(&name)
                    .find(|g| g.resources.contains_key(stripped));
                let bucket = match g {
                    Some(g) => {
                        if let Some(o) = res.as_object_mut() {
                            restore_resource_fields(rules, g, o, "resource");
                            if let Some(rk) = o.get_mut("responseKind") {
                                restore_kind_ref(rules, g, rk);
                            }
                            for sub in o
                                .get_mut("subresources")
                                .and_then(Value::as_array_mut)
                                .into_iter()
                                .flatten()
                            {
                                if let Some(rk) = sub.get_mut("responseKind") {
                                    restore_kind_ref(rules, g, rk);
                                }
                            }
                        }
                        g.original.clone()
                    }
                    None => name.clone(),
                };
                let bi = match buckets.iter().position(|(n, _)| *n == bucket) {
                    Some(i) => i,
                    None => {
                        buckets.push((bucket, Vec::new()));
                        buckets.len() - 1
                    }
                };
                let restore_version = rules
                    .group(&buckets[bi].0)
                    .map(|g| g.restore_version(vname).to_owned());
                let vers = &mut buckets[bi].1;
                let vi = match vers
                    .iter()
                    .position(|(v, _)| v.get("version").and_then(Value::as_str) == Some(vname))
                {
                    Some(i) => i,
                    None => {
                        let mut shell = ver.clone();
                        if let Some(o) = shell.as_object_mut() {
                            o.insert("resources".into(), Value::Array(Vec::new()));
                            if let Some(v) = &restore_version {
                                o.insert("version".into(), Value::String(v.clone()));
                            }
                        }
                        vers.push((shell, Vec::new()));
                        vers.len() - 1
                    }
                };
                vers[vi].1.push(res);
            }
        }
        for (bucket, vers) in buckets {
            let mut g = item.clone();
            if let Some(o) = g.as_object_mut() {
                if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.insert("name".into(), Value::String(bucket));
                }
                let versions: Vec<Value> = vers
                    .into_iter()
                    .map(|(mut shell, res)| {
                        shell["resources"] = Value::Array(res);
                        shell
                    })
                    .collect();
                o.insert("versions".into(), Value::Array(versions));
            }
            out.push(g);
        }
    }
    *items = out;
    changed
}
