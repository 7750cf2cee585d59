//! The rule file format: a superset of the Go kube-api-rewriter's `RULES_PATH` format.
//!
//! Keys are matched the way Go's decoder matches them for the spellings people write
//! (`kindPrefix`, `KindPrefix`, `kindprefix`), unknown keys are errors, and every value that is
//! checked after parsing carries its line and column.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_saphyr::Spanned;

/// A whole rule file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuleFile {
    /// Prefix added to kinds (`VirtualMachine` → `InternalVirtualizationVirtualMachine`).
    #[serde(default, alias = "KindPrefix", alias = "kindprefix")]
    pub kind_prefix: Option<String>,
    /// Prefix added to resource names (plurals and singulars).
    #[serde(
        default,
        alias = "ResourceTypePrefix",
        alias = "resourcetypeprefix",
        rename = "resourceTypePrefix"
    )]
    pub resource_type_prefix: Option<String>,
    /// Prefix added to short names.
    #[serde(
        default,
        alias = "ShortNamePrefix",
        alias = "shortnameprefix",
        rename = "shortNamePrefix"
    )]
    pub short_name_prefix: Option<String>,
    /// Categories given to renamed resources that have categories.
    #[serde(default, alias = "Categories")]
    pub categories: Option<Vec<String>>,
    /// Renamed API groups, keyed by the original group.
    #[serde(default, alias = "Rules")]
    pub rules: Option<BTreeMap<String, Spanned<GroupRules>>>,
    /// Admission webhook paths served through the webhook proxy.
    #[serde(default, alias = "Webhooks")]
    pub webhooks: Option<BTreeMap<String, WebhookRule>>,
    /// Label renames.
    #[serde(default, alias = "Labels")]
    pub labels: Option<MetadataReplace>,
    /// Annotation renames.
    #[serde(default, alias = "Annotations")]
    pub annotations: Option<MetadataReplace>,
    /// Finalizer renames.
    #[serde(default, alias = "Finalizers")]
    pub finalizers: Option<MetadataReplace>,
    /// Objects hidden from the client.
    #[serde(default, alias = "Excludes")]
    pub excludes: Option<Vec<ExcludeRule>>,
    /// Extension: where names live inside objects of given kinds.
    #[serde(default, alias = "Kinds")]
    pub kinds: Option<Vec<Spanned<KindRule>>>,
    /// Extension: resources of unruled groups whose responses are rewritten.
    #[serde(
        default,
        alias = "RewriteResponses",
        alias = "rewriteresponses",
        rename = "rewriteResponses"
    )]
    pub rewrite_responses: Option<RewriteResponses>,
    /// Extension: subresources that stream over an upgraded connection, in addition to
    /// `log`, `exec`, `attach`, `portforward` and `proxy` (e.g. KubeVirt's `console`, `vnc`):
    /// their bodies are never rewritten and their upgrades are spliced.
    #[serde(
        default,
        alias = "StreamingSubresources",
        alias = "streamingsubresources",
        rename = "streamingSubresources"
    )]
    pub streaming_subresources: Option<Vec<String>>,
}

/// One renamed API group.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GroupRules {
    /// The group itself.
    #[serde(default, alias = "GroupRule", alias = "grouprule", rename = "groupRule")]
    pub group_rule: GroupRule,
    /// Its resources, keyed by plural.
    #[serde(
        default,
        alias = "ResourceRules",
        alias = "resourcerules",
        rename = "resourceRules"
    )]
    pub resource_rules: Option<BTreeMap<String, ResourceRule>>,
}

/// Names of a group on both sides.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GroupRule {
    /// Original group, e.g. `kubevirt.io`.
    #[serde(default, alias = "Group")]
    pub group: String,
    /// Versions (informational, used in generated discovery).
    #[serde(default, alias = "Versions")]
    pub versions: Option<Vec<String>>,
    /// Preferred version (informational).
    #[serde(
        default,
        alias = "PreferredVersion",
        alias = "preferredversion",
        rename = "preferredVersion"
    )]
    pub preferred_version: Option<String>,
    /// Renamed group, e.g. `internal.virtualization.deckhouse.io`.
    #[serde(default, alias = "Renamed")]
    pub renamed: String,
    /// Extension: original version → renamed version.
    #[serde(default, alias = "VersionMap", alias = "versionmap", rename = "versionMap")]
    pub version_map: Option<BTreeMap<String, String>>,
}

/// One renamed resource.
#[derive(Debug, Default, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResourceRule {
    /// Kind.
    #[serde(default, alias = "Kind")]
    pub kind: String,
    /// List kind.
    #[serde(default, alias = "ListKind", alias = "listkind", rename = "listKind")]
    pub list_kind: String,
    /// Plural resource name.
    #[serde(default, alias = "Plural")]
    pub plural: String,
    /// Singular resource name.
    #[serde(default, alias = "Singular")]
    pub singular: String,
    /// Short names.
    #[serde(default, alias = "ShortNames", alias = "shortnames", rename = "shortNames")]
    pub short_names: Option<Vec<String>>,
    /// Categories on the original side (`None` restores as JSON `null`).
    #[serde(default, alias = "Categories")]
    pub categories: Option<Vec<String>>,
    /// Versions (informational).
    #[serde(default, alias = "Versions")]
    pub versions: Option<Vec<String>>,
    /// Preferred version (informational).
    #[serde(
        default,
        alias = "PreferredVersion",
        alias = "preferredversion",
        rename = "preferredVersion"
    )]
    pub preferred_version: Option<String>,
}

/// A webhook path and the resource it serves.
#[derive(Debug, Default, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookRule {
    /// Path on the webhook server.
    #[serde(default, alias = "Path")]
    pub path: String,
    /// Original group.
    #[serde(default, alias = "Group")]
    pub group: String,
    /// Original resource.
    #[serde(default, alias = "Resource")]
    pub resource: String,
}

/// Label, annotation or finalizer renames.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MetadataReplace {
    /// Rules matching the part before the first `/`.
    #[serde(default, alias = "Prefixes")]
    pub prefixes: Option<Vec<Spanned<MetadataReplaceRule>>>,
    /// Rules matching the whole name (and value, when given).
    #[serde(default, alias = "Names")]
    pub names: Option<Vec<Spanned<MetadataReplaceRule>>>,
}

/// One rename of a label, annotation or finalizer name (and optionally its value).
#[derive(Debug, Default, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MetadataReplaceRule {
    /// Original name or prefix.
    #[serde(default, alias = "Original")]
    pub original: String,
    /// Renamed name or prefix.
    #[serde(default, alias = "Renamed")]
    pub renamed: String,
    /// Original value (with `renamedValue`: the rule matches only this pair).
    #[serde(
        default,
        alias = "OriginalValue",
        alias = "originalvalue",
        rename = "originalValue"
    )]
    pub original_value: String,
    /// Renamed value.
    #[serde(
        default,
        alias = "RenamedValue",
        alias = "renamedvalue",
        rename = "renamedValue"
    )]
    pub renamed_value: String,
}

/// Hides objects from the client.
#[derive(Debug, Default, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExcludeRule {
    /// Kinds (any matches; empty matches all).
    #[serde(default, alias = "Kinds")]
    pub kinds: Option<Vec<String>>,
    /// Names (any matches; empty matches all).
    #[serde(default, alias = "MatchNames", alias = "matchnames", rename = "matchNames")]
    pub match_names: Option<Vec<String>>,
    /// Labels the object must all carry.
    #[serde(default, alias = "MatchLabels", alias = "matchlabels", rename = "matchLabels")]
    pub match_labels: Option<BTreeMap<String, String>>,
    /// Extension: API groups (any matches; empty matches all).
    #[serde(default, alias = "ApiGroups", alias = "apigroups", rename = "apiGroups")]
    pub api_groups: Option<Vec<String>>,
}

/// Extension: field locations for objects of some kinds.
#[derive(Debug, Default, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KindRule {
    /// Kinds this applies to.
    #[serde(default)]
    pub kinds: Vec<String>,
    /// API groups this applies to (`""` is core); absent means any group.
    #[serde(default, rename = "apiGroups")]
    pub api_groups: Option<Vec<String>>,
    /// Locations.
    #[serde(default)]
    pub fields: Vec<Spanned<FieldRule>>,
}

/// Extension: one field location.
#[derive(Debug, Default, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FieldRule {
    /// JSONPath (RFC 9535 subset: names, `[*]`, `.*`) from the object root.
    pub path: String,
    /// What lives there (see [`crate::rules::FieldType`]).
    #[serde(rename = "type")]
    pub field_type: String,
}

/// Extension: which responses of unruled groups are rewritten.
#[derive(Debug, Default, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RewriteResponses {
    /// Rewrite every core (`/api`) response.
    #[serde(default)]
    pub core: Option<bool>,
    /// Resource names (plurals) under `/apis` whose responses are rewritten.
    #[serde(default)]
    pub resources: Option<Vec<String>>,
}
