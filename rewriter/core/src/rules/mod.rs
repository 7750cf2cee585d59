//! Rule sets: what is renamed, how, and where names live inside objects.
//!
//! A [`Rules`] value is built once from one or more rule files (YAML or JSON) and is then
//! read-only. Loading validates everything: unknown keys, field locations, colliding renames; the
//! error names the file, line and column.
//!
//! ```
//! let rules = kube_api_rewriter::Rules::builtin_kubevirt();
//! assert_eq!(rules.rename_group("kubevirt.io"), Some("internal.virtualization.deckhouse.io"));
//! assert_eq!(rules.restore_api_version("internal.virtualization.deckhouse.io/v1", None).as_deref(), Some("kubevirt.io/v1"));
//! ```

pub mod diff;
pub mod generate;
pub(crate) mod gvk;
pub(crate) mod jsonpath;
pub(crate) mod names;
pub(crate) mod plan;
// The rule-file schema keeps plain `pub` items: `WebhookRule` is re-exported below (a route's
// webhook), the rest is the file format as serde reads it, for this crate only.
#[allow(unreachable_pub)]
mod schema;

use std::collections::{BTreeMap, HashMap, HashSet};

pub use names::NameRules;
pub(crate) use schema::ResourceRule;
pub use schema::WebhookRule;
use serde_saphyr::Location;

use crate::Direction;
use crate::error::{Error, Result};
use jsonpath::Segment;
use plan::Plans;

/// Built-in rule files, embedded at build time.
pub mod builtin {
    /// The KubeVirt rule set (`rules/kubevirt.yaml`).
    pub const KUBEVIRT: &str = include_str!("../../../../rules/kubevirt.yaml");
    /// Field locations of built-in and well-known kinds (`rules/kinds.yaml`).
    pub const KINDS: &str = include_str!("../../../../rules/kinds.yaml");
}

/// What lives at a field location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum FieldType {
    /// A label map (`{"key": "value"}`), renamed with the label rules.
    Labels,
    /// An annotation map.
    Annotations,
    /// A finalizer list.
    Finalizers,
    /// A label selector (`matchLabels`, `matchExpressions`).
    LabelSelector,
    /// A string that is a label key (`topologyKey`, toleration `key`).
    LabelKey,
    /// A list of label keys (`matchLabelKeys`).
    LabelKeys,
    /// A list of selector requirements (`{key, operator, values}`).
    Requirements,
    /// A node affinity/pod affinity block (expands to its selectors).
    Affinity,
    /// A pod template (`metadata` plus the pod spec's selectors).
    PodTemplate,
    /// Embedded object metadata: labels, annotations, finalizers, ownerReferences (a top-level
    /// object's managedFields are rewritten apart from its locations).
    Metadata,
    /// An object reference with `apiVersion` and `kind`.
    ObjectRef,
    /// A reference with `apiGroup` and `kind`.
    GroupKindRef,
    /// An `apiVersion` string (`group/version`).
    ApiVersion,
    /// An API group name.
    ApiGroup,
    /// RBAC policy rules (`apiGroups` and `resources` together).
    PolicyRules,
    /// Admission rules with `apiGroups`, `apiVersions`, `resources`.
    AdmissionRules,
    /// Access-review resource attributes (`group`, `resource`, `version`).
    ResourceAttributes,
    /// An embedded object rewritten by its own kind.
    Object,
}

impl FieldType {
    fn parse(s: &str) -> Option<Self> {
        use FieldType::*;
        Some(match s {
            "labels" => Labels,
            "annotations" => Annotations,
            "finalizers" => Finalizers,
            "labelSelector" => LabelSelector,
            "labelKey" => LabelKey,
            "labelKeys" => LabelKeys,
            "requirements" => Requirements,
            "affinity" => Affinity,
            "podTemplate" => PodTemplate,
            "metadata" => Metadata,
            "objectRef" => ObjectRef,
            "groupKindRef" => GroupKindRef,
            "apiVersion" => ApiVersion,
            "apiGroup" => ApiGroup,
            "policyRules" => PolicyRules,
            "admissionRules" => AdmissionRules,
            "resourceAttributes" => ResourceAttributes,
            "object" => Object,
            _ => return None,
        })
    }

    const NAMES: &'static str = "labels, annotations, finalizers, labelSelector, labelKey, labelKeys, requirements, \
        affinity, podTemplate, metadata, objectRef, groupKindRef, apiVersion, apiGroup, policyRules, \
        admissionRules, resourceAttributes, object";
}

/// Field locations for some kinds, from the `kinds` section of a rule file.
#[derive(Debug, Clone)]
pub struct KindFields {
    /// Kinds.
    pub kinds: Vec<String>,
    /// Groups, or `None` for any.
    pub(crate) api_groups: Option<Vec<String>>,
    /// Compiled locations.
    pub(crate) fields: Vec<(Vec<Segment>, FieldType)>,
}

/// A renamed API group and its resources.
#[derive(Debug, Clone)]
pub struct Group {
    /// Original name.
    pub original: String,
    /// Renamed name.
    pub renamed: String,
    /// Versions.
    pub versions: Vec<String>,
    /// Preferred version.
    pub preferred_version: Option<String>,
    /// Original version → renamed version.
    pub(crate) version_map: BTreeMap<String, String>,
    /// Resources by plural.
    pub resources: BTreeMap<String, ResourceRule>,
    /// Kinds and list kinds → (plural, is the list kind): the first resource by plural wins.
    by_kind: names::FastMap<(String, bool)>,
}

/// An exclude rule: objects it matches are hidden from clients.
#[derive(Debug, Clone, Default)]
pub struct Exclude {
    /// Kinds as the server holds them (any; empty = all).
    pub kinds: Vec<String>,
    /// Groups as the server holds them (any; empty = all).
    pub(crate) api_groups: Vec<String>,
    /// Names (any; empty = all).
    pub(crate) names: Vec<String>,
    /// Labels (all must be present with these values).
    pub labels: BTreeMap<String, String>,
}

/// Subresources that always stream (their bodies are not JSON objects).
const DEFAULT_STREAMING_SUBRESOURCES: &[&str] = &["log", "exec", "attach", "portforward", "proxy"];

/// A compiled, validated rule set.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    /// Prefix for kinds.
    pub(crate) kind_prefix: String,
    /// Prefix for plurals and singulars.
    pub(crate) resource_prefix: String,
    /// Prefix for short names.
    pub(crate) short_name_prefix: String,
    /// Categories of renamed resources.
    pub(crate) categories: Vec<String>,
    groups: Vec<Group>,
    by_original: names::FastMap<usize>,
    by_renamed: names::FastMap<Vec<usize>>,
    /// Groups having a resource of each (original) kind, in rule order.
    groups_by_kind: names::FastMap<Vec<usize>>,
    /// Webhook paths.
    pub(crate) webhooks: BTreeMap<String, WebhookRule>,
    /// Label rules.
    pub(crate) labels: NameRules,
    /// Annotation rules.
    pub(crate) annotations: NameRules,
    /// Finalizer rules.
    pub(crate) finalizers: NameRules,
    /// Explicit excludes (the implicit ones are checked from the groups).
    pub(crate) excludes: Vec<Exclude>,
    /// Field locations per kind.
    pub(crate) kinds: Vec<KindFields>,
    /// Things a rule file does that load but deserve a word (for the log).
    pub(crate) warnings: Vec<String>,
    rewrite_core: bool,
    rewrite_resources: HashSet<String>,
    streaming_subresources: HashSet<String>,
    pub(crate) plans: Plans,
    version: u64,
}

/// A rule file's name and text.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// Name used in error messages.
    pub name: &'a str,
    /// YAML or JSON text.
    pub text: &'a str,
}

impl Rules {
    /// The prefix of renamed kinds (`InternalVirtualization`).
    pub fn kind_prefix(&self) -> &str {
        &self.kind_prefix
    }

    /// The categories of renamed resources (`kubectl get CATEGORY`).
    pub fn categories(&self) -> &[String] {
        &self.categories
    }

    /// The webhook paths, by path.
    pub fn webhooks(&self) -> &BTreeMap<String, WebhookRule> {
        &self.webhooks
    }

    /// The label renames (label keys and the values the rules name).
    pub fn labels(&self) -> &NameRules {
        &self.labels
    }

    /// The explicit excludes (the implicit ones follow from the groups).
    pub fn excludes(&self) -> &[Exclude] {
        &self.excludes
    }

    /// The field locations, per kind.
    pub fn kinds(&self) -> &[KindFields] {
        &self.kinds
    }

    /// Things the rule files do that load but deserve a word (for the log).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
    /// The embedded KubeVirt rules with the built-in kinds.
    pub fn builtin_kubevirt() -> Rules {
        Rules::parse(&[Source {
            name: "rules/kubevirt.yaml",
            text: builtin::KUBEVIRT,
        }])
        .expect("embedded rules are valid (checked by tests)")
    }

    /// Parses rule files on top of the built-in kinds (`rules/kinds.yaml`).
    pub fn parse(sources: &[Source<'_>]) -> Result<Rules> {
        let mut all = vec![Source {
            name: "rules/kinds.yaml",
            text: builtin::KINDS,
        }];
        all.extend_from_slice(sources);
        Rules::parse_only(&all)
    }

    /// Parses rule files without the built-in kinds.
    pub(crate) fn parse_only(sources: &[Source<'_>]) -> Result<Rules> {
        let mut rules = Rules::default();
        for src in sources {
            let opts = serde_saphyr::options! { legacy_octal_numbers: false };
            let file: schema::RuleFile =
                serde_saphyr::from_str_with_options(src.text, opts).map_err(|e| {
                    let (line, column) = e.location().map(|l| (l.line(), l.column())).unwrap_or((0, 0));
                    Error::Rules {
                        file: src.name.into(),
                        line,
                        column,
                        message: first_line(&e.to_string()),
                    }
                })?;
            rules.merge(src.name, file)?;
        }
        rules.plans = Plans::compile(&rules);
        rules.version = version_of(sources);
        Ok(rules)
    }

    /// A fingerprint of the rule files' names and texts: equal for the same files, different
    /// (with overwhelming likelihood) when any byte differs. Caches of rewritten documents and
    /// the ETags sent to clients include it.
    pub fn version(&self) -> u64 {
        self.version
    }

    fn merge(&mut self, name: &str, f: schema::RuleFile) -> Result<()> {
        let at = |loc: &Location, message: String| Error::Rules {
            file: name.into(),
            line: loc.line(),
            column: loc.column(),
            message,
        };
        let no_loc = |message: String| Error::Rules {
            file: name.into(),
            line: 0,
            column: 0,
            message,
        };
        set_once(&mut self.kind_prefix, f.kind_prefix);
        set_once(&mut self.resource_prefix, f.resource_type_prefix);
        set_once(&mut self.short_name_prefix, f.short_name_prefix);
        if let Some(c) = f.categories {
            self.categories = c;
        }
        for (key, g) in f.rules.unwrap_or_default() {
            let loc = g.referenced;
            let g = g.value;
            let original = if g.group_rule.group.is_empty() {
                key.clone()
            } else {
                g.group_rule.group.clone()
            };
            if original != key {
                return Err(at(
                    &loc,
                    format!("group rule key {key:?} differs from groupRule.group {original:?}"),
                ));
            }
            if g.group_rule.renamed.is_empty() {
                if g.group_rule.group.is_empty() {
                    // As the Go rewriter loads it: nothing renamed, and `Init` turns the kinds
                    // and list kinds into excludes (by kind alone).
                    let kinds = kinds_of(g.resource_rules.unwrap_or_default());
                    self.warnings.push(format!(
                        "{name}: group {key:?} has an empty groupRule: it is not renamed; objects of its kinds ({}) are hidden from clients, as the Go rewriter does",
                        kinds.join(", ")
                    ));
                    self.excludes.push(Exclude {
                        kinds,
                        ..Exclude::default()
                    });
                    continue;
                }
                return Err(at(&loc, format!("group {key:?} has no groupRule.renamed")));
            }
            if self.by_original.contains_key(&key) {
                return Err(at(&loc, format!("group {key:?} is defined twice")));
            }
            let mut resources = BTreeMap::new();
            for (plural, r) in g.resource_rules.unwrap_or_default() {
                if r.kind.is_empty() {
                    return Err(at(
                        &loc,
                        format!("resource {plural:?} of group {key:?} has no kind"),
                    ));
                }
                let mut r = r;
                if r.plural.is_empty() {
                    r.plural = plural.clone();
                }
                if r.list_kind.is_empty() {
                    r.list_kind = format!("{}List", r.kind);
                }
                resources.insert(plural, r);
            }
            let idx = self.groups.len();
            self.by_original.insert(key.clone(), idx);
            self.by_renamed
                .entry(g.group_rule.renamed.clone())
                .or_default()
                .push(idx);
            let mut by_kind = names::FastMap::default();
            for (plural, r) in &resources {
                by_kind
                    .entry(r.kind.clone())
                    .or_insert_with(|| (plural.clone(), false));
                by_kind
                    .entry(r.list_kind.clone())
                    .or_insert_with(|| (plural.clone(), true));
                for k in [&r.kind, &r.list_kind] {
                    let v = self.groups_by_kind.entry(k.clone()).or_default();
                    if v.last() != Some(&idx) {
                        v.push(idx);
                    }
                }
            }
            self.groups.push(Group {
                original,
                renamed: g.group_rule.renamed,
                versions: g.group_rule.versions.unwrap_or_default(),
                preferred_version: g.group_rule.preferred_version,
                version_map: g.group_rule.version_map.unwrap_or_default(),
                resources,
                by_kind,
            });
        }
        for (path, w) in f.webhooks.unwrap_or_default() {
            let mut w = w;
            if w.path.is_empty() {
                w.path = path.clone();
            }
            self.webhooks.insert(path, w);
        }
        for (which, m) in [(0, f.labels), (1, f.annotations), (2, f.finalizers)] {
            let Some(m) = m else { continue };
            let target = match which {
                0 => &mut self.labels,
                1 => &mut self.annotations,
                _ => &mut self.finalizers,
            };
            for (is_prefix, list) in [(false, m.names), (true, m.prefixes)] {
                for r in list.unwrap_or_default() {
                    let rule = names::NameRule {
                        original: &r.value.original,
                        renamed: &r.value.renamed,
                        original_value: &r.value.original_value,
                        renamed_value: &r.value.renamed_value,
                    };
                    let res = if is_prefix {
                        target.add_prefix(rule)
                    } else {
                        target.add_name(rule)
                    };
                    res.map_err(|c| at(&r.referenced, c.0))?;
                }
            }
        }
        for e in f.excludes.unwrap_or_default() {
            self.excludes.push(Exclude {
                kinds: e.kinds.unwrap_or_default(),
                api_groups: e.api_groups.unwrap_or_default(),
                names: e.match_names.unwrap_or_default(),
                labels: e.match_labels.unwrap_or_default(),
            });
        }
        for k in f.kinds.unwrap_or_default() {
            let loc = k.referenced;
            let k = k.value;
            if k.kinds.is_empty() {
                return Err(at(&loc, "a kinds entry needs at least one kind".into()));
            }
            let mut fields = Vec::new();
            for fr in k.fields {
                let ty = FieldType::parse(&fr.value.field_type).ok_or_else(|| {
                    at(
                        &fr.referenced,
                        format!(
                            "unknown field type {:?} (one of: {})",
                            fr.value.field_type,
                            FieldType::NAMES
                        ),
                    )
                })?;
                let segs = jsonpath::parse(&fr.value.path).map_err(|e| {
                    at(
                        &fr.referenced,
                        format!(
                            "invalid JSONPath {:?} at character {}: {}",
                            fr.value.path, e.at, e.msg
                        ),
                    )
                })?;
                if segs.is_empty() && ty != FieldType::Metadata {
                    return Err(at(
                        &fr.referenced,
                        "a field location must name a field below `$`".into(),
                    ));
                }
                fields.push((segs, ty));
            }
            self.kinds.push(KindFields {
                kinds: k.kinds,
                api_groups: k.api_groups,
                fields,
            });
        }
        if let Some(rr) = f.rewrite_responses {
            if let Some(core) = rr.core {
                self.rewrite_core = core;
            }
            self.rewrite_resources.extend(rr.resources.unwrap_or_default());
        }
        self.streaming_subresources
            .extend(f.streaming_subresources.unwrap_or_default());
        // Two original groups may share a renamed group only if their kinds stay distinct.
        for idxs in self.by_renamed.values() {
            let mut seen = HashMap::new();
            for &i in idxs {
                for r in self.groups[i].resources.values() {
                    if let Some(other) = seen.insert(r.kind.clone(), i)
                        && other != i
                    {
                        return Err(no_loc(format!(
                            "kind {:?} is in groups {:?} and {:?}, which share the renamed group {:?}",
                            r.kind,
                            self.groups[other].original,
                            self.groups[i].original,
                            self.groups[i].renamed
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    // === lookups ===

    /// Whether a subresource streams over an upgraded connection: `log`, `exec`, `attach`,
    /// `portforward`, `proxy`, and those the rule files' `streamingSubresources` add. Bodies of
    /// these are never rewritten.
    ///
    /// ```
    /// let rules = kube_api_rewriter::Rules::parse(&[kube_api_rewriter::rules::Source {
    ///     name: "r.yaml",
    ///     text: "streamingSubresources: [console, vnc]",
    /// }])
    /// .unwrap();
    /// assert!(rules.is_streaming_subresource("console") && rules.is_streaming_subresource("exec"));
    /// assert!(!rules.is_streaming_subresource("freeze"));
    /// ```
    pub fn is_streaming_subresource(&self, sub: &str) -> bool {
        DEFAULT_STREAMING_SUBRESOURCES.contains(&sub) || self.streaming_subresources.contains(sub)
    }

    /// All renamed groups.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// The group with this original name.
    pub fn group(&self, original: &str) -> Option<&Group> {
        self.by_original.get(original).map(|&i| &self.groups[i])
    }

    /// Groups renamed to `renamed`.
    pub(crate) fn groups_renamed_to(&self, renamed: &str) -> impl Iterator<Item = &Group> {
        self.by_renamed
            .get(renamed)
            .into_iter()
            .flatten()
            .map(|&i| &self.groups[i])
    }

    /// True for a renamed group name.
    pub(crate) fn is_renamed_group(&self, g: &str) -> bool {
        self.by_renamed.contains_key(g)
    }

    /// The renamed name of an original group.
    pub fn rename_group(&self, original: &str) -> Option<&str> {
        self.group(original).map(|g| g.renamed.as_str())
    }

    /// The original group of a renamed one; with several, the one holding `kind` (renamed or
    /// original spelling), else the first.
    pub(crate) fn restore_group_for(&self, renamed: &str, kind: Option<&str>) -> Option<&Group> {
        let first = self.groups_renamed_to(renamed).next()?;
        let k = kind.map(|k| k.strip_prefix(self.kind_prefix.as_str()).unwrap_or(k));
        Some(k.and_then(|k| self.group_with_kind(renamed, k)).unwrap_or(first))
    }

    /// The first group renamed to `renamed` that has a resource of (original) kind or list
    /// kind `kind`.
    #[inline]
    pub(crate) fn group_with_kind(&self, renamed: &str, kind: &str) -> Option<&Group> {
        self.groups_by_kind
            .get(kind)?
            .iter()
            .map(|&i| &self.groups[i])
            .find(|g| g.renamed == renamed)
    }

    /// Renames `group/version`; `None` when the group is not renamed.
    pub fn rename_api_version(&self, av: &str) -> Option<String> {
        self.api_version_parts(Direction::Rename, av, None)
            .map(|p| p.concat())
    }

    /// Restores `group/version`; `None` when the group is not a renamed one.
    pub fn restore_api_version(&self, av: &str, kind: Option<&str>) -> Option<String> {
        self.api_version_parts(Direction::Restore, av, kind)
            .map(|p| p.concat())
    }

    /// `group/version` renamed or restored (by `dir`) as pieces to concatenate, without
    /// allocating; `None` when the group is not one the rules map.
    #[inline]
    pub(crate) fn api_version_parts<'s>(
        &'s self,
        dir: Direction,
        av: &'s str,
        kind: Option<&str>,
    ) -> Option<[&'s str; 3]> {
        let (g, v) = av.split_once('/')?;
        Some(if dir == Direction::Restore {
            let grp = self.restore_group_for(g, kind)?;
            [grp.original.as_str(), "/", grp.restore_version(v)]
        } else {
            let grp = self.group(g)?;
            [grp.renamed.as_str(), "/", grp.rename_version(v)]
        })
    }

    /// Whether responses for `resource` of an unruled group under `/apis` are rewritten.
    pub(crate) fn rewrites_resource(&self, resource: &str) -> bool {
        self.rewrite_resources.contains(resource)
    }

    /// Whether core (`/api`) responses are rewritten.
    pub(crate) fn rewrites_core(&self) -> bool {
        self.rewrite_core
    }

    /// A resource rule by (original group, plural).
    pub(crate) fn resource(&self, group: &str, plural: &str) -> Option<&ResourceRule> {
        self.group(group)?.resources.get(plural)
    }

    /// Any group's resource with this plural.
    pub(crate) fn resource_by_plural_any(&self, plural: &str) -> Option<(&Group, &ResourceRule)> {
        self.groups
            .iter()
            .find_map(|g| g.resources.get(plural).map(|r| (g, r)))
    }

    /// True when an object of `kind` in `group` (both as the server holds them) is hidden.
    pub(crate) fn is_excluded_kind(&self, group: &str, kind: &str) -> bool {
        // Implicit: objects of an original ruled group and kind (e.g. a real KubeVirt install).
        self.group(group)
            .is_some_and(|g| g.resource_by_kind(kind).is_some())
    }
}

impl Group {
    /// The resource rule whose kind or listKind is `kind`; the bool says it is the list kind.
    pub(crate) fn resource_by_kind(&self, kind: &str) -> Option<(&ResourceRule, bool)> {
        let (plural, list) = self.by_kind.get(kind)?;
        self.resources.get(plural).map(|r| (r, *list))
    }

    /// Renamed version → original version.
    pub(crate) fn restore_version<'a>(&'a self, v: &'a str) -> &'a str {
        self.version_map
            .iter()
            .find(|(_, r)| r.as_str() == v)
            .map_or(v, |(o, _)| o.as_str())
    }

    /// Original version → renamed version.
    pub(crate) fn rename_version<'a>(&'a self, v: &'a str) -> &'a str {
        self.version_map.get(v).map_or(v, String::as_str)
    }
}

/// The kinds and list kinds of a group's resource rules, in rule order.
fn kinds_of(resources: BTreeMap<String, schema::ResourceRule>) -> Vec<String> {
    let mut kinds = Vec::new();
    for r in resources.into_values().filter(|r| !r.kind.is_empty()) {
        let list = if r.list_kind.is_empty() {
            format!("{}List", r.kind)
        } else {
            r.list_kind
        };
        kinds.push(r.kind);
        kinds.push(list);
    }
    kinds
}

/// FNV-1a over the sources' names and texts (stable across builds and platforms).
fn version_of(sources: &[Source<'_>]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for src in sources {
        for b in src.name.bytes().chain([0]).chain(src.text.bytes()).chain([0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

fn set_once(target: &mut String, v: Option<String>) {
    if let Some(v) = v {
        *target = v;
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or(s).trim().to_owned()
}
