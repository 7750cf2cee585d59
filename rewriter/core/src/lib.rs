//! Rename Kubernetes API groups, kinds, resources, labels, annotations and finalizers on the way
//! to kube-apiserver, and restore them on the way back.
//!
//! This crate is the sans-I/O core: rules, paths, objects, patches and streams are plain
//! functions over bytes and values. It has no async runtime and no HTTP stack; the
//! `kube-api-rewriter` proxy, the webhook proxy and the tower layer wrap it.
//!
//! ```
//! use kube_api_rewriter::{Direction, Rules, path};
//! let rules = Rules::builtin_kubevirt();
//! let p = path::rewrite(&rules, Direction::Rename, "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/vm1").unwrap();
//! assert_eq!(p, "/apis/internal.virtualization.deckhouse.io/v1/namespaces/ns/internalvirtualizationvirtualmachines/vm1");
//! ```

#![warn(unreachable_pub)]

mod error;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals;
mod json;
pub mod object;
// Patches are partial objects, walked with the object walker: the module lives there, and is
// named here too, where users look for it.
pub use object::patch;
pub mod openapi;
pub mod path;
pub mod proto;
mod route;
pub mod rules;
mod short_eq;
pub mod stream;
pub mod yaml;

// The API an embedder needs, at the root. The modules above hold the functions (each
// module's `rewrite`); everything else is internal.

/// What can go wrong: rule files, JSON, YAML, patches, paths, media types.
///
/// ```
/// use kube_api_rewriter::{Direction, Error, Rules, object};
/// let rules = Rules::builtin_kubevirt();
/// let err = object::rewrite(&rules, Direction::Restore, b"{\"a\":", &Default::default()).unwrap_err();
/// assert!(matches!(err, Error::Json(_)));
/// assert_eq!(err.metric_label(), "json");
/// ```
pub use error::Error;
/// Invalid JSON and the byte offset where it went wrong.
///
/// ```
/// use kube_api_rewriter::{Direction, Error, Rules, object};
/// let rules = Rules::builtin_kubevirt();
/// let Err(Error::Json(e)) = object::rewrite(&rules, Direction::Restore, b"[1,}", &Default::default()) else {
///     panic!("not a JSON error")
/// };
/// assert!(e.to_string().starts_with("invalid JSON at byte 3"));
/// ```
pub use error::JsonError;
/// `Result` with this crate's [`Error`].
///
/// ```
/// fn load(text: &str) -> kube_api_rewriter::Result<kube_api_rewriter::Rules> {
///     kube_api_rewriter::Rules::parse(&[kube_api_rewriter::Source { name: "mine.yaml", text }])
/// }
/// assert!(load("kindPrefix: Internal").is_ok());
/// assert!(load("kindPrefx: Internal").is_err());
/// ```
pub use error::Result;
/// What the caller knows about a body beyond its bytes: the original group and kind of the
/// request path.
///
/// ```
/// use kube_api_rewriter::{Context, Direction, Rules, object};
/// let rules = Rules::builtin_kubevirt();
/// let ctx = Context { group: Some("kubevirt.io".into()), kind: Some("VirtualMachine".into()), ..Context::default() };
/// let out = object::rewrite(&rules, Direction::Restore, br#"{"metadata":{"name":"a"}}"#, &ctx).unwrap();
/// assert!(out.bytes().is_some());
/// ```
pub use object::Context;
/// The result of rewriting one object: its bytes, or `Excluded` when a rule hides it.
///
/// ```
/// use kube_api_rewriter::{Direction, Outcome, Rules, object};
/// let rules = Rules::builtin_kubevirt();
/// let out = object::rewrite(&rules, Direction::Restore, br#"{"kind":"ConfigMap","apiVersion":"v1"}"#, &Default::default()).unwrap();
/// assert!(matches!(out, Outcome::Object(_)));
/// ```
pub use object::Outcome;
/// What the objects a patch is about are (the request's group and kind): where names live in
/// the patch.
///
/// ```
/// use kube_api_rewriter::{Direction, PatchType, Rules, patch};
/// let rules = Rules::builtin_kubevirt();
/// let target = patch::plan_for(&rules, "kubevirt.io", "VirtualMachine");
/// let out = patch::rewrite(&rules, Direction::Rename, PatchType::Merge, br#"{"metadata":{"labels":{"kubevirt.io/x":"y"}}}"#, target).unwrap();
/// assert_eq!(&out[..], br#"{"metadata":{"labels":{"kubevirt.internal.virtualization.deckhouse.io/x":"y"}}}"#);
/// ```
pub use patch::PatchTarget;
/// The kinds of patch Kubernetes accepts, by `Content-Type`.
///
/// ```
/// use kube_api_rewriter::PatchType;
/// assert_eq!(PatchType::from_content_type("application/merge-patch+json"), Some(PatchType::Merge));
/// assert_eq!(PatchType::from_content_type("application/json"), None);
/// ```
pub use patch::PatchType;
/// A parsed request path: prefix, group, version, namespace, resource, name, subresource.
///
/// ```
/// let p = kube_api_rewriter::ApiPath::parse("/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/a?dryRun=All");
/// assert_eq!((p.group(), p.resource(), p.name()), (Some("kubevirt.io"), Some("virtualmachines"), Some("a")));
/// ```
pub use path::ApiPath;
/// How a response body is handled: passed, rewritten whole, or streamed as a LIST or WATCH.
///
/// ```
/// use kube_api_rewriter::{BodyMode, ProxyMode, Route, Rules};
/// let rules = Rules::builtin_kubevirt();
/// let r = Route::new(&rules, ProxyMode::Api, "GET", "/apis/kubevirt.io/v1/virtualmachines");
/// assert_eq!(r.response_mode(200, Some("application/json")), BodyMode::List);
/// assert_eq!(r.response_mode(404, Some("application/json")), BodyMode::Object);
/// assert_eq!(r.response_mode(200, Some("application/vnd.kubernetes.protobuf")), BodyMode::Pass);
/// ```
pub use route::BodyMode;
/// Which proxy a request came through: the API proxy (rename up, restore down) or the
/// webhook proxy (the other way round).
///
/// ```
/// use kube_api_rewriter::{Direction, ProxyMode, Route, Rules};
/// let rules = Rules::builtin_kubevirt();
/// let r = Route::new(&rules, ProxyMode::Api, "POST", "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines");
/// assert_eq!(r.request_direction(), Direction::Rename);
/// ```
pub use route::ProxyMode;
/// A rewritten request body and, when its format changed, its new `Content-Type`.
///
/// ```
/// use kube_api_rewriter::{ProxyMode, Route, Rules};
/// let rules = Rules::builtin_kubevirt();
/// let r = Route::new(&rules, ProxyMode::Api, "POST", "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines");
/// let yaml = b"apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {name: a}\n";
/// let out = r.request_body(&rules, Some("application/yaml"), yaml).unwrap();
/// assert_eq!(out.content_type, Some("application/json"));
/// assert!(out.body.starts_with(br#"{"apiVersion":"internal.virtualization.deckhouse.io/v1""#));
/// ```
pub use route::RequestBody;
/// A rewritten whole response body, or the 404 `Status` that replaces a hidden object.
///
/// ```
/// use kube_api_rewriter::{ProxyMode, ResponseBody, Route, Rules};
/// let rules = Rules::builtin_kubevirt();
/// let r = Route::new(&rules, ProxyMode::Api, "GET", "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/a");
/// let body = br#"{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachine","metadata":{"name":"a"}}"#;
/// let ResponseBody::Body(out) = r.response_body(&rules, body).unwrap() else { panic!("hidden") };
/// assert_eq!(&out[..], br#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"a"}}"#);
/// ```
pub use route::ResponseBody;
/// The decisions a proxy makes for one request: the upstream path, which bodies are
/// rewritten, and how.
///
/// ```
/// use kube_api_rewriter::{BodyMode, ProxyMode, Route, Rules};
/// let rules = Rules::builtin_kubevirt();
/// let r = Route::new(&rules, ProxyMode::Api, "GET", "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines?watch=1");
/// assert_eq!(r.upstream_path(), "/apis/internal.virtualization.deckhouse.io/v1/namespaces/ns/internalvirtualizationvirtualmachines?watch=1");
/// assert!(r.rewrite_bodies());
/// assert_eq!(r.response(), BodyMode::Watch);
/// ```
pub use route::Route;
/// True for JSON media types (`application/json`, `...+json`), parameters ignored.
///
/// ```
/// assert!(kube_api_rewriter::is_json(Some("application/json; charset=utf-8")));
/// assert!(!kube_api_rewriter::is_json(Some("application/yaml")));
/// ```
pub use route::is_json;
/// A Kubernetes `Status` failure body.
///
/// ```
/// let s = kube_api_rewriter::status_json(404, "NotFound", "gone", None);
/// let v: serde_json::Value = serde_json::from_slice(&s).unwrap();
/// assert_eq!((v["kind"].as_str(), v["code"].as_u64()), (Some("Status"), Some(404)));
/// ```
pub use route::status_json;
/// A compiled, validated rule set, built once and then read-only.
///
/// ```
/// let rules = kube_api_rewriter::Rules::builtin_kubevirt();
/// assert_eq!(rules.rename_group("kubevirt.io"), Some("internal.virtualization.deckhouse.io"));
/// ```
pub use rules::Rules;
/// A rule file's name (for error messages) and text (YAML or JSON).
///
/// ```
/// use kube_api_rewriter::{Rules, Source};
/// let err = Rules::parse(&[Source { name: "bad.yaml", text: "kindPrefix: [" }]).unwrap_err();
/// assert!(err.to_string().starts_with("bad.yaml:"));
/// ```
pub use rules::Source;
/// Restores (or renames) a LIST body pushed in pieces of any size, item by item.
///
/// ```
/// use kube_api_rewriter::{Context, Direction, ListRewriter, Rules};
/// let rules = Rules::builtin_kubevirt();
/// let mut lr = ListRewriter::new(&rules, Direction::Restore, Context::default());
/// let mut out = Vec::new();
/// lr.feed(br#"{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachineList","items":[]"#, &mut out).unwrap();
/// lr.feed(b"}", &mut out).unwrap();
/// lr.finish(&mut out).unwrap();
/// assert_eq!(out, br#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineList","items":[]}"#);
/// ```
pub use stream::ListRewriter;
/// What the head of a LIST response shows the body is; see [`look_ahead`].
///
/// ```
/// use kube_api_rewriter::{Shape, look_ahead};
/// assert_eq!(look_ahead(br#"{"kind":"Status","#, false), Some(Shape::Object));
/// ```
pub use stream::Shape;
/// Restores (or renames) a WATCH stream pushed in pieces of any size, event by event.
///
/// ```
/// use kube_api_rewriter::{Context, Direction, Rules, WatchRewriter};
/// let rules = Rules::builtin_kubevirt();
/// let mut wr = WatchRewriter::new(&rules, Direction::Restore, Context::default());
/// let mut out = Vec::new();
/// wr.feed(br#"{"type":"ADDED","object":{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachine","metadata":{"name":"a"}}}"#, &mut out).unwrap();
/// wr.feed(b"\n", &mut out).unwrap();
/// wr.finish(&mut out).unwrap();
/// assert_eq!(out, b"{\"type\":\"ADDED\",\"object\":{\"apiVersion\":\"kubevirt.io/v1\",\"kind\":\"VirtualMachine\",\"metadata\":{\"name\":\"a\"}}}\n");
/// ```
pub use stream::WatchRewriter;
/// The look-ahead of a LIST response: stream it item by item, or rewrite it whole.
///
/// ```
/// use kube_api_rewriter::{Shape, look_ahead};
/// assert_eq!(look_ahead(br#"{"kind":"PodList","items":["#, false), Some(Shape::List));
/// assert_eq!(look_ahead(br#"{"kind":"PodList","#, false), None);
/// ```
pub use stream::look_ahead;

/// Which way names go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Original → renamed (client to kube-apiserver; webhook responses).
    Rename,
    /// Renamed → original (kube-apiserver to client; webhook requests).
    Restore,
}

impl Direction {
    /// The other direction.
    pub fn reverse(self) -> Self {
        match self {
            Direction::Rename => Direction::Restore,
            Direction::Restore => Direction::Rename,
        }
    }
}
