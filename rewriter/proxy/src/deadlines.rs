//! Every deadline, timeout and interval of the sidecar, configurable or fixed, in one place.
//!
//! The settings (`HEADER_READ_TIMEOUT`, `UPSTREAM_RESPONSE_TIMEOUT`, ...) map onto the first
//! group of fields ([`crate::config::Config::deadlines`]); the others are fixed, and are fields
//! here so that whoever changes one sees them all. No other module of this crate spells a
//! duration (`scripts/test.sh` checks it).

use std::time::Duration;

/// The sidecar's deadlines; [`Deadlines::DEFAULT`] holds the default of each.
///
/// ```
/// use kube_api_rewriter_proxy::deadlines::Deadlines;
/// let d = Deadlines::default();
/// assert_eq!(d.upstream_response.as_secs(), 90);
/// assert!(d.stream_idle > d.connection_idle);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    // Configurable.
    /// `HEADER_READ_TIMEOUT` (30 s): a client's first request (TLS handshake and headers)
    /// must arrive within it, so a connection that sends nothing cannot hold a place.
    pub header_read: Duration,
    /// `UPSTREAM_RESPONSE_TIMEOUT` (90 s): upstream's time to send response headers, and the
    /// longest a non-watch response body may stall; kube-apiserver's own request timeout is
    /// 60 s, so an answer later than this will not come. Watches and upgrades are exempt.
    pub upstream_response: Duration,
    /// `CONNECTION_IDLE_TIMEOUT` (5 min): a client connection with no request in flight is
    /// closed after it (client-go keeps idle connections 90 s; a watch is in flight).
    pub connection_idle: Duration,
    /// `STREAM_IDLE_TIMEOUT` (4 h): an upgraded connection (exec, attach, port-forward)
    /// without a byte either way ends, as the kubelet's `--streaming-connection-idle-timeout`.
    pub stream_idle: Duration,
    /// `SHUTDOWN_TIMEOUT` (20 s): what open requests get after SIGTERM, within the pod's
    /// default 30 s grace period.
    pub shutdown: Duration,
    /// `READYZ_POLL_INTERVAL` (1 s): how often upstream `/readyz` is asked.
    pub readyz_poll: Duration,
    /// `READYZ_STALE_AFTER` (4 s): not ready when upstream `/readyz` has not said `ok` for this
    /// long (a few missed polls, not one).
    pub readyz_stale: Duration,

    // Fixed.
    /// The monitoring listener's shutdown deadline (1 s): scrapes are short, and Kubernetes
    /// stops probing a terminating pod.
    pub monitoring_shutdown: Duration,
    /// Idle time before the first TCP keep-alive probe, client and upstream sockets (30 s):
    /// a dead peer of a quiet watch is found in minutes, not Linux's two hours.
    pub tcp_keepalive_time: Duration,
    /// Between TCP keep-alive probes (10 s).
    pub tcp_keepalive_interval: Duration,
    /// HTTP/2 ping interval on client and upstream connections (30 s), for peers that drop
    /// idle connections silently.
    pub h2_ping_interval: Duration,
    /// A client's HTTP/2 ping unanswered this long closes its connection (20 s).
    pub h2_ping_timeout: Duration,
    /// Pause after a failed `accept` (100 ms): out of file descriptors, the loop waits instead
    /// of spinning.
    pub accept_retry: Duration,
    /// Time to open a TCP connection upstream (10 s): on loopback or a cluster network an
    /// answer comes at once or not at all.
    pub upstream_connect: Duration,
    /// An idle pooled upstream connection is closed after it (90 s, Go's `IdleConnTimeout`).
    pub upstream_pool_idle: Duration,
    /// How long watches go through the pool after a watch's own connection failed before its
    /// response head (60 s): an upstream offering only HTTP/2 refuses each such connection,
    /// and each refusal costs a TLS handshake.
    pub own_watch_retry: Duration,
    /// How often a kubeconfig token file is looked at for a new token (1 s; kubelet rotates
    /// projected tokens well before they expire).
    pub token_file_check: Duration,
    /// Upstream `/readyz`'s time to answer a poll (5 s): a stopped kube-apiserver must not
    /// hang the poller.
    pub readyz_answer: Duration,
    /// The shortest timeout of one readiness poll (500 ms); it is twice the poll interval.
    pub readyz_poll_floor: Duration,
    /// How often `RULES_PATH` is read again without a file event (10 s): events may be
    /// missed on some file systems.
    pub rules_poll: Duration,
    /// Quiet time after a rule file event before it is read (100 ms): an editor's save or a
    /// ConfigMap's symlink swap comes as a burst of events.
    pub rules_settle: Duration,
    /// How long a `/metrics` token's review is remembered (2 min), as kube-rbac-proxy does.
    pub metrics_auth_cache: Duration,
    /// kube-apiserver's time to answer a TokenReview or SubjectAccessReview (10 s).
    pub metrics_auth_review: Duration,
    /// What upgraded connections still open when the runtime stops get (100 ms): graceful
    /// shutdown does not wait for exec sessions.
    pub runtime_shutdown: Duration,
}

impl Deadlines {
    /// The defaults.
    pub const DEFAULT: Deadlines = Deadlines {
        header_read: Duration::from_secs(30),
        upstream_response: Duration::from_secs(90),
        connection_idle: Duration::from_secs(5 * 60),
        stream_idle: Duration::from_secs(4 * 3600),
        shutdown: Duration::from_secs(20),
        readyz_poll: Duration::from_secs(1),
        readyz_stale: Duration::from_secs(4),
        monitoring_shutdown: Duration::from_secs(1),
        tcp_keepalive_time: Duration::from_secs(30),
        tcp_keepalive_interval: Duration::from_secs(10),
        h2_ping_interval: Duration::from_secs(30),
        h2_ping_timeout: Duration::from_secs(20),
        accept_retry: Duration::from_millis(100),
        upstream_connect: Duration::from_secs(10),
        upstream_pool_idle: Duration::from_secs(90),
        own_watch_retry: Duration::from_secs(60),
        token_file_check: Duration::from_secs(1),
        readyz_answer: Duration::from_secs(5),
        readyz_poll_floor: Duration::from_millis(500),
        rules_poll: Duration::from_secs(10),
        rules_settle: Duration::from_millis(100),
        metrics_auth_cache: Duration::from_secs(120),
        metrics_auth_review: Duration::from_secs(10),
        runtime_shutdown: Duration::from_millis(100),
    };
}

impl Default for Deadlines {
    fn default() -> Self {
        Self::DEFAULT
    }
}
