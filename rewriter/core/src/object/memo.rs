//! Rewrites of small leaves remembered by their bytes.
//!
//! The items of a LIST (and the events of a watch) repeat themselves: objects written by the
//! same controller carry the same finalizers and the same managedFields key sets (`f:labels`,
//! `f:annotations`, `f:finalizers`), byte for byte. Such a leaf is rewritten once; later copies
//! are found by their bytes and get the remembered result. Leaves that usually differ from item
//! to item (label maps, whose values hold object names) are not remembered whole; their keys
//! are, one by one ([`KeyHit`]).
//!
//! The last few leaves of each kind are also kept apart ([`Recent`]) and compared with the
//! input ahead before it is scanned at all: a copy met again is neither scanned nor hashed.
//!
//! An item's head (`{"apiVersion":…,"kind":…`) is the same bytes item after item: the last
//! one is kept ([`HeadHit`]) and compared with the input ahead instead of read again, with the
//! plan its kind dispatched to.
//!
//! Subtrees no rule reaches (a VM's `spec`, managedFields' `f:spec`) are skipped like the one
//! last skipped at the same place ([`Place`]): what equals it is compared, not scanned.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::ops::Range;
use std::sync::Arc;

use crate::error::Result;
use crate::json::Scanner;
use crate::json::scan::Reference;
use crate::rules::names::WordHasher;
use crate::rules::plan::{Leaf, Node, Which};
use crate::short_eq;

/// Leaves longer than this are not remembered.
const MAX_LEAF: usize = 2048;
/// Remembered bytes (keys and results) before the memo starts over.
const MAX_BYTES: usize = 1 << 20;

type Map = HashMap<Box<[u8]>, Option<Box<[u8]>>, BuildHasherDefault<WordHasher>>;
type KeyMap = HashMap<Box<[u8]>, KeyHit, BuildHasherDefault<WordHasher>>;
/// A leaf's bytes and its result (`None`: unchanged).
type Remembered = (Box<[u8]>, Option<Box<[u8]>>);

/// Remembered leaf rewrites of one direction: for each raw leaf, its rewritten bytes (`None`:
/// unchanged); and for label and annotation keys, what a map entry's key becomes.
///
/// Empty until the first insert, so that handing a memo from item to item (a `mem::take`) costs
/// a pointer move rather than building and dropping its tables.
#[derive(Debug, Default)]
pub(crate) struct Memo(Option<Box<Tables>>);

/// The tables of a [`Memo`].
#[derive(Debug, Default)]
struct Tables {
    maps: [Map; SLOTS],
    keys: [KeyMap; 2],
    cursors: [KeyCursor; 2],
    recent: [Recent; SLOTS],
    bytes: usize,
    places: Vec<Place>,
    gvks: Vec<GvkHit>,
    /// The entry of `gvks` replaced next once it is full.
    gvk_next: usize,
    head: Option<HeadHit>,
}

/// The head of the last object read ahead: its bytes from `{` through the second of its
/// `apiVersion` and `kind` members (both plain strings), and where their texts lie in them.
/// Input that starts with these bytes has the same two members first: nothing else is read to
/// find them.
#[derive(Debug)]
struct HeadHit {
    bytes: Box<[u8]>,
    version: Range<usize>,
    kind: Range<usize>,
    /// The plan objects with this head were walked by, when nothing but the head chose it.
    plan: Option<Dispatch>,
}

/// A plan chosen by an object's head, for a top-level object or not and a request's group.
#[derive(Debug)]
struct Dispatch {
    top: bool,
    group_hint: Option<Box<str>>,
    plan: Arc<Node>,
}

/// The longest head kept.
const MAX_HEAD: usize = 512;

/// The new bytes of a restored `apiVersion` and `kind` (`None`: unchanged).
pub(crate) type NewGvk<'m> = (Option<&'m [u8]>, Option<&'m [u8]>);

/// `apiVersion`/`kind` pairs remembered (an item's own, its owners'), and the longest string
/// of one.
const GVKS: usize = 8;
const MAX_GVK: usize = 256;

/// An `apiVersion`/`kind` pair restored: its bytes (quotes included; no kind: empty), the
/// request's group it was restored for, and its new bytes (`None`: unchanged).
#[derive(Debug)]
struct GvkHit {
    version: Box<[u8]>,
    kind: Box<[u8]>,
    hint: Option<Box<str>>,
    new_version: Option<Box<[u8]>>,
    new_kind: Option<Box<[u8]>>,
}

/// A place of the walk where subtrees are skipped (a plan node and a member name), and the
/// subtree last recorded there.
#[derive(Debug)]
struct Place {
    node: usize,
    key: Box<[u8]>,
    /// A skip was seen here: the first is not recorded (a lone object never needs it).
    seen: bool,
    /// The subtree here was too large or too deep to keep: skipped plainly.
    plain: bool,
    reference: Option<Reference>,
    /// Skips in a row that found less than half of their bytes equal to the reference.
    misses: u8,
}

/// Places remembered: the subtrees of a kind of object its rules do not reach. A reference
/// holds at most 16 KiB and twice that in marks.
const MAX_PLACES: usize = 16;

/// Skips in a row that mostly differ from the reference before it is recorded anew.
const MAX_MISSES: u8 = 2;

/// Leaves of one slot met lately (at most [`RECENT`]), with their results.
///
/// Found by comparing their bytes with the input ahead of the walk, which needs no scan: a
/// valid JSON value other than a number ends where its own bytes say (a closing bracket or
/// quote, the last letter of a literal), so input that starts with a remembered leaf holds that
/// same leaf, already validated, and nothing longer. Numbers are never remembered here.
#[derive(Debug, Default)]
struct Recent {
    entries: Vec<Remembered>,
    /// The entry replaced next once the list is full.
    next: usize,
}

/// Leaves kept per slot in [`Recent`]: the distinct key sets one kind of object repeats (a
/// VM's managedFields hold two or three `f:labels` sets).
const RECENT: usize = 8;

const SLOTS: usize = 6;

/// What a label or annotation key (one no `name=value` rule names) becomes.
#[derive(Debug, Clone)]
pub(crate) struct KeyHit {
    /// The final name.
    pub(crate) name: Box<str>,
    /// The key's replacement (a JSON string, quotes included), if it changes.
    pub(crate) edit: Option<Box<[u8]>>,
}

/// The keys of the last map of a kind, in order, with what they became: the map of the next
/// item (the same label keys, other values) is matched key by key, without hashing, and when
/// every key is the one expected its names collide as they did before.
#[derive(Debug, Default)]
struct KeyCursor {
    keys: Vec<(Box<[u8]>, Option<KeyHit>)>,
    /// Whether renamed names of exactly `keys` collide, once found out.
    collides: Option<bool>,
}

/// Keys a cursor follows, and the longest it keeps (label keys are at most 317 bytes).
const CURSOR_KEYS: usize = 32;
const CURSOR_KEY_BYTES: usize = 320;

/// The key memo of a map kind.
fn key_slot(w: Which) -> Option<usize> {
    match w {
        Which::Labels => Some(0),
        Which::Annotations => Some(1),
        Which::Finalizers => None,
    }
}

/// The memo slot of a leaf kind, for kinds worth remembering.
pub(crate) fn slot(l: Leaf) -> Option<usize> {
    Some(match l {
        Leaf::FieldsKeys(Which::Labels) => 0,
        Leaf::FieldsKeys(Which::Annotations) => 1,
        Leaf::FieldsValues(Which::Finalizers) => 2,
        Leaf::NameList(Which::Finalizers) => 3,
        Leaf::NameList(Which::Labels) => 4,
        // managedFields entries' apiVersion: the same few values in every item.
        Leaf::ApiVersion => 5,
        _ => return None,
    })
}

impl Memo {
    fn tables(&mut self) -> &mut Tables {
        self.0.get_or_insert_default()
    }

    /// The remembered result for `raw` in `slot`: `Some(None)` when it stays as it is.
    #[inline]
    pub(crate) fn get(&self, slot: usize, raw: &[u8]) -> Option<Option<&[u8]>> {
        if raw.len() > MAX_LEAF {
            return None;
        }
        self.0.as_ref()?.maps[slot].get(raw).map(Option::as_deref)
    }

    /// The remembered leaf of `slot` that `ahead` starts with: its length and its result
    /// (`None`: it stays as it is).
    #[inline]
    pub(crate) fn recent(&self, slot: usize, ahead: &[u8]) -> Option<(usize, Option<&[u8]>)> {
        self.0.as_ref()?.recent[slot]
            .entries
            .iter()
            .find(|(raw, _)| short_eq::starts_with(ahead, raw))
            .map(|(raw, out)| (raw.len(), out.as_deref()))
    }

    /// Keeps `raw` (a complete, valid value that is not a number) and its result among the
    /// recent leaves of `slot`.
    pub(crate) fn note_recent(&mut self, slot: usize, raw: &[u8], out: Option<&[u8]>) {
        if raw.len() > MAX_LEAF || matches!(raw.first(), None | Some(b'-' | b'0'..=b'9')) {
            return;
        }
        let r = &mut self.tables().recent[slot];
        let entry = (raw.into(), out.map(Into::into));
        if r.entries.len() < RECENT {
            r.entries.push(entry);
        } else {
            r.entries[r.next] = entry;
            r.next = (r.next + 1) % RECENT;
        }
    }

    /// Remembers the result for `raw` in `slot`.
    pub(crate) fn insert(&mut self, slot: usize, raw: &[u8], out: Option<Vec<u8>>) {
        if raw.len() > MAX_LEAF {
            return;
        }
        let add = raw.len() + out.as_ref().map_or(0, Vec::len);
        self.make_room(add);
        self.tables().maps[slot].insert(raw.into(), out.map(Vec::into_boxed_slice));
    }

    /// What the raw (unescaped) key `raw` of a `w` map becomes, if remembered.
    #[inline]
    pub(crate) fn key(&self, w: Which, raw: &[u8]) -> Option<&KeyHit> {
        self.0.as_ref()?.keys[key_slot(w)?].get(raw)
    }

    /// What key `i` of a `w` map becomes, if it is `raw` as in the last map of that kind:
    /// `Some(None)` for a key not remembered (its value matters, or it is a directive).
    #[inline]
    pub(crate) fn expected_key(&self, w: Which, i: usize, raw: &[u8]) -> Option<Option<&KeyHit>> {
        let (k, hit) = self.0.as_ref()?.cursors[key_slot(w)?].keys.get(i)?;
        short_eq::eq(k, raw).then_some(hit.as_ref())
    }

    /// Makes the raw key `raw` key `i` of the `w` cursor, with what it becomes if remembered;
    /// the cursor then ends there (nothing when it holds fewer than `i` keys: an earlier key
    /// could not be followed).
    pub(crate) fn follow_key(&mut self, w: Which, i: usize, raw: &[u8]) {
        let Some(slot) = key_slot(w) else { return };
        let t = self.tables();
        let c = &mut t.cursors[slot];
        if c.keys.len() < i {
            return;
        }
        c.keys.truncate(i);
        c.collides = None;
        if i < CURSOR_KEYS && raw.len() <= CURSOR_KEY_BYTES {
            c.keys.push((raw.into(), t.keys[slot].get(raw).cloned()));
        }
    }

    /// Ends the `w` cursor after `n` keys (where a map ended, or before a key not remembered).
    pub(crate) fn end_keys(&mut self, w: Which, n: usize) {
        let Some(slot) = key_slot(w) else { return };
        let Some(t) = self.0.as_mut() else { return };
        let c = &mut t.cursors[slot];
        if c.keys.len() > n {
            c.keys.truncate(n);
            c.collides = None;
        }
    }

    /// Whether the renamed keys of the `w` cursor collide, if found out and if it holds `n`.
    pub(crate) fn collisions(&self, w: Which, n: usize) -> Option<bool> {
        let c = &self.0.as_ref()?.cursors[key_slot(w)?];
        (c.keys.len() == n).then_some(c.collides).flatten()
    }

    /// Notes whether the renamed keys of the `w` cursor collide, if it holds `n`.
    pub(crate) fn note_collisions(&mut self, w: Which, n: usize, collides: bool) {
        let Some(slot) = key_slot(w) else { return };
        let Some(t) = self.0.as_mut() else { return };
        let c = &mut t.cursors[slot];
        if c.keys.len() == n {
            c.collides = Some(collides);
        }
    }

    /// The new bytes of an `apiVersion`/`kind` pair restored for the request's group `hint`
    /// (strings with their quotes; no kind: empty), if remembered: `None` for what stays.
    #[inline]
    pub(crate) fn gvk(&self, version: &[u8], kind: &[u8], hint: Option<&str>) -> Option<NewGvk<'_>> {
        self.0
            .as_ref()?
            .gvks
            .iter()
            .find(|g| *g.version == *version && *g.kind == *kind && g.hint.as_deref() == hint)
            .map(|g| (g.new_version.as_deref(), g.new_kind.as_deref()))
    }

    /// Remembers the new bytes of an `apiVersion`/`kind` pair (see [`Memo::gvk`]).
    pub(crate) fn note_gvk(
        &mut self,
        version: &[u8],
        kind: &[u8],
        hint: Option<&str>,
        new_version: Option<Vec<u8>>,
        new_kind: Option<Vec<u8>>,
    ) {
        if version.len() > MAX_GVK || kind.len() > MAX_GVK {
            return;
        }
        let hit = GvkHit {
            version: version.into(),
            kind: kind.into(),
            hint: hint.map(Into::into),
            new_version: new_version.map(Vec::into_boxed_slice),
            new_kind: new_kind.map(Vec::into_boxed_slice),
        };
        let t = self.tables();
        if t.gvks.len() < GVKS {
            t.gvks.push(hit);
        } else {
            t.gvks[t.gvk_next] = hit;
            t.gvk_next = (t.gvk_next + 1) % GVKS;
        }
    }

    /// Where the texts of `apiVersion` and `kind` lie in `ahead`, if it starts with the head
    /// last noted.
    #[inline]
    pub(crate) fn head(&self, ahead: &[u8]) -> Option<(Range<usize>, Range<usize>)> {
        let h = self.0.as_ref()?.head.as_ref()?;
        ahead
            .starts_with(&h.bytes)
            .then(|| (h.version.clone(), h.kind.clone()))
    }

    /// Keeps `bytes`, an object's head (see [`Memo::head`]), with where the texts of its
    /// `apiVersion` and `kind` lie in it.
    pub(crate) fn note_head(&mut self, bytes: &[u8], version: Range<usize>, kind: Range<usize>) {
        if bytes.len() > MAX_HEAD {
            return;
        }
        let t = self.tables();
        match &mut t.head {
            Some(h) if *h.bytes == *bytes => {}
            head => {
                *head = Some(HeadHit {
                    bytes: bytes.into(),
                    version,
                    kind,
                    plan: None,
                });
            }
        }
    }

    /// The plan the head last noted chose, for a top-level object or not (`top`) and the
    /// request's group `group_hint`.
    #[inline]
    pub(crate) fn plan(&self, top: bool, group_hint: Option<&str>) -> Option<Arc<Node>> {
        let d = self.0.as_ref()?.head.as_ref()?.plan.as_ref()?;
        (d.top == top && d.group_hint.as_deref() == group_hint).then(|| Arc::clone(&d.plan))
    }

    /// Notes the plan the head last noted chose (see [`Memo::plan`]).
    pub(crate) fn note_plan(&mut self, top: bool, group_hint: Option<&str>, plan: &Arc<Node>) {
        if let Some(h) = self.0.as_mut().and_then(|t| t.head.as_mut()) {
            h.plan = Some(Dispatch {
                top,
                group_hint: group_hint.map(Into::into),
                plan: Arc::clone(plan),
            });
        }
    }

    /// Remembers what the raw key `raw` of a `w` map becomes.
    pub(crate) fn insert_key(&mut self, w: Which, raw: &[u8], hit: KeyHit) {
        let Some(slot) = key_slot(w) else { return };
        if raw.len() > MAX_LEAF {
            return;
        }
        self.make_room(raw.len() + hit.name.len() + hit.edit.as_ref().map_or(0, |e| e.len()));
        self.tables().keys[slot].insert(raw.into(), hit);
    }

    /// Skips the container at the scanner's position, the member `key` of an object walked by
    /// plan node `node`, like the one skipped there before: its span.
    pub(crate) fn skip_at(
        &mut self,
        sc: &mut Scanner<'_>,
        node: usize,
        key: &[u8],
    ) -> Result<(usize, usize)> {
        let places = &mut self.tables().places;
        let i = match places.iter().position(|p| p.node == node && *p.key == *key) {
            Some(i) => i,
            None if places.len() < MAX_PLACES => {
                places.push(Place {
                    node,
                    key: key.into(),
                    seen: false,
                    plain: false,
                    reference: None,
                    misses: 0,
                });
                places.len() - 1
            }
            None => return Ok(sc.skip_value()?),
        };
        let place = &mut places[i];
        if place.plain || !std::mem::replace(&mut place.seen, true) {
            return Ok(sc.skip_value()?);
        }
        match &place.reference {
            Some(r) if place.misses < MAX_MISSES => {
                let (span, equal) = sc.skip_like(r)?;
                if equal * 2 < span.1 - span.0 {
                    place.misses += 1;
                } else {
                    place.misses = 0;
                }
                Ok(span)
            }
            _ => {
                let (span, r) = sc.skip_recording()?;
                place.plain = r.is_none();
                place.reference = r;
                place.misses = 0;
                Ok(span)
            }
        }
    }

    /// Starts over when `add` more bytes would take the memo past its bound.
    fn make_room(&mut self, add: usize) {
        let t = self.tables();
        if t.bytes + add > MAX_BYTES {
            t.maps.iter_mut().for_each(Map::clear);
            t.keys.iter_mut().for_each(KeyMap::clear);
            t.bytes = 0;
        }
        t.bytes += add;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{Context, rewrite};
    use crate::stream::ListRewriter;
    use crate::{Direction, Rules};

    fn vm(name: &str, extra_label: &str) -> String {
        format!(
            r#"{{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachine","metadata":{{"name":"{name}","finalizers":["kubevirt.internal.virtualization.deckhouse.io/f"],"managedFields":[{{"apiVersion":"internal.virtualization.deckhouse.io/v1","fieldsV1":{{"f:metadata":{{"f:finalizers":{{"v:\"kubevirt.internal.virtualization.deckhouse.io/f\"":{{}}}},"f:labels":{{"f:kubevirt.internal.virtualization.deckhouse.io/a":{{}}{extra_label}}}}}}}}}]}}}}"#
        )
    }

    /// `items` restored as one streamed LIST (the memo carried from item to item), and each
    /// restored alone.
    fn streamed_and_alone(items: &[String]) -> (String, Vec<String>) {
        let rules = Rules::builtin_kubevirt();
        let body = format!(
            r#"{{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachineList","items":[{}]}}"#,
            items.join(",")
        );
        let mut lr = ListRewriter::new(&rules, Direction::Restore, Context::default());
        let mut out = Vec::new();
        lr.feed(body.as_bytes(), &mut out).unwrap();
        lr.finish(&mut out).unwrap();
        let alone = items
            .iter()
            .map(|i| {
                let o = rewrite(&rules, Direction::Restore, i.as_bytes(), &Context::default()).unwrap();
                String::from_utf8(o.bytes().unwrap().to_vec()).unwrap()
            })
            .collect();
        (String::from_utf8(out).unwrap(), alone)
    }

    /// A VM with a `spec` no rule reaches, `disks` disks long, broken when `broken`.
    fn vm_spec(name: &str, disks: usize, broken: bool) -> String {
        let disks: Vec<String> = (0..disks)
            .map(|i| format!(r#"{{"name":"{name}-disk-{i}","disk":{{"bus":"virtio"}},"bootOrder":{i}}}"#))
            .collect();
        let tail = if broken { "]" } else { "}" };
        format!(
            r#"{{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachine","metadata":{{"name":"{name}"}},"spec":{{"domain":{{"cpu":{{"cores":1}},"devices":{{"disks":[{}],"rng":{{}}}}}},"hostname":"{name}"{tail}}}"#,
            disks.join(",")
        )
    }

    #[test]
    fn subtrees_skipped_like_the_last_give_what_a_fresh_walk_gives() {
        let items: Vec<String> = [
            ("a", 1),
            ("b", 1),
            ("cc", 2),
            ("d", 0),
            ("e", 3),
            ("f", 1),
            ("g", 1),
        ]
        .iter()
        .map(|(n, d)| vm_spec(n, *d, false))
        .collect();
        let (out, alone) = streamed_and_alone(&items);
        assert!(out.contains(&alone.join(",")), "{out}");
        assert!(out.contains(r#""hostname":"e"}"#), "{out}");
    }

    #[test]
    fn a_broken_subtree_after_like_ones_is_an_error() {
        let rules = Rules::builtin_kubevirt();
        let mut items: Vec<String> = ["a", "b", "c"].iter().map(|n| vm_spec(n, 2, false)).collect();
        items.push(vm_spec("d", 2, true));
        let body = format!(
            r#"{{"kind":"InternalVirtualizationVirtualMachineList","items":[{}]}}"#,
            items.join(",")
        );
        let mut lr = ListRewriter::new(&rules, Direction::Restore, Context::default());
        let mut out = Vec::new();
        let err = lr
            .feed(body.as_bytes(), &mut out)
            .and_then(|()| lr.finish(&mut out))
            .expect_err("a broken item");
        let alone = rewrite(
            &rules,
            Direction::Restore,
            items[3].as_bytes(),
            &Context::default(),
        )
        .expect_err("a broken item");
        let item_at = body.find(&items[3]).unwrap();
        assert_eq!(
            err.offset(),
            alone.offset().map(|o| item_at + o),
            "{err} / {alone}"
        );
    }

    #[test]
    fn remembered_leaves_give_what_a_fresh_walk_gives() {
        let items = [vm("a", ""), vm("b", ""), vm("c", r#","f:app":{}"#), vm("d", "")];
        let (out, alone) = streamed_and_alone(&items);
        assert!(out.contains(&alone.join(",")), "{out}");
        assert!(
            out.contains(r#""f:labels":{"f:kubevirt.io/a":{},"f:app":{}}"#),
            "{out}"
        );
        assert!(!out.contains("kubevirt.internal"), "{out}");
    }

    #[test]
    fn remembered_label_keys_give_what_a_fresh_walk_gives() {
        // The same keys item after item: renamed, kept, a `name=value` key whose value changes
        // (and is once not a string), an escaped spelling, a key that collides once renamed,
        // and annotations that share a label's key but not its rules.
        let item = |name: &str, managed_by: &str, extra: &str| {
            format!(
                r#"{{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachine","metadata":{{"name":"{name}","labels":{{"kubevirt.internal.virtualization.deckhouse.io/a":"1","app":"x","app.kubernetes.io/managed-by":{managed_by}{extra}}},"annotations":{{"kubevirt.internal.virtualization.deckhouse.io/a":"2","app.kubernetes.io/managed-by":{managed_by}}}}}}}"#
            )
        };
        let items = [
            item("a", r#""virt-operator-internal-virtualization""#, ""),
            item("b", "null", ""),
            item("c", r#""someone-else""#, ""),
            item(
                "d",
                r#""virt-operator-internal-virtualization""#,
                r#","kubevirt.io/a":"3""#,
            ),
            item(
                "e",
                r#""kubevirt-operator-internal-virtualization""#,
                r#","kubevirt.internal.virtualization.deckhouse.io\/b":"4""#,
            ),
            item(
                "f",
                r#""virt-operator-internal-virtualization""#,
                r#","kubevirt.internal.virtualization.deckhouse.io/b":"5""#,
            ),
        ];
        let (out, alone) = streamed_and_alone(&items);
        assert!(out.contains(&alone.join(",")), "{alone:?}\nnot in\n{out}");
        assert!(
            out.contains(r#""app.kubernetes.io/managed-by":"virt-operator""#),
            "{out}"
        );
        assert!(
            out.contains(r#""app.kubernetes.io/managed-by":"someone-else""#),
            "{out}"
        );
    }

    #[test]
    fn leaves_met_again_keep_their_verdicts() {
        // Two managedFields entries in one object: the second one's leaves are found among
        // the recent ones. A number is never taken for a longer one, and a copy followed by
        // stray bytes fails where a scan from scratch fails.
        let rules = Rules::builtin_kubevirt();
        let entry = |api: &str, tail: &str| {
            format!(
                r#"{{"apiVersion":{api},"fieldsV1":{{"f:metadata":{{"f:labels":{{"f:kubevirt.internal.virtualization.deckhouse.io/a":{{}}}}{tail}}}}}}}"#
            )
        };
        let doc = |second: &str| {
            format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"a","managedFields":[{},{second}]}}}}"#,
                entry("1", "")
            )
        };
        let ok = doc(&entry("12", ""));
        let out = rewrite(&rules, Direction::Restore, ok.as_bytes(), &Context::default()).unwrap();
        let out = String::from_utf8(out.bytes().unwrap().to_vec()).unwrap();
        assert_eq!(
            out.matches(r#""f:labels":{"f:kubevirt.io/a":{}}"#).count(),
            2,
            "{out}"
        );
        assert!(out.contains(r#"{"apiVersion":12,"#), "{out}");

        let bad = doc(&entry("1", "}"));
        let err = rewrite(&rules, Direction::Restore, bad.as_bytes(), &Context::default()).unwrap_err();
        let stray = bad.rfind("}]").unwrap();
        assert!(serde_json::from_str::<serde_json::Value>(&bad).is_err());
        assert_eq!(err.offset(), Some(stray), "{err}");
    }

    #[test]
    fn remembered_heads_give_what_a_fresh_walk_gives() {
        // Heads repeat item after item, and between them come heads that choose no plan of
        // their own: an original KubeVirt kind (hidden), and a list whose kind says `List`.
        let rules = Rules::builtin_kubevirt();
        let original = r#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"o"}}"#;
        let inner = r#"{"apiVersion":"v1","kind":"ConfigMapList","items":[{"metadata":{"name":"c","labels":{"kubevirt.internal.virtualization.deckhouse.io/x":"1"}}}]}"#;
        let kept = [
            vm("a", ""),
            vm("b", ""),
            vm("c", ""),
            inner.to_owned(),
            inner.to_owned(),
        ];
        let all = [
            kept[0].clone(),
            kept[1].clone(),
            original.to_owned(),
            original.to_owned(),
            kept[2].clone(),
            kept[3].clone(),
            kept[4].clone(),
        ];
        let list = |items: &[String]| {
            format!(
                r#"{{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachineList","items":[{}]}}"#,
                items.join(",")
            )
        };
        let mut lr = ListRewriter::new(&rules, Direction::Restore, Context::default());
        let mut out = Vec::new();
        lr.feed(list(&all).as_bytes(), &mut out).unwrap();
        lr.finish(&mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        let alone: Vec<String> = kept
            .iter()
            .map(|i| {
                let o = rewrite(&rules, Direction::Restore, i.as_bytes(), &Context::default()).unwrap();
                String::from_utf8(o.bytes().unwrap().to_vec()).unwrap()
            })
            .collect();
        assert!(out.contains(&alone.join(",")), "{alone:?}\nnot in\n{out}");
        assert!(!out.contains(r#""name":"o""#), "{out}");
        assert_eq!(out.matches(r#""kubevirt.io/x":"1""#).count(), 2, "{out}");
    }

    #[test]
    fn memo_is_bounded() {
        let mut m = Memo::default();
        let big = vec![b'x'; MAX_LEAF];
        for i in 0..(2 * MAX_BYTES / MAX_LEAF) {
            let mut k = big.clone();
            k[..8].copy_from_slice(&(i as u64).to_le_bytes());
            m.insert(0, &k, None);
        }
        assert!(m.0.as_ref().unwrap().bytes <= MAX_BYTES);
        assert!(m.get(0, &vec![b'x'; MAX_LEAF + 1]).is_none());
    }
}
