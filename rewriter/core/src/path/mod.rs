//! Kubernetes URL paths and queries: parsing, renaming and restoring.
//!
//! [`ApiPath::parse`] splits a request target (`/apis/G/V/namespaces/NS/R/N/S?query`) the way
//! kube-apiserver's `RequestInfoFactory` does, but keeps every raw path segment and the raw query,
//! so that [`ApiPath`]'s `Display` gives back the input byte for byte when nothing was rewritten
//! (trailing slashes, double slashes and percent-escapes included).
//!
//! [`rewrite`] and `rewrite_parsed` rename (client → server) or restore (server → client):
//!
//! * `/apis/G[/V]` (discovery) of a ruled group: the group (and version) are renamed.
//! * `/apis/G/V/[namespaces/NS/]R[/N[/S...]]`: group, version and resource are renamed when the
//!   resource has a rule; when it has none the path is left alone, as the Go rewriter does.
//! * `/apis/apiextensions.k8s.io/V/customresourcedefinitions/<plural>.<group>[/status]`: the CRD
//!   name is renamed when the rule exists.
//! * `labelSelector` (any `/api` or `/apis` path) is rewritten with the label rules, keeping its
//!   syntax; `fieldSelector` is rewritten for CRD lists (`metadata.name`) and events
//!   (`involvedObject.kind/apiVersion`, and `regarding.*` on `events.k8s.io`). Only changed
//!   parameters are re-encoded; all other query text is kept as it is.
//!
//! Differences from the Go rewriter (bugs not copied): paths are also restored; legacy
//! `/watch/` paths are understood; `watch` is read from the parsed query, not found by substring;
//! the query is not re-encoded as a whole; webhook queries are kept; event field selectors are
//! rewritten. Nothing here panics, whatever the input: text that cannot be decoded is opaque.
//!
//! ```
//! use kube_api_rewriter::{Direction, Rules, path};
//! let rules = Rules::builtin_kubevirt();
//! let p = "/apis/kubevirt.io/v1/watch/namespaces/ns/virtualmachines?labelSelector=kubevirt.io%2Fx%3Dy";
//! let r = path::rewrite(&rules, Direction::Rename, p).unwrap();
//! assert_eq!(r, "/apis/internal.virtualization.deckhouse.io/v1/watch/namespaces/ns/\
//!     internalvirtualizationvirtualmachines?labelSelector=kubevirt.internal.virtualization.deckhouse.io%2Fx%3Dy");
//! assert_eq!(path::rewrite(&rules, Direction::Restore, &r).unwrap(), p);
//! assert!(path::ApiPath::parse(p).is_watch());
//! ```

mod query;
mod selector;

use std::fmt;

use selector::FieldScope;
pub use selector::rewrite_label_selector;

use crate::rules::WebhookRule;
use crate::{Direction, Result, Rules};

/// The group that serves CustomResourceDefinitions.
pub(crate) const CRD_GROUP: &str = "apiextensions.k8s.io";
/// The resource name of CustomResourceDefinitions.
pub(crate) const CRD_RESOURCE: &str = "customresourcedefinitions";

/// The first segment of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Prefix {
    /// `/` (or an empty path).
    Root,
    /// `/api/...`: the core (legacy) group.
    Core,
    /// `/apis/...`: named groups.
    Apis,
    /// Anything else (`/version`, `/healthz`, `/openapi/v2`, relative or absolute URLs): passed
    /// through untouched.
    Unknown,
}

/// One `/`-separated path segment: the raw text and its percent-decoded form.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seg {
    raw: String,
    /// Decoded text; the raw text when it has no escapes or they are invalid (opaque).
    decoded: String,
}

impl Seg {
    fn new(raw: &str) -> Seg {
        let decoded = query::decode_path_segment(raw).unwrap_or_else(|| raw.to_owned());
        Seg {
            raw: raw.to_owned(),
            decoded,
        }
    }
}

/// A parsed Kubernetes API URL (path and raw query).
///
/// Roles (group, version, namespace, resource, name, subresource) are indices into the raw path
/// segments; accessors return the percent-decoded text. Empty segments (from `//` or a trailing
/// `/`) are skipped when roles are assigned but kept in the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiPath {
    segs: Vec<Seg>,
    query: Option<String>,
    prefix: Prefix,
    group: Option<usize>,
    version: Option<usize>,
    namespace: Option<usize>,
    resource: Option<usize>,
    name: Option<usize>,
    subresource: Option<usize>,
    remainder: Option<usize>,
    legacy_watch: bool,
}

impl ApiPath {
    /// Parses a request target (`path[?query]`). Never fails and never panics; paths that are not
    /// Kubernetes API paths get an unknown prefix (or the root).
    ///
    /// Layouts (after `/api/V` or `/apis/G/V`): `[watch/][namespaces/NS/]R[/N[/S[/rest...]]]`.
    /// In the core group `namespaces/X` alone or followed by `status`/`finalize` is the namespace
    /// object X (resource `namespaces`, name X, no namespace scope), as in kube-apiserver; under
    /// `/apis`, `namespaces/X/...` is always a namespace scope.
    pub fn parse(path_and_query: &str) -> ApiPath {
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q.to_owned())),
            None => (path_and_query, None),
        };
        let mut p = ApiPath {
            segs: path.split('/').map(Seg::new).collect(),
            query,
            prefix: Prefix::Unknown,
            group: None,
            version: None,
            namespace: None,
            resource: None,
            name: None,
            subresource: None,
            remainder: None,
            legacy_watch: false,
        };
        if !path.is_empty() && !path.starts_with('/') {
            return p;
        }
        let idx: Vec<usize> = (0..p.segs.len()).filter(|&i| !p.segs[i].raw.is_empty()).collect();
        let Some(&first) = idx.first() else {
            p.prefix = Prefix::Root;
            return p;
        };
        let rest = match p.segs[first].decoded.as_str() {
            "api" => {
                p.prefix = Prefix::Core;
                p.version = idx.get(1).copied();
                idx.get(2..).unwrap_or_default()
            }
            "apis" => {
                p.prefix = Prefix::Apis;
                p.group = idx.get(1).copied();
                p.version = idx.get(2).copied();
                idx.get(3..).unwrap_or_default()
            }
            _ => return p,
        };
        p.parse_rest(rest);
        p
    }

    /// Assigns `[watch/][namespaces/NS/]R/N/S/rest...` after the version.
    fn parse_rest(&mut self, mut r: &[usize]) {
        let seg = |i: usize| self.segs[i].decoded.as_str();
        if r.len() >= 2 && seg(r[0]) == "watch" {
            self.legacy_watch = true;
            r = &r[1..];
        }
        if r.len() >= 2 && seg(r[0]) == "namespaces" {
            let scoped = match self.prefix {
                Prefix::Core => r.len() > 2 && !matches!(seg(r[2]), "status" | "finalize"),
                _ => r.len() > 2,
            };
            if scoped {
                self.namespace = Some(r[1]);
                r = &r[2..];
            }
        }
        self.resource = r.first().copied();
        self.name = r.get(1).copied();
        self.subresource = r.get(2).copied();
        self.remainder = r.get(3).copied();
    }

    fn get(&self, i: Option<usize>) -> Option<&str> {
        i.map(|i| self.segs[i].decoded.as_str())
    }

    /// Replaces the segment at `i` (if any) with `new`; true when it changed.
    fn set(&mut self, i: Option<usize>, new: &str) -> bool {
        let Some(seg) = i.and_then(|i| self.segs.get_mut(i)) else {
            return false;
        };
        if seg.decoded == new {
            return false;
        }
        *seg = Seg {
            raw: query::path_escape(new),
            decoded: new.to_owned(),
        };
        true
    }

    /// Which kind of path this is.
    pub(crate) fn prefix(&self) -> Prefix {
        self.prefix
    }

    /// The API group (`/apis/G/...` only).
    pub fn group(&self) -> Option<&str> {
        self.get(self.group)
    }

    /// The version (`/api/V` or `/apis/G/V`).
    pub fn version(&self) -> Option<&str> {
        self.get(self.version)
    }

    /// The namespace scope (`.../namespaces/NS/R...`).
    pub fn namespace(&self) -> Option<&str> {
        self.get(self.namespace)
    }

    /// The resource (plural).
    pub fn resource(&self) -> Option<&str> {
        self.get(self.resource)
    }

    /// The object name.
    pub fn name(&self) -> Option<&str> {
        self.get(self.name)
    }

    /// The subresource (`status`, `scale`, `proxy`, ...).
    pub fn subresource(&self) -> Option<&str> {
        self.get(self.subresource)
    }

    /// Segments after the subresource, raw (still percent-encoded), joined with `/`
    /// (`pods/x/proxy/some/path` → `some/path`).
    pub fn remainder(&self) -> Option<String> {
        let i = self.remainder?;
        Some(
            self.segs[i..]
                .iter()
                .map(|s| s.raw.as_str())
                .collect::<Vec<_>>()
                .join("/"),
        )
    }

    /// True for the legacy `/api/v1/watch/...` and `/apis/G/V/watch/...` layout.
    pub fn legacy_watch(&self) -> bool {
        self.legacy_watch
    }

    /// True for `/apis/apiextensions.k8s.io/*/customresourcedefinitions[/...]`.
    pub fn is_crd(&self) -> bool {
        self.prefix == Prefix::Apis
            && self.group() == Some(CRD_GROUP)
            && self.resource() == Some(CRD_RESOURCE)
    }

    /// The plural of a CRD path's name (the part before the first dot).
    pub fn crd_plural(&self) -> Option<&str> {
        let n = self.name().filter(|_| self.is_crd())?;
        Some(n.split_once('.').map_or(n, |(p, _)| p))
    }

    /// The group of a CRD path's name (the part after the first dot).
    pub fn crd_group(&self) -> Option<&str> {
        let n = self.name().filter(|_| self.is_crd())?;
        n.split_once('.').map(|(_, g)| g)
    }

    /// The raw query (without `?`); `Some("")` for a bare `?`.
    pub fn query(&self) -> Option<&str> {
        self.query.as_deref()
    }

    /// The first decoded value of a query parameter (`""` for a key without `=`).
    pub fn query_param(&self, name: &str) -> Option<String> {
        query::first_value(self.query.as_deref()?, name)
    }

    /// The raw path, without the query.
    pub fn path(&self) -> String {
        self.segs
            .iter()
            .map(|s| s.raw.as_str())
            .collect::<Vec<_>>()
            .join("/")
    }

    /// True for a watch: the legacy `/watch/` layout, or a collection with a `watch` query
    /// parameter that kube-apiserver reads as true (present, and its first value is neither `0`
    /// nor `false` in any case — `watch=1`, `watch=True`, even `watch=` are watches). A `watch`
    /// parameter on a named object is ignored, as kube-apiserver does (a plain GET).
    pub fn is_watch(&self) -> bool {
        if self.legacy_watch {
            return true;
        }
        matches!(self.prefix, Prefix::Core | Prefix::Apis)
            && self.is_collection()
            && self.query_param("watch").is_some_and(|v| query::kube_bool(&v))
    }

    /// True when a resource is set and no name: a list, watch, create or deletecollection target.
    pub fn is_collection(&self) -> bool {
        self.resource.is_some() && self.name.is_none()
    }

    /// The field selector rules that apply to this path.
    fn field_scope(&self) -> Option<FieldScope> {
        if !self.is_collection() {
            return None;
        }
        match (self.prefix, self.group(), self.resource()) {
            (Prefix::Apis, Some(CRD_GROUP), Some(CRD_RESOURCE)) => Some(FieldScope::Crd),
            (Prefix::Apis, Some("events.k8s.io"), Some("events")) => Some(FieldScope::Events),
            (Prefix::Core, _, Some("events")) => Some(FieldScope::CoreEvents),
            _ => None,
        }
    }

    /// Renames or restores the `/apis` part of the path; true when it changed.
    fn rewrite_apis(&mut self, rules: &Rules, dir: Direction) -> bool {
        let Some(group) = self.group().map(str::to_owned) else {
            return false;
        };
        if self.is_crd() {
            let new = self.name().and_then(|n| rewrite_crd_name(rules, dir, n));
            return new.is_some_and(|n| self.set(self.name, &n));
        }
        let version = self.version().map(str::to_owned);
        let resource = self.resource().map(str::to_owned);
        let (new_group, new_version, new_resource) = match dir {
            Direction::Rename => {
                let Some(g) = rules.group(&group) else {
                    return false;
                };
                let res = match &resource {
                    None => None,
                    Some(r) if g.resources.contains_key(r.as_str()) => {
                        Some(format!("{}{r}", rules.resource_prefix))
                    }
                    Some(_) => return false,
                };
                (
                    g.renamed.clone(),
                    version.as_deref().map(|v| g.rename_version(v).to_owned()),
                    res,
                )
            }
            Direction::Restore => {
                let (g, res) = match &resource {
                    None => match rules.restore_group_for(&group, None) {
                        Some(g) => (g, None),
                        None => return false,
                    },
                    Some(r) => {
                        let Some(stripped) = r.strip_prefix(rules.resource_prefix.as_str()) else {
                            return false;
                        };
                        let Some(g) = rules
                            .groups_renamed_to(&group)
                            .find(|g| g.resources.contains_key(stripped))
                        else {
                            return false;
                        };
                        (g, Some(stripped.to_owned()))
                    }
                };
                (
                    g.original.clone(),
                    version.as_deref().map(|v| g.restore_version(v).to_owned()),
                    res,
                )
            }
        };
        let mut changed = self.set(self.group, &new_group);
        if let Some(v) = new_version {
            changed |= self.set(self.version, &v);
        }
        if let Some(r) = new_resource {
            changed |= self.set(self.resource, &r);
        }
        changed
    }

    /// Rewrites `labelSelector` and `fieldSelector`; true when the query changed.
    fn rewrite_query(&mut self, rules: &Rules, dir: Direction) -> bool {
        if !matches!(self.prefix, Prefix::Core | Prefix::Apis) {
            return false;
        }
        let Some(q) = self.query.as_deref() else {
            return false;
        };
        let scope = self.field_scope();
        let mut out = String::with_capacity(q.len() + 32);
        let mut changed = false;
        for (i, pair) in q.split('&').enumerate() {
            if i > 0 {
                out.push('&');
            }
            let new = pair.split_once('=').and_then(|(k, v)| {
                let nv = match query::decode_form(k)?.as_str() {
                    "labelSelector" => selector::rewrite_label_selector_query(&rules.labels, dir, v),
                    "fieldSelector" => selector::rewrite_field_selector_query(rules, dir, scope?, v),
                    _ => None,
                }?;
                Some(format!("{k}={nv}"))
            });
            match new {
                Some(n) => {
                    out.push_str(&n);
                    changed = true;
                }
                None => out.push_str(pair),
            }
        }
        if changed {
            self.query = Some(out);
        }
        changed
    }
}

impl fmt::Display for ApiPath {
    /// The path and query, byte for byte as parsed except for rewritten parts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.segs.iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            f.write_str(&s.raw)?;
        }
        if let Some(q) = &self.query {
            write!(f, "?{q}")?;
        }
        Ok(())
    }
}

/// Renames (`<plural>.<group>` → `<prefix><plural>.<renamed group>`) or restores a CRD name.
/// `None` when no rule applies.
pub(crate) fn rewrite_crd_name(rules: &Rules, dir: Direction, name: &str) -> Option<String> {
    let (plural, group) = name.split_once('.')?;
    match dir {
        Direction::Rename => {
            let g = rules.group(group)?;
            g.resources.get(plural)?;
            Some(format!("{}{plural}.{}", rules.resource_prefix, g.renamed))
        }
        Direction::Restore => {
            let stripped = plural.strip_prefix(rules.resource_prefix.as_str())?;
            let g = rules
                .groups_renamed_to(group)
                .find(|g| g.resources.contains_key(stripped))?;
            Some(format!("{stripped}.{}", g.original))
        }
    }
}

/// Rewrites a path and query for `dir` (Rename: client → server; Restore: server → client). The
/// text is returned unchanged when no rule applies.
///
/// This never fails today; the `Result` leaves room for stricter checks.
pub fn rewrite(rules: &Rules, dir: Direction, path_and_query: &str) -> Result<String> {
    let p = ApiPath::parse(path_and_query);
    let (out, changed) = rewrite_parsed(rules, dir, &p)?;
    Ok(if changed {
        out.to_string()
    } else {
        path_and_query.to_owned()
    })
}

/// The request target as kube-apiserver routes it: every encoded `/` (`%2F`, `%2f`) in a segment
/// that decides the route (all of them up to the subresource; every segment of a path that is not
/// an API path yet) decoded, so that the rewriter splits the path where kube-apiserver, which
/// splits the decoded path, does. `None` when there is nothing to decode. Segments after a
/// subresource (`pods/x/proxy/a%2Fb`) are kept: they are handed on, not routed on.
///
/// ```
/// use kube_api_rewriter::path::decode_route_slashes;
/// assert_eq!(
///     decode_route_slashes("/apis/kubevirt.io%2Fv1/virtualmachines?x=%2F").as_deref(),
///     Some("/apis/kubevirt.io/v1/virtualmachines?x=%2F")
/// );
/// assert_eq!(decode_route_slashes("/api/v1/namespaces/n/pods/p/proxy/a%2Fb"), None);
/// ```
pub fn decode_route_slashes(path_and_query: &str) -> Option<String> {
    let path = path_and_query.split('?').next().unwrap_or("");
    if !path.starts_with('/') || !path.contains('%') {
        return None;
    }
    let mut cur: Option<String> = None;
    loop {
        let p = ApiPath::parse(cur.as_deref().unwrap_or(path_and_query));
        let end = match p.prefix {
            Prefix::Core | Prefix::Apis => p.remainder.unwrap_or(p.segs.len()),
            Prefix::Root | Prefix::Unknown => p.segs.len(),
        };
        let mut changed = false;
        let segs: Vec<String> = p
            .segs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                if i < end && s.decoded.contains('/') {
                    changed = true;
                    decode_slashes(&s.raw)
                } else {
                    s.raw.clone()
                }
            })
            .collect();
        if !changed {
            return cur;
        }
        let mut out = segs.join("/");
        if let Some(q) = &p.query {
            out.push('?');
            out.push_str(q);
        }
        cur = Some(out);
    }
}

/// `path_and_query` with every `includeObject` query parameter set to `Metadata`.
///
/// ```
/// use kube_api_rewriter::path::set_include_object_metadata;
/// assert_eq!(
///     set_include_object_metadata("/api/v1/pods?limit=1&includeObject=None"),
///     "/api/v1/pods?limit=1&includeObject=Metadata"
/// );
/// ```
pub fn set_include_object_metadata(path_and_query: &str) -> String {
    let Some((path, q)) = path_and_query.split_once('?') else {
        return path_and_query.to_owned();
    };
    let params: Vec<&str> = q
        .split('&')
        .map(|kv| {
            let key = kv.split_once('=').map_or(kv, |(k, _)| k);
            if query::decode_form(key).as_deref() == Some("includeObject") {
                "includeObject=Metadata"
            } else {
                kv
            }
        })
        .collect();
    format!("{path}?{}", params.join("&"))
}

/// `raw` with `%2F`/`%2f` escapes turned into `/`; other escapes kept.
fn decode_slashes(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let esc = rest.get(i..i + 3).unwrap_or(&rest[i..]);
        if esc.eq_ignore_ascii_case("%2f") {
            out.push('/');
        } else {
            out.push_str(esc);
        }
        rest = &rest[i + esc.len()..];
    }
    out.push_str(rest);
    out
}

/// Rewrites a parsed path; returns the result and whether anything changed.
pub(crate) fn rewrite_parsed(rules: &Rules, dir: Direction, p: &ApiPath) -> Result<(ApiPath, bool)> {
    let mut out = p.clone();
    let mut changed = false;
    if out.prefix == Prefix::Apis {
        changed |= out.rewrite_apis(rules, dir);
    }
    changed |= out.rewrite_query(rules, dir);
    Ok((out, changed))
}

/// The path part of a request target (before `?` or `#`).
fn path_only(path_and_query: &str) -> &str {
    path_and_query.split(['?', '#']).next().unwrap_or_default()
}

/// The webhook rule for an incoming webhook request: exact match of the path (raw, or decoded when
/// it has escapes); the query is ignored for matching.
pub fn webhook_rule<'r>(rules: &'r Rules, path_and_query: &str) -> Option<&'r WebhookRule> {
    let path = path_only(path_and_query);
    rules.webhooks.get(path).or_else(|| {
        let decoded = query::decode_path_segment(path).filter(|d| d != path)?;
        rules.webhooks.get(&decoded)
    })
}

/// The target of a webhook request: the rule's path with the incoming query kept (the Go rewriter
/// dropped it, losing `?timeout=10s`). `None` when no webhook rule matches.
pub fn webhook_target(rules: &Rules, path_and_query: &str) -> Option<String> {
    let rule = webhook_rule(rules, path_and_query)?;
    let tail = &path_and_query[path_only(path_and_query).len()..];
    Some(format!("{}{tail}", rule.path))
}

#[cfg(test)]
mod tests;
