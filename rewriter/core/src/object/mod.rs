//! Rewriting whole objects: dispatch by kind, the plans of each kind, and the special kinds
//! (discovery, CRDs, Status, admission reviews) whose names depend on each other.
//!
//! ```
//! use kube_api_rewriter::{object, Direction, Rules};
//! let rules = Rules::builtin_kubevirt();
//! let vm = br#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"a","labels":{"kubevirt.io/x":"y"}},"spec":{}}"#;
//! let out = object::rewrite(&rules, Direction::Rename, vm, &object::Context::default()).unwrap();
//! assert_eq!(
//!     out.bytes().unwrap().as_ref(),
//!     br#"{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachine","metadata":{"name":"a","labels":{"kubevirt.internal.virtualization.deckhouse.io/x":"y"}},"spec":{}}"#
//! );
//! ```

pub(crate) mod crd;
mod discovery;
mod leaf;
pub(crate) mod memo;
pub mod patch;
mod status;
mod table;
pub(crate) mod walk;

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;

pub(crate) use walk::Walker;

use crate::Direction;
use crate::error::Result;
use crate::json::{Scanner, Str};
use crate::rules::{Exclude, Rules};

/// What the caller knows about a body beyond its bytes (from the request path).
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// The original API group of the request, if any.
    pub group: Option<String>,
    /// The original kind the body is expected to hold (items of built-in lists carry none).
    pub kind: Option<String>,
    /// Table rows' `object` becomes `null` (the client asked for `includeObject=None`; upstream
    /// was asked for `Metadata` so that excludes can see the labels).
    pub strip_row_objects: bool,
}

/// The result of rewriting one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// The object, rewritten or as it was.
    Object(Cow<'a, [u8]>),
    /// The object is hidden from the client (an exclude rule matched).
    Excluded,
}

impl<'a> Outcome<'a> {
    /// The bytes, unless the object was excluded.
    pub fn bytes(&self) -> Option<&Cow<'a, [u8]>> {
        match self {
            Outcome::Object(b) => Some(b),
            Outcome::Excluded => None,
        }
    }
}

/// Rewrites one complete JSON document (an object, a list, a watch event) in direction `dir`.
pub fn rewrite<'a>(rules: &Rules, dir: Direction, input: &'a [u8], ctx: &Context) -> Result<Outcome<'a>> {
    let mut w = Walker::new(rules, dir, input);
    w.strip_row_objects = ctx.strip_row_objects;
    w.group_hint = ctx.group.as_deref();
    if let (Some(g), Some(k)) = (&ctx.group, &ctx.kind) {
        w.kind_hint = Some((g.as_str(), k.as_str()));
    }
    let hint = Hint {
        kind: ctx.kind.as_deref(),
        api_version: None,
        top: true,
    };
    let verdict = w.object(&hint)?;
    w.sc.end()?;
    Ok(match verdict {
        Verdict::Keep => Outcome::Object(w.output()),
        Verdict::Excluded => Outcome::Excluded,
    })
}

/// What the caller knows about an object about to be walked.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Hint<'h> {
    /// Kind to assume when the object has none.
    pub kind: Option<&'h str>,
    /// apiVersion to assume when the object has none.
    pub(crate) api_version: Option<&'h str>,
    /// A top-level object (or list item): excludes apply.
    pub(crate) top: bool,
}

/// Whether an object stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Keep it (rewritten).
    Keep,
    /// Drop it.
    Excluded,
}

#[derive(Deserialize, Default)]
struct MetaLite {
    #[serde(default)]
    name: String,
    #[serde(default)]
    labels: Option<std::collections::BTreeMap<String, serde_json::Value>>,
}

/// The top-level `apiVersion`, `kind` and `metadata` span of an object, read ahead.
struct Head<'a> {
    api_version: Option<Cow<'a, str>>,
    kind: Option<Cow<'a, str>>,
    has_items: bool,
    /// The memo holds this head (found there or just noted; see [`memo::Memo::head`]).
    current: bool,
}

impl<'r, 'a> Walker<'r, 'a> {
    /// Reads `apiVersion` and `kind` ahead. With `typed`, stops at the first other member: the
    /// server writes typed objects with `kind` and `apiVersion` first, and list items of
    /// built-in kinds carry neither (their kind comes from the list). A head like the last
    /// one read is found by its bytes.
    fn head(&mut self, want_items: bool, typed: bool) -> Result<Head<'a>> {
        let mut sc = self.sc.clone();
        let input = sc.input();
        let at = sc.pos();
        if !want_items && let Some((v, k)) = self.memo.head(&input[at..]) {
            let text = |r: Range<usize>| {
                std::str::from_utf8(&input[at + r.start..at + r.end])
                    .ok()
                    .map(Cow::Borrowed)
            };
            return Ok(Head {
                api_version: text(v),
                kind: text(k),
                has_items: false,
                current: true,
            });
        }
        let mut head = Head {
            api_version: None,
            kind: None,
            has_items: false,
            current: false,
        };
        // Where the texts of the two lie when both are plain strings: the head is kept for
        // the next object when they are its first two members.
        let mut texts: [Option<Range<usize>>; 2] = [None, None];
        let plain = |s: &Option<Str<'a>>| match s {
            Some(s) if matches!(s.text, Cow::Borrowed(_)) => Some(s.start + 1 - at..s.end - 1 - at),
            _ => None,
        };
        sc.begin_object()?;
        let mut first = true;
        let mut n = 0;
        while let Some(raw) = sc.next_key_raw(&mut first)? {
            n += 1;
            let mut decoded = None;
            match sc.key_bytes(&raw, &mut decoded)? {
                b"apiVersion" => {
                    let s = sc.string_or_skip()?;
                    texts[0] = plain(&s);
                    head.api_version = s.map(|s| s.text);
                }
                b"kind" => {
                    let s = sc.string_or_skip()?;
                    texts[1] = plain(&s);
                    head.kind = s.map(|s| s.text);
                }
                b"items" => {
                    head.has_items = sc.peek()? == b'[';
                    sc.skip_value()?;
                }
                _ if typed => break,
                _ => {
                    sc.skip_value()?;
                }
            }
            if head.api_version.is_some() && head.kind.is_some() && (!want_items || head.has_items) {
                if let [Some(v), Some(k)] = texts
                    && n == 2
                    && !want_items
                {
                    self.memo.note_head(&input[at..sc.pos()], v, k);
                    head.current = true;
                }
                break;
            }
        }
        Ok(head)
    }

    fn metadata_lite(&self) -> Result<MetaLite> {
        let mut sc = self.sc.clone();
        sc.begin_object()?;
        let mut first = true;
        while let Some(k) = sc.next_key(&mut first)? {
            let (s, e) = sc.skip_value()?;
            if k.text == "metadata" {
                return Ok(serde_json::from_slice(&sc.input()[s..e]).unwrap_or_default());
            }
        }
        Ok(MetaLite::default())
    }

    /// True when an object the server holds as (`group`, `kind`) is hidden from clients.
    fn excluded(&self, group: &str, kind: &str) -> Result<bool> {
        if self.rules.is_excluded_kind(group, kind) {
            return Ok(true);
        }
        let matching: Vec<_> = self.excludes(group, kind).collect();
        if matching.is_empty() {
            return Ok(false);
        }
        let meta = self.metadata_lite()?;
        Ok(matching.iter().any(|e| {
            (e.names.is_empty() || e.names.contains(&meta.name))
                && e.labels.iter().all(|(k, v)| {
                    meta.labels
                        .as_ref()
                        .and_then(|l| l.get(k))
                        .and_then(|x| x.as_str())
                        == Some(v.as_str())
                })
        }))
    }

    /// The exclude rules that may hide an object held as (`group`, `kind`), by its name or
    /// labels.
    fn excludes<'s>(&'s self, group: &'s str, kind: &'s str) -> impl Iterator<Item = &'r Exclude> + 's {
        self.rules
            .excludes
            .iter()
            .filter(move |e| e.kinds.is_empty() || e.kinds.iter().any(|k| k == kind))
            .filter(move |e| e.api_groups.is_empty() || e.api_groups.iter().any(|g| g == group))
    }

    /// True when no object held as (`group`, `kind`) is ever hidden.
    fn never_excluded(&self, group: &str, kind: &str) -> bool {
        !self.rules.is_excluded_kind(group, kind) && self.excludes(group, kind).next().is_none()
    }

    /// The (group, kind) the server holds the request's resource as (for excludes).
    fn request_kind(&self) -> Option<(String, String)> {
        let (g, k) = self.kind_hint?;
        Some(match self.rules.group(g) {
            Some(grp) if grp.resource_by_kind(k).is_some() => {
                (grp.renamed.clone(), format!("{}{k}", self.rules.kind_prefix))
            }
            _ => (g.to_owned(), k.to_owned()),
        })
    }

    /// True when the request is about CRDs (Tables then carry CRD names in their rows).
    fn crd_context(&self) -> bool {
        self.kind_hint
            .as_ref()
            .is_some_and(|&(g, k)| g == "apiextensions.k8s.io" && k == "CustomResourceDefinition")
    }

    /// Rewrites the object at the current position, dispatching on its kind.
    pub(crate) fn object(&mut self, hint: &Hint<'_>) -> Result<Verdict> {
        if self.sc.peek()? != b'{' {
            self.sc.skip_value()?;
            return Ok(Verdict::Keep);
        }
        let typed = hint.top && hint.kind.is_some() && self.dir == Direction::Restore;
        let head = self.head(false, typed)?;
        // The same head as the last object's: the same plan, unless more than the head chose it.
        if head.current
            && let Some(plan) = self.memo.plan(hint.top, self.group_hint)
        {
            self.node(&plan)?;
            return Ok(Verdict::Keep);
        }
        let av = head.api_version.as_deref().or(hint.api_version);
        let kind = head.kind.as_deref().or(hint.kind);
        let (group, _) = av.map(split_api_version).unwrap_or(("", ""));
        let kind = kind.unwrap_or("");
        // The kind and group as the original side names them.
        let (og, ok) = match self.dir {
            Direction::Rename => (group, kind),
            Direction::Restore => {
                match crate::rules::gvk::restore_group_kind(self.rules, group, Some(kind), self.group_hint) {
                    Some((g, k)) => (g.original.as_str(), k.unwrap_or(kind)),
                    None => (group, kind),
                }
            }
        };
        // Excludes hide top-level objects (and list items) from clients.
        let checked = self.dir == Direction::Restore && hint.top;
        if checked {
            // Metadata-only objects say nothing of their kind: the request's resource does.
            let request = (group == "meta.k8s.io" && kind == "PartialObjectMetadata")
                .then(|| self.request_kind())
                .flatten();
            let (eg, ek) = request
                .as_ref()
                .map_or((group, kind), |(g, k)| (g.as_str(), k.as_str()));
            if self.excluded(eg, ek)? {
                self.sc.skip_value()?;
                return Ok(Verdict::Excluded);
            }
        }
        match (og, ok) {
            ("", "Status") => self.dom(|me, v| status::restore(me.rules, me.dir, v))?,
            ("", "APIGroupList" | "APIGroup" | "APIResourceList")
            | ("apidiscovery.k8s.io", "APIGroupDiscoveryList") => {
                self.dom(|me, v| discovery::rewrite(me.rules, me.dir, v, me.group_hint))?
            }
            ("apiextensions.k8s.io", "CustomResourceDefinition") => return self.crd(),
            ("meta.k8s.io", "Table") if self.crd_context() => {
                self.dom(|me, v| crd::table(me.rules, me.dir, v))?
            }
            ("meta.k8s.io", "Table") if self.dir == Direction::Restore => self.table()?,
            (_, k) if k.ends_with("List") && self.head(true, false)?.has_items => {
                let item_kind = kind.strip_suffix("List").unwrap_or(kind).to_owned();
                let av = av.map(str::to_owned);
                self.list(&item_kind, av.as_deref())?;
            }
            (g, k) => {
                let plan = self.rules.plans.get(g, k);
                // Chosen by the head alone (no exclude looks further, no other kind of walk may
                // take its place): remembered with it.
                if head.current
                    && g != "meta.k8s.io"
                    && !k.ends_with("List")
                    && (!checked || self.never_excluded(group, kind))
                {
                    self.memo.note_plan(hint.top, self.group_hint, plan);
                }
                self.node(plan)?;
            }
        }
        Ok(Verdict::Keep)
    }

    /// A list: envelope `apiVersion`/`kind` rewritten, items dispatched, excluded items dropped.
    fn list(&mut self, item_kind: &str, av: Option<&str>) -> Result<()> {
        self.sc.begin_object()?;
        let mut first = true;
        let mut version = None;
        let mut kind = None;
        while let Some(key) = self.sc.next_key(&mut first)? {
            match key.text.as_ref() {
                "apiVersion" => version = self.sc.string_or_skip()?,
                "kind" => kind = self.sc.string_or_skip()?,
                "items" if self.sc.peek()? == b'[' => {
                    let hint = Hint {
                        kind: Some(item_kind),
                        api_version: av,
                        top: true,
                    };
                    self.items(&hint)?;
                }
                _ => {
                    self.sc.skip_value()?;
                }
            }
        }
        let k = kind.as_ref().map(|k| k.text.as_ref());
        let v = version.as_ref().map(|v| v.text.as_ref());
        let (nv, nk) = crate::rules::gvk::rewrite_gvk(self.rules, self.dir, v, k, self.group_hint);
        if let (Some(s), Some(n)) = (version, nv) {
            self.edits.replace_quoted(s.start, s.end, &n);
        }
        if let (Some(s), Some(n)) = (kind, nk) {
            self.edits.replace_quoted(s.start, s.end, &n);
        }
        Ok(())
    }

    /// Array elements dispatched as objects; dropped ones are cut out with their commas.
    fn items(&mut self, hint: &Hint<'_>) -> Result<()> {
        self.sc.begin_array()?;
        let mut first = true;
        let mut spans: Vec<Element> = Vec::new();
        while self.sc.next_elem(&mut first)? {
            self.sc.ws();
            let start = self.sc.pos();
            let mark = self.edits.len();
            let v = self.object(hint)?;
            let end = self.sc.pos();
            if v == Verdict::Excluded {
                self.edits.truncate(mark);
            }
            spans.push(Element {
                start,
                end,
                dropped: v == Verdict::Excluded,
            });
        }
        drop_elements(&mut self.edits, &spans);
        Ok(())
    }
}

/// Where one array element lies in the input, and whether it is dropped.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Element {
    /// Offset of its first byte.
    pub(crate) start: usize,
    /// Offset just past its last byte.
    pub(crate) end: usize,
    /// Cut out of the output (an excluded object).
    pub(crate) dropped: bool,
}

/// Records deletions for dropped array elements so that the separators stay valid.
pub(crate) fn drop_elements(edits: &mut crate::json::Edits, spans: &[Element]) {
    let Some(last_kept) = spans.iter().rposition(|s| !s.dropped) else {
        if let (Some(f), Some(l)) = (spans.first(), spans.last()) {
            edits.delete(f.start, l.end);
        }
        return;
    };
    for i in 0..spans.len() {
        if !spans[i].dropped {
            continue;
        }
        if i < last_kept {
            edits.delete(spans[i].start, spans[i + 1].start);
        }
    }
    if last_kept + 1 < spans.len() {
        edits.delete(spans[last_kept].end, spans[spans.len() - 1].end);
    }
}

/// `group/version` → (group, version); core `v1` → ("", "v1").
pub(crate) fn split_api_version(av: &str) -> (&str, &str) {
    av.split_once('/').unwrap_or(("", av))
}

/// Checks a single document for validity without rewriting it.
pub fn validate(input: &[u8]) -> Result<()> {
    let mut sc = Scanner::new(input);
    sc.skip_value()?;
    sc.end()?;
    Ok(())
}
