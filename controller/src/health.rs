//! The probe and metrics listeners: `GET /healthz`, `/readyz` and `/metrics`
//! ([`crate::metrics`]) over hyper's HTTP/1.1, with a header deadline, a connection deadline and
//! a connection cap. Deckhouse's listen-address syntax (`:8083`) is accepted.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::reconcile::Context;

/// Parses a listen address; an empty host (`:8083`) means every interface.
pub fn listen_addr(s: &str) -> Result<SocketAddr, String> {
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_owned()
    };
    full.parse().map_err(|e| format!("listen address {s:?}: {e}"))
}

/// What a listener answers.
#[derive(Clone, Copy, Debug)]
pub enum Endpoints {
    /// `/healthz` (always 200) and `/readyz` (200 once every required API is served and every
    /// watched resource could be listed, else 503 and why).
    Probes,
    /// `/metrics` (Prometheus text).
    Metrics,
}

/// Open connections per listener; a connection beyond it is closed at once.
const MAX_CONNECTIONS: usize = 64;
/// The longest a connection may take to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a connection may stay open.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `endpoints` on `listener` (HTTP/1.1, keep-alive) until the task is dropped.
pub async fn serve(listener: TcpListener, endpoints: Endpoints, ctx: Arc<Context>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            continue;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let resp = answer(&req, endpoints, &ctx);
                async move { Ok::<_, std::convert::Infallible>(resp) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, conn).await;
            drop(slot);
        });
    }
}

/// The status line and body for `path`.
pub fn respond(path: &str, endpoints: Endpoints, ctx: &Context) -> (&'static str, String) {
    match (endpoints, path) {
        (Endpoints::Probes, "/healthz") => ("200 OK", "ok\n".into()),
        (Endpoints::Probes, "/readyz") => match ctx.readiness() {
            Ok(()) => ("200 OK", "ok\n".into()),
            Err(why) => ("503 Service Unavailable", format!("not ready: {why}\n")),
        },
        (Endpoints::Metrics, "/metrics") => (
            "200 OK",
            crate::metrics::render(ctx.metric_rows(ctx.errors.load(Ordering::Relaxed))),
        ),
        _ => ("404 Not Found", "not found\n".into()),
    }
}

fn answer(req: &Request<Incoming>, endpoints: Endpoints, ctx: &Context) -> Response<Full<Bytes>> {
    let (method, path) = (req.method(), req.uri().path());
    let (status, body) = if method == Method::GET || method == Method::HEAD {
        respond(path, endpoints, ctx)
    } else {
        ("405 Method Not Allowed", "method not allowed\n".into())
    };
    let content_type = match endpoints {
        Endpoints::Metrics if status == "200 OK" => {
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        }
        _ => "text/plain; charset=utf-8",
    };
    let code = status
        .split(' ')
        .next()
        .and_then(|c| c.parse().ok())
        .and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = code;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(listen_addr(":8083").unwrap(), "0.0.0.0:8083".parse().unwrap());
        assert_eq!(
            listen_addr("127.0.0.1:8080").unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
        assert!(listen_addr("nowhere").is_err());
    }

    #[tokio::test]
    async fn probes_follow_readiness_and_metrics_count_errors() {
        let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().expect("url")))
            .expect("client");
        let ctx = Context::new(client);
        assert_eq!(respond("/healthz", Endpoints::Probes, &ctx).0, "200 OK");
        assert_eq!(
            respond("/readyz", Endpoints::Probes, &ctx),
            (
                "503 Service Unavailable",
                "not ready: the served APIs were not discovered yet\n".into()
            )
        );
        for api in crate::apis::USED {
            let required = api.need == crate::apis::Need::Required;
            ctx.served
                .record(api.name, required && api.name.group != "kubevirt.io");
        }
        let (status, body) = respond("/readyz", Endpoints::Probes, &ctx);
        assert_eq!(status, "503 Service Unavailable");
        assert!(
            body.starts_with(
                "not ready: required APIs not served: virtualmachines.kubevirt.io/v1 (KubeVirt's CRDs"
            ),
            "{body}"
        );
        for api in crate::apis::USED {
            ctx.served
                .record(api.name, api.need == crate::apis::Need::Required);
        }
        assert_eq!(
            respond("/readyz", Endpoints::Probes, &ctx),
            (
                "503 Service Unavailable",
                "not ready: the watched resources were not listed yet\n".into()
            )
        );
        ctx.listed.store(true, Ordering::Relaxed);
        // An optional API that is not served does not keep the controller from being ready.
        assert!(!ctx.served.is_served(crate::apis::VOLUME_SNAPSHOTS));
        assert_eq!(respond("/readyz", Endpoints::Probes, &ctx).0, "200 OK");
        assert_eq!(respond("/metrics", Endpoints::Probes, &ctx).0, "404 Not Found");
        ctx.errors.store(3, Ordering::Relaxed);
        let (status, body) = respond("/metrics", Endpoints::Metrics, &ctx);
        assert_eq!(status, "200 OK");
        assert!(
            body.contains("virtualization_controller_reconcile_errors_total 3\n"),
            "{body}"
        );
        assert!(
            body.contains("virtualization_controller_api_served{group=\"snapshot.storage.k8s.io\",version=\"v1\",resource=\"volumesnapshots\"} 0\n"),
            "{body}"
        );
        assert!(
            body.contains("virtualization_controller_api_served{group=\"kubevirt.io\",version=\"v1\",resource=\"virtualmachines\"} 1\n"),
            "{body}"
        );
        assert_eq!(respond("/healthz", Endpoints::Metrics, &ctx).0, "404 Not Found");
    }
}
