//! The upstream the proxy forwards to: kube-apiserver (kubeconfig or in-cluster) or the webhook
//! server.
//!
//! Ordinary requests share pooled clients that speak HTTP/2 when the server offers it (ALPN),
//! at most [`STREAMS_PER_CONNECTION`] requests in flight per connection (`h2_pool.rs`): at
//! that budget another connection opens, so 1,000 watches never queue behind each other, and a
//! burst of requests on a new one makes one TLS handshake, not one each.
//! Upgrade requests (exec, attach, port-forward, proxy) take a client that offers only
//! HTTP/1.1, since an HTTP/2 stream cannot carry an `Upgrade`. So do watches, up to
//! [`MAX_OWN_WATCHES`] at once, each on a connection that its body drives (`watch_conn.rs`):
//! through a pooled HTTP/2 connection every event is handed from the connection's task to the
//! reading one, and a burst goes out in smaller batches, with more writes. Watches beyond that
//! share the pooled connections, so the connections to kube-apiserver stay bounded.
//!
//! Credentials and the kubeconfig are in `credentials.rs`, the identity headers
//! (impersonation, front-proxy `X-Remote-*`) in `identity.rs`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use http::header::{AUTHORIZATION, HeaderValue};
use http::{HeaderMap, Request, Response, Uri};
use hyper::body::Incoming;
use hyper_rustls::{FixedServerNameResolver, HttpsConnector};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::capture_connection;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use secrecy::ExposeSecret;

mod credentials;
mod h2_pool;
pub mod identity;
mod watch_conn;

use crate::deadlines::Deadlines;
use crate::tls::{self, NoVerify};
use credentials::{Auth, TokenFile, bearer, client_identity};
pub use credentials::{UpstreamSource, load_kube_config};
use h2_pool::{LaneConnector, Lanes};
pub use h2_pool::{STREAMS_PER_CONNECTION, Stalled, UpstreamBody};
use identity::{fix_identity, impersonation};
use kube_api_rewriter_layer::Body;

/// Why the upstream cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No usable kubeconfig or in-cluster configuration.
    #[error("kube-apiserver configuration: {0}")]
    Config(String),
    /// Certificates or keys.
    #[error("{0}")]
    Tls(#[from] tls::TlsError),
    /// rustls refused the configuration.
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

type HttpsClient = Client<HttpsConnector<HttpConnector>, Body>;

/// The client of one lane: its connector counts the lane's connections.
type LaneClient = Client<LaneConnector<HttpsConnector<HttpConnector>>, Body>;

/// HTTP/2 flow-control window per upstream stream: what one stream whose client stopped reading
/// can hold in the proxy.
const STREAM_WINDOW: u32 = 1 << 20;

/// Largest HTTP/2 frame the proxy takes from upstream (SETTINGS_MAX_FRAME_SIZE; a quarter of a
/// stream's window). kube-apiserver sends a LIST in frames up to the limit; at the protocol's
/// default of 16 KiB a large LIST comes as thousands of DATA frames, each taken and written on
/// its own. Larger frames write less still, but each holds its size per connection.
const MAX_FRAME_SIZE: u32 = 256 << 10;

/// Times a bodiless GET is sent again after its upstream connection failed before the head.
pub const SEND_RETRIES: usize = 2;

/// Unanswered TCP keep-alive probes before an upstream connection is given up.
const UPSTREAM_KEEPALIVE_PROBES: u32 = 3;

/// Watches on upstream connections of their own at once; further ones share the pooled lanes.
pub const MAX_OWN_WATCHES: usize = 100;

/// A request head for sending again (extensions are not carried: none are read upstream).
fn clone_parts(p: &http::request::Parts) -> http::request::Parts {
    let (mut out, ()) = Request::new(()).into_parts();
    out.method = p.method.clone();
    out.uri = p.uri.clone();
    out.version = p.version;
    out.headers = p.headers.clone();
    out
}

/// A forwarding target.
#[derive(Debug)]
pub struct Upstream {
    /// Scheme and authority, and a path prefix without the trailing slash.
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    prefix: String,
    clients: Lanes<LaneClient>,
    upgrade_client: HttpsClient,
    /// Connections that offer only HTTP/1.1 (upgrades, watches on their own connection).
    h1_connector: HttpsConnector<HttpConnector>,
    /// When a watch's own connection last failed before its response head: watches then go
    /// through the pool for [`Deadlines::own_watch_retry`] (an upstream that offers only HTTP/2 refuses
    /// every such connection, and each refusal costs a TLS handshake).
    own_watch_failed: Mutex<Option<Instant>>,
    /// Watches on connections of their own now (at most [`MAX_OWN_WATCHES`]).
    own_watches: Arc<AtomicUsize>,
    auth: Auth,
    /// The upstream connections' deadlines (and [`Deadlines::own_watch_retry`]).
    deadlines: Deadlines,
    /// The kubeconfig's impersonation (`as`, `as-uid`, `as-groups`, `as-user-extra`) as headers.
    impersonate: Vec<(http::HeaderName, HeaderValue)>,
    /// Drop client `Impersonate-*` headers when the kubeconfig sets no impersonation.
    drop_client_impersonation: bool,
}

/// TLS and name settings for building clients.
struct TlsSettings {
    roots: Option<Vec<CertificateDer<'static>>>,
    insecure: bool,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    server_name: Option<String>,
}

impl Upstream {
    /// kube-apiserver from the configured source.
    pub async fn kube(source: &UpstreamSource, deadlines: &Deadlines) -> Result<Upstream, UpstreamError> {
        let cfg = load_kube_config(source).await?;
        Upstream::from_kube_config(cfg, deadlines)
    }

    /// kube-apiserver from a loaded `kube::Config`.
    pub fn from_kube_config(cfg: kube::Config, deadlines: &Deadlines) -> Result<Upstream, UpstreamError> {
        let a = &cfg.auth_info;
        if a.exec.is_some() || a.auth_provider.is_some() {
            return Err(UpstreamError::Config(
                "exec and auth-provider credentials are not supported; use a token, token file or client certificate".into(),
            ));
        }
        let auth = if let Some(t) = &a.token {
            bearer(t.expose_secret().trim()).map_or(Auth::None, Auth::Fixed)
        } else if let Some(f) = &a.token_file {
            Auth::TokenFile(TokenFile::new(PathBuf::from(f), deadlines.token_file_check)?)
        } else if let (Some(u), Some(p)) = (&a.username, &a.password) {
            let b = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{}", p.expose_secret()));
            let mut v = HeaderValue::from_str(&format!("Basic {b}"))
                .map_err(|_| UpstreamError::Config("username/password are not valid in a header".into()))?;
            v.set_sensitive(true);
            Auth::Fixed(v)
        } else {
            Auth::None
        };
        let identity = client_identity(a)?;
        let impersonate = impersonation(a);
        let roots = cfg
            .root_cert
            .as_ref()
            .map(|ders| ders.iter().map(|d| CertificateDer::from(d.clone())).collect());
        let settings = TlsSettings {
            roots,
            insecure: cfg.accept_invalid_certs,
            identity,
            server_name: cfg.tls_server_name.clone(),
        };
        Upstream::build(&cfg.cluster_url, settings, auth, impersonate, deadlines)
    }

    /// A webhook server: TLS with `server_name`, verified only when a CA file is given.
    pub fn webhook(
        target: &Uri,
        server_name: Option<&str>,
        ca_file: Option<&Path>,
        deadlines: &Deadlines,
    ) -> Result<Upstream, UpstreamError> {
        let roots = match ca_file {
            Some(p) => Some(tls::load_certs(p)?),
            None => None,
        };
        let settings = TlsSettings {
            insecure: roots.is_none(),
            roots,
            identity: None,
            server_name: server_name.map(str::to_owned),
        };
        Upstream::build(target, settings, Auth::None, Vec::new(), deadlines)
    }

    fn build(
        url: &Uri,
        s: TlsSettings,
        auth: Auth,
        impersonate: Vec<(http::HeaderName, HeaderValue)>,
        deadlines: &Deadlines,
    ) -> Result<Upstream, UpstreamError> {
        let d = *deadlines;
        let scheme = url.scheme().cloned().unwrap_or(http::uri::Scheme::HTTPS);
        let authority = url
            .authority()
            .cloned()
            .ok_or_else(|| UpstreamError::Config(format!("{url}: no host")))?;
        let prefix = url.path().trim_end_matches('/').to_owned();
        let provider = tls::provider();
        let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()?;
        let builder = if s.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerify(Arc::clone(&provider))))
        } else {
            let mut store = rustls::RootCertStore::empty();
            for c in s.roots.iter().flatten() {
                store.add(c.clone())?;
            }
            if store.is_empty() && scheme == http::uri::Scheme::HTTPS {
                return Err(UpstreamError::Config(format!(
                    "{url}: no certificate authority configured (certificate-authority(-data) or insecure-skip-tls-verify)"
                )));
            }
            builder.with_root_certificates(store)
        };
        let tls_config = match s.identity {
            Some((certs, key)) => builder.with_client_auth_cert(certs, key)?,
            None => builder.with_no_client_auth(),
        };
        let server_name = match &s.server_name {
            Some(n) => Some(
                ServerName::try_from(n.trim_start_matches('[').trim_end_matches(']').to_owned())
                    .map_err(|e| UpstreamError::Config(format!("TLS server name {n:?}: {e}")))?,
            ),
            None => None,
        };
        let connector = |h2: bool| {
            let mut http = HttpConnector::new();
            http.enforce_http(false);
            http.set_nodelay(true);
            http.set_keepalive(Some(d.tcp_keepalive_time));
            http.set_keepalive_interval(Some(d.tcp_keepalive_interval));
            // A quiet watch on a connection of its own learns of a dead upstream only from
            // these probes: 30 s + 3 x 10 s, not Linux's 9 (HTTP/2 lanes also ping).
            http.set_keepalive_retries(Some(UPSTREAM_KEEPALIVE_PROBES));
            http.set_connect_timeout(Some(d.upstream_connect));
            let b = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(tls_config.clone())
                .https_or_http();
            let b = match &server_name {
                Some(n) => b.with_server_name_resolver(FixedServerNameResolver::new(n.clone())),
                None => b,
            };
            if h2 {
                b.enable_http1().enable_http2().wrap_connector(http)
            } else {
                b.enable_http1().wrap_connector(http)
            }
        };
        let h2 = connector(true);
        let clients = Lanes::new(STREAMS_PER_CONNECTION, move |live| {
            Client::builder(TokioExecutor::new())
                .timer(TokioTimer::new())
                .pool_timer(TokioTimer::new())
                .pool_idle_timeout(d.upstream_pool_idle)
                .http2_keep_alive_interval(d.h2_ping_interval)
                .http2_keep_alive_while_idle(true)
                // A stream whose client stopped reading holds at most its own window; the
                // connection window covers every stream's, so it never stalls the others.
                .http2_initial_stream_window_size(STREAM_WINDOW)
                .http2_initial_connection_window_size(STREAM_WINDOW * STREAMS_PER_CONNECTION as u32)
                .http2_max_frame_size(MAX_FRAME_SIZE)
                .build(LaneConnector::new(h2.clone(), live))
        });
        let h1_connector = connector(false);
        let upgrade_client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_max_idle_per_host(0)
            .build(h1_connector.clone());
        Ok(Upstream {
            own_watch_failed: Mutex::new(None),
            own_watches: Arc::default(),
            h1_connector,
            scheme,
            authority,
            prefix,
            clients,
            upgrade_client,
            auth,
            deadlines: d,
            impersonate,
            drop_client_impersonation: false,
        })
    }

    /// Drops client `Impersonate-*` headers on requests sent with the proxy's credentials even
    /// when the kubeconfig sets no impersonation (`DROP_IMPERSONATION_HEADERS`).
    #[must_use]
    pub fn with_dropped_client_impersonation(mut self, drop: bool) -> Self {
        self.drop_client_impersonation = drop;
        self
    }

    /// The upstream URI for a path with query.
    pub fn uri(&self, path_and_query: &str) -> Result<Uri, http::Error> {
        let pq = format!("{}{}", self.prefix, path_and_query);
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(pq)
            .build()
    }

    /// Adds the proxy's credentials unless the client brought its own `Authorization`.
    ///
    /// Every request carries the kubeconfig's impersonation, if any, and nothing a client asked
    /// for: client `Impersonate-*` headers can neither replace nor widen the configured
    /// identity, even on a request that brings its own `Authorization` (the connection still
    /// carries the proxy's client certificate, which kube-apiserver authenticates before any
    /// token). Without kubeconfig impersonation they pass (kube-apiserver checks the
    /// authenticated user's right to impersonate, as behind `kubectl proxy`) unless dropping
    /// them was asked for. A client's own `Authorization` is kept; otherwise the proxy's token
    /// or basic auth is added.
    pub fn authorize(&self, headers: &mut HeaderMap) {
        fix_identity(headers, &self.impersonate, self.drop_client_impersonation);
        if headers.contains_key(AUTHORIZATION) {
            return;
        }
        let v = match &self.auth {
            Auth::None => None,
            Auth::Fixed(v) => Some(v.clone()),
            Auth::TokenFile(t) => t.header(),
        };
        if let Some(v) = v {
            headers.insert(AUTHORIZATION, v);
        }
    }

    /// Sends an ordinary request over a pooled connection with a free stream. With `stall`,
    /// the response body fails when upstream sends nothing for that long while it is awaited
    /// (not for watches: they may be quiet for minutes).
    ///
    /// A GET or HEAD without a body (get, list, watch) whose upstream connection fails before
    /// the response head (kube-apiserver closed it while the request was being sent, or it
    /// broke while a new connection opened) is sent again, up to [`SEND_RETRIES`] times, as
    /// Go's HTTP/2 transport does for idempotent requests: nothing has reached the client yet,
    /// and kube-apiserver does nothing twice for a GET.
    pub async fn send(
        &self,
        req: Request<Body>,
        stall: Option<Duration>,
    ) -> Result<Response<UpstreamBody>, hyper_util::client::legacy::Error> {
        use http_body::Body as _;
        let again = (req.method() == http::Method::GET || req.method() == http::Method::HEAD)
            && req.body().is_end_stream();
        let (parts, body) = req.into_parts();
        let mut tries = 0;
        let mut body = Some(body);
        loop {
            let slot = self.clients.take();
            let opening = slot.opening().await;
            let b = body.take().unwrap_or_else(kube_api_rewriter_layer::body::empty);
            let mut req = Request::from_parts(clone_parts(&parts), b);
            let sent = match opening {
                None => slot.client().request(req).await,
                Some(opening) => {
                    // This request opens the lane's connection: the lane's other requests wait
                    // until it is in the pool (or failed), then share it.
                    let mut connected = capture_connection(&mut req);
                    let mut sending = std::pin::pin!(slot.client().request(req));
                    let done = tokio::select! {
                        r = &mut sending => Some(r),
                        m = connected.wait_for_connection_metadata() => {
                            drop(m);
                            None
                        }
                    };
                    drop(opening);
                    match done {
                        Some(r) => r,
                        None => sending.await,
                    }
                }
            };
            match sent {
                Ok(resp) => return Ok(resp.map(|b| UpstreamBody::new(b, Box::new(slot), stall))),
                Err(e) if again && tries < SEND_RETRIES => {
                    tries += 1;
                    tracing::info!(error = %e, tries, "upstream connection failed before the response head; sending the GET again");
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends a watch: like [`Upstream::send`] without a stall timeout, but over an HTTP/1.1
    /// connection of its own that the response body drives, so a burst of events is read and
    /// rewritten without a task hand-off per event (`watch_conn.rs`). The pooled way instead for a
    /// watch with a body, past [`MAX_OWN_WATCHES`], within [`Deadlines::own_watch_retry`] of such a
    /// connection failing before its response head, and for the watch whose connection failed.
    pub async fn send_watch(
        &self,
        req: Request<Body>,
    ) -> Result<Response<UpstreamBody>, hyper_util::client::legacy::Error> {
        use http_body::Body as _;
        if !req.body().is_end_stream() || self.own_watch_failed_recently() {
            return self.send(req, None).await;
        }
        let Some(own) = OwnWatch::take(&self.own_watches) else {
            return self.send(req, None).await;
        };
        let (parts, body) = req.into_parts();
        let again = Request::from_parts(clone_parts(&parts), kube_api_rewriter_layer::body::empty());
        match watch_conn::send(&self.h1_connector, Request::from_parts(parts, body)).await {
            Ok(resp) => Ok(resp.map(|b| UpstreamBody::new(b, Box::new(own), None))),
            Err(e) => {
                drop(own);
                tracing::info!(error = %e, retry_in_s = self.deadlines.own_watch_retry.as_secs(), "watch connection failed before the response head; watches go over the pool meanwhile");
                if let Ok(mut f) = self.own_watch_failed.lock() {
                    *f = Some(Instant::now());
                }
                self.send(again, None).await
            }
        }
    }

    /// Whether a watch's own connection failed less than [`Deadlines::own_watch_retry`] ago.
    fn own_watch_failed_recently(&self) -> bool {
        self.own_watch_failed
            .lock()
            .map(|f| f.is_some_and(|t| t.elapsed() < self.deadlines.own_watch_retry))
            .unwrap_or(false)
    }

    /// Watches on connections of their own now.
    pub fn own_watches(&self) -> usize {
        self.own_watches.load(Ordering::Relaxed)
    }

    /// Sends an upgrade request over its own HTTP/1.1 connection.
    pub async fn send_upgrade(
        &self,
        req: Request<Body>,
    ) -> Result<Response<Incoming>, hyper_util::client::legacy::Error> {
        self.upgrade_client.request(req).await
    }
}

/// One of the [`MAX_OWN_WATCHES`] places for a watch on a connection of its own, given back
/// when the watch's body ends or is dropped.
struct OwnWatch(Arc<AtomicUsize>);

impl OwnWatch {
    /// A place, if one is free.
    fn take(count: &Arc<AtomicUsize>) -> Option<OwnWatch> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_OWN_WATCHES).then_some(n + 1)
            })
            .ok()
            .map(|_| OwnWatch(Arc::clone(count)))
    }
}

impl Drop for OwnWatch {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
