//! `/healthz`, `/readyz` and `/metrics`.
//!
//! Ready means: rules loaded (start-up fails otherwise) and upstream's `/readyz` answered `200`
//! within the last few seconds. A poller asks upstream every interval, so `/readyz` turns
//! not-ready when kube-apiserver goes away and ready again when it returns.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode};

use crate::deadlines::Deadlines;
use crate::metrics::Metrics;
use crate::shutdown::ShutdownSignal;
use crate::upstream::Upstream;
use kube_api_rewriter_layer::{Body, body};

/// Upstream readiness as last seen.
#[derive(Debug)]
pub struct Readiness {
    last_ok: Mutex<Option<Instant>>,
    stale_after: Duration,
    last_error: Mutex<String>,
    always: std::sync::atomic::AtomicBool,
    rules: Mutex<Option<Arc<crate::reload::RulesHandle>>>,
}

impl Readiness {
    /// Not ready until upstream answers.
    pub fn new(stale_after: Duration) -> Arc<Readiness> {
        Arc::new(Readiness {
            last_ok: Mutex::new(None),
            stale_after,
            last_error: Mutex::new("not polled yet".into()),
            always: std::sync::atomic::AtomicBool::new(false),
            rules: Mutex::new(None),
        })
    }

    /// Reports the rules' reload state in `/readyz?verbose` (a failed reload keeps the old
    /// rules serving, so it does not make the proxy unready).
    pub fn set_rules(&self, rules: Arc<crate::reload::RulesHandle>) {
        *self.rules.lock().unwrap_or_else(|p| p.into_inner()) = Some(rules);
    }

    /// The rules' line of `/readyz?verbose`.
    fn rules_check(&self) -> String {
        let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match rules.and_then(|r| r.last_error()) {
            None => "[+]rules ok\n".to_owned(),
            Some(e) => format!("[+]rules ok: the last reload failed, the previous rules serve: {e}\n"),
        }
    }

    /// Ready without polling (no API proxy to check).
    pub fn force_ready(&self) {
        self.always.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Ready now?
    pub fn ready(&self) -> Result<(), String> {
        if self.always.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(());
        }
        let ok = *self.last_ok.lock().unwrap_or_else(|p| p.into_inner());
        match ok {
            Some(t) if t.elapsed() <= self.stale_after => Ok(()),
            _ => Err(self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone()),
        }
    }

    fn record(&self, res: Result<(), String>) {
        match res {
            Ok(()) => *self.last_ok.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now()),
            Err(e) => *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = e,
        }
    }

    /// Polls `GET /readyz` of `upstream` every [`Deadlines::readyz_poll`] until shutdown.
    pub fn spawn_poller(self: &Arc<Self>, upstream: Arc<Upstream>, d: Deadlines, shutdown: ShutdownSignal) {
        let interval = d.readyz_poll;
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let stop = shutdown.cancelled();
            tokio::pin!(stop);
            loop {
                let res = tokio::select! {
                    _ = &mut stop => return,
                    r = tokio::time::timeout(interval.max(d.readyz_poll_floor) * 2, poll(&upstream, d.readyz_answer)) => {
                        r.unwrap_or_else(|_| Err("upstream /readyz timed out".into()))
                    }
                };
                this.record(res);
                tokio::select! {
                    _ = &mut stop => return,
                    _ = tokio::time::sleep(interval) => {}
                }
            }
        });
    }
}

/// Asks upstream `/readyz`, giving it `answer` to answer.
async fn poll(upstream: &Upstream, answer: Duration) -> Result<(), String> {
    let uri = upstream.uri("/readyz").map_err(|e| e.to_string())?;
    let mut headers = HeaderMap::new();
    upstream.authorize(&mut headers);
    let mut req = Request::new(body::empty());
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    // A stopped (not dead) kube-apiserver must not hang the poller.
    let resp = tokio::time::timeout(answer, upstream.send(req, Some(answer)))
        .await
        .map_err(|_| format!("upstream /readyz: no answer within {answer:?}"))?
        .map_err(|e| format!("upstream /readyz: {e}"))?;
    if resp.status() == StatusCode::OK {
        Ok(())
    } else {
        Err(format!("upstream /readyz answered {}", resp.status()))
    }
}

fn text(code: StatusCode, s: impl Into<String>) -> Response<Body> {
    let mut r = Response::new(body::full(s.into()));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The answer to a `/metrics` request `MONITORING_AUTH` refuses, `None` when allowed.
pub fn refuse(d: crate::metrics_auth::Decision) -> Option<Response<Body>> {
    use crate::metrics_auth::Decision;
    match d {
        Decision::Allowed => None,
        Decision::Unauthenticated => {
            let mut r = text(StatusCode::UNAUTHORIZED, "Unauthorized\n");
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            Some(r)
        }
        Decision::Forbidden => Some(text(StatusCode::FORBIDDEN, "Forbidden\n")),
    }
}

/// The monitoring listener's handler.
pub fn handle<B>(metrics: &Metrics, ready: &Readiness, req: &Request<B>) -> Response<Body> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    match req.uri().path() {
        "/metrics" => {
            let mut r = text(StatusCode::OK, metrics.encode());
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
            );
            r
        }
        "/healthz" | "/healthz/" | "/livez" | "/livez/" => text(StatusCode::OK, "ok"),
        "/readyz" | "/readyz/" => {
            let verbose = req
                .uri()
                .query()
                .is_some_and(|q| q.split('&').any(|p| p == "verbose" || p.starts_with("verbose=")));
            match (ready.ready(), verbose) {
                (Ok(()), false) => text(StatusCode::OK, "ok"),
                (Ok(()), true) => text(
                    StatusCode::OK,
                    format!("[+]upstream ok\n{}readyz check passed\n", ready.rules_check()),
                ),
                (Err(e), false) => text(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {e}\n")),
                (Err(e), true) => text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "[-]upstream failed: {e}\n{}readyz check failed\n",
                        ready.rules_check()
                    ),
                ),
            }
        }
        _ => text(StatusCode::NOT_FOUND, "404 page not found\n"),
    }
}
