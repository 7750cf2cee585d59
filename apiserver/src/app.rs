//! One request through the server: health, front-proxy authentication, authorization,
//! discovery and OpenAPI, the VM and its subresources.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response};
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use rustls_pki_types::CertificateDer;
use serde_json::json;

use crate::authn::{RequestHeaderConfig, User};
use crate::authz::{Attributes, Authorizer, verb};
use crate::error::{Error, Result};
use crate::status::{Body, error_response, json, text};
use crate::subresources::{ApiPath, GROUP, Sub, Target, VERSION, parse_path, target};
use crate::virtapi::{MAX_BODY, VirtApi, is_upgrade};
use crate::vmcache::{VmCache, check_phase};
use crate::{discovery, openapi};

/// What routing decided.
enum Step {
    /// Answer with this.
    Respond(Response<Body>),
    /// Call virt-api (`true`: a stream).
    Forward(Target, bool),
}

/// Time an answered request's body has to arrive before the answer goes out anyway.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads and drops the rest of a request answered without its body, so that a kept-alive
/// HTTP/1 connection stays in sync and an HTTP/2 stream ends cleanly. Bodies declared over
/// the limit are left (the connection or stream is reset instead).
async fn drain(req: Request<Incoming>) {
    let declared = req
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return;
    }
    let body = Limited::new(req.into_body(), MAX_BODY).collect();
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, body).await;
}

/// Everything a request needs.
#[derive(Debug)]
pub struct App {
    /// Front-proxy authentication.
    pub authn: RequestHeaderConfig,
    /// SubjectAccessReviews.
    pub authz: Authorizer,
    /// The VirtualMachines.
    pub vms: VmCache,
    /// The hop to virt-api.
    pub virtapi: VirtApi,
}

impl App {
    /// Answers one request; `peer` is the client certificate the TLS handshake verified.
    pub async fn handle(
        self: Arc<Self>,
        mut req: Request<Incoming>,
        peer: Option<Arc<CertificateDer<'static>>>,
    ) -> Response<Body> {
        let path = req.uri().path().to_owned();
        if matches!(path.as_str(), "/healthz" | "/livez" | "/readyz") {
            drain(req).await;
            return text("ok");
        }
        let method = req.method().clone();
        let user = match self.authn.authenticate(peer.as_deref(), req.headers_mut()) {
            Ok(u) => u,
            Err(e) => {
                tracing::info!(%method, %path, code = 401, error = %e, "request");
                drain(req).await;
                return error_response(&e);
            }
        };
        let resp = match self.route(&req, &user).await {
            Ok(Step::Forward(tgt, stream)) => match self.virtapi.forward(req, tgt, stream).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(%path, error = %e, "virt-api call failed");
                    error_response(&e)
                }
            },
            Ok(Step::Respond(r)) => {
                drain(req).await;
                r
            }
            Err(e) => {
                drain(req).await;
                error_response(&e)
            }
        };
        tracing::info!(%method, %path, user = %user.name, code = resp.status().as_u16(), "request");
        resp
    }

    async fn non_resource(&self, user: &User, method: &Method, path: &str) -> Result<()> {
        self.authz
            .authorize(
                user,
                &Attributes::NonResource {
                    verb: verb(method),
                    path: path.to_owned(),
                },
            )
            .await?;
        if method != Method::GET {
            return Err(Error::MethodNotAllowed);
        }
        Ok(())
    }

    async fn route(&self, req: &Request<Incoming>, user: &User) -> Result<Step> {
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        match parse_path(&path) {
            ApiPath::Apis => {
                self.non_resource(user, &method, &path).await?;
                Ok(Step::Respond(json(&discovery::api_group_list())))
            }
            ApiPath::Group => {
                self.non_resource(user, &method, &path).await?;
                Ok(Step::Respond(json(&discovery::api_group())))
            }
            ApiPath::Version => {
                self.non_resource(user, &method, &path).await?;
                Ok(Step::Respond(json(&discovery::api_resource_list())))
            }
            ApiPath::Other => {
                self.non_resource(user, &method, &path).await?;
                let doc = match path.as_str() {
                    "/version" => discovery::version(),
                    "/openapi/v2" => openapi::v2(),
                    "/openapi/v3" => openapi::v3_index(),
                    p if p == openapi::v3_group_path() => openapi::v3_group(),
                    _ => return Err(Error::no_route()),
                };
                Ok(Step::Respond(json(&doc)))
            }
            ApiPath::InvalidName { message } => Err(Error::BadRequest(message)),
            ApiPath::VmList { namespace } => {
                let attrs = Attributes::Resource {
                    verb: if method == Method::GET {
                        "list"
                    } else {
                        verb(&method)
                    },
                    namespace: namespace.to_owned(),
                    name: String::new(),
                    subresource: String::new(),
                };
                self.authz.authorize(user, &attrs).await?;
                Err(Error::MethodNotAllowed)
            }
            ApiPath::Vm { namespace, name } => {
                let attrs = Attributes::Resource {
                    verb: verb(&method),
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    subresource: String::new(),
                };
                self.authz.authorize(user, &attrs).await?;
                if method != Method::GET {
                    return Err(Error::MethodNotAllowed);
                }
                let vm = self.vms.get(namespace, name)?;
                Ok(Step::Respond(json(&json!({
                    "kind": "VirtualMachine",
                    "apiVersion": format!("{GROUP}/{VERSION}"),
                    "metadata": vm.metadata,
                }))))
            }
            ApiPath::Subresource { namespace, name, sub } => {
                let v = verb(&method);
                if v.is_empty() {
                    return Err(Error::MethodNotAllowed);
                }
                let attrs = Attributes::Resource {
                    verb: v,
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    subresource: sub.to_owned(),
                };
                self.authz.authorize(user, &attrs).await?;
                let Some(sub) = Sub::parse(sub) else {
                    return Err(Error::no_route());
                };
                if !sub.allows(&method) {
                    return Err(Error::MethodNotAllowed);
                }
                let tgt = target(sub, namespace, name, req.uri().query().unwrap_or(""))?;
                let vm = self.vms.get(namespace, name)?;
                if let Some((phases, message)) = sub.required_phases() {
                    check_phase(&vm, phases, message)?;
                }
                if sub.is_stream() && !is_upgrade(req.headers()) {
                    return Err(Error::BadRequest("Upgrade request required".into()));
                }
                Ok(Step::Forward(tgt, sub.is_stream()))
            }
        }
    }
}
