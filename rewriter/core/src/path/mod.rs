//! Kubernetes URL paths and queries: parsing, renaming and restoring.
//!
//! [`ApiPath::parse`] splits a request target (`/apis/G/V/namespaces/NS/R/N/S?query`) the way
//! kube-apiserver's `RequestInfoFactory` does, but keeps every raw path segment and the raw query,
//! so that [`ApiPath`]'s `Display` gives back the input byte for byte when nothing was rewritten
//! (trailing slashes, double slashes and percent-escapes included).
//!
//! [`rewrite`] and [`rewrite_parsed`] rename (client → server) or restore (server → client):
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
pub const CRD_GROUP: &str = "apiextensions.k8s.io";
/// The resource name of CustomResourceDefinitions.
pub const CRD_RESOURCE: &str = "customresourcedefinitions";

/// The first segment of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Prefix {
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
    /// Kubernetes API paths get [`Prefix::Unknown`] (or [`Prefix::Root`]).
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
    pub fn prefix(&self) -> Prefix {
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
pub fn rewrite_crd_name(rules: &Rules, dir: Direction, name: &str) -> Option<String> {
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
pub fn rewrite_parsed(rules: &Rules, dir: Direction, p: &ApiPath) -> Result<(ApiPath, bool)> {
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
mod tests {
    use super::*;

    const G: &str = "internal.virtualization.deckhouse.io";

    fn rules() -> &'static Rules {
        static RULES: std::sync::OnceLock<Rules> = std::sync::OnceLock::new();
        RULES.get_or_init(Rules::builtin_kubevirt)
    }

    fn rename(p: &str) -> String {
        rewrite(rules(), Direction::Rename, p).unwrap()
    }

    fn restore(p: &str) -> String {
        rewrite(rules(), Direction::Restore, p).unwrap()
    }

    /// (input, prefix, group, version, namespace, resource, name, subresource, remainder, legacy watch)
    type Layout = (
        &'static str,
        Prefix,
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
        bool,
    );

    #[test]
    fn route_slashes_decoded_up_to_the_subresource() {
        let cases = [
            ("/apis/g%2Fv/rs", Some("/apis/g/v/rs")),
            (
                "/apis/g/v/namespaces/a%2Fb/rs",
                Some("/apis/g/v/namespaces/a/b/rs"),
            ),
            ("/apis/g/v/rs/n%2F%41%2f?q=%2F", Some("/apis/g/v/rs/n/%41/?q=%2F")),
            ("/api%2Fv1/pods/x/proxy/a%2Fb", Some("/api/v1/pods/x/proxy/a/b")),
            ("/api/v1/namespaces/n/pods/x/proxy/a%2Fb", None),
            ("/apis/g/v/rs/n%252F", None),
            ("/apis/g/v/rs/n%2Fzz%zz", None), // an invalid escape: opaque, as parse treats it
            ("/apis/g/v/rs/n", None),
            ("relative%2Fpath", None),
        ];
        for (path, want) in cases {
            assert_eq!(decode_route_slashes(path).as_deref(), want, "{path}");
        }
    }

    #[test]
    fn layouts() {
        use Prefix::*;
        let n = None;
        let cases: &[Layout] = &[
            ("/", Root, n, n, n, n, n, n, n, false),
            ("", Root, n, n, n, n, n, n, n, false),
            ("/api", Core, n, n, n, n, n, n, n, false),
            ("/api/v1", Core, n, Some("v1"), n, n, n, n, n, false),
            (
                "/api/v1/pods",
                Core,
                n,
                Some("v1"),
                n,
                Some("pods"),
                n,
                n,
                n,
                false,
            ),
            (
                "/api/v1/nodes/n1/status",
                Core,
                n,
                Some("v1"),
                n,
                Some("nodes"),
                Some("n1"),
                Some("status"),
                n,
                false,
            ),
            (
                "/api/v1/namespaces/ns/pods",
                Core,
                n,
                Some("v1"),
                Some("ns"),
                Some("pods"),
                n,
                n,
                n,
                false,
            ),
            (
                "/api/v1/namespaces/ns/pods/p/log",
                Core,
                n,
                Some("v1"),
                Some("ns"),
                Some("pods"),
                Some("p"),
                Some("log"),
                n,
                false,
            ),
            (
                "/api/v1/namespaces/ns/pods/p/proxy/some/path/",
                Core,
                n,
                Some("v1"),
                Some("ns"),
                Some("pods"),
                Some("p"),
                Some("proxy"),
                Some("some/path/"),
                false,
            ),
            (
                "/api/v1/namespaces",
                Core,
                n,
                Some("v1"),
                n,
                Some("namespaces"),
                n,
                n,
                n,
                false,
            ),
            (
                "/api/v1/namespaces/ns",
                Core,
                n,
                Some("v1"),
                n,
                Some("namespaces"),
                Some("ns"),
                n,
                n,
                false,
            ),
            (
                "/api/v1/namespaces/ns/status",
                Core,
                n,
                Some("v1"),
                n,
                Some("namespaces"),
                Some("ns"),
                Some("status"),
                n,
                false,
            ),
            (
                "/api/v1/namespaces/ns/finalize",
                Core,
                n,
                Some("v1"),
                n,
                Some("namespaces"),
                Some("ns"),
                Some("finalize"),
                n,
                false,
            ),
            (
                "/api/v1/watch/pods",
                Core,
                n,
                Some("v1"),
                n,
                Some("pods"),
                n,
                n,
                n,
                true,
            ),
            (
                "/api/v1/watch/namespaces/ns/pods/p",
                Core,
                n,
                Some("v1"),
                Some("ns"),
                Some("pods"),
                Some("p"),
                n,
                n,
                true,
            ),
            (
                "/api/v1/watch",
                Core,
                n,
                Some("v1"),
                n,
                Some("watch"),
                n,
                n,
                n,
                false,
            ),
            ("/apis", Apis, n, n, n, n, n, n, n, false),
            (
                "/apis/kubevirt.io",
                Apis,
                Some("kubevirt.io"),
                n,
                n,
                n,
                n,
                n,
                n,
                false,
            ),
            (
                "/apis/kubevirt.io/v1/",
                Apis,
                Some("kubevirt.io"),
                Some("v1"),
                n,
                n,
                n,
                n,
                n,
                false,
            ),
            (
                "/apis/g/v/rs",
                Apis,
                Some("g"),
                Some("v"),
                n,
                Some("rs"),
                n,
                n,
                n,
                false,
            ),
            (
                "/apis/g/v/rs/x/scale",
                Apis,
                Some("g"),
                Some("v"),
                n,
                Some("rs"),
                Some("x"),
                Some("scale"),
                n,
                false,
            ),
            (
                "/apis/g/v/namespaces/ns/rs/x/s/a/b",
                Apis,
                Some("g"),
                Some("v"),
                Some("ns"),
                Some("rs"),
                Some("x"),
                Some("s"),
                Some("a/b"),
                false,
            ),
            (
                "/apis/g/v/namespaces/ns/status",
                Apis,
                Some("g"),
                Some("v"),
                Some("ns"),
                Some("status"),
                n,
                n,
                n,
                false,
            ),
            (
                "/apis/g/v/namespaces/ns",
                Apis,
                Some("g"),
                Some("v"),
                n,
                Some("namespaces"),
                Some("ns"),
                n,
                n,
                false,
            ),
            (
                "/apis/g/v/watch/namespaces/ns/rs",
                Apis,
                Some("g"),
                Some("v"),
                Some("ns"),
                Some("rs"),
                n,
                n,
                n,
                true,
            ),
            (
                "//apis//g/v//rs/",
                Apis,
                Some("g"),
                Some("v"),
                n,
                Some("rs"),
                n,
                n,
                n,
                false,
            ),
            (
                "/apis/g/v/namespaces/a%2Fb/rs",
                Apis,
                Some("g"),
                Some("v"),
                Some("a/b"),
                Some("rs"),
                n,
                n,
                n,
                false,
            ),
            (
                "/apis/g/v/rs/%zz",
                Apis,
                Some("g"),
                Some("v"),
                n,
                Some("rs"),
                Some("%zz"),
                n,
                n,
                false,
            ),
            ("/version", Unknown, n, n, n, n, n, n, n, false),
            ("/openapi/v2", Unknown, n, n, n, n, n, n, n, false),
            ("/healthz?verbose", Unknown, n, n, n, n, n, n, n, false),
            ("apis/kubevirt.io", Unknown, n, n, n, n, n, n, n, false),
            (
                "http://host/apis/kubevirt.io",
                Unknown,
                n,
                n,
                n,
                n,
                n,
                n,
                n,
                false,
            ),
        ];
        for &(input, prefix, group, version, ns, res, name, sub, rem, lw) in cases {
            let p = ApiPath::parse(input);
            let got = (
                p.prefix(),
                p.group(),
                p.version(),
                p.namespace(),
                p.resource(),
                p.name(),
                p.subresource(),
                p.remainder(),
                p.legacy_watch(),
            );
            assert_eq!(
                got,
                (
                    prefix,
                    group,
                    version,
                    ns,
                    res,
                    name,
                    sub,
                    rem.map(str::to_owned),
                    lw
                ),
                "{input}"
            );
            assert_eq!(p.to_string(), input, "round trip");
            assert_eq!(p.is_collection(), res.is_some() && name.is_none(), "{input}");
        }
    }

    #[test]
    fn crd_paths_parse() {
        let p = ApiPath::parse(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/virtualmachines.kubevirt.io/status",
        );
        assert!(p.is_crd());
        assert_eq!(
            (p.crd_plural(), p.crd_group()),
            (Some("virtualmachines"), Some("kubevirt.io"))
        );
        assert_eq!(p.subresource(), Some("status"));
        let p = ApiPath::parse("/apis/apiextensions.k8s.io/v1beta1/customresourcedefinitions?limit=1");
        assert!(p.is_crd() && p.is_collection());
        assert_eq!((p.crd_plural(), p.crd_group()), (None, None));
        assert!(!ApiPath::parse("/apis/apiextensions.k8s.io/v1").is_crd());
        assert!(!ApiPath::parse("/apis/kubevirt.io/v1/customresourcedefinitions/x.y").is_crd());
        assert_eq!(
            ApiPath::parse("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/noplural").crd_group(),
            None
        );
    }

    #[test]
    fn watch_detection() {
        let cases = [
            ("/api/v1/pods?watch=true", true),
            ("/api/v1/pods?watch=1", true),
            ("/api/v1/pods?watch=True", true),
            ("/api/v1/pods?watch=t", true),
            ("/api/v1/pods?watch", true),
            ("/api/v1/pods?watch=%74rue", true),
            ("/api/v1/pods?watch=false&watch=true", false),
            ("/api/v1/pods?watch=0", false),
            ("/api/v1/pods?watch=FALSE", false),
            ("/api/v1/pods?labelSelector=watch%3Dtrue", false),
            ("/api/v1/pods?xwatch=true", false),
            ("/api/v1/pods?allowWatchBookmarks=true&watch=true", true),
            ("/api/v1/pods", false),
            ("/api/v1/namespaces/ns/pods/p?watch=true", false),
            ("/api/v1/watch/namespaces/ns/pods", true),
            ("/api/v1/watch/namespaces/ns/pods/p", true),
            ("/apis/kubevirt.io/v1/watch/virtualmachines", true),
            ("/apis/kubevirt.io/v1/virtualmachines?watch=true", true),
            ("/version?watch=true", false),
        ];
        for (p, want) in cases {
            assert_eq!(ApiPath::parse(p).is_watch(), want, "{p}");
        }
    }

    #[test]
    fn display_round_trips_untouched_input() {
        for s in [
            "/",
            "",
            "?",
            "/api/v1/pods?",
            "/apis/apps/v1//deployments/",
            "/apis/x/v1/namespaces/%41b/foos?a=%2F&b=c+d&&=x&e",
            "///",
            "/api/v1/pods?a?b",
            "/healthz#frag",
            "/apis/g/v/rs/n%2Fm",
        ] {
            assert_eq!(ApiPath::parse(s).to_string(), s);
            assert_eq!(rename(s), s);
            assert_eq!(restore(s), s);
        }
    }

    #[test]
    fn rename_and_restore_paths() {
        let kv = format!("/apis/{G}/v1");
        let cases: Vec<(&str, String)> = vec![
            ("/apis/kubevirt.io", format!("/apis/{G}")),
            ("/apis/kubevirt.io/", format!("/apis/{G}/")),
            ("/apis/kubevirt.io/v1", kv.clone()),
            ("/apis/kubevirt.io/v1alpha3", format!("/apis/{G}/v1alpha3")),
            ("/apis/kubevirt.io/v1/virtualmachines", format!("{kv}/internalvirtualizationvirtualmachines")),
            (
                "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/vm1",
                format!("{kv}/namespaces/ns/internalvirtualizationvirtualmachines/vm1"),
            ),
            (
                "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/vm1/status",
                format!("{kv}/namespaces/ns/internalvirtualizationvirtualmachines/vm1/status"),
            ),
            (
                "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/",
                format!("{kv}/namespaces/ns/internalvirtualizationvirtualmachines/"),
            ),
            (
                "/apis/kubevirt.io/v1/watch/namespaces/ns/virtualmachineinstances?resourceVersion=1",
                format!("{kv}/watch/namespaces/ns/internalvirtualizationvirtualmachineinstances?resourceVersion=1"),
            ),
            (
                "/apis/kubevirt.io/v1/kubevirts/x/a/b",
                format!("{kv}/internalvirtualizationkubevirts/x/a/b"),
            ),
            (
                "/apis/snapshot.kubevirt.io/v1alpha1/namespaces/ns/virtualmachinesnapshots?limit=500",
                "/apis/snapshot.internal.virtualization.deckhouse.io/v1alpha1/namespaces/ns/\
                 internalvirtualizationvirtualmachinesnapshots?limit=500"
                    .to_owned(),
            ),
            (
                "/apis/instancetype.kubevirt.io/v1alpha2/virtualmachineclusterinstancetypes/small",
                "/apis/instancetype.internal.virtualization.deckhouse.io/v1alpha2/\
                 internalvirtualizationvirtualmachineclusterinstancetypes/small"
                    .to_owned(),
            ),
            (
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/virtualmachines.kubevirt.io",
                format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/internalvirtualizationvirtualmachines.{G}"),
            ),
            (
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/migrationpolicies.migrations.kubevirt.io/status",
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/\
                 internalvirtualizationmigrationpolicies.migrations.internal.virtualization.deckhouse.io/status"
                    .to_owned(),
            ),
        ];
        for (orig, renamed) in &cases {
            assert_eq!(&rename(orig), renamed, "rename {orig}");
            assert_eq!(&restore(renamed), orig, "restore {renamed}");
        }
    }

    #[test]
    fn paths_without_rules_are_untouched() {
        for p in [
            "/apis/kubevirt.io/v1/namespaces/ns/nosuchresources",
            "/apis/kubevirt.io/v1/namespaces/ns",
            "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/vm/console",
            "/apis/apps/v1/namespaces/ns/deployments/d",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/foos.example.com",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/virtualmachines.kubevirt.io.evil",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodot",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/internalvirtualizationvirtualmachines.kubevirt.io",
            "/api/v1/namespaces/kubevirt.io/pods",
            "/apis",
            "/api",
            "/version",
            "/openapi/v3/apis/kubevirt.io/v1",
            "/healthz",
            "/metrics?labelSelector=kubevirt.io%2Fx",
        ] {
            assert_eq!(rename(p), p, "rename {p}");
            assert_eq!(restore(p), p, "restore {p}");
        }
        // Restore only touches renamed groups and prefixed resources that have a rule.
        for p in [
            "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines",
            &format!("/apis/{G}/v1/namespaces/ns/virtualmachines"),
            &format!("/apis/{G}/v1/internalvirtualizationmigrationpolicies"),
        ] {
            assert_eq!(restore(p), p, "restore {p}");
        }
        let (_, changed) = rewrite_parsed(
            rules(),
            Direction::Rename,
            &ApiPath::parse("/apis/apps/v1/deployments"),
        )
        .unwrap();
        assert!(!changed);
    }

    #[test]
    fn percent_encoded_segments() {
        // Escaped names are matched decoded; rewritten segments are written plainly, others kept raw.
        assert_eq!(
            rename("/apis/kubevirt.io/v1/namespaces/n%73/virtualmachine%73/a%2Fb"),
            format!("/apis/{G}/v1/namespaces/n%73/internalvirtualizationvirtualmachines/a%2Fb")
        );
        assert_eq!(
            rename("/apis/kubevirt.io/v1/virtualmachines%zz"),
            "/apis/kubevirt.io/v1/virtualmachines%zz"
        );
    }

    #[test]
    fn label_selectors_in_queries() {
        let base = "/api/v1/namespaces/ns/pods";
        let kv = "kubevirt.internal.virtualization.deckhouse.io";
        let mb = "app.kubernetes.io%2Fmanaged-by";
        let cases: Vec<(String, String)> = vec![
            (
                format!("{base}?labelSelector=kubevirt.io%2Fcreated-by%3Dx&limit=500"),
                format!("{base}?labelSelector={kv}%2Fcreated-by%3Dx&limit=500"),
            ),
            (
                format!("{base}?limit=1&labelSelector=kubevirt.io%2Fcreated-by!=x,tier+in+(a,b)&watch=1"),
                format!("{base}?limit=1&labelSelector={kv}%2Fcreated-by!=x,tier+in+(a,b)&watch=1"),
            ),
            (
                format!("{base}?labelSelector=%21kubevirt.io%2Fx"),
                format!("{base}?labelSelector=%21{kv}%2Fx"),
            ),
            (
                format!("{base}?labelSelector=vm.kubevirt.io%2Fname+notin+%28a%2Cb%29"),
                format!(
                    "{base}?labelSelector=vm.kubevirt.internal.virtualization.deckhouse.io%2Fname+notin+%28a%2Cb%29"
                ),
            ),
            (
                format!("{base}?labelSelector={mb}+in+%28virt-operator%29"),
                format!("{base}?labelSelector={mb}+in+%28virt-operator-internal-virtualization%29"),
            ),
            (
                "/apis/kubevirt.io/v1/virtualmachines?labelSelector=kubevirt.io%3D".to_owned(),
                format!("/apis/{G}/v1/internalvirtualizationvirtualmachines?labelSelector={kv}%3D"),
            ),
        ];
        for (orig, renamed) in &cases {
            assert_eq!(&rename(orig), renamed, "rename {orig}");
            assert_eq!(&restore(renamed), orig, "restore {renamed}");
        }
        for p in [
            format!("{base}?labelSelector=tier%3Dbackend"),
            format!("{base}?labelSelector=kubevirt.io%2Fx%3E%3D1"), // `>=` does not parse
            format!("{base}?labelSelector=kubevirt.io%2Fx%ZZ"),     // invalid escape: opaque
            format!("{base}?labelselector=kubevirt.io%2Fx"),        // parameter names are case-sensitive
            format!("{base}?labelSelector"),
        ] {
            assert_eq!(rename(&p), p);
        }
        // Unchanged raw text is kept as sent; a changed token is re-encoded like url.QueryEscape.
        assert_eq!(
            rename(&format!("{base}?labelSelector=kubevirt.io/a!=x,tier+in+(a,b)")),
            format!("{base}?labelSelector={kv}%2Fa!=x,tier+in+(a,b)")
        );
        // Several selectors: each rewritten in place, the rest kept.
        assert_eq!(
            rename(&format!("{base}?labelSelector=kubevirt.io&x=%zz&labelSelector=a")),
            format!("{base}?labelSelector={kv}&x=%zz&labelSelector=a")
        );
    }

    #[test]
    fn field_selectors_in_queries() {
        let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
        let cases = [
            (
                format!("{crds}?fieldSelector=metadata.name%3Dvirtualmachines.kubevirt.io&limit=1"),
                format!("{crds}?fieldSelector=metadata.name%3Dinternalvirtualizationvirtualmachines.{G}&limit=1"),
            ),
            (
                format!("{crds}?watch=1&fieldSelector=metadata.name=kubevirts.kubevirt.io"),
                format!("{crds}?watch=1&fieldSelector=metadata.name=internalvirtualizationkubevirts.{G}"),
            ),
            (
                "/api/v1/namespaces/ns/events?fieldSelector=involvedObject.kind%3DVirtualMachine%2CinvolvedObject.name%3Dvm1"
                    .to_owned(),
                "/api/v1/namespaces/ns/events?fieldSelector=involvedObject.kind%3D\
                 InternalVirtualizationVirtualMachine%2CinvolvedObject.name%3Dvm1"
                    .to_owned(),
            ),
            (
                "/api/v1/events?fieldSelector=involvedObject.apiVersion%3Dkubevirt.io%2Fv1".to_owned(),
                format!("/api/v1/events?fieldSelector=involvedObject.apiVersion%3D{G}%2Fv1"),
            ),
            (
                "/apis/events.k8s.io/v1/namespaces/ns/events?fieldSelector=regarding.kind%3DVirtualMachineInstance"
                    .to_owned(),
                "/apis/events.k8s.io/v1/namespaces/ns/events?fieldSelector=regarding.kind%3D\
                 InternalVirtualizationVirtualMachineInstance"
                    .to_owned(),
            ),
        ];
        for (orig, renamed) in &cases {
            assert_eq!(&rename(orig), renamed, "rename {orig}");
            assert_eq!(&restore(renamed), orig, "restore {renamed}");
        }
        for p in [
            // Field selectors are only rewritten for CRD and event collections.
            "/api/v1/pods?fieldSelector=involvedObject.kind%3DVirtualMachine",
            "/api/v1/namespaces/ns/events/e1?fieldSelector=involvedObject.kind%3DVirtualMachine",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x.y?fieldSelector=metadata.name%3Dvirtualmachines.kubevirt.io",
            "/api/v1/events?fieldSelector=involvedObject.kind%3DPod",
            "/api/v1/events?fieldSelector=regarding.kind%3DVirtualMachine",
        ] {
            assert_eq!(rename(p), p);
        }
    }

    /// Distinct request targets of the kube-apiserver 1.20 capture
    /// (`fixtures/kube-apiserver-1.20/index.json`), which are server-side (renamed) paths.
    const FIXTURE_PATHS: &[&str] = &[
        "/api",
        "/api/v1",
        "/apis",
        "/apis/internal.virtualization.deckhouse.io",
        "/apis/internal.virtualization.deckhouse.io/v1",
        "/apis/internal.virtualization.deckhouse.io/v1alpha3",
        "/apis/apiextensions.k8s.io/v1",
        "/apis/subresources.virtualization.deckhouse.io/v1alpha2",
        "/version",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/internalvirtualizationvirtualmachines.internal.virtualization.deckhouse.io",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions?fieldSelector=metadata.name%3Dinternalvirtualizationvirtualmachines.internal.virtualization.deckhouse.io",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines?limit=500",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines?includeObject=Object",
        "/apis/internal.virtualization.deckhouse.io/v1/internalvirtualizationvirtualmachines",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines?labelSelector=kubevirt.internal.virtualization.deckhouse.io%2Fcreated-by%3Dvirt-controller%2Ctier%3Dbackend",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines?limit=2",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines/vm1",
        "/apis/internal.virtualization.deckhouse.io/v1alpha3/namespaces/demo/internalvirtualizationvirtualmachines/vm1",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines/vm1/status",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachineinstances/vm1",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachineinstances",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachineinstancemigrations",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/d8-virtualization/internalvirtualizationkubevirts/config",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines/does-not-exist",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/nosuchresources",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines/vm3",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/bulk/internalvirtualizationvirtualmachines",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines/vm-patch",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines/vm-patch/status",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines/vm-apply?fieldManager=fixture-capture&force=true",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines/vm-apply?fieldManager=other-manager",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/watchdemo/internalvirtualizationvirtualmachines?watch=true&allowWatchBookmarks=true&resourceVersion=243&timeoutSeconds=25",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines?watch=true&timeoutSeconds=3",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines?watch=true&allowWatchBookmarks=true&resourceVersion=1&timeoutSeconds=10",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/watchdemo/internalvirtualizationvirtualmachines?watch=true&allowWatchBookmarks=true&resourceVersion=250&timeoutSeconds=6",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines?resourceVersion=10&resourceVersionMatch=Exact",
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/demo/internalvirtualizationvirtualmachines?limit=1&continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTAsInN0YXJ0Ijoidm0xXHUwMDAwIn0",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/kubevirt-internal-virtualization-controller",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/demo/roles/intvirt-vm-reader",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/demo/roles",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        "/api/v1/namespaces/demo/events",
        "/api/v1/namespaces/demo/events?fieldSelector=involvedObject.kind%3DInternalVirtualizationVirtualMachine%2CinvolvedObject.name%3Dvm1",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/virt-api-validator",
        "/apis/subresources.virtualization.deckhouse.io/v1alpha2/namespaces/demo/virtualmachines/vm1/console",
    ];

    #[test]
    fn fixture_paths_restore_and_rename_back() {
        let mut restored_count = 0;
        for p in FIXTURE_PATHS {
            let restored = restore(p);
            assert_eq!(rename(&restored), *p, "rename(restore({p})) = rename({restored})");
            if restored != *p {
                restored_count += 1;
                assert!(
                    !restored.contains(G) || restored.contains("subresources."),
                    "{p} → {restored}"
                );
            }
            assert_eq!(ApiPath::parse(p).is_watch(), p.contains("watch=true"), "{p}");
        }
        assert_eq!(restored_count, 32);
        let ev = FIXTURE_PATHS
            .iter()
            .find(|p| p.contains("involvedObject"))
            .unwrap();
        assert_eq!(
            restore(ev),
            "/api/v1/namespaces/demo/events?fieldSelector=involvedObject.kind%3DVirtualMachine%2CinvolvedObject.name%3Dvm1"
        );
        let crd = FIXTURE_PATHS
            .iter()
            .find(|p| p.contains("fieldSelector=metadata.name"))
            .unwrap();
        assert_eq!(
            restore(crd),
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions?fieldSelector=metadata.name%3Dvirtualmachines.kubevirt.io"
        );
        let ls = FIXTURE_PATHS
            .iter()
            .find(|p| p.contains("labelSelector"))
            .unwrap();
        assert_eq!(
            restore(ls),
            "/apis/kubevirt.io/v1/namespaces/demo/virtualmachines?labelSelector=kubevirt.io%2Fcreated-by%3Dvirt-controller%2Ctier%3Dbackend"
        );
    }

    #[test]
    fn webhooks_keep_the_query() {
        let r = rules();
        let w = webhook_rule(r, "/virtualmachines-validate?timeout=10s").unwrap();
        assert_eq!(
            (w.group.as_str(), w.resource.as_str()),
            ("kubevirt.io", "virtualmachines")
        );
        assert_eq!(
            webhook_target(r, "/virtualmachines-validate?timeout=10s").as_deref(),
            Some("/virtualmachines-validate?timeout=10s")
        );
        assert_eq!(
            webhook_target(r, "/virtualmachines-mutate").as_deref(),
            Some("/virtualmachines-mutate")
        );
        assert!(webhook_rule(r, "/virtualmachines-validat%65").is_some());
        for p in [
            "/virtualmachines-validate/x",
            "/nope?timeout=10s",
            "virtualmachines-validate",
            "",
            "?",
        ] {
            assert!(webhook_rule(r, p).is_none(), "{p}");
            assert_eq!(webhook_target(r, p), None);
        }
    }

    #[test]
    fn garbage_does_not_panic() {
        let r = rules();
        let inputs = [
            "",
            "?",
            "??",
            "/?&&&=&==",
            "/apis/%",
            "/apis/kubevirt.io/v1/virtualmachines?labelSelector=%",
            "/apis/kubevirt.io/v1/virtualmachines?labelSelector=(((,,,!!!===",
            "/api/v1/events?fieldSelector=%5C",
            "/api/v1/events?fieldSelector=involvedObject.kind%3D%5C",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/.",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions?fieldSelector=metadata.name%3D.",
            "/apis/kubevirt.io/v1/virtualmachines?labelSelector=\u{0}",
            "/apis/\u{e9}\u{1F600}/v1/%F0%9F/x?labelSelector=%F0%9F%98%80%3D%E2",
            "\u{0}/apis",
            "/apis/kubevirt.io/v1/namespaces",
            "/apis/kubevirt.io/v1/watch",
            "/api/v1/watch/namespaces",
        ];
        for s in inputs {
            for dir in [Direction::Rename, Direction::Restore] {
                let out = rewrite(r, dir, s).unwrap();
                let p = ApiPath::parse(s);
                assert_eq!(p.to_string(), s);
                let _ = (p.is_watch(), p.is_collection(), p.crd_group(), p.remainder(), out);
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_input_never_panics_and_round_trips(s in "\\PC{0,80}") {
            let r = rules();
            let p = ApiPath::parse(&s);
            proptest::prop_assert_eq!(p.to_string(), s.clone());
            let renamed = rewrite(r, Direction::Rename, &s).unwrap();
            let _ = rewrite(r, Direction::Restore, &renamed).unwrap();
        }

        #[test]
        fn api_like_input_never_panics(
            segs in proptest::collection::vec("(api|apis|kubevirt\\.io|v1|watch|namespaces|status|virtualmachines|%2F|%|x|)", 0..8),
            q in "(labelSelector|fieldSelector|watch|=|&|%3D|%2C|!|\\(|\\)|,| in | notin |kubevirt\\.io/x|metadata\\.name|involvedObject\\.kind|VirtualMachine|\\.){0,10}",
        ) {
            let r = rules();
            let s = format!("/{}?{q}", segs.join("/"));
            for dir in [Direction::Rename, Direction::Restore] {
                let out = rewrite(r, dir, &s).unwrap();
                proptest::prop_assert_eq!(ApiPath::parse(&out).to_string(), out);
            }
        }
    }
}
