//! The rewriting path: the request's path, query and body renamed (restored, for the webhook
//! direction) on the way up, the response restored as it streams on the way back, with the
//! Layer crate's [`Exchange`], the same path the embedded
//! [`RewriteLayer`](kube_api_rewriter_layer::RewriteLayer) takes. A spliced upgrade goes up
//! untouched; a refused one (any answer but `101`) is restored like any response. The
//! proxy's own answers from further in pass as they are.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response, StatusCode};
use kube_api_rewriter_layer::{Body, Error, Exchange, body};
use tower::{Layer, Service};

use super::{ProxyAnswered, Routed, answer};

/// The request for upstream. (Boxed so that the future is `Send` for every lifetime: awaited in
/// place, the generic body bound of [`Exchange::request`] trips the compiler's check, a known
/// limit of its reasoning about higher-ranked lifetimes in async blocks.)
fn rename<'a>(
    exchange: &'a Exchange,
    req: Request<Body>,
) -> Pin<Box<dyn Future<Output = Result<Request<Body>, Error>> + Send + 'a>> {
    Box::pin(exchange.request(req))
}

/// The response for the client (boxed for the same reason as [`rename`]).
fn restore(exchange: Exchange, resp: Response<Body>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> {
    Box::pin(exchange.response(resp))
}

/// Rewrites requests and their responses.
#[derive(Debug, Clone, Copy, Default)]
pub struct RewriteLayer;

impl RewriteLayer {
    /// The layer.
    pub fn new() -> Self {
        Self
    }
}

impl<S> Layer<S> for RewriteLayer {
    type Service = RewriteService<S>;

    fn layer(&self, inner: S) -> RewriteService<S> {
        RewriteService { inner }
    }
}

/// The service [`RewriteLayer`] makes.
#[derive(Debug, Clone)]
pub struct RewriteService<S> {
    inner: S,
}

impl<S> Service<Routed> for RewriteService<S>
where
    S: Service<Routed, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut r: Routed) -> Self::Future {
        // The ready service goes into the future; a fresh clone takes its place here.
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        Box::pin(async move {
            let exchange = r.exchange.clone();
            if !r.splice {
                let req = std::mem::replace(&mut r.req, Request::new(body::empty()));
                r.req = match rename(&exchange, req).await {
                    Ok(up) => up,
                    Err(e) => return Ok(answer(e)),
                };
            }
            let resp = inner.call(r).await?;
            if resp.status() == StatusCode::SWITCHING_PROTOCOLS
                || resp.extensions().get::<ProxyAnswered>().is_some()
            {
                return Ok(resp);
            }
            Ok(restore(exchange, resp).await)
        })
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::super::test_support::{futures_now, mock, routed, routed_req};
    use super::*;

    const VM: &str = "/apis/kubevirt.io/v1/namespaces/d/virtualmachines/a";
    const RENAMED: &str =
        "/apis/internal.virtualization.deckhouse.io/v1/namespaces/d/internalvirtualizationvirtualmachines/a";

    fn json(s: &str) -> Response<Body> {
        Response::builder()
            .header("content-type", "application/json")
            .body(body::full(s.to_owned()))
            .expect("response")
    }

    #[tokio::test]
    async fn the_request_is_renamed_and_the_response_restored() {
        let (svc, mut handle) = mock();
        let req = Request::put(VM)
            .header("content-type", "application/json")
            .body(body::full(
                r#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine"}"#,
            ))
            .expect("request");
        let call = tokio::spawn(RewriteLayer::new().layer(svc).oneshot(routed_req(req)));
        let (r, send) = handle.next_request().await.expect("forwarded");
        assert_eq!(r.req.uri().path(), RENAMED);
        let sent = r.req.into_body().collect().await.expect("body").to_bytes();
        assert!(
            std::str::from_utf8(&sent)
                .expect("utf-8")
                .contains("InternalVirtualizationVirtualMachine")
        );
        send.send_response(json(
            r#"{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachine"}"#,
        ));
        let resp = call.await.expect("task").expect("answered");
        let got = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(
            &got[..],
            br#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine"}"#
        );
    }

    #[tokio::test]
    async fn a_request_that_cannot_be_rewritten_never_reaches_the_inner_service() {
        let (svc, mut handle) = mock();
        let req = Request::put(VM)
            .header("content-type", "application/json")
            .body(body::full("{not json"))
            .expect("request");
        let resp = RewriteLayer::new()
            .layer(svc)
            .oneshot(routed_req(req))
            .await
            .expect("answered");
        assert_eq!(resp.status(), 400);
        assert!(resp.extensions().get::<ProxyAnswered>().is_some());
        assert!(!matches!(futures_now(handle.next_request()), Some(Some(_))));
    }

    #[tokio::test]
    async fn a_spliced_upgrade_and_the_proxys_own_answers_pass_untouched() {
        let (svc, mut handle) = mock();
        let mut r = routed(VM);
        r.splice = true;
        let call = tokio::spawn(RewriteLayer::new().layer(svc).oneshot(r));
        let (seen, send) = handle.next_request().await.expect("forwarded");
        assert_eq!(seen.req.uri().path(), VM, "a spliced request is not renamed");
        send.send_response(answer(Error::UpgradeTimeout));
        let resp = call.await.expect("task").expect("answered");
        assert_eq!(resp.status(), 504);
        let got = resp.into_body().collect().await.expect("body").to_bytes();
        assert!(
            std::str::from_utf8(&got)
                .expect("utf-8")
                .contains("\"kind\":\"Status\"")
        );
    }
}
