//! The walker: follows a plan over a document in one pass and records byte edits.

use std::borrow::Cow;
use std::ops::Range;

use serde_json::Value;

use super::memo::{self, KeyHit, Memo};
use crate::Direction;
use crate::error::Result;
use crate::json::escape::{needs_escape, quote, write_str};
use crate::json::{Edits, RawStr, Scanner, Str};
use crate::rules::Rules;
use crate::rules::gvk::{
    policy_rule, resource_attributes, restore_group_kind, rewrite_group, rewrite_group_kind, rewrite_gvk,
};
use crate::rules::names::Pieces;
use crate::rules::plan::{Gvk, Leaf, Node, ObjNode, Which};

/// The CRD being walked: its original group and plural.
#[derive(Debug, Clone)]
pub(crate) struct CrdTarget {
    /// Original group.
    pub(crate) group: String,
    /// Original plural.
    pub(crate) plural: String,
}

/// Walks one document (or a part of one) and collects edits.
pub(crate) struct Walker<'r, 'a> {
    /// The rules.
    pub(crate) rules: &'r Rules,
    /// Which way names go.
    pub(crate) dir: Direction,
    /// The scanner over the document.
    pub(crate) sc: Scanner<'a>,
    /// Collected edits.
    pub(crate) edits: Edits,
    /// Original group of the request, for renamed groups shared by several original ones.
    pub(crate) group_hint: Option<&'r str>,
    /// Original (group, kind) of the object a patch applies to (admission responses).
    pub(crate) kind_hint: Option<(&'r str, &'r str)>,
    /// The CRD being walked.
    pub(crate) crd: Option<CrdTarget>,
    /// Leaf rewrites remembered by their bytes (kept across the items of a stream).
    pub(crate) memo: Memo,
    /// Buffers reused from map to map (kept across the items of a stream).
    pub(crate) scratch: Scratch,
    /// Table rows' `object` becomes `null` (see [`super::Context::strip_row_objects`]).
    pub(crate) strip_row_objects: bool,
}

/// Buffers a walk reuses instead of allocating for each label or annotation map.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    names: String,
    entries: Vec<MapEntry>,
}

impl<'r, 'a> Walker<'r, 'a> {
    /// A walker over `input`.
    pub(crate) fn new(rules: &'r Rules, dir: Direction, input: &'a [u8]) -> Self {
        Self {
            rules,
            dir,
            sc: Scanner::new(input),
            edits: Edits::default(),
            group_hint: None,
            kind_hint: None,
            crd: None,
            memo: Memo::default(),
            scratch: Scratch::default(),
            strip_row_objects: false,
        }
    }

    /// The input with the edits applied.
    pub(crate) fn output(&mut self) -> Cow<'a, [u8]> {
        let input = self.sc.input();
        if self.edits.is_empty() {
            return Cow::Borrowed(input);
        }
        let mut out = Vec::with_capacity(input.len() + 64);
        self.edits.apply_range(input, 0, input.len(), &mut out);
        Cow::Owned(out)
    }

    fn restore(&self) -> bool {
        self.dir == Direction::Restore
    }

    /// Rewrites the value at the current position by `node`.
    pub(crate) fn node(&mut self, node: &Node) -> Result<()> {
        match node {
            Node::Obj(o) => self.obj(o),
            Node::Leaf(l) => self.leaf(*l),
        }
    }

    fn obj(&mut self, o: &ObjNode) -> Result<()> {
        match self.sc.peek()? {
            b'{' => {}
            b'[' if o.any.is_some() => {
                let any = o.any.as_ref().expect("checked");
                self.sc.begin_array()?;
                let mut first = true;
                while self.sc.next_elem(&mut first)? {
                    self.node(any)?;
                }
                return Ok(());
            }
            _ => {
                self.sc.skip_value()?;
                return Ok(());
            }
        }
        self.sc.begin_object()?;
        let mut first = true;
        // Read raw: decoded only when the pair is not remembered.
        let mut version: Option<RawStr<'a>> = None;
        let mut kind: Option<RawStr<'a>> = None;
        while let Some(raw) = self.sc.next_key_raw(&mut first)? {
            let mut decoded = None;
            let key = self.sc.key_bytes(&raw, &mut decoded)?;
            if let Some(g) = o.gvk {
                let is_version = match g {
                    Gvk::ApiVersionKind => key == b"apiVersion",
                    Gvk::ApiGroupKind => key == b"apiGroup",
                };
                if is_version {
                    version = self.sc.raw_string_or_skip()?;
                    continue;
                }
                if key == b"kind" {
                    kind = self.sc.raw_string_or_skip()?;
                    continue;
                }
            }
            let child = match o.child_bytes(key) {
                Some(c) => Some(c),
                // Strategic-merge-patch directives name the field they act on.
                None if key.first() == Some(&b'$') => std::str::from_utf8(key)
                    .ok()
                    .and_then(directive_field)
                    .and_then(|f| o.child(f)),
                None => None,
            };
            match child {
                Some(c) => self.node(c)?,
                // Subtrees repeat from item to item of a stream: skipped like the last one here.
                None if matches!(self.sc.peek()?, b'{' | b'[') => {
                    self.memo
                        .skip_at(&mut self.sc, std::ptr::from_ref(o) as usize, key)?;
                }
                None => {
                    self.sc.skip_value()?;
                }
            }
        }
        if let Some(g) = o.gvk {
            self.gvk(g, version, kind)?;
        }
        Ok(())
    }

    /// Rewrites an `apiVersion`/`kind` (or `apiGroup`/`kind`) pair.
    fn gvk(&mut self, g: Gvk, version: Option<RawStr<'a>>, kind: Option<RawStr<'a>>) -> Result<()> {
        if g == Gvk::ApiVersionKind && self.restore() {
            return self.restore_gvk(version, kind);
        }
        let version = version.map(|v| self.sc.decode(&v)).transpose()?;
        let kind = kind.map(|k| self.sc.decode(&k)).transpose()?;
        let k = kind.as_ref().map(|k| k.text.as_ref());
        let v = version.as_ref().map(|v| v.text.as_ref());
        let (new_v, new_k) = match g {
            Gvk::ApiVersionKind => rewrite_gvk(self.rules, self.dir, v, k, self.group_hint),
            Gvk::ApiGroupKind => rewrite_group_kind(self.rules, self.dir, v, k, self.group_hint),
        };
        if let (Some(s), Some(n)) = (version, new_v) {
            self.edits.replace_quoted(s.start, s.end, &n);
        }
        if let (Some(s), Some(n)) = (kind, new_k) {
            self.edits.replace_quoted(s.start, s.end, &n);
        }
        Ok(())
    }

    /// [`Walker::gvk`] for a restore of `apiVersion`/`kind`, written as pieces. The pair's new
    /// bytes are remembered by its bytes: an object's references repeat from item to item.
    fn restore_gvk(&mut self, version: Option<RawStr<'a>>, kind: Option<RawStr<'a>>) -> Result<()> {
        let Some(v) = version else { return Ok(()) };
        let input = self.sc.input();
        let raw = |s: &RawStr<'_>| &input[s.start..s.end];
        let kind_raw = kind.as_ref().map_or(&b""[..], raw);
        if let Some((new_v, new_k)) = self.memo.gvk(raw(&v), kind_raw, self.group_hint) {
            if let Some(n) = new_v {
                self.edits.replace_slice(v.start, v.end, n);
            }
            if let (Some(s), Some(n)) = (&kind, new_k) {
                self.edits.replace_slice(s.start, s.end, n);
            }
            return Ok(());
        }
        let version_raw = raw(&v);
        let v = self.sc.decode(&v)?;
        let kind = kind.map(|k| self.sc.decode(&k)).transpose()?;
        let (group, ver) = v.text.split_once('/').unwrap_or(("", &v.text));
        let k = kind.as_ref().map(|k| k.text.as_ref());
        let (mut new_v, mut new_k) = (None, None);
        if let Some((grp, new_kind)) = restore_group_kind(self.rules, group, k, self.group_hint) {
            let parts = [grp.original.as_str(), "/", grp.restore_version(ver)];
            if !Pieces(parts).eq_str(&v.text) {
                let mark = self.edits.len();
                self.edits.replace_quoted_parts(v.start, v.end, &parts);
                new_v = self.edits.render_since(mark, input, v.start, v.end);
            }
            if let (Some(s), Some(n)) = (&kind, new_kind)
                && n != s.text
            {
                let mark = self.edits.len();
                self.edits.replace_quoted(s.start, s.end, n);
                new_k = self.edits.render_since(mark, input, s.start, s.end);
            }
        }
        self.memo
            .note_gvk(version_raw, kind_raw, self.group_hint, new_v, new_k);
        Ok(())
    }

    fn names(&self, w: Which) -> &'r crate::rules::NameRules {
        match w {
            Which::Labels => &self.rules.labels,
            Which::Annotations => &self.rules.annotations,
            Which::Finalizers => &self.rules.finalizers,
        }
    }

    /// Rewrites the name `s` in place (as an edit) if a rule fires on it.
    fn rename_str(&mut self, w: Which, s: &Str<'a>) {
        let rules = self.names(w);
        if let Some((p, _)) = rules.pieces(self.dir, &s.text, "")
            && !p.eq_str(&s.text)
        {
            if rules.is_plain() && matches!(s.text, Cow::Borrowed(_)) {
                self.edits.replace_plain_parts(s.start, s.end, &p.0);
            } else {
                self.edits.replace_quoted_parts(s.start, s.end, &p.0);
            }
        }
    }

    /// A name (string value); other values are skipped.
    fn name_value(&mut self, w: Which) -> Result<()> {
        if let Some(s) = self.sc.string_or_skip()? {
            self.rename_str(w, &s);
        }
        Ok(())
    }

    fn leaf(&mut self, l: Leaf) -> Result<()> {
        if self.context_leaf(l)? {
            return Ok(());
        }
        match memo::slot(l) {
            Some(slot) => self.remembered_leaf(slot, l),
            None => self.rewrite_leaf(l),
        }
    }

    /// A leaf rewritten once per distinct bytes: skipped (validated) first, then looked up in
    /// the memo, rewritten only when it is not there yet.
    fn remembered_leaf(&mut self, slot: usize, l: Leaf) -> Result<()> {
        self.sc.ws();
        let input = self.sc.input();
        let at = self.sc.pos();
        // A copy of a leaf met lately: found without scanning it.
        if let Some((len, out)) = self.memo.recent(slot, &input[at..]) {
            if let Some(out) = out {
                self.edits.replace_slice(at, at + len, out);
            }
            self.sc.seek(at + len);
            return Ok(());
        }
        let before = self.sc.clone();
        let (start, end) = self.sc.skip_value()?;
        let raw = &input[start..end];
        match self.memo.get(slot, raw) {
            Some(Some(out)) => {
                self.edits.replace_slice(start, end, out);
                let out = out.to_vec();
                self.memo.note_recent(slot, raw, Some(&out));
                return Ok(());
            }
            Some(None) => {
                self.memo.note_recent(slot, raw, None);
                return Ok(());
            }
            None => {}
        }
        self.sc = before;
        let mark = self.edits.len();
        self.rewrite_leaf(l)?;
        let out = self.edits.render_since(mark, input, start, end);
        self.memo.note_recent(slot, raw, out.as_deref());
        self.memo.insert(slot, raw, out);
        Ok(())
    }

    fn rewrite_leaf(&mut self, l: Leaf) -> Result<()> {
        match l {
            Leaf::Names(w) => self.name_map(w),
            Leaf::NameList(w) => self.name_list(w),
            Leaf::Name(w) => self.name_value(w),
            Leaf::ApiVersion => {
                if let Some(s) = self.sc.string_or_skip()?
                    && let Some(p) = self.rules.api_version_parts(self.dir, &s.text, None)
                    && !Pieces(p).eq_str(&s.text)
                {
                    self.edits.replace_quoted_parts(s.start, s.end, &p);
                }
                Ok(())
            }
            Leaf::ApiGroup => {
                self.string(|me, s| rewrite_group(me.rules, me.dir, s, me.group_hint).to_owned())
            }
            Leaf::Requirement => self.requirement(),
            Leaf::PolicyRule => self.dom(|me, v| policy_rule(me.rules, me.dir, v)),
            Leaf::ResourceAttributes => self.dom(|me, v| resource_attributes(me.rules, me.dir, v)),
            Leaf::Embedded => self.object(&super::Hint::default()).map(|_| ()),
            Leaf::FieldsKeys(w) => self.fields_keys(w, false),
            Leaf::FieldsValues(w) => self.fields_keys(w, true),
            _ => unreachable!("context leaves are handled above"),
        }
    }

    /// A string value rewritten by `f`; other values are skipped.
    pub(crate) fn string(&mut self, f: impl Fn(&Self, &str) -> String) -> Result<()> {
        if let Some(s) = self.sc.string_or_skip()? {
            let n = f(self, &s.text);
            if n != s.text {
                self.edits.replace_quoted(s.start, s.end, &n);
            }
        }
        Ok(())
    }

    /// A list of names; elements that are not strings are kept.
    fn name_list(&mut self, w: Which) -> Result<()> {
        if self.sc.peek()? != b'[' {
            self.sc.skip_value()?;
            return Ok(());
        }
        self.sc.begin_array()?;
        let mut first = true;
        while self.sc.next_elem(&mut first)? {
            self.name_value(w)?;
        }
        Ok(())
    }

    /// A label or annotation map. Values that are not strings (`null` in patches) are kept.
    fn name_map(&mut self, w: Which) -> Result<()> {
        if self.sc.peek()? != b'{' {
            self.sc.skip_value()?;
            return Ok(());
        }
        let start = self.sc.pos();
        let mark = self.edits.len();
        self.sc.begin_object()?;
        let mut first = true;
        let rules = self.names(w);
        let dir = self.dir;
        // Every entry's final name (and new value) as ranges of `names`, and its value's span.
        let Scratch {
            mut names,
            mut entries,
        } = std::mem::take(&mut self.scratch);
        names.clear();
        entries.clear();
        let mut changed = false;
        // Every key so far is the one at the same index of the last map of this kind.
        let mut expected = true;
        while let Some(raw) = self.sc.next_key_raw(&mut first)? {
            let i = entries.len();
            // A key seen before in this stream: its rename is remembered by its bytes, and
            // found without hashing when it is the key the last such map had here.
            let hit = if raw.escaped {
                self.memo.end_keys(w, i);
                None
            } else {
                match self.memo.expected_key(w, i, raw.raw) {
                    Some(hit) => hit,
                    None => {
                        expected = false;
                        self.memo.follow_key(w, i, raw.raw);
                        self.memo.key(w, raw.raw)
                    }
                }
            };
            if let Some(hit) = hit {
                let from = names.len();
                names.push_str(&hit.name);
                if let Some(e) = &hit.edit {
                    self.edits.replace_slice(raw.start, raw.end, e);
                    changed = true;
                }
                let span = self.sc.skip_value()?;
                entries.push(MapEntry {
                    name: from..names.len(),
                    span,
                    new_value: None,
                });
                continue;
            }
            // Not remembered yet, or never (escaped, a directive, a `name=value` rule's key,
            // whose name may depend on its value).
            expected = false;
            let key = self.sc.decode(&raw)?;
            let from = names.len();
            if key.text.starts_with('$') {
                // Strategic-merge-patch directive ($patch, $retainKeys): kept as is.
                let span = self.sc.skip_value()?;
                names.push_str(&key.text);
                entries.push(MapEntry {
                    name: from..names.len(),
                    span,
                    new_value: None,
                });
                continue;
            }
            // Values matter only to `name=value` rules: decoded only for names that have some.
            let value_rules = rules.has_value_rules(&key.text);
            let (vstr, span) = if value_rules && self.sc.peek()? == b'"' {
                let v = self.sc.string()?;
                let span = (v.start, v.end);
                (Some(v), span)
            } else {
                (None, self.sc.skip_value()?)
            };
            let value_text = vstr.as_ref().map_or("", |v| v.text.as_ref());
            let mut new_value = None;
            // Remembered unless the value matters (a `name=value` rule names the key).
            let remember = !raw.escaped && !value_rules;
            match rules.pieces(dir, &key.text, value_text) {
                None => {
                    names.push_str(&key.text);
                    if remember {
                        let hit = KeyHit {
                            name: key.text.as_ref().into(),
                            edit: None,
                        };
                        self.memo.insert_key(w, raw.raw, hit);
                        self.memo.follow_key(w, i, raw.raw);
                    }
                }
                Some((p, nv)) => {
                    let name_at = names.len();
                    p.0.iter().for_each(|x| names.push_str(x));
                    let mut edit = None;
                    if !p.eq_str(&key.text) {
                        let mark = self.edits.len();
                        if rules.is_plain() && !raw.escaped {
                            self.edits.replace_plain_parts(key.start, key.end, &p.0);
                        } else {
                            self.edits.replace_quoted_parts(key.start, key.end, &p.0);
                        }
                        edit = self.edits.render_since(mark, self.sc.input(), key.start, key.end);
                        changed = true;
                    }
                    if remember {
                        let hit = KeyHit {
                            name: names[name_at..].into(),
                            edit: edit.map(Vec::into_boxed_slice),
                        };
                        self.memo.insert_key(w, raw.raw, hit);
                        self.memo.follow_key(w, i, raw.raw);
                    }
                    if let (Some(v), Some(nv)) = (&vstr, nv)
                        && nv != v.text
                    {
                        self.edits.replace_quoted(v.start, v.end, nv);
                        let at = names.len();
                        names.push_str(nv);
                        new_value = Some(at..names.len());
                        changed = true;
                    }
                }
            }
            let name_end = new_value.as_ref().map_or(names.len(), |r| r.start);
            entries.push(MapEntry {
                name: from..name_end,
                span,
                new_value,
            });
        }
        let n = entries.len();
        self.memo.end_keys(w, n);
        if changed {
            // The same keys as the last map: their names collide as they did then.
            let known = expected.then(|| self.memo.collisions(w, n)).flatten();
            let collides = known.unwrap_or_else(|| collides(&names, &entries));
            if known.is_none() {
                self.memo.note_collisions(w, n, collides);
            }
            if collides {
                self.resolve_collisions(&names, &entries, start, mark);
            }
        }
        self.scratch = Scratch { names, entries };
        Ok(())
    }

    /// After a map's names changed and two entries now have the same name: the map is written
    /// anew with the later entry winning.
    fn resolve_collisions(&mut self, names: &str, entries: &[MapEntry], start: usize, mark: usize) {
        let name = |e: &MapEntry| &names[e.name.clone()];
        {
            let end = self.sc.pos();
            self.edits.truncate(mark);
            let input = self.sc.input();
            let mut kept: Vec<&MapEntry> = Vec::new();
            for e in entries {
                kept.retain(|k| name(k) != name(e));
                kept.push(e);
            }
            let mut out = vec![b'{'];
            for (i, e) in kept.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(&mut out, name(e));
                out.push(b':');
                match &e.new_value {
                    Some(v) => write_str(&mut out, &names[v.clone()]),
                    None => out.extend_from_slice(&input[e.span.0..e.span.1]),
                }
            }
            out.push(b'}');
            self.edits.replace(start, end, out);
        }
    }

    /// `fieldsV1` members: `f:<name>` (labels, annotations) or `v:"<name>"` (finalizers).
    fn fields_keys(&mut self, w: Which, values: bool) -> Result<()> {
        if self.sc.peek()? != b'{' {
            self.sc.skip_value()?;
            return Ok(());
        }
        self.sc.begin_object()?;
        let mut first = true;
        let rules = self.names(w);
        let dir = self.dir;
        while let Some(raw) = self.sc.next_key_raw(&mut first)? {
            self.sc.skip_value()?;
            if values {
                // `v:"<name>"`: the name is read from the raw bytes when it needs no unescaping.
                let plain = raw
                    .raw
                    .strip_prefix(br#"v:\""#)
                    .and_then(|r| r.strip_suffix(br#"\""#))
                    .filter(|n| !n.contains(&b'\\'))
                    .and_then(|n| std::str::from_utf8(n).ok());
                let owned;
                let name = match plain {
                    Some(n) => n,
                    None => {
                        let key = self.sc.decode(&raw)?;
                        let Some(n) = key
                            .text
                            .strip_prefix("v:")
                            .and_then(|lit| serde_json::from_str::<String>(lit).ok())
                        else {
                            continue;
                        };
                        owned = n;
                        &owned
                    }
                };
                let Some((p, _)) = rules.pieces(dir, name, "") else {
                    continue;
                };
                if p.eq_str(name) {
                    continue;
                }
                if p.0.iter().all(|x| !needs_escape(x)) {
                    // The inner quotes, escaped for the outer string.
                    let [a, b, c] = p.0;
                    self.edits
                        .replace_plain_parts(raw.start, raw.end, &["v:\\\"", a, b, c, "\\\""]);
                } else {
                    let mut k = b"v:".to_vec();
                    k.extend_from_slice(&quote(&p.concat()));
                    let k = String::from_utf8(k).expect("quoted UTF-8");
                    self.edits.replace_quoted(raw.start, raw.end, &k);
                }
            } else {
                let key = self.sc.decode(&raw)?;
                let Some(name) = key.text.strip_prefix("f:") else {
                    continue;
                };
                let Some((p, _)) = rules.pieces(dir, name, "") else {
                    continue;
                };
                if !p.eq_str(name) {
                    let [a, b, c] = p.0;
                    if rules.is_plain() && !raw.escaped {
                        self.edits
                            .replace_plain_parts(raw.start, raw.end, &["f:", a, b, c]);
                    } else {
                        self.edits
                            .replace_quoted_parts(raw.start, raw.end, &["f:", a, b, c]);
                    }
                }
            }
        }
        Ok(())
    }

    fn requirement(&mut self) -> Result<()> {
        if self.sc.peek()? != b'{' {
            self.sc.skip_value()?;
            return Ok(());
        }
        self.sc.begin_object()?;
        let mut first = true;
        let mut key: Option<Str<'a>> = None;
        let mut values: Vec<Str<'a>> = Vec::new();
        while let Some(k) = self.sc.next_key(&mut first)? {
            match k.text.as_ref() {
                "key" => key = self.sc.string_or_skip()?,
                "values" if self.sc.peek()? == b'[' => {
                    self.sc.begin_array()?;
                    let mut f = true;
                    while self.sc.next_elem(&mut f)? {
                        if let Some(s) = self.sc.string_or_skip()? {
                            values.push(s);
                        }
                    }
                }
                _ => {
                    self.sc.skip_value()?;
                }
            }
        }
        let Some(key) = key else { return Ok(()) };
        let vals: Vec<String> = values.iter().map(|v| v.text.to_string()).collect();
        let (nk, nv) = self
            .names(Which::Labels)
            .rewrite_requirement(self.dir, &key.text, &vals);
        if nk != key.text {
            self.edits.replace_quoted(key.start, key.end, &nk);
        }
        for (old, new) in values.iter().zip(nv) {
            if new != old.text {
                self.edits.replace_quoted(old.start, old.end, &new);
            }
        }
        Ok(())
    }

    /// A small value rewritten through a DOM: replaced only if `f` changed it.
    pub(crate) fn dom(&mut self, f: impl FnOnce(&Self, &mut Value) -> bool) -> Result<()> {
        let (start, end) = self.sc.skip_value()?;
        let bytes = &self.sc.input()[start..end];
        let mut v: Value = serde_json::from_slice(bytes).map_err(|_| self.sc.err("invalid JSON value"))?;
        if f(self, &mut v) {
            self.edits
                .replace(start, end, serde_json::to_vec(&v).expect("a Value serializes"));
        }
        Ok(())
    }
}

/// One entry of a label or annotation map: its final name (a range of the names written so
/// far), its value's span, and its new value if a rule changed it.
#[derive(Debug)]
struct MapEntry {
    name: Range<usize>,
    span: (usize, usize),
    new_value: Option<Range<usize>>,
}

/// True when two entries of a map have the same name. Maps are small: a quadratic check beats
/// hashing here.
fn collides(names: &str, entries: &[MapEntry]) -> bool {
    let name = |e: &MapEntry| &names[e.name.clone()];
    entries
        .iter()
        .enumerate()
        .any(|(i, e)| entries[..i].iter().any(|o| name(o) == name(e)))
}

/// The directive's field: `$setElementOrder/finalizers` → `finalizers`.
fn directive_field(key: &str) -> Option<&str> {
    key.strip_prefix("$setElementOrder/")
        .or_else(|| key.strip_prefix("$deleteFromPrimitiveList/"))
        .or_else(|| key.strip_prefix("$retainKeys/"))
}

#[cfg(test)]
mod tests {
    use crate::object::{Context, rewrite};
    use crate::{Direction, Rules};

    fn restore(doc: &str) -> String {
        let rules = Rules::builtin_kubevirt();
        let out = rewrite(&rules, Direction::Restore, doc.as_bytes(), &Context::default()).unwrap();
        String::from_utf8(out.bytes().unwrap().to_vec()).unwrap()
    }

    const HEAD: &str = r#"{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachine","metadata":"#;

    #[test]
    fn managed_fields_keys_plain_and_escaped() {
        // `v:` keys read from raw bytes, `f:` keys, and the same names written with escapes.
        let doc = format!(
            r#"{HEAD}{{"managedFields":[{{"apiVersion":"internal.virtualization.deckhouse.io/v1","fieldsV1":{{"f:metadata":{{"f:finalizers":{{"v:\"kubevirt.internal.virtualization.deckhouse.io/x\"":{{}},"v:\"kubevirt.internal.virtualization.deckhouse.io\/y\"":{{}}}},"f:labels":{{"f:kubevirt.internal.virtualization.deckhouse.io/a":{{}},"f:kubevirt.internal.virtualization.deckhouse.io\/b":{{}},"f:app":{{}}}}}}}}}}]}}}}"#
        );
        let out = restore(&doc);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let meta = &v["metadata"]["managedFields"][0];
        assert_eq!(meta["apiVersion"], "kubevirt.io/v1");
        let f = &meta["fieldsV1"]["f:metadata"];
        let fin: Vec<&String> = f["f:finalizers"].as_object().unwrap().keys().collect();
        assert_eq!(fin, [r#"v:"kubevirt.io/x""#, r#"v:"kubevirt.io/y""#]);
        let labels: Vec<&String> = f["f:labels"].as_object().unwrap().keys().collect();
        assert_eq!(labels, ["f:kubevirt.io/a", "f:kubevirt.io/b", "f:app"]);
    }

    #[test]
    fn label_maps_keep_values_and_escapes() {
        let doc = format!(
            r#"{HEAD}{{"labels":{{"kubevirt.internal.virtualization.deckhouse.io/a":"1","kubevirt.internal.virtualization.deckhouse.io\/b":"2","x\"y":"3"}},"finalizers":["kubevirt.internal.virtualization.deckhouse.io/f","k\\z"]}}}}"#
        );
        let out = restore(&doc);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["metadata"]["labels"],
            serde_json::json!({"kubevirt.io/a": "1", "kubevirt.io/b": "2", "x\"y": "3"})
        );
        assert_eq!(
            v["metadata"]["finalizers"],
            serde_json::json!(["kubevirt.io/f", "k\\z"])
        );
        // Untouched entries keep their bytes.
        assert!(out.contains(r#""x\"y":"3""#), "{out}");
    }
}
