//! The decisions a proxy makes for one request, as plain data: where it goes, which bodies are
//! rewritten and how. The sidecar proxy, the webhook proxy, the tower layer and the CLI all
//! route requests through [`Route`], so they rewrite alike.
//!
//! ```
//! use kube_api_rewriter::{BodyMode, ProxyMode, Route, Rules};
//! let rules = Rules::builtin_kubevirt();
//! let r = Route::new(&rules, ProxyMode::Api, "GET", "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines?watch=1");
//! assert_eq!(r.upstream_path(), "/apis/internal.virtualization.deckhouse.io/v1/namespaces/ns/internalvirtualizationvirtualmachines?watch=1");
//! assert_eq!(r.response(), BodyMode::Watch);
//! ```

use std::borrow::Cow;

use crate::Direction;
use crate::error::{Error, Result};
use crate::object::{self, Context, Outcome};
use crate::patch::{self, PatchType};
use crate::path::ApiPath;
use crate::rules::{Rules, WebhookRule};
use crate::stream::{ListRewriter, RulesRef, WatchRewriter};

/// Which proxy a request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    /// Client → kube-apiserver: requests renamed, responses restored.
    Api,
    /// kube-apiserver → webhook server: AdmissionReview requests restored, responses renamed.
    Webhook,
}

/// How a response body is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyMode {
    /// Passed through untouched, streamed.
    Pass,
    /// One document, rewritten whole.
    Object,
    /// A LIST, rewritten item by item as it streams.
    List,
    /// A WATCH stream, rewritten event by event.
    Watch,
}

/// The route of one request: the core's decisions about it, read through its accessors.
#[derive(Debug, Clone)]
pub struct Route {
    /// Which proxy.
    pub(crate) mode: ProxyMode,
    /// HTTP method (upper case).
    pub(crate) method: String,
    /// The path and query as the client sent them.
    pub(crate) path: String,
    /// The path and query to send upstream.
    pub(crate) upstream_path: String,
    /// True when the path or query changed.
    pub(crate) path_rewritten: bool,
    /// True when bodies of this request are rewritten (request and response).
    pub(crate) rewrite_bodies: bool,
    /// True when an error response (a JSON `Status`, 4xx or 5xx) is restored even where bodies
    /// are not otherwise rewritten: the streaming subresources (exec, port-forward, console...)
    /// of resources the rules rewrite, whose refusals name the renamed group and resource.
    pub(crate) restore_errors: bool,
    /// How a successful response body is handled.
    pub(crate) response: BodyMode,
    /// True for watch requests.
    pub(crate) watch: bool,
    /// The resource for logs and metrics (Go's `ResourceForLog`), with original names.
    pub(crate) resource: String,
    /// Original group and kind the bodies are about.
    pub(crate) context: Context,
    /// The webhook rule, in webhook mode.
    pub(crate) webhook: Option<WebhookRule>,
    /// The OpenAPI document asked for (`/openapi/v2`, `/openapi/v3...`): its response is
    /// restored by [`crate::openapi`] (JSON or protobuf) and bodies are otherwise not touched.
    pub(crate) openapi: Option<crate::openapi::Document>,
}

/// A rewritten request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestBody<'a> {
    /// The body.
    pub body: Cow<'a, [u8]>,
    /// A new `Content-Type`, when the body changed format (YAML sent as JSON).
    pub content_type: Option<&'static str>,
}

/// A rewritten (non-streamed) response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseBody<'a> {
    /// Send this body with the upstream status.
    Body(Cow<'a, [u8]>),
    /// The object is hidden: send this `Status` with 404.
    NotFound(Vec<u8>),
}

impl Route {
    /// Which proxy the request came to.
    pub fn mode(&self) -> ProxyMode {
        self.mode
    }

    /// The HTTP method, upper case.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The path and query as the client sent them.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The path and query to send upstream.
    pub fn upstream_path(&self) -> &str {
        &self.upstream_path
    }

    /// True when the path or query changed on the way up.
    pub fn path_rewritten(&self) -> bool {
        self.path_rewritten
    }

    /// True when the bodies of this request and its response are rewritten.
    pub fn rewrite_bodies(&self) -> bool {
        self.rewrite_bodies
    }

    /// True when an error response (a JSON `Status`, 4xx or 5xx) is restored even where bodies
    /// are not otherwise rewritten: the streaming subresources (exec, port-forward, console...)
    /// of resources the rules rewrite, whose refusals name the renamed group and resource.
    pub fn restore_errors(&self) -> bool {
        self.restore_errors
    }

    /// How a successful response body is handled.
    pub fn response(&self) -> BodyMode {
        self.response
    }

    /// True for a watch.
    pub fn watch(&self) -> bool {
        self.watch
    }

    /// The resource for logs and metrics (Go's `ResourceForLog`), with original names.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The original group and kind the bodies are about.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// The webhook rule of the path, in webhook mode.
    pub fn webhook(&self) -> Option<&WebhookRule> {
        self.webhook.as_ref()
    }

    /// The OpenAPI document asked for (`/openapi/v2`, `/openapi/v3...`): its response is
    /// restored by [`crate::openapi`] (JSON or protobuf) and bodies are otherwise not touched.
    pub fn openapi(&self) -> Option<crate::openapi::Document> {
        self.openapi
    }

    /// Routes a request.
    pub fn new(rules: &Rules, mode: ProxyMode, method: &str, path_and_query: &str) -> Route {
        let method = method.to_ascii_uppercase();
        if mode == ProxyMode::Api
            && let Some(decoded) = crate::path::decode_route_slashes(path_and_query)
        {
            // kube-apiserver splits the decoded path: route what it will see.
            let mut r = Route::new(rules, mode, &method, &decoded);
            r.path = path_and_query.to_owned();
            r.path_rewritten = true;
            return r;
        }
        let parsed = ApiPath::parse(path_and_query);
        // Only a GET is a watch; kube-apiserver ignores `watch` on other verbs.
        let watch = method == "GET" && parsed.is_watch();
        if mode == ProxyMode::Webhook {
            let rule = crate::path::webhook_rule(rules, path_and_query).cloned();
            let upstream_path = match &rule {
                Some(r) => match path_and_query.split_once('?') {
                    Some((_, q)) => format!("{}?{q}", r.path),
                    None => r.path.clone(),
                },
                None => path_and_query.to_owned(),
            };
            let context = rule
                .as_ref()
                .map(|r| webhook_context(rules, r))
                .unwrap_or_default();
            return Route {
                mode,
                method,
                path: path_and_query.to_owned(),
                path_rewritten: upstream_path != path_and_query,
                upstream_path,
                rewrite_bodies: rule.is_some(),
                restore_errors: rule.is_some(),
                response: if rule.is_some() {
                    BodyMode::Object
                } else {
                    BodyMode::Pass
                },
                watch: false,
                resource: rule
                    .as_ref()
                    .map_or_else(|| "UNKNOWN".to_owned(), |r| r.resource.clone()),
                context,
                webhook: rule,
                openapi: None,
            };
        }
        if let Some(doc) = crate::openapi::Document::of_path(path_and_query) {
            let upstream_path = crate::openapi::upstream_path(rules, path_and_query)
                .unwrap_or_else(|| path_and_query.to_owned());
            return Route {
                mode,
                method,
                path: path_and_query.to_owned(),
                path_rewritten: upstream_path != path_and_query,
                upstream_path,
                rewrite_bodies: false,
                restore_errors: false,
                response: BodyMode::Pass,
                watch: false,
                resource: "OpenAPI".to_owned(),
                context: Context::default(),
                webhook: None,
                openapi: Some(doc),
            };
        }
        let (upstream, changed) = match crate::path::rewrite_parsed(rules, Direction::Rename, &parsed) {
            Ok((p, changed)) => (p.to_string(), changed),
            Err(_) => (path_and_query.to_owned(), false),
        };
        let f = facts(&parsed);
        // The resource's bodies are rewritten; a streaming subresource's are not (they are no
        // JSON objects), but its errors are.
        let ruled = match f.prefix {
            Prefix::Other => false,
            Prefix::Core => f.resource.is_some() && rules.rewrites_core(),
            Prefix::Apis => match (&f.group, &f.resource) {
                (None, _) => true,
                (Some(g), None) => rules.group(g).is_some(),
                (Some(g), Some(r)) => {
                    let crd = g == "apiextensions.k8s.io" && r == "customresourcedefinitions";
                    crd || rules.resource(g, r).is_some() || rules.rewrites_resource(r)
                }
            },
        };
        let sub_stream = f
            .sub
            .as_deref()
            .is_some_and(|s| rules.is_streaming_subresource(s));
        let rewrite = ruled && !sub_stream;
        let response = if !rewrite {
            BodyMode::Pass
        } else if watch {
            BodyMode::Watch
        } else if method == "GET" && f.resource.is_some() && f.name.is_none() {
            BodyMode::List
        } else {
            BodyMode::Object
        };
        // A Table without objects carries no labels for excludes to see: upstream is asked
        // for metadata, which the response then loses.
        let strip_row_objects =
            rewrite && method == "GET" && parsed.query_param("includeObject").is_some_and(|v| v == "None");
        let (upstream, changed) = if strip_row_objects {
            (crate::path::set_include_object_metadata(&upstream), true)
        } else {
            (upstream, changed)
        };
        let context = Context {
            group: f.group.clone(),
            kind: f
                .resource
                .as_deref()
                .and_then(|r| kind_of(rules, f.group.as_deref().unwrap_or(""), r)),
            strip_row_objects,
        };
        Route {
            mode,
            method,
            path: path_and_query.to_owned(),
            upstream_path: upstream,
            path_rewritten: changed,
            rewrite_bodies: rewrite,
            restore_errors: ruled,
            response,
            watch,
            resource: f.label,
            context,
            webhook: None,
            openapi: None,
        }
    }

    /// Direction for request bodies.
    pub fn request_direction(&self) -> Direction {
        match self.mode {
            ProxyMode::Api => Direction::Rename,
            ProxyMode::Webhook => Direction::Restore,
        }
    }

    /// Direction for response bodies.
    pub fn response_direction(&self) -> Direction {
        self.request_direction().reverse()
    }

    /// True when upstream should be asked for JSON rather than protobuf or CBOR.
    pub fn wants_json(&self) -> bool {
        self.rewrite_bodies
    }

    /// Rewrites a request body sent with `content_type`.
    pub fn request_body<'a>(
        &self,
        rules: &Rules,
        content_type: Option<&str>,
        body: &'a [u8],
    ) -> Result<RequestBody<'a>> {
        let keep = |body: &'a [u8]| {
            Ok(RequestBody {
                body: Cow::Borrowed(body),
                content_type: None,
            })
        };
        if !self.rewrite_bodies || body.is_empty() {
            return keep(body);
        }
        let dir = self.request_direction();
        let media = media_type(content_type);
        if media == "application/vnd.kubernetes.protobuf" && self.method != "PATCH" {
            let out = crate::proto::rewrite(rules, dir, body)?;
            return Ok(RequestBody {
                body: Cow::Owned(out),
                content_type: None,
            });
        }
        if media.contains("protobuf") || media.contains("cbor") {
            return Err(Error::UnsupportedMediaType(media));
        }
        if self.method == "PATCH" {
            let Some(ty) = content_type.and_then(PatchType::from_content_type) else {
                return Err(Error::UnsupportedMediaType(media));
            };
            let target = self.patch_target(rules);
            let out = patch::rewrite(rules, dir, ty, body, target)?;
            return Ok(RequestBody {
                body: out,
                content_type: None,
            });
        }
        match media.as_str() {
            "" | "application/json" | "*/*" => {
                let out = object::rewrite(rules, dir, body, &self.context)?;
                let body = match out {
                    Outcome::Object(b) => b,
                    Outcome::Excluded => Cow::Borrowed(body),
                };
                Ok(RequestBody {
                    body,
                    content_type: None,
                })
            }
            "application/yaml" | "application/x-yaml" | "text/yaml" => {
                let json = patch::yaml_to_json(body)?;
                let out = object::rewrite(rules, dir, &json, &self.context)?;
                let out = match out {
                    Outcome::Object(b) => b.into_owned(),
                    Outcome::Excluded => json.clone(),
                };
                Ok(RequestBody {
                    body: Cow::Owned(out),
                    content_type: Some("application/json"),
                })
            }
            _ => keep(body),
        }
    }

    /// What the objects this request is about are, for patches.
    pub fn patch_target<'r>(&'r self, rules: &'r Rules) -> patch::PatchTarget<'r> {
        if self.mode == ProxyMode::Api {
            let decoded = crate::path::decode_route_slashes(&self.path);
            let p = ApiPath::parse(decoded.as_deref().unwrap_or(&self.path));
            if p.is_crd()
                && let Some(name) = p.name()
            {
                return patch::plan_for_crd(rules, name);
            }
        }
        patch::plan_for(
            rules,
            self.context.group.as_deref().unwrap_or(""),
            self.context.kind.as_deref().unwrap_or(""),
        )
    }

    /// True when a response with this status and `Content-Type` is rewritten.
    pub(crate) fn rewrites_response(&self, status: u16, content_type: Option<&str>) -> bool {
        let restored = self.rewrite_bodies || (self.restore_errors && status >= 400);
        // A webhook's answer on a rule path is an AdmissionReview whatever its Content-Type
        // says: Go webhook servers (KubeVirt's virt-api among them) leave it to net/http's
        // sniffing, which says `text/plain`, and kube-apiserver reads it as JSON all the same.
        let json = is_json(content_type)
            || (self.mode == ProxyMode::Webhook && self.rewrite_bodies && (200..300).contains(&status));
        restored && status != 101 && status != 204 && status != 304 && json
    }

    /// How a response with `status` is handled (errors are single Status documents).
    pub fn response_mode(&self, status: u16, content_type: Option<&str>) -> BodyMode {
        if !self.rewrites_response(status, content_type) {
            BodyMode::Pass
        } else if !(200..300).contains(&status) && self.response != BodyMode::Watch {
            BodyMode::Object
        } else {
            self.response
        }
    }

    /// Rewrites a whole response body.
    pub fn response_body<'a>(&self, rules: &Rules, body: &'a [u8]) -> Result<ResponseBody<'a>> {
        let ctx = self.context.clone();
        match object::rewrite(rules, self.response_direction(), body, &ctx)? {
            Outcome::Object(b) => Ok(ResponseBody::Body(b)),
            Outcome::Excluded => Ok(ResponseBody::NotFound(self.not_found())),
        }
    }

    /// A LIST body rewriter for this response.
    pub fn list_rewriter<'r>(&self, rules: impl Into<RulesRef<'r>>) -> ListRewriter<'r> {
        ListRewriter::new(rules, self.response_direction(), self.context.clone())
    }

    /// A WATCH stream rewriter for this response.
    pub fn watch_rewriter<'r>(&self, rules: impl Into<RulesRef<'r>>) -> WatchRewriter<'r> {
        WatchRewriter::new(rules, self.response_direction(), self.context.clone())
    }

    fn not_found(&self) -> Vec<u8> {
        let p = ApiPath::parse(&self.path);
        let f = facts(&p);
        let resource = f.resource.clone().unwrap_or_default();
        let name = f.name.clone().unwrap_or_default();
        let gr = match f.group.as_deref() {
            Some(g) if !g.is_empty() => format!("{resource}.{g}"),
            _ => resource.clone(),
        };
        let details =
            serde_json::json!({"name": name, "group": f.group.clone().unwrap_or_default(), "kind": resource});
        status_json(
            404,
            "NotFound",
            &format!("{gr} \"{name}\" not found"),
            Some(details),
        )
    }
}

/// A Kubernetes `Status` failure body.
pub fn status_json(code: u16, reason: &str, message: &str, details: Option<serde_json::Value>) -> Vec<u8> {
    let mut v = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let Some(d) = details {
        v["details"] = d;
    }
    // Serializing a `Value` of strings and numbers cannot fail.
    serde_json::to_vec(&v).unwrap_or_default()
}

fn media_type(ct: Option<&str>) -> String {
    ct.unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// True for JSON media types (`application/json`, `...+json`), parameters ignored.
pub fn is_json(ct: Option<&str>) -> bool {
    let m = media_type(ct);
    m == "application/json" || m.ends_with("+json")
}

fn webhook_context(rules: &Rules, w: &WebhookRule) -> Context {
    let first = w.resource.split(',').next().unwrap_or("");
    let plural = first.split('/').next().unwrap_or("");
    Context {
        group: Some(w.group.clone()),
        kind: rules.resource(&w.group, plural).map(|r| r.kind.clone()),
        strip_row_objects: false,
    }
}

/// The original kind of a resource: from the rules, or guessed for built-in kinds the way
/// Kubernetes guesses plurals.
pub(crate) fn kind_of(rules: &Rules, group: &str, plural: &str) -> Option<String> {
    if let Some(r) = rules.resource(group, plural) {
        return Some(r.kind.clone());
    }
    if group == crate::path::CRD_GROUP && plural == crate::path::CRD_RESOURCE {
        return Some("CustomResourceDefinition".to_owned());
    }
    // Kinds with field locations, then the kinds excludes name (metadata-only lists and
    // Tables carry no kind of their own).
    rules
        .kinds
        .iter()
        .filter(|k| k.api_groups.as_ref().is_none_or(|g| g.iter().any(|x| x == group)))
        .flat_map(|k| k.kinds.iter())
        .chain(
            rules
                .excludes
                .iter()
                .filter(|e| e.api_groups.is_empty() || e.api_groups.iter().any(|x| x == group))
                .flat_map(|e| e.kinds.iter()),
        )
        .find(|k| guess_plural(k) == plural)
        .cloned()
}

fn guess_plural(kind: &str) -> String {
    let l = kind.to_ascii_lowercase();
    if l.ends_with('s') || l.ends_with("ch") || l.ends_with('x') {
        format!("{l}es")
    } else if let Some(stem) = l
        .strip_suffix('y')
        .filter(|s| !s.ends_with(['a', 'e', 'i', 'o', 'u']))
    {
        format!("{stem}ies")
    } else {
        format!("{l}s")
    }
}

enum Prefix {
    Core,
    Apis,
    Other,
}

struct Facts {
    prefix: Prefix,
    group: Option<String>,
    resource: Option<String>,
    name: Option<String>,
    sub: Option<String>,
    label: String,
}

/// The parts of a parsed path this module decides on.
fn facts(p: &ApiPath) -> Facts {
    let (prefix, group) = match p.prefix() {
        crate::path::Prefix::Core => (Prefix::Core, Some(String::new())),
        crate::path::Prefix::Apis => (Prefix::Apis, p.group().map(str::to_owned)),
        _ => (Prefix::Other, None),
    };
    let resource = p.resource().map(str::to_owned);
    let label = match (&prefix, &group, &resource) {
        (Prefix::Other, _, _) => "UNKNOWN".to_owned(),
        (Prefix::Core, _, None) => "APIVersions/core".to_owned(),
        (Prefix::Apis, None, _) => "APIGroupList".to_owned(),
        (Prefix::Apis, Some(g), None) => format!("APIGroup/{g}"),
        (_, _, Some(r)) => match p.subresource() {
            Some(s) => format!("{r}/{s}"),
            None => r.clone(),
        },
    };
    Facts {
        prefix,
        group,
        resource,
        name: p.name().map(str::to_owned),
        sub: p.subresource().map(str::to_owned),
        label,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: &str = "internal.virtualization.deckhouse.io";
    const VMS: &str = "internalvirtualizationvirtualmachines";

    /// exec, port-forward...: the stream passes untouched, a refusal gets its names back; no
    /// error of a resource the rules do not touch is read.
    #[test]
    fn streams_of_ruled_resources_restore_their_errors() {
        let rules = Rules::builtin_kubevirt();
        let json = Some("application/json");
        for path in [
            "/apis/kubevirt.io/v1/namespaces/ns/virtualmachineinstances/vm/portforward",
            "/api/v1/namespaces/ns/pods/p/exec?command=sh",
            "/api/v1/namespaces/ns/pods/p/log",
        ] {
            let r = Route::new(&rules, ProxyMode::Api, "GET", path);
            assert!(!r.rewrite_bodies && r.restore_errors, "{path}");
            assert_eq!(r.response_mode(200, json), BodyMode::Pass, "{path}");
            assert_eq!(r.response_mode(403, json), BodyMode::Object, "{path}");
        }
        let r = Route::new(
            &rules,
            ProxyMode::Api,
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
        );
        assert!(!r.restore_errors);
        assert_eq!(r.response_mode(404, json), BodyMode::Pass);
        let st = format!(
            r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"{VMS}.{G} \"vm\" not found","reason":"NotFound","details":{{"name":"vm","group":"{G}","kind":"{VMS}"}},"code":404}}"#
        );
        let r = Route::new(
            &rules,
            ProxyMode::Api,
            "GET",
            "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/vm/portforward",
        );
        let out = match r.response_body(&rules, st.as_bytes()).expect("rewrites") {
            ResponseBody::Body(b) => String::from_utf8(b.into_owned()).expect("utf-8"),
            ResponseBody::NotFound(_) => panic!("not hidden"),
        };
        assert!(!out.contains(G) && !out.contains(VMS), "{out}");
        assert!(
            out.contains(r#"virtualmachines.kubevirt.io \"vm\" not found"#),
            "{out}"
        );
    }

    #[test]
    fn only_a_get_is_a_watch() {
        let rules = Rules::builtin_kubevirt();
        let path = "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines?watch=1";
        let get = Route::new(&rules, ProxyMode::Api, "get", path);
        assert!(get.watch);
        assert_eq!(get.response, BodyMode::Watch);
        for (method, mode) in [
            ("POST", BodyMode::Object),
            ("DELETE", BodyMode::Object),
            ("PUT", BodyMode::Object),
        ] {
            let r = Route::new(&rules, ProxyMode::Api, method, path);
            assert!(!r.watch, "{method}");
            assert_eq!(r.response, mode, "{method}");
            assert!(r.rewrite_bodies, "{method}");
        }
    }

    #[test]
    fn encoded_slashes_are_routed_as_kube_apiserver_splits_them() {
        let rules = Rules::builtin_kubevirt();
        let cases = [
            // group
            (
                "/apis/kubevirt.io%2Fv1/namespaces/ns/virtualmachines",
                format!("/apis/{G}/v1/namespaces/ns/{VMS}"),
            ),
            // version
            (
                "/apis/kubevirt.io/v1%2Fnamespaces/ns/virtualmachines/vm",
                format!("/apis/{G}/v1/namespaces/ns/{VMS}/vm"),
            ),
            // namespace
            (
                "/apis/kubevirt.io/v1/namespaces/ns%2Fvirtualmachines",
                format!("/apis/{G}/v1/namespaces/ns/{VMS}"),
            ),
            // resource
            (
                "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines%2Fvm?x=%2F",
                format!("/apis/{G}/v1/namespaces/ns/{VMS}/vm?x=%2F"),
            ),
            // name
            (
                "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/vm%2fstatus",
                format!("/apis/{G}/v1/namespaces/ns/{VMS}/vm/status"),
            ),
            // the prefix itself, lower case escape, twice
            (
                "/apis%2Fkubevirt.io%2fv1/virtualmachines",
                format!("/apis/{G}/v1/{VMS}"),
            ),
        ];
        for (path, want) in cases {
            let r = Route::new(&rules, ProxyMode::Api, "GET", path);
            assert_eq!(r.upstream_path, want, "{path}");
            assert!(r.path_rewritten && r.rewrite_bodies, "{path}");
            assert_eq!(r.path, path);
        }
        let watch = Route::new(
            &rules,
            ProxyMode::Api,
            "GET",
            "/apis/kubevirt.io%2Fv1/virtualmachines?watch=1",
        );
        assert_eq!(watch.response, BodyMode::Watch);
        // After the subresource the path is handed on as sent; `%252F` is a literal `%2F`.
        for path in [
            "/api/v1/namespaces/ns/services/s/proxy/a%2Fb",
            "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/a%252Fb",
        ] {
            let r = Route::new(&rules, ProxyMode::Api, "GET", path);
            assert!(!r.upstream_path.contains("a/b"), "{path}: {}", r.upstream_path);
        }
    }

    /// `rules/virtualization-api.yaml`: our subresources group to virt-api's, streams spliced
    /// (never rewritten), the PUT subresources rewritten (a Status error gets its group back).
    #[test]
    fn virtualization_api_rules() {
        let rules = Rules::parse(&[crate::rules::Source {
            name: "rules/virtualization-api.yaml",
            text: include_str!("../../../rules/virtualization-api.yaml"),
        }])
        .expect("valid");
        let ours = "/apis/subresources.virtualization.deckhouse.io/v1alpha2/namespaces/ns";
        let theirs = "/apis/subresources.kubevirt.io/v1/namespaces/ns";
        for (method, tail, rewrite) in [
            ("GET", "virtualmachineinstances/vm/console", false),
            ("GET", "virtualmachineinstances/vm/vnc", false),
            ("GET", "virtualmachineinstances/vm/portforward/22/tcp", false),
            ("PUT", "virtualmachineinstances/vm/freeze", true),
            ("PUT", "virtualmachines/vm/addvolume", true),
        ] {
            let r = Route::new(&rules, ProxyMode::Api, method, &format!("{ours}/{tail}"));
            assert_eq!(r.upstream_path, format!("{theirs}/{tail}"));
            assert_eq!(r.rewrite_bodies, rewrite, "{tail}");
            // A stream's refusal (virt-api's Status) is restored all the same.
            assert!(r.restore_errors, "{tail}");
            let json = Some("application/json");
            assert_eq!(r.response_mode(404, json), BodyMode::Object, "{tail}");
            assert_eq!(r.response_mode(400, json), BodyMode::Object, "{tail}");
            assert_eq!(r.response_mode(404, Some("text/plain")), BodyMode::Pass, "{tail}");
            if !rewrite {
                assert_eq!(r.response_mode(101, None), BodyMode::Pass, "{tail}");
                assert_eq!(r.response_mode(200, json), BodyMode::Pass, "{tail}");
            }
        }
        // Without the extension, console is not a stream: its bodies would be rewritten.
        let plain = Rules::parse(&[crate::rules::Source {
            name: "r.yaml",
            text: "rules: {subresources.virtualization.deckhouse.io: {groupRule: {group: subresources.virtualization.deckhouse.io, renamed: subresources.kubevirt.io}, resourceRules: {virtualmachineinstances: {kind: VirtualMachineInstance}}}}",
        }])
        .expect("valid");
        let r = Route::new(
            &plain,
            ProxyMode::Api,
            "GET",
            &format!("{ours}/virtualmachineinstances/vm/console"),
        );
        assert!(r.rewrite_bodies);
        // virt-api's errors come back in our group.
        let st = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"virtualmachineinstances.subresources.kubevirt.io \"vm\" not found","reason":"NotFound","details":{"name":"vm","group":"subresources.kubevirt.io","kind":"virtualmachineinstances"},"code":404}"#;
        let r = Route::new(
            &rules,
            ProxyMode::Api,
            "PUT",
            &format!("{ours}/virtualmachineinstances/vm/freeze"),
        );
        let out = match r.response_body(&rules, st).expect("rewrites") {
            ResponseBody::Body(b) => String::from_utf8(b.into_owned()).expect("utf-8"),
            ResponseBody::NotFound(_) => panic!("not hidden"),
        };
        assert!(
            out.contains(r#""group":"subresources.virtualization.deckhouse.io""#),
            "{out}"
        );
        // A body that is not a Kubernetes object passes untouched.
        let body = br#"{"unfreezeTimeout":"5m"}"#;
        let b = r
            .request_body(&rules, Some("application/json"), body)
            .expect("ok");
        assert_eq!(&b.body[..], &body[..]);
    }

    #[test]
    fn a_webhook_answer_is_json_whatever_its_content_type() {
        let rules = Rules::builtin_kubevirt();
        let r = Route::new(
            &rules,
            ProxyMode::Webhook,
            "POST",
            "/virtualmachines-mutate?timeout=10s",
        );
        for ct in [Some("text/plain; charset=utf-8"), None, Some("application/json")] {
            assert_eq!(r.response_mode(200, ct), BodyMode::Object, "{ct:?}");
        }
        // A plain-text error is not an AdmissionReview; nor is any answer off the rule paths.
        assert_eq!(r.response_mode(400, Some("text/plain")), BodyMode::Pass);
        let other = Route::new(&rules, ProxyMode::Webhook, "GET", "/healthz");
        assert_eq!(other.response_mode(200, Some("text/plain")), BodyMode::Pass);
    }
}
