//! CustomResourceDefinitions: the name decides the rule, the rule gives every name.

use serde_json::{Value, json};

use super::walk::CrdTarget;
use super::{Verdict, Walker};
use crate::Direction;
use crate::error::Result;
use crate::rules::{ResourceRule, Rules};

impl<'r, 'a> Walker<'r, 'a> {
    /// A CRD object at the current position.
    pub(super) fn crd(&mut self) -> Result<Verdict> {
        let name = self.metadata_lite()?.name;
        let target = match self.dir {
            Direction::Rename => name.split_once('.').and_then(|(plural, group)| {
                self.rules.resource(group, plural).map(|_| CrdTarget {
                    group: group.into(),
                    plural: plural.into(),
                })
            }),
            Direction::Restore => {
                if let Some((_, group)) = name.split_once('.')
                    && self.rules.group(group).is_some()
                {
                    // A CRD of an original group (a real KubeVirt install): hidden.
                    self.sc.skip_value()?;
                    return Ok(Verdict::Excluded);
                }
                name.split_once('.').and_then(|(plural, group)| {
                    let p = plural.strip_prefix(self.rules.resource_prefix.as_str())?;
                    let g = self
                        .rules
                        .groups_renamed_to(group)
                        .find(|g| g.resources.contains_key(p))?;
                    Some(CrdTarget {
                        group: g.original.clone(),
                        plural: p.to_owned(),
                    })
                })
            }
        };
        let plan = self
            .rules
            .plans
            .get("apiextensions.k8s.io", "CustomResourceDefinition");
        let saved = std::mem::replace(&mut self.crd, target);
        let r = self.node(plan);
        self.crd = saved;
        r.map(|_| Verdict::Keep)
    }

    pub(super) fn crd_rule(&self) -> Option<(&'r crate::rules::Group, &'r ResourceRule)> {
        let t = self.crd.as_ref()?;
        let g = self.rules.group(&t.group)?;
        Some((g, g.resources.get(&t.plural)?))
    }
}

/// New `metadata.name` of the CRD.
pub(crate) fn name(rules: &Rules, dir: Direction, g: &crate::rules::Group, r: &ResourceRule) -> String {
    match dir {
        Direction::Rename => format!("{}{}.{}", rules.resource_prefix, r.plural, g.renamed),
        Direction::Restore => format!("{}.{}", r.plural, g.original),
    }
}

/// Sets `spec.names` / `status.acceptedNames` from the rule.
pub(crate) fn names(rules: &Rules, dir: Direction, r: &ResourceRule, v: &mut Value) -> bool {
    let Some(obj) = v.as_object_mut() else {
        return false;
    };
    let (kp, rp, sp) = match dir {
        Direction::Rename => (
            rules.kind_prefix.as_str(),
            rules.resource_prefix.as_str(),
            rules.short_name_prefix.as_str(),
        ),
        Direction::Restore => ("", "", ""),
    };
    let short = r
        .short_names
        .as_ref()
        .map(|s| s.iter().map(|x| format!("{sp}{x}")).collect::<Vec<_>>());
    let categories = match dir {
        Direction::Rename => {
            if r.categories.as_ref().is_some_and(|c| !c.is_empty()) {
                json!(rules.categories)
            } else {
                json!([])
            }
        }
        Direction::Restore => json!(r.categories),
    };
    let wanted = [
        ("kind", json!(format!("{kp}{}", r.kind))),
        ("listKind", json!(format!("{kp}{}", r.list_kind))),
        ("plural", json!(format!("{rp}{}", r.plural))),
        ("singular", json!(format!("{rp}{}", r.singular))),
        ("shortNames", json!(short)),
        ("categories", categories),
    ];
    let mut changed = false;
    for (k, val) in wanted {
        // Renaming sets what the client sent; restoring sets every name.
        if (dir == Direction::Restore || obj.contains_key(k)) && obj.get(k) != Some(&val) {
            obj.insert(k.to_owned(), val);
            changed = true;
        }
    }
    changed
}

/// A Table of CRDs (`kubectl get crd`): row names and cells follow the CRD names; rows of
/// original-group CRDs (a real KubeVirt install) are dropped when restoring.
pub(crate) fn table(rules: &Rules, dir: Direction, v: &mut Value) -> bool {
    let Some(rows) = v.get_mut("rows").and_then(Value::as_array_mut) else {
        return false;
    };
    let before = rows.len();
    let mut changed = false;
    rows.retain_mut(|row| {
        let Some(name) = row
            .pointer("/object/metadata/name")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return true;
        };
        if dir == Direction::Restore
            && name
                .split_once('.')
                .is_some_and(|(_, g)| rules.group(g).is_some())
        {
            return false;
        }
        let Some(new) = crate::path::rewrite_crd_name(rules, dir, &name) else {
            return true;
        };
        if let Some(obj) = row.get_mut("object") {
            if obj.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
                // A whole CRD (includeObject=Object): rewritten like any CRD.
                if let Ok(bytes) = serde_json::to_vec(&*obj)
                    && let Ok(super::Outcome::Object(out)) =
                        super::rewrite(rules, dir, &bytes, &super::Context::default())
                    && let Ok(new_obj) = serde_json::from_slice(&out)
                {
                    *obj = new_obj;
                }
            } else if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                m.insert("name".into(), Value::String(new.clone()));
            }
        }
        if let Some(cells) = row.get_mut("cells").and_then(Value::as_array_mut) {
            for c in cells.iter_mut().filter(|c| c.as_str() == Some(name.as_str())) {
                *c = Value::String(new.clone());
            }
        }
        changed = true;
        true
    });
    changed || rows.len() != before
}
