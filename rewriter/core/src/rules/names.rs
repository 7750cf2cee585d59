//! Renaming of label, annotation and finalizer names (and values), as the Go rewriter does it.
//!
//! Rename order: a `preserved-original-` name loses the marker and nothing else; then an exact
//! `name=value` rule; then an exact name rule; then a prefix rule on the part before the first `/`.
//! Restore turns names that are *original* (some rename rule would fire on them) into
//! `preserved-original-<name>`, so that original-namespace labels on shared objects survive a
//! round trip, and otherwise applies the rules backwards.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::Direction;
use crate::short_eq;

/// Marker for original-looking names that the server holds as they are.
pub(crate) const PRESERVED_PREFIX: &str = "preserved-original-";

/// A compiled set of name rules for one of labels, annotations or finalizers.
#[derive(Debug, Default, Clone)]
pub struct NameRules {
    /// Exact names, both directions (`[FWD]`, `[BACK]`): one lookup serves a restore, which
    /// asks both whether the name is original and what it was renamed from.
    names: FastMap<[NameEntry; 2]>,
    /// Prefixes (the part before the first `/`), both directions.
    prefixes: FastMap<[Option<String>; 2]>,
    /// Some rule string has a character JSON escapes.
    escapes: bool,
    /// Lengths (mod 64) of the exact names and of the prefixes: most names are turned away
    /// by a bit test before any hashing.
    name_lens: u64,
    prefix_lens: u64,
    /// Lengths (mod 64) of the names of `name=value` rules.
    pair_lens: u64,
}

/// The length bit of `s` in a length set.
#[inline(always)]
fn len_bit(s: &str) -> u64 {
    1 << (s.len() % 64)
}

/// Index of original → renamed entries.
const FWD: usize = 0;
/// Index of renamed → original entries.
const BACK: usize = 1;

/// What one name's lookups found: its exact entries and, with the rest of the name, its
/// prefix entries.
type Found<'r, 'a> = (
    Option<&'r [NameEntry; 2]>,
    Option<(&'r [Option<String>; 2], &'a str)>,
);

#[derive(Debug, Default, Clone)]
struct NameEntry {
    /// The new name for any value.
    to: Option<String>,
    /// (value, new name, new value) for `name=value` rules.
    pairs: Vec<(String, String, String)>,
}

/// A map keyed by short trusted strings, hashed a word at a time.
pub(crate) type FastMap<V> = HashMap<String, V, BuildHasherDefault<WordHasher>>;

/// A multiply-rotate hash over 8-byte words (FxHash's recipe). Label keys are trusted (rule
/// files, objects the apiserver validated) and up to ~70 bytes long; SipHash and byte-wise
/// FNV dominated profiles of label lookups.
#[derive(Default)]
pub(crate) struct WordHasher(u64);

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut h = self.0;
        let mut body = bytes;
        if bytes.len() >= 64 {
            // Four lanes over 32-byte blocks: the remembered leaves (managedFields key sets,
            // up to 2 KiB) would otherwise wait on one multiply per word in a row.
            let mut lanes = [h, h ^ 1, h ^ 2, h ^ 3];
            let mut blocks = bytes.chunks_exact(32);
            for b in &mut blocks {
                for (lane, w) in lanes.iter_mut().zip(b.chunks_exact(8)) {
                    let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
                    *lane = (lane.rotate_left(5) ^ w).wrapping_mul(K);
                }
            }
            h = lanes
                .iter()
                .fold(h, |h, &l| (h.rotate_left(5) ^ l).wrapping_mul(K));
            body = blocks.remainder();
        }
        let mut chunks = body.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
            h = (h.rotate_left(5) ^ w).wrapping_mul(K);
        }
        let mut tail = [0u8; 8];
        let rest = chunks.remainder();
        tail[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(tail) ^ (bytes.len() as u64)).wrapping_mul(K);
        self.0 = h;
    }
}

/// A (name, value) pair after renaming; values are borrowed where unchanged.
pub(crate) type Renamed<'a> = (Cow<'a, str>, Cow<'a, str>);

/// One rule, as given to [`NameRules::add_name`] and [`NameRules::add_prefix`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct NameRule<'a> {
    /// Original name (or prefix).
    pub(crate) original: &'a str,
    /// Renamed name (or prefix).
    pub(crate) renamed: &'a str,
    /// Original value; empty unless the rule matches a `name=value` pair.
    pub(crate) original_value: &'a str,
    /// Renamed value.
    pub(crate) renamed_value: &'a str,
}

/// Why a rule could not be added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Collision(pub String);

impl NameRules {
    /// Adds an exact-name rule (a `name=value` rule when values are given).
    pub(crate) fn add_name(&mut self, r: NameRule<'_>) -> Result<(), Collision> {
        self.note_rule(&r, false);
        if r.original.is_empty() || r.renamed.is_empty() {
            return Err(Collision(
                "a name rule needs both `original` and `renamed`".into(),
            ));
        }
        if !r.original_value.is_empty() || !r.renamed_value.is_empty() {
            let show = |n: &str, v: &str| format!("{n}={v}");
            add_pair(
                &mut self.names,
                FWD,
                r.original,
                r.original_value,
                r.renamed,
                r.renamed_value,
                show,
            )?;
            add_pair(
                &mut self.names,
                BACK,
                r.renamed,
                r.renamed_value,
                r.original,
                r.original_value,
                show,
            )
        } else {
            set_name(&mut self.names, FWD, r.original, r.renamed)?;
            set_name(&mut self.names, BACK, r.renamed, r.original)
        }
    }

    /// Adds a prefix rule (matches the part of a name before its first `/`).
    pub(crate) fn add_prefix(&mut self, r: NameRule<'_>) -> Result<(), Collision> {
        self.note_rule(&r, true);
        if r.original.is_empty() || r.renamed.is_empty() {
            return Err(Collision(
                "a prefix rule needs both `original` and `renamed`".into(),
            ));
        }
        if r.original.contains('/') || r.renamed.contains('/') {
            return Err(Collision(format!("prefix {:?} must not contain '/'", r.original)));
        }
        insert_unique(&mut self.prefixes, FWD, r.original, r.renamed)?;
        insert_unique(&mut self.prefixes, BACK, r.renamed, r.original)
    }

    fn note_rule(&mut self, r: &NameRule<'_>, prefix: bool) {
        use crate::json::escape::needs_escape;
        let lens = if prefix {
            &mut self.prefix_lens
        } else {
            &mut self.name_lens
        };
        *lens |= len_bit(r.original) | len_bit(r.renamed);
        if !prefix && (!r.original_value.is_empty() || !r.renamed_value.is_empty()) {
            self.pair_lens |= len_bit(r.original) | len_bit(r.renamed);
        }
        self.escapes |= [r.original, r.renamed, r.original_value, r.renamed_value]
            .iter()
            .any(|s| needs_escape(s));
    }

    /// Every original → renamed mapping, as `(original, renamed)` display strings: exact names
    /// (`name=value` for value rules) and prefixes (`prefix/*`), sorted.
    pub(crate) fn mappings(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (name, e) in &self.names {
            let fwd = &e[FWD];
            if let Some(to) = &fwd.to {
                out.push((name.clone(), to.clone()));
            }
            for (v, n, nv) in &fwd.pairs {
                out.push((format!("{name}={v}"), format!("{n}={nv}")));
            }
        }
        for (p, e) in &self.prefixes {
            if let Some(to) = &e[FWD] {
                out.push((format!("{p}/*"), format!("{to}/*")));
            }
        }
        out.sort();
        out
    }

    /// True when no rule string has a character that JSON escapes: the pieces of a rewritten
    /// name that had none need no escaping either.
    pub(crate) fn is_plain(&self) -> bool {
        !self.escapes
    }

    /// True when a `name=value` rule names `name`: only then does its value matter.
    #[inline]
    pub(crate) fn has_value_rules(&self, name: &str) -> bool {
        self.pair_lens & len_bit(name) != 0
            && self
                .names
                .get(name)
                .is_some_and(|e| e.iter().any(|d| !d.pairs.is_empty()))
    }

    /// Original → renamed. `value` is `""` for finalizers and keys without a value.
    pub fn rename<'a>(&self, name: &'a str, value: &'a str) -> Renamed<'a> {
        owned(name, value, self.pieces(Direction::Rename, name, value))
    }

    /// Renamed → original; original-looking names become `preserved-original-<name>`.
    pub fn restore<'a>(&self, name: &'a str, value: &'a str) -> Renamed<'a> {
        owned(name, value, self.pieces(Direction::Restore, name, value))
    }

    /// What [`NameRules::rename`] (or, for [`Direction::Restore`], [`NameRules::restore`]) does to a name
    /// and its value, without building strings: `None` when no rule fires; otherwise the new name
    /// as pieces and the new value (`None`: unchanged).
    #[inline]
    pub(crate) fn pieces<'s>(
        &'s self,
        dir: Direction,
        name: &'s str,
        value: &'s str,
    ) -> Option<(Pieces<'s>, Option<&'s str>)> {
        if dir == Direction::Restore {
            let found = self.lookup(name);
            if matches(found, FWD, value) {
                return Some((Pieces([PRESERVED_PREFIX, name, ""]), None));
            }
            apply(found, BACK, value)
        } else {
            if let Some(stripped) = name.strip_prefix(PRESERVED_PREFIX) {
                return Some((Pieces([stripped, "", ""]), None));
            }
            apply(self.lookup(name), FWD, value)
        }
    }

    /// (renamed prefix, original prefix) pairs, for names mentioned in free text.
    pub(crate) fn renamed_prefixes(&self) -> impl Iterator<Item = (&str, &str)> {
        self.prefixes
            .iter()
            .filter_map(|(k, v)| v[BACK].as_deref().map(|o| (k.as_str(), o)))
    }

    #[inline]
    fn lookup<'r, 'a>(&'r self, name: &'a str) -> Found<'r, 'a> {
        let exact = if self.name_lens & len_bit(name) != 0 {
            self.names.get(name)
        } else {
            None
        };
        let prefix = split_prefix(name)
            .filter(|(p, _)| self.prefix_lens & len_bit(p) != 0)
            .and_then(|(p, rest)| self.prefixes.get(p).map(|e| (e, rest)));
        (exact, prefix)
    }

    /// Rewrites a selector requirement `key op (values)`: the key changes by the first value
    /// whose pair rule fires (or by name/prefix rules), and each value is rewritten with the key.
    pub(crate) fn rewrite_requirement(
        &self,
        dir: Direction,
        key: &str,
        values: &[String],
    ) -> (String, Vec<String>) {
        let f = |k: &str, v: &str| -> (String, String) {
            let (k, v) = if dir == Direction::Restore {
                self.restore(k, v)
            } else {
                self.rename(k, v)
            };
            (k.into_owned(), v.into_owned())
        };
        let new_key = values
            .iter()
            .map(|v| f(key, v).0)
            .find(|k| k != key)
            .unwrap_or_else(|| f(key, "").0);
        let new_values = values.iter().map(|v| f(key, v).1).collect();
        (new_key, new_values)
    }
}

/// True when a rule of direction `d` fires on the name looked up, with `value`.
fn matches(found: Found<'_, '_>, d: usize, value: &str) -> bool {
    let (exact, prefix) = found;
    exact.is_some_and(|e| e[d].to.is_some() || e[d].pairs.iter().any(|(ov, _, _)| ov == value))
        || prefix.is_some_and(|(p, _)| p[d].is_some())
}

/// The name (and value) after the rules of direction `d`, if one fires.
#[inline]
fn apply<'s>(found: Found<'s, 's>, d: usize, value: &'s str) -> Option<(Pieces<'s>, Option<&'s str>)> {
    let (exact, prefix) = found;
    if let Some(e) = exact.map(|e| &e[d]) {
        if let Some((_, n, v)) = e.pairs.iter().find(|(ov, _, _)| ov == value) {
            return Some((Pieces([n, "", ""]), Some(v)));
        }
        if let Some(n) = &e.to {
            return Some((Pieces([n, "", ""]), None));
        }
    }
    let (p, rest) = prefix?;
    let p = p[d].as_ref()?;
    Some((Pieces([p, "/", rest]), None))
}

/// A name and value as [`NameRules::rename`] returns them.
fn owned<'a>(name: &'a str, value: &'a str, p: Option<(Pieces<'_>, Option<&str>)>) -> Renamed<'a> {
    match p {
        None => (Cow::Borrowed(name), Cow::Borrowed(value)),
        Some((n, v)) => (
            Cow::Owned(n.concat()),
            v.map_or(Cow::Borrowed(value), |v| Cow::Owned(v.to_owned())),
        ),
    }
}

/// A name built from up to three pieces, so that a rewrite can be written out without
/// allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pieces<'s>(pub [&'s str; 3]);

impl Pieces<'_> {
    /// The name as one string.
    pub(crate) fn concat(&self) -> String {
        self.0.concat()
    }

    /// True when the name equals `s`.
    pub(crate) fn eq_str(&self, s: &str) -> bool {
        let [a, b, c] = self.0;
        let s = s.as_bytes();
        s.len() == a.len() + b.len() + c.len()
            && short_eq::starts_with(s, a.as_bytes())
            && short_eq::starts_with(&s[a.len()..], b.as_bytes())
            && short_eq::ends_with(s, c.as_bytes())
    }
}

fn set_name(
    names: &mut FastMap<[NameEntry; 2]>,
    d: usize,
    name: &str,
    new_name: &str,
) -> Result<(), Collision> {
    let e = &mut names.entry(name.to_owned()).or_default()[d];
    match &e.to {
        Some(old) if old == new_name => Ok(()),
        Some(_) => Err(Collision(format!("{name} is renamed in two different ways"))),
        None => {
            e.to = Some(new_name.to_owned());
            Ok(())
        }
    }
}

/// `prefix/rest` split at the first `/` (a byte search: names are short).
#[inline]
fn split_prefix(name: &str) -> Option<(&str, &str)> {
    // memchr: prefixes are ~45 bytes long, where a byte loop was 2% of a LIST's restore.
    let i = memchr::memchr(b'/', name.as_bytes())?;
    Some((&name[..i], &name[i + 1..]))
}

fn add_pair(
    names: &mut FastMap<[NameEntry; 2]>,
    d: usize,
    name: &str,
    value: &str,
    new_name: &str,
    new_value: &str,
    show: impl Fn(&str, &str) -> String,
) -> Result<(), Collision> {
    let entries = &mut names.entry(name.to_owned()).or_default()[d].pairs;
    match entries.iter().find(|(v, _, _)| v == value) {
        Some((_, n, v)) if n == new_name && v == new_value => Ok(()),
        Some(_) => Err(Collision(format!(
            "{} is renamed in two different ways",
            show(name, value)
        ))),
        None => {
            entries.push((value.to_owned(), new_name.to_owned(), new_value.to_owned()));
            Ok(())
        }
    }
}

fn insert_unique(
    map: &mut FastMap<[Option<String>; 2]>,
    d: usize,
    k: &str,
    v: &str,
) -> Result<(), Collision> {
    let slot = &mut map.entry(k.to_owned()).or_default()[d];
    match slot {
        Some(old) if old == v => Ok(()),
        Some(_) => Err(Collision(format!("{k} is renamed in two different ways"))),
        None => {
            *slot = Some(v.to_owned());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word_hash(bytes: &[u8]) -> u64 {
        let mut h = WordHasher::default();
        h.write(bytes);
        h.finish()
    }

    #[test]
    fn every_byte_of_a_long_key_counts() {
        // Past 64 bytes the hasher runs four lanes; a byte that one of them dropped would make
        // remembered leaves that differ there collide on every lookup.
        for len in [63, 64, 65, 95, 96, 100, 2048] {
            let base: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            let h = word_hash(&base);
            for at in 0..len {
                let mut other = base.clone();
                other[at] ^= 0x20;
                assert_ne!(word_hash(&other), h, "length {len}, byte {at}");
            }
            assert_eq!(word_hash(&base.clone()), h);
        }
        // Swapped words, which a sum of lanes would not tell apart.
        let a: Vec<u8> = [[1u8; 8], [2; 8], [3; 8], [4; 8], [5; 8], [6; 8], [7; 8], [8; 8]].concat();
        let b: Vec<u8> = [[2u8; 8], [1; 8], [3; 8], [4; 8], [5; 8], [6; 8], [7; 8], [8; 8]].concat();
        assert_ne!(word_hash(&a), word_hash(&b));
    }

    // Was the doc example of `NameRules::pieces` while `NameRules` was public.
    #[test]
    fn pieces_example() {
        let mut r = NameRules::default();
        r.add_prefix(NameRule {
            original: "kubevirt.io",
            renamed: "kubevirt.internal.virtualization.deckhouse.io",
            original_value: "",
            renamed_value: "",
        })
        .unwrap();
        let (name, value) = r
            .pieces(
                Direction::Restore,
                "kubevirt.internal.virtualization.deckhouse.io/size",
                "s",
            )
            .unwrap();
        assert_eq!(name.concat(), "kubevirt.io/size");
        assert_eq!(value, None);
        assert_eq!(r.pieces(Direction::Restore, "app", "x"), None);
    }

    fn kubevirt_labels() -> NameRules {
        let mut r = NameRules::default();
        let rule = |o, n| NameRule {
            original: o,
            renamed: n,
            original_value: "",
            renamed_value: "",
        };
        r.add_prefix(rule(
            "kubevirt.io",
            "kubevirt.internal.virtualization.deckhouse.io",
        ))
        .unwrap();
        r.add_prefix(rule(
            "vm.kubevirt.io",
            "vm.kubevirt.internal.virtualization.deckhouse.io",
        ))
        .unwrap();
        r.add_name(rule(
            "kubevirt.io",
            "kubevirt.internal.virtualization.deckhouse.io",
        ))
        .unwrap();
        for (o, n) in [
            ("virt-operator", "virt-operator-iv"),
            ("kubevirt-operator", "kubevirt-operator-iv"),
        ] {
            r.add_name(NameRule {
                original: "app.kubernetes.io/managed-by",
                renamed: "app.kubernetes.io/managed-by",
                original_value: o,
                renamed_value: n,
            })
            .unwrap();
        }
        r
    }

    #[test]
    fn prefix_matches_whole_segment_only() {
        let r = kubevirt_labels();
        assert_eq!(
            r.rename("kubevirt.io/created-by", "x").0,
            "kubevirt.internal.virtualization.deckhouse.io/created-by"
        );
        assert_eq!(
            r.rename("vm.kubevirt.io/name", "x").0,
            "vm.kubevirt.internal.virtualization.deckhouse.io/name"
        );
        assert_eq!(r.rename("xkubevirt.io/a", "x").0, "xkubevirt.io/a");
        assert_eq!(
            r.rename("kubevirt.io", "v").0,
            "kubevirt.internal.virtualization.deckhouse.io"
        );
    }

    #[test]
    fn pair_rules_match_only_their_value() {
        let r = kubevirt_labels();
        let k = "app.kubernetes.io/managed-by";
        assert_eq!(
            r.rename(k, "virt-operator"),
            (k.into(), "virt-operator-iv".into())
        );
        assert_eq!(r.rename(k, "helm"), (k.into(), "helm".into()));
        assert_eq!(
            r.restore(k, "virt-operator-iv"),
            (k.into(), "virt-operator".into())
        );
        assert_eq!(r.restore(k, "helm"), (k.into(), "helm".into()));
    }

    #[test]
    fn originals_on_the_server_are_preserved() {
        let r = kubevirt_labels();
        let (k, _) = r.restore("kubevirt.io/schedulable", "true");
        assert_eq!(k, "preserved-original-kubevirt.io/schedulable");
        assert_eq!(r.rename(&k, "true").0, "kubevirt.io/schedulable");
        assert_eq!(
            r.restore("app.kubernetes.io/managed-by", "virt-operator").0,
            "preserved-original-app.kubernetes.io/managed-by"
        );
    }

    #[test]
    fn collisions_are_judged_on_pairs() {
        let mut r = kubevirt_labels();
        let bad = NameRule {
            original: "kubevirt.io",
            renamed: "other.io",
            original_value: "",
            renamed_value: "",
        };
        assert!(r.add_prefix(bad).is_err());
        let same = NameRule {
            original: "kubevirt.io",
            renamed: "kubevirt.internal.virtualization.deckhouse.io",
            original_value: "",
            renamed_value: "",
        };
        assert!(r.add_prefix(same).is_ok());
    }

    #[test]
    fn requirement_key_follows_its_values() {
        let r = kubevirt_labels();
        let (k, v) = r.rewrite_requirement(
            Direction::Rename,
            "app.kubernetes.io/managed-by",
            &["virt-operator".into(), "x".into()],
        );
        assert_eq!(k, "app.kubernetes.io/managed-by");
        assert_eq!(v, vec!["virt-operator-iv".to_string(), "x".to_string()]);
        let (k, v) = r.rewrite_requirement(
            Direction::Restore,
            "kubevirt.internal.virtualization.deckhouse.io/a",
            &[],
        );
        assert_eq!((k.as_str(), v.len()), ("kubevirt.io/a", 0));
    }
}
