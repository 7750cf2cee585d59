//! Patches, chosen by `Content-Type`: JSON Patch (RFC 6902), JSON merge patch (RFC 7396),
//! strategic merge patch and server-side apply (YAML or JSON).
//!
//! A merge, strategic or apply patch is a partial object: it is walked with the kind's plan
//! (`null` stays `null`, strategic directives are followed to the field they name). A JSON
//! Patch is walked op by op: `path` and `from` pointers are followed through the plan, the
//! names in them renamed (with `~0`/`~1` escaping), and `value` rewritten by the plan found at
//! the pointer.
//!
//! ```
//! use kube_api_rewriter::{patch, Direction, Rules};
//! let rules = Rules::builtin_kubevirt();
//! let plan = patch::plan_for(&rules, "kubevirt.io", "VirtualMachine");
//! let p = br#"[{"op":"add","path":"/metadata/labels/kubevirt.io~1created-by","value":"x"}]"#;
//! let out = patch::json_patch(&rules, Direction::Rename, p, plan).unwrap();
//! assert_eq!(out.as_ref(), br#"[{"op":"add","path":"/metadata/labels/kubevirt.internal.virtualization.deckhouse.io~1created-by","value":"x"}]"#);
//! ```

use std::borrow::Cow;

use serde_json::Value;

use super::Walker;
use crate::error::{Error, Result};
use crate::json::{Scanner, Str};
use crate::rules::plan::{Leaf, Node, Which};
use crate::{Direction, Rules};

/// The kinds of patch Kubernetes accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json`
    Json,
    /// `application/merge-patch+json`
    Merge,
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/apply-patch+yaml` (YAML or JSON)
    Apply,
}

impl PatchType {
    /// The patch type of a `Content-Type` value (parameters ignored).
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        let media = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        Some(match media.as_str() {
            "application/json-patch+json" => PatchType::Json,
            "application/merge-patch+json" => PatchType::Merge,
            "application/strategic-merge-patch+json" => PatchType::Strategic,
            "application/apply-patch+yaml" | "application/apply-patch+json" => PatchType::Apply,
            _ => return None,
        })
    }
}

/// What a patch applies to: objects of an original (`group`, `kind`) and their plan.
#[derive(Debug, Clone, Copy)]
pub struct PatchTarget<'a> {
    /// The kind's plan.
    pub(crate) plan: &'a Node,
    /// Original group.
    pub group: &'a str,
    /// Original kind.
    pub kind: &'a str,
    /// For a patch of one CustomResourceDefinition the rules name: its original group and
    /// plural (from the request path), so that `spec`, `spec.names` and `spec.group` in the
    /// patch are renamed as in a whole CRD body.
    pub(crate) crd: Option<(&'a str, &'a str)>,
}

/// The target of patches to objects of an original (`group`, `kind`).
pub fn plan_for<'a>(rules: &'a Rules, group: &'a str, kind: &'a str) -> PatchTarget<'a> {
    PatchTarget {
        plan: rules.plans.get(group, kind),
        group,
        kind,
        crd: None,
    }
}

/// The target of patches to the CustomResourceDefinition named `name` (`plural.group`, original
/// names); a plain CRD target when the rules do not name that resource.
pub fn plan_for_crd<'a>(rules: &'a Rules, name: &str) -> PatchTarget<'a> {
    let mut t = plan_for(rules, crate::path::CRD_GROUP, "CustomResourceDefinition");
    t.crd = name.split_once('.').and_then(|(plural, group)| {
        let g = rules.group(group)?;
        let (p, _) = g.resources.get_key_value(plural)?;
        Some((g.original.as_str(), p.as_str()))
    });
    t
}

/// Rewrites a patch body of type `ty` for objects with plan `plan`.
pub fn rewrite<'a>(
    rules: &Rules,
    dir: Direction,
    ty: PatchType,
    body: &'a [u8],
    on: PatchTarget<'_>,
) -> Result<Cow<'a, [u8]>> {
    match ty {
        PatchType::Json => json_patch(rules, dir, body, on),
        PatchType::Merge | PatchType::Strategic => partial_object(rules, dir, body, on),
        PatchType::Apply => {
            let first = body.iter().find(|b| !b.is_ascii_whitespace()).copied();
            if first == Some(b'{') {
                partial_object(rules, dir, body, on)
            } else {
                let json = yaml_to_json(body)?;
                let out = partial_object(rules, dir, &json, on)?.into_owned();
                Ok(Cow::Owned(out))
            }
        }
    }
}

/// Converts a YAML document to JSON with the YAML 1.1 scalar rules kube-apiserver applies
/// (`yes`/`on` are booleans, `0777` is octal).
pub fn yaml_to_json(body: &[u8]) -> Result<Vec<u8>> {
    let text = std::str::from_utf8(body)
        .map_err(|e| Error::Yaml(format!("not UTF-8 at byte {}", e.valid_up_to())))?;
    let opts = serde_saphyr::options! { legacy_octal_numbers: true };
    let v: Value = serde_saphyr::from_str_with_options(text, opts).map_err(|e| {
        let loc = e
            .location()
            .map(|l| format!(" at line {}, column {}", l.line(), l.column()))
            .unwrap_or_default();
        Error::Yaml(format!("{}{loc}", e.to_string().lines().next().unwrap_or("")))
    })?;
    Ok(serde_json::to_vec(&v).expect("a Value serializes"))
}

fn partial_object<'a>(
    rules: &Rules,
    dir: Direction,
    body: &'a [u8],
    on: PatchTarget<'_>,
) -> Result<Cow<'a, [u8]>> {
    let mut w = walker(rules, dir, body, on);
    w.node(on.plan)?;
    w.sc.end()?;
    Ok(w.output())
}

/// Rewrites an RFC 6902 JSON Patch applying to objects with plan `plan`.
pub fn json_patch<'a>(
    rules: &Rules,
    dir: Direction,
    body: &'a [u8],
    on: PatchTarget<'_>,
) -> Result<Cow<'a, [u8]>> {
    let mut w = walker(rules, dir, body, on);
    if w.sc.peek()? != b'[' {
        return Err(Error::Patch("a JSON patch must be an array of operations".into()));
    }
    w.sc.begin_array()?;
    let mut first = true;
    while w.sc.next_elem(&mut first)? {
        op(&mut w, on)?;
    }
    w.sc.end()?;
    Ok(w.output())
}

/// A walker over a patch `body`, knowing the CRD the patch applies to.
fn walker<'r, 'a>(rules: &'r Rules, dir: Direction, body: &'a [u8], on: PatchTarget<'_>) -> Walker<'r, 'a> {
    let mut w = Walker::new(rules, dir, body);
    w.crd = on.crd.map(|(group, plural)| super::walk::CrdTarget {
        group: group.to_owned(),
        plural: plural.to_owned(),
    });
    w
}

fn op(w: &mut Walker<'_, '_>, on: PatchTarget<'_>) -> Result<()> {
    let plan = on.plan;
    if w.sc.peek()? != b'{' {
        return Err(Error::Patch(format!(
            "operation at byte {} is not an object",
            w.sc.pos()
        )));
    }
    w.sc.begin_object()?;
    let mut first = true;
    let mut path: Option<Str<'_>> = None;
    let mut from: Option<Str<'_>> = None;
    let mut value: Option<usize> = None;
    while let Some(k) = w.sc.next_key(&mut first)? {
        match k.text.as_ref() {
            "path" => path = w.sc.string_or_skip()?,
            "from" => from = w.sc.string_or_skip()?,
            "value" => {
                w.sc.ws();
                value = Some(w.sc.pos());
                w.sc.skip_value()?;
            }
            _ => {
                w.sc.skip_value()?;
            }
        }
    }
    let end = w.sc.pos();
    let value_text = value.and_then(|v| {
        let mut sc = Scanner::new(w.sc.input());
        sc.seek(v);
        sc.string().ok().map(|s| s.text.into_owned())
    });
    let mut target = None;
    if let Some(p) = &path {
        let (np, t) = pointer(w.rules, w.dir, plan, &p.text, value_text.as_deref());
        if np != p.text {
            w.edits.replace_quoted(p.start, p.end, &np);
        }
        target = t;
    }
    if let Some(f) = &from {
        let (nf, _) = pointer(w.rules, w.dir, plan, &f.text, None);
        if nf != f.text {
            w.edits.replace_quoted(f.start, f.end, &nf);
        }
    }
    if let (Some(v), Some(t)) = (value, target) {
        w.sc.seek(v);
        match t {
            Target::Node(n) => w.node(n)?,
            Target::Leaf(l) => w.node(&Node::Leaf(l))?,
            Target::Kind => {
                // The object's own kind: renamed with the group the patch applies to.
                let group = match w.dir {
                    Direction::Rename => on.group,
                    Direction::Restore => w.rules.rename_group(on.group).unwrap_or(on.group),
                };
                if let Some(s) = w.sc.string_or_skip()?
                    && let (_, Some(k)) = crate::rules::gvk::rewrite_group_kind(
                        w.rules,
                        w.dir,
                        Some(group),
                        Some(&s.text),
                        None,
                    )
                {
                    w.edits.replace_quoted(s.start, s.end, &k);
                }
            }
            Target::LabelValue(which, key) => {
                if let Some(s) = w.sc.string_or_skip()? {
                    let rules = match which {
                        Which::Labels => &w.rules.labels,
                        Which::Annotations => &w.rules.annotations,
                        Which::Finalizers => &w.rules.finalizers,
                    };
                    let (_, nv) = match w.dir {
                        Direction::Rename => rules.rename(&key, &s.text),
                        Direction::Restore => rules.restore(&key, &s.text),
                    };
                    if nv != s.text {
                        w.edits.replace_quoted(s.start, s.end, &nv);
                    }
                }
            }
        }
        w.sc.seek(end);
    }
    Ok(())
}

/// What an op's `value` is, found by following its pointer through the plan.
enum Target<'p> {
    Node(&'p Node),
    Leaf(Leaf),
    /// The object's own `kind`.
    Kind,
    /// The value of a label (or annotation) whose original-side key is given.
    LabelValue(Which, String),
}

fn unescape_segment(s: &str) -> String {
    s.replace("~1", "/").replace("~0", "~")
}

fn escape_segment(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// Follows a JSON pointer through `plan`: the rewritten pointer, and the value's plan.
fn pointer<'p>(
    rules: &Rules,
    dir: Direction,
    plan: &'p Node,
    ptr: &str,
    value: Option<&str>,
) -> (String, Option<Target<'p>>) {
    if ptr.is_empty() {
        return (String::new(), Some(Target::Node(plan)));
    }
    let Some(rest) = ptr.strip_prefix('/') else {
        return (ptr.to_owned(), None);
    };
    let segs: Vec<String> = rest.split('/').map(unescape_segment).collect();
    let mut out: Vec<String> = Vec::with_capacity(segs.len());
    let mut node = Some(plan);
    let mut target = None;
    let mut i = 0;
    while i < segs.len() {
        let seg = &segs[i];
        let last = i + 1 == segs.len();
        match node {
            Some(Node::Leaf(Leaf::Names(w))) => {
                // This segment is a name (label key); a string value goes with it.
                let rules_for = names_of(rules, *w);
                let (nk, _) = match dir {
                    Direction::Rename => rules_for.rename(seg, value.unwrap_or("")),
                    Direction::Restore => rules_for.restore(seg, value.unwrap_or("")),
                };
                out.push(nk.into_owned());
                target = last.then(|| Target::LabelValue(*w, seg.clone()));
                out.extend(segs[i + 1..].iter().cloned());
                break;
            }
            Some(Node::Leaf(Leaf::NameList(w))) => {
                out.push(seg.clone());
                target = last.then_some(Target::Leaf(Leaf::Name(*w)));
                out.extend(segs[i + 1..].iter().cloned());
                break;
            }
            Some(Node::Obj(o)) => {
                out.push(seg.clone());
                if o.gvk.is_some() && last && seg == "apiVersion" {
                    target = Some(Target::Leaf(Leaf::ApiVersion));
                    node = None;
                } else if i == 0 && last && seg == "kind" {
                    target = Some(Target::Kind);
                    node = None;
                } else {
                    node = o.child(seg);
                    if last {
                        target = node.map(Target::Node);
                    }
                }
            }
            Some(Node::Leaf(_)) | None => {
                out.extend(segs[i..].iter().cloned());
                break;
            }
        }
        i += 1;
    }
    let s: Vec<String> = out.iter().map(|s| escape_segment(s)).collect();
    (format!("/{}", s.join("/")), target)
}

fn names_of(rules: &Rules, w: Which) -> &crate::rules::NameRules {
    match w {
        Which::Labels => &rules.labels,
        Which::Annotations => &rules.annotations,
        Which::Finalizers => &rules.finalizers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm_plan(rules: &Rules) -> PatchTarget<'_> {
        plan_for(rules, "kubevirt.io", "VirtualMachine")
    }

    #[test]
    fn json_patch_pointers_and_values() {
        let rules = Rules::builtin_kubevirt();
        let p = br#"[{"op":"replace","path":"/metadata/finalizers/0","value":"kubevirt.io/foo"},{"op":"add","path":"/metadata/ownerReferences/-","value":{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","name":"a","uid":"u"}},{"op":"move","from":"/metadata/labels/kubevirt.io~1a","path":"/metadata/labels/kubevirt.io~1b"},{"op":"add","path":"/metadata/labels","value":{"kubevirt.io/c":"d"}},{"op":"test","path":"/spec/x","value":"kubevirt.io/free-text"}]"#;
        let out = json_patch(&rules, Direction::Rename, p, vm_plan(&rules)).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v[0]["value"], "kubevirt.internal.virtualization.deckhouse.io/foo");
        assert_eq!(
            v[1]["value"]["apiVersion"],
            "internal.virtualization.deckhouse.io/v1"
        );
        assert_eq!(v[1]["value"]["kind"], "InternalVirtualizationVirtualMachine");
        assert_eq!(
            v[2]["from"],
            "/metadata/labels/kubevirt.internal.virtualization.deckhouse.io~1a"
        );
        assert_eq!(
            v[2]["path"],
            "/metadata/labels/kubevirt.internal.virtualization.deckhouse.io~1b"
        );
        assert_eq!(
            v[3]["value"]["kubevirt.internal.virtualization.deckhouse.io/c"],
            "d"
        );
        assert_eq!(v[4]["value"], "kubevirt.io/free-text", "free text in spec stays");
        let back = json_patch(&rules, Direction::Restore, &out, vm_plan(&rules)).unwrap();
        assert_eq!(back.as_ref(), &p[..]);
    }

    #[test]
    fn merge_patch_keeps_null_and_follows_directives() {
        let rules = Rules::builtin_kubevirt();
        let p = br#"{"metadata":{"labels":{"kubevirt.io/a":null},"$setElementOrder/finalizers":["kubevirt.io/f"],"$deleteFromPrimitiveList/finalizers":["kubevirt.io/g"]}}"#;
        let out = rewrite(
            &rules,
            Direction::Rename,
            PatchType::Strategic,
            p,
            vm_plan(&rules),
        )
        .unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"metadata":{"labels":{"kubevirt.internal.virtualization.deckhouse.io/a":null},"$setElementOrder/finalizers":["kubevirt.internal.virtualization.deckhouse.io/f"],"$deleteFromPrimitiveList/finalizers":["kubevirt.internal.virtualization.deckhouse.io/g"]}}"#
        );
    }

    #[test]
    fn apply_yaml_uses_yaml_1_1_scalars_and_renames_kind() {
        let rules = Rules::builtin_kubevirt();
        let y = b"apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: a\n  labels:\n    kubevirt.io/x: v\nspec:\n  running: yes\n  mode: 0777\n";
        let out = rewrite(&rules, Direction::Rename, PatchType::Apply, y, vm_plan(&rules)).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["apiVersion"], "internal.virtualization.deckhouse.io/v1");
        assert_eq!(v["kind"], "InternalVirtualizationVirtualMachine");
        assert_eq!(
            v["metadata"]["labels"]["kubevirt.internal.virtualization.deckhouse.io/x"],
            "v"
        );
        assert_eq!(v["spec"]["running"], true);
        assert_eq!(v["spec"]["mode"], 511);
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchType::Merge)
        );
        assert_eq!(PatchType::from_content_type("application/json"), None);
    }
}
