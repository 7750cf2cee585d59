//! OpenAPI documents served by kube-apiserver (`/openapi/v2`, `/openapi/v3` and its group
//! documents), restored for clients: definitions (schemas), `$ref`s,
//! `x-kubernetes-group-version-kind` and paths of renamed groups appear under their original
//! names, so `kubectl explain` and kubectl's client-side validation find the original kinds.
//! Everything that belongs to groups the rules do not rename is copied byte for byte.
//!
//! * [`json`]: OpenAPI v2 and v3 as JSON, rewritten with byte edits over the span scanner.
//! * [`proto`]: OpenAPI v2 as protobuf (gnostic's `openapi.v2.Document`), the form kubectl
//!   asks for, rewritten field by field on the wire.
//!
//! ```
//! use kube_api_rewriter::{Rules, openapi};
//! let rules = Rules::builtin_kubevirt();
//! assert_eq!(
//!     openapi::restore_definition(&rules, "io.deckhouse.virtualization.internal.v1.InternalVirtualizationVirtualMachine").as_deref(),
//!     Some("io.kubevirt.v1.VirtualMachine")
//! );
//! ```

pub mod json;
pub mod proto;

use crate::rules::Group;
use crate::{Direction, Rules};

/// Which OpenAPI document a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Document {
    /// `/openapi/v2` (JSON or protobuf).
    V2,
    /// `/openapi/v3`: the index of group documents.
    V3Index,
    /// `/openapi/v3/apis/GROUP/VERSION` (or `/openapi/v3/api/v1`): one group's document.
    V3Group,
}

impl Document {
    /// The document a request path (query ignored) is for, if any.
    pub(crate) fn of_path(path: &str) -> Option<Document> {
        let path = path.split(['?', '#']).next().unwrap_or_default();
        let path = path.strip_suffix('/').unwrap_or(path);
        match path {
            "/openapi/v2" => Some(Document::V2),
            "/openapi/v3" => Some(Document::V3Index),
            p if p.starts_with("/openapi/v3/") => Some(Document::V3Group),
            _ => None,
        }
    }
}

/// The upstream path of an OpenAPI request: a v3 group document of a renamed group is asked
/// for under its renamed group (`/openapi/v3/apis/kubevirt.io/v1` →
/// `/openapi/v3/apis/internal.virtualization.deckhouse.io/v1`); the query is kept.
pub(crate) fn upstream_path(rules: &Rules, path_and_query: &str) -> Option<String> {
    rewrite_v3_url(rules, Direction::Rename, path_and_query)
}

/// Renames or restores the group of an `/openapi/v3/apis/GROUP/VERSION[?query]` URL; `None`
/// when it is not one of a group the rules map.
pub(crate) fn rewrite_v3_url(rules: &Rules, dir: Direction, url: &str) -> Option<String> {
    let (path, query) = match url.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (url, None),
    };
    let rest = path.strip_prefix("/openapi/v3/apis/")?;
    let (group, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let (g, version) = match dir {
        Direction::Rename => {
            let g = rules.group(group)?;
            (g.renamed.as_str(), g.rename_version(tail))
        }
        Direction::Restore => {
            let g = rules.restore_group_for(group, None)?;
            (g.original.as_str(), g.restore_version(tail))
        }
    };
    let mut out = format!("/openapi/v3/apis/{g}");
    if !tail.is_empty() || rest.contains('/') {
        out.push('/');
        out.push_str(version);
    }
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    Some(out)
}

/// Reverses a dotted domain: `internal.virtualization.deckhouse.io` ↔
/// `io.deckhouse.virtualization.internal`.
fn reverse_domain(s: &str) -> String {
    s.rsplit('.').collect::<Vec<_>>().join(".")
}

/// The renamed group, restored version and original kind of a renamed `kind` served in the
/// renamed `group` at `version`; `None` when the rules do not map it.
fn restore_gvk<'r>(
    rules: &'r Rules,
    group: &str,
    version: &'r str,
    kind: &str,
) -> Option<(&'r Group, &'r str, String)> {
    let stripped = kind.strip_prefix(rules.kind_prefix.as_str())?;
    let g = rules.group_with_kind(group, stripped)?;
    Some((g, g.restore_version(version), stripped.to_owned()))
}

/// Restores a definition (schema) name: kube-apiserver names a custom resource's schema
/// `<reversed group>.<version>.<Kind>`, so
/// `io.deckhouse.virtualization.internal.v1.InternalVirtualizationVirtualMachine` becomes
/// `io.kubevirt.v1.VirtualMachine`. `None` when the name is not one of a renamed kind.
pub fn restore_definition(rules: &Rules, name: &str) -> Option<String> {
    let mut it = name.rsplitn(3, '.');
    let kind = it.next()?;
    let version = it.next()?;
    let reversed = it.next()?;
    let group = reverse_domain(reversed);
    let (g, v, k) = restore_gvk(rules, &group, version, kind)?;
    Some(format!("{}.{v}.{k}", reverse_domain(&g.original)))
}

/// Restores a `$ref` (`#/definitions/NAME` or `#/components/schemas/NAME`); `None` when it
/// does not change.
pub(crate) fn restore_ref(rules: &Rules, r: &str) -> Option<String> {
    for prefix in ["#/definitions/", "#/components/schemas/"] {
        if let Some(name) = r.strip_prefix(prefix) {
            return restore_definition(rules, name).map(|n| format!("{prefix}{n}"));
        }
    }
    None
}

/// Restores one `x-kubernetes-group-version-kind` entry: `(group, version, kind)` of a renamed
/// kind become the original ones; `None` when the rules do not map it.
pub(crate) fn restore_group_version_kind(
    rules: &Rules,
    group: &str,
    version: &str,
    kind: &str,
) -> Option<(String, String, String)> {
    let (g, v, k) = restore_gvk(rules, group, version, kind)?;
    Some((g.original.clone(), v.to_owned(), k))
}

/// Restores an API path of the `paths` section (`/apis/GROUP/VERSION/...`, with
/// `{namespace}`-style placeholders); `None` when it does not change.
pub(crate) fn restore_api_path(rules: &Rules, path: &str) -> Option<String> {
    let out = crate::path::rewrite(rules, Direction::Restore, path).ok()?;
    (out != path).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let r = Rules::builtin_kubevirt();
        assert_eq!(
            restore_definition(
                &r,
                "io.deckhouse.virtualization.internal.v1.InternalVirtualizationVirtualMachineList"
            )
            .as_deref(),
            Some("io.kubevirt.v1.VirtualMachineList")
        );
        assert_eq!(
            restore_definition(
                &r,
                "io.deckhouse.virtualization.internal.clone.v1alpha1.InternalVirtualizationVirtualMachineClone"
            )
            .as_deref(),
            Some("io.kubevirt.clone.v1alpha1.VirtualMachineClone")
        );
        // Not renamed: built-in kinds, unprefixed kinds, unknown groups.
        for n in [
            "io.k8s.api.core.v1.Pod",
            "io.deckhouse.virtualization.internal.v1.VirtualMachine",
            "io.example.v1.InternalVirtualizationVirtualMachine",
            "Pod",
            "",
        ] {
            assert_eq!(restore_definition(&r, n), None, "{n}");
        }
        assert_eq!(
            restore_ref(&r, "#/components/schemas/io.deckhouse.virtualization.internal.v1.InternalVirtualizationVirtualMachine")
                .as_deref(),
            Some("#/components/schemas/io.kubevirt.v1.VirtualMachine")
        );
        assert_eq!(restore_ref(&r, "#/definitions/io.k8s.api.core.v1.Pod"), None);
        assert_eq!(
            restore_group_version_kind(
                &r,
                "internal.virtualization.deckhouse.io",
                "v1",
                "InternalVirtualizationVirtualMachine"
            ),
            Some(("kubevirt.io".into(), "v1".into(), "VirtualMachine".into()))
        );
        assert_eq!(restore_group_version_kind(&r, "", "v1", "Pod"), None);
    }

    #[test]
    fn paths() {
        let r = Rules::builtin_kubevirt();
        assert_eq!(
            restore_api_path(
                &r,
                "/apis/internal.virtualization.deckhouse.io/v1/namespaces/{namespace}/internalvirtualizationvirtualmachines/{name}/status"
            )
            .as_deref(),
            Some("/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}/status")
        );
        assert_eq!(restore_api_path(&r, "/api/v1/namespaces/{namespace}/pods"), None);
        assert_eq!(Document::of_path("/openapi/v2?timeout=32s"), Some(Document::V2));
        assert_eq!(Document::of_path("/openapi/v3"), Some(Document::V3Index));
        assert_eq!(
            Document::of_path("/openapi/v3/apis/kubevirt.io/v1"),
            Some(Document::V3Group)
        );
        assert_eq!(Document::of_path("/openapi/v2x"), None);
        assert_eq!(
            upstream_path(&r, "/openapi/v3/apis/kubevirt.io/v1?hash=AB").as_deref(),
            Some("/openapi/v3/apis/internal.virtualization.deckhouse.io/v1?hash=AB")
        );
        assert_eq!(upstream_path(&r, "/openapi/v3/api/v1"), None);
        assert_eq!(
            rewrite_v3_url(
                &r,
                Direction::Restore,
                "/openapi/v3/apis/internal.virtualization.deckhouse.io/v1?hash=X"
            )
            .as_deref(),
            Some("/openapi/v3/apis/kubevirt.io/v1?hash=X")
        );
    }
}
