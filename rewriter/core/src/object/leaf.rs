//! Leaves whose rewrite needs the walker's context (CRDs, admission reviews).

use base64::Engine as _;
use serde_json::Value;

use super::Walker;
use super::crd;
use crate::Direction;
use crate::error::{Error, Result};
use crate::json::escape::quote;
use crate::rules::plan::Leaf;

impl<'r, 'a> Walker<'r, 'a> {
    /// Leaves that depend on context; `false` if `l` is not one of them.
    pub(super) fn context_leaf(&mut self, l: Leaf) -> Result<bool> {
        match l {
            Leaf::CrdName => {
                let rule = self.crd_rule();
                let (rules, dir) = (self.rules, self.dir);
                self.string(|_, s| rule.map_or_else(|| s.to_owned(), |(g, r)| crd::name(rules, dir, g, r)))?;
            }
            Leaf::CrdGroup => {
                let rule = self.crd_rule();
                let dir = self.dir;
                self.string(|_, s| match (rule, dir) {
                    (Some((g, _)), Direction::Rename) => g.renamed.clone(),
                    (Some((g, _)), Direction::Restore) => g.original.clone(),
                    (None, _) => s.to_owned(),
                })?;
            }
            Leaf::CrdNames => match self.crd_rule() {
                Some((_, r)) => self.dom(|me, v| crd::names(me.rules, me.dir, r, v))?,
                None => {
                    self.sc.skip_value()?;
                }
            },
            Leaf::GroupVersionKind => self.dom(|me, v| group_version_kind(me, v))?,
            Leaf::AdmissionPatch => self.admission_patch()?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn admission_patch(&mut self) -> Result<()> {
        let Some(s) = self.sc.string_or_skip()? else {
            return Ok(());
        };
        let b64 = base64::engine::general_purpose::STANDARD;
        let raw = b64.decode(s.text.as_bytes()).map_err(|source| Error::Base64 {
            field: "response.patch",
            source,
        })?;
        let (group, kind) = self.kind_hint.unwrap_or_default();
        let target = super::patch::plan_for(self.rules, group, kind);
        let out = super::patch::json_patch(self.rules, self.dir, &raw, target)?;
        if out.as_ref() != raw.as_slice() {
            self.edits
                .replace(s.start, s.end, quote(&b64.encode(out.as_ref())));
        }
        Ok(())
    }
}

fn group_version_kind(w: &Walker<'_, '_>, v: &mut Value) -> bool {
    let Some(o) = v.as_object_mut() else { return false };
    let group = o.get("group").and_then(Value::as_str).map(str::to_owned);
    let kind = o.get("kind").and_then(Value::as_str).map(str::to_owned);
    let (ng, nk) = crate::rules::gvk::rewrite_group_kind(
        w.rules,
        w.dir,
        group.as_deref(),
        kind.as_deref(),
        w.group_hint,
    );
    let mut changed = false;
    if let (Some(ng), Some(og)) = (ng, group) {
        if let Some(ver) = o.get("version").and_then(Value::as_str).map(str::to_owned) {
            let grp = match w.dir {
                Direction::Rename => w.rules.group(&og),
                Direction::Restore => w.rules.group(&ng),
            };
            if let Some(grp) = grp {
                let nv = match w.dir {
                    Direction::Rename => grp.rename_version(&ver),
                    Direction::Restore => grp.restore_version(&ver),
                };
                o.insert("version".into(), Value::String(nv.to_owned()));
            }
        }
        o.insert("group".into(), Value::String(ng));
        changed = true;
    }
    if let Some(nk) = nk {
        o.insert("kind".into(), Value::String(nk));
        changed = true;
    }
    changed
}
