//! Who the request is sent as: the proxy's credentials (unless the client brought its own
//! `Authorization`), the kubeconfig's impersonation in place of any a client asked for, and
//! the configured front-proxy identity (`REMOTE_USER`, `REMOTE_GROUPS`) in place of every
//! client `X-Remote-*` header. Nothing a client sends can replace or widen the identity the
//! proxy lends it ([`Upstream::authorize`], [`RemoteIdentity::apply`]).

use std::sync::Arc;
use std::task::{Context, Poll};

use tower::{Layer, Service};

use super::Routed;
use crate::upstream::Upstream;
use crate::upstream::identity::RemoteIdentity;

/// Sets the identity of each request sent to `upstream`.
#[derive(Debug, Clone)]
pub struct IdentityLayer {
    upstream: Arc<Upstream>,
    remote: Option<RemoteIdentity>,
}

impl IdentityLayer {
    /// `upstream`'s credentials and impersonation, and the front-proxy identity `remote`
    /// (`None`: client `X-Remote-*` headers are left alone, as for the webhook proxy).
    pub fn new(upstream: Arc<Upstream>, remote: Option<RemoteIdentity>) -> Self {
        Self { upstream, remote }
    }
}

impl<S> Layer<S> for IdentityLayer {
    type Service = IdentityService<S>;

    fn layer(&self, inner: S) -> IdentityService<S> {
        IdentityService {
            layer: self.clone(),
            inner,
        }
    }
}

/// The service [`IdentityLayer`] makes.
#[derive(Debug, Clone)]
pub struct IdentityService<S> {
    layer: IdentityLayer,
    inner: S,
}

impl<S: Service<Routed>> Service<Routed> for IdentityService<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut r: Routed) -> S::Future {
        let headers = r.req.headers_mut();
        self.layer.upstream.authorize(headers);
        if let Some(id) = &self.layer.remote {
            id.apply(headers);
        }
        self.inner.call(r)
    }
}

#[cfg(test)]
mod tests {
    use http::{Request, Response};
    use kube_api_rewriter_layer::body;
    use tower::ServiceExt;

    use super::super::test_support::{mock, routed_req};
    use super::*;
    use crate::deadlines::Deadlines;

    fn upstream(token: Option<&str>, impersonate: Option<&str>) -> Arc<Upstream> {
        let mut cfg = kube::Config::new("http://127.0.0.1:1".parse().expect("url"));
        cfg.auth_info.token = token.map(|t| t.to_owned().into());
        cfg.auth_info.impersonate = impersonate.map(str::to_owned);
        Arc::new(Upstream::from_kube_config(cfg, &Deadlines::default()).expect("upstream"))
    }

    async fn sent(layer: IdentityLayer, req: Request<kube_api_rewriter_layer::Body>) -> http::HeaderMap {
        let (svc, mut handle) = mock();
        let call = tokio::spawn(layer.layer(svc).oneshot(routed_req(req)));
        let (r, send) = handle.next_request().await.expect("forwarded");
        send.send_response(Response::new(body::empty()));
        call.await.expect("task").expect("answered");
        r.req.headers().clone()
    }

    #[tokio::test]
    async fn client_identity_headers_never_reach_the_inner_service() {
        let remote =
            RemoteIdentity::new("system:serviceaccount:d:sa", "system:serviceaccounts").expect("identity");
        let layer = IdentityLayer::new(upstream(Some("proxy-token"), Some("lent")), Some(remote));
        let req = Request::get("/api/v1/namespaces")
            .header("impersonate-user", "admin")
            .header("impersonate-group", "system:masters")
            .header("x-remote-user", "admin")
            .header("x-remote-group", "system:masters")
            .header("x-remote-extra-scopes", "all")
            .body(body::empty())
            .expect("request");
        let h = sent(layer, req).await;
        assert_eq!(h["impersonate-user"], "lent");
        assert!(!h.contains_key("impersonate-group"));
        assert_eq!(h["x-remote-user"], "system:serviceaccount:d:sa");
        assert_eq!(
            h.get_all("x-remote-group").iter().collect::<Vec<_>>(),
            ["system:serviceaccounts"]
        );
        assert!(!h.contains_key("x-remote-extra-scopes"));
        assert_eq!(h["authorization"], "Bearer proxy-token");
    }

    #[tokio::test]
    async fn a_clients_own_authorization_is_kept() {
        let layer = IdentityLayer::new(upstream(Some("proxy-token"), None), None);
        let req = Request::get("/api/v1/namespaces")
            .header("authorization", "Bearer client-token")
            .body(body::empty())
            .expect("request");
        let h = sent(layer, req).await;
        assert_eq!(h["authorization"], "Bearer client-token");
    }
}
