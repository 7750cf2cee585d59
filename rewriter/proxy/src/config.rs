//! Settings: the Go sidecar's environment variables and defaults, also accepted as flags
//! (`kube-api-rewriter proxy --help`).
//!
//! [`ProxyArgs`] is what clap reads; [`ProxyArgs::resolve`] checks it into a [`Config`] or one
//! [`ConfigError`] line naming the setting.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use http::Uri;

use crate::deadlines::Deadlines;

/// The proxy's settings as given (environment or flags).
#[derive(Debug, Clone, Args)]
pub struct ProxyArgs {
    /// `no` disables the API client proxy.
    #[arg(long, env = "CLIENT_PROXY", default_value = "yes")]
    pub client_proxy: String,
    /// `yes` drops client `Impersonate-*` headers on requests sent with the proxy's credentials
    /// when the kubeconfig sets no impersonation (a kubeconfig's `as:` always replaces them).
    #[arg(long, env = "DROP_IMPERSONATION_HEADERS", default_value = "no")]
    pub drop_impersonation_headers: String,
    /// Listen address of the API client proxy (plain HTTP).
    #[arg(long, env = "CLIENT_PROXY_ADDRESS", default_value = "127.0.0.1")]
    pub client_proxy_address: String,
    /// Listen port of the API client proxy.
    #[arg(long, env = "CLIENT_PROXY_PORT", default_value = "23915")]
    pub client_proxy_port: String,
    /// kubeconfig of kube-apiserver; unset: in-cluster service account, then `~/.kube/config`.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<String>,
    /// Target webhook server URL (e.g. `https://127.0.0.1:9443`); unset: no webhook proxy.
    #[arg(long, env = "WEBHOOK_ADDRESS")]
    pub webhook_address: Option<String>,
    /// TLS server name for the webhook target (default: the target's host).
    #[arg(long, env = "WEBHOOK_SERVER_NAME")]
    pub webhook_server_name: Option<String>,
    /// CA bundle that turns on verification of the webhook target (default: not verified, as Go).
    #[arg(long, env = "WEBHOOK_CA_FILE")]
    pub webhook_ca_file: Option<PathBuf>,
    /// Certificate of the webhook listener (PEM; reloaded when it changes).
    #[arg(long, env = "WEBHOOK_CERT_FILE")]
    pub webhook_cert_file: Option<PathBuf>,
    /// Private key of the webhook listener (PEM; reloaded when it changes).
    #[arg(long, env = "WEBHOOK_KEY_FILE")]
    pub webhook_key_file: Option<PathBuf>,
    /// `yes`: the webhook listener serves only the paths the rules' `webhooks:` name (others
    /// get 404); default: every path is forwarded, as Go does.
    #[arg(long, env = "WEBHOOK_RULE_PATHS_ONLY", default_value = "no")]
    pub webhook_rule_paths_only: String,
    /// Listen address of the webhook proxy (default 0.0.0.0).
    #[arg(long, env = "WEBHOOK_LISTEN_ADDRESS")]
    pub webhook_listen_address: Option<String>,
    /// Listen port of the webhook proxy (default 24192).
    #[arg(long, env = "WEBHOOK_LISTEN_PORT")]
    pub webhook_listen_port: Option<String>,
    /// Older name of `WEBHOOK_LISTEN_ADDRESS`.
    #[arg(long, env = "WEBHOOK_PROXY_ADDRESS", hide_short_help = true)]
    pub webhook_proxy_address: Option<String>,
    /// Older name of `WEBHOOK_LISTEN_PORT`.
    #[arg(long, env = "WEBHOOK_PROXY_PORT", hide_short_help = true)]
    pub webhook_proxy_port: Option<String>,
    /// Metrics and health listener (`host:port`, `:port` for all addresses; empty disables).
    #[arg(long, env = "MONITORING_BIND_ADDRESS", default_value = ":9090")]
    pub monitoring_bind_address: String,
    /// Go's pprof listener (set by Deckhouse in debug builds): not available here; a warning at
    /// start says so.
    #[arg(long, env = "PPROF_BIND_ADDRESS")]
    pub pprof_bind_address: Option<String>,
    /// `/metrics` requires a bearer token allowed these SubjectAccessReview resource attributes
    /// (JSON: namespace, verb, group, version, resource, name, optional subresource).
    #[arg(long, env = "MONITORING_AUTH")]
    pub monitoring_auth: Option<String>,
    /// Rule file (YAML or JSON); unset: the built-in KubeVirt rules.
    #[arg(long, env = "RULES_PATH")]
    pub rules_path: Option<PathBuf>,
    /// error, warn, info or debug.
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// json, text or pretty.
    #[arg(long, env = "LOG_FORMAT", default_value = "json")]
    pub log_format: String,
    /// stdout, stderr or discard.
    #[arg(long, env = "LOG_OUTPUT", default_value = "stdout")]
    pub log_output: String,
    /// Largest request body accepted, in bytes (larger: 413).
    #[arg(long, env = "MAX_REQUEST_BODY_BYTES", default_value = "3145728")]
    pub max_request_body_bytes: String,
    /// Largest single LIST item or WATCH event, in bytes (larger: a watch ends with an `ERROR`
    /// event, a LIST, whose head has left already, is reset; default 64 MiB).
    #[arg(long, env = "MAX_ITEM_BYTES", default_value = "67108864")]
    pub max_item_bytes: String,
    /// Largest response read whole, after gzip decoding, in bytes (larger: 502; default 256 MiB).
    #[arg(long, env = "MAX_RESPONSE_BYTES", default_value = "268435456")]
    pub max_response_bytes: String,
    /// Time a client has to send the request headers (e.g. `30s`).
    #[arg(long, env = "HEADER_READ_TIMEOUT", default_value = "30s")]
    pub header_read_timeout: String,
    /// Time upstream has to send response headers (e.g. `90s`).
    #[arg(long, env = "UPSTREAM_RESPONSE_TIMEOUT", default_value = "90s")]
    pub upstream_response_timeout: String,
    /// A client connection (HTTP/1 keep-alive or HTTP/2) with no request in flight for this long
    /// is closed.
    #[arg(long, env = "CONNECTION_IDLE_TIMEOUT", default_value = "5m")]
    pub connection_idle_timeout: String,
    /// Upgraded connections (exec, attach, port-forward, proxy) end after this long without a
    /// byte either way (the kubelet's streaming idle timeout).
    #[arg(long, env = "STREAM_IDLE_TIMEOUT", default_value = "4h")]
    pub stream_idle_timeout: String,
    /// Go's sidecar reads it (Deckhouse sets it in webhook mode); this proxy has no use for it
    /// and says so at start.
    #[arg(long, env = "POD_IP")]
    pub pod_ip: Option<String>,
    /// Time in-flight requests get to finish after SIGTERM (e.g. `20s`).
    #[arg(long, env = "SHUTDOWN_TIMEOUT", default_value = "20s")]
    pub shutdown_timeout: String,
    /// Open connections at most on the API proxy listener and on the webhook listener (each);
    /// at the cap the oldest connection without a complete request is closed for a new one.
    #[arg(long, env = "MAX_CONNECTIONS", default_value = "2048")]
    pub max_connections: String,
    /// Open connections at most on the monitoring listener.
    #[arg(long, env = "MONITORING_MAX_CONNECTIONS", default_value = "64")]
    pub monitoring_max_connections: String,
    /// `X-Remote-User` sent upstream on every API proxy request (for an upstream that trusts the
    /// kubeconfig's client certificate as a front proxy, such as KubeVirt's virt-api). Client
    /// `X-Remote-*` headers are always dropped.
    #[arg(long, env = "REMOTE_USER", default_value = "")]
    pub remote_user: String,
    /// `X-Remote-Group` values (comma-separated) sent with `REMOTE_USER`.
    #[arg(long, env = "REMOTE_GROUPS", default_value = "")]
    pub remote_groups: String,
    /// How often upstream `/readyz` is polled.
    #[arg(long, env = "READYZ_POLL_INTERVAL", default_value = "1s")]
    pub readyz_poll_interval: String,
    /// Not ready when upstream `/readyz` has not answered `ok` for this long.
    #[arg(long, env = "READYZ_STALE_AFTER", default_value = "4s")]
    pub readyz_stale_after: String,
}

/// A setting that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{name}={value:?}: {why}")]
pub struct ConfigError {
    /// Environment variable name.
    pub name: &'static str,
    /// The value given.
    pub value: String,
    /// What is wrong.
    pub why: String,
}

fn bad(name: &'static str, value: &str, why: impl Into<String>) -> ConfigError {
    ConfigError {
        name,
        value: value.to_owned(),
        why: why.into(),
    }
}

/// Log settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    /// Most verbose level.
    pub level: tracing::Level,
    /// Line format.
    pub format: LogFormat,
    /// Destination.
    pub output: LogOutput,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Plain text.
    Text,
    /// Multi-line, for people.
    Pretty,
}

/// Log destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogOutput {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// Nowhere.
    Discard,
}

/// The webhook proxy.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// Target webhook server.
    pub target: Uri,
    /// TLS server name for the target.
    pub server_name: Option<String>,
    /// CA bundle to verify the target with.
    pub ca_file: Option<PathBuf>,
    /// Listen address.
    pub listen: SocketAddr,
    /// Listener certificate and key; `None` serves plain HTTP (as Go does).
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Only the paths the rules name are served.
    pub rule_paths_only: bool,
}

/// Checked settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// API client proxy listen address, `None` when disabled.
    pub client_proxy: Option<SocketAddr>,
    /// kube-apiserver.
    pub upstream: crate::upstream::UpstreamSource,
    /// Drop client `Impersonate-*` headers without kubeconfig impersonation.
    pub drop_impersonation_headers: bool,
    /// The webhook proxy, when enabled.
    pub webhook: Option<WebhookConfig>,
    /// Monitoring listen address, `None` when disabled.
    pub monitoring: Option<SocketAddr>,
    /// What `/metrics` requires of a bearer token, when set.
    pub monitoring_auth: Option<crate::metrics_auth::ResourceAttributes>,
    /// Rule file; `None` for the built-in rules.
    pub rules_path: Option<PathBuf>,
    /// `PPROF_BIND_ADDRESS` as given (warned about at start).
    pub pprof_bind_address: Option<String>,
    /// Logging.
    pub log: LogConfig,
    /// Request body limit in bytes.
    pub max_request_body: usize,
    /// Largest LIST item or WATCH event in bytes.
    pub max_item: usize,
    /// Largest response read whole in bytes.
    pub max_response: usize,
    /// Every deadline: the `*_TIMEOUT` and `READYZ_*` settings, and the fixed ones.
    pub deadlines: Deadlines,
    /// `POD_IP` as given (noted at start, not used).
    pub pod_ip: Option<String>,
    /// Connection cap of the API and webhook listeners (each).
    pub max_connections: usize,
    /// Connection cap of the monitoring listener.
    pub monitoring_max_connections: usize,
    /// The `X-Remote-*` identity sent upstream by the API proxy.
    pub remote_identity: crate::upstream::identity::RemoteIdentity,
}

impl Config {
    /// The limits of the shared rewriting path.
    pub fn limits(&self) -> kube_api_rewriter_layer::Limits {
        kube_api_rewriter_layer::Limits::default()
            .with_max_request_body(self.max_request_body)
            .with_max_item(self.max_item)
            .with_max_response(self.max_response)
    }
}

impl ProxyArgs {
    /// Checks every setting; the first bad one is the error.
    pub fn resolve(&self) -> Result<Config, ConfigError> {
        let client_proxy = match flag("CLIENT_PROXY", &self.client_proxy)? {
            Some(false) => None,
            _ => Some(SocketAddr::new(
                ip("CLIENT_PROXY_ADDRESS", &self.client_proxy_address)?,
                port("CLIENT_PROXY_PORT", &self.client_proxy_port)?,
            )),
        };
        let upstream = match self.kubeconfig.as_deref().map(str::trim) {
            Some(list) if !list.is_empty() => crate::upstream::UpstreamSource::Kubeconfig(
                list.split(':')
                    .filter(|p| !p.is_empty())
                    .map(PathBuf::from)
                    .collect(),
            ),
            _ => crate::upstream::UpstreamSource::Infer,
        };
        let webhook = match self.webhook_address.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(addr) => {
                let target: Uri = addr
                    .parse()
                    .map_err(|e| bad("WEBHOOK_ADDRESS", addr, format!("not a URL: {e}")))?;
                if !matches!(target.scheme_str(), Some("https" | "http")) || target.host().is_none() {
                    return Err(bad("WEBHOOK_ADDRESS", addr, "expected https://HOST:PORT"));
                }
                let listen_address = self
                    .webhook_listen_address
                    .as_deref()
                    .or(self.webhook_proxy_address.as_deref());
                let listen_port = self
                    .webhook_listen_port
                    .as_deref()
                    .or(self.webhook_proxy_port.as_deref());
                let listen = SocketAddr::new(
                    match listen_address {
                        Some(a) => ip("WEBHOOK_LISTEN_ADDRESS", a)?,
                        None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                    },
                    match listen_port {
                        Some(p) => port("WEBHOOK_LISTEN_PORT", p)?,
                        None => 24192,
                    },
                );
                let tls = match (&self.webhook_cert_file, &self.webhook_key_file) {
                    (Some(c), Some(k)) => Some((c.clone(), k.clone())),
                    (None, None) => None,
                    (Some(c), None) => {
                        return Err(bad(
                            "WEBHOOK_KEY_FILE",
                            "",
                            format!("required with WEBHOOK_CERT_FILE={}", c.display()),
                        ));
                    }
                    (None, Some(k)) => {
                        return Err(bad(
                            "WEBHOOK_CERT_FILE",
                            "",
                            format!("required with WEBHOOK_KEY_FILE={}", k.display()),
                        ));
                    }
                };
                Some(WebhookConfig {
                    target,
                    server_name: self.webhook_server_name.clone().filter(|s| !s.is_empty()),
                    ca_file: self.webhook_ca_file.clone(),
                    listen,
                    tls,
                    rule_paths_only: flag("WEBHOOK_RULE_PATHS_ONLY", &self.webhook_rule_paths_only)?
                        .unwrap_or(false),
                })
            }
        };
        let monitoring = match self.monitoring_bind_address.trim() {
            "" => None,
            a => Some(bind_address("MONITORING_BIND_ADDRESS", a)?),
        };
        let monitoring_auth = match self.monitoring_auth.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(v) => Some(crate::metrics_auth::ResourceAttributes::parse(v).map_err(|e| {
                bad(
                    "MONITORING_AUTH",
                    v,
                    format!("expected a JSON object of resource attributes: {e}"),
                )
            })?),
        };
        let level = match self.log_level.trim().to_ascii_lowercase().as_str() {
            "error" => tracing::Level::ERROR,
            "warn" | "warning" => tracing::Level::WARN,
            "info" | "" => tracing::Level::INFO,
            "debug" => tracing::Level::DEBUG,
            "trace" => tracing::Level::TRACE,
            _ => {
                return Err(bad(
                    "LOG_LEVEL",
                    &self.log_level,
                    "expected error, warn, info or debug",
                ));
            }
        };
        let format = match self.log_format.trim().to_ascii_lowercase().as_str() {
            "json" | "" => LogFormat::Json,
            "text" => LogFormat::Text,
            "pretty" => LogFormat::Pretty,
            _ => {
                return Err(bad(
                    "LOG_FORMAT",
                    &self.log_format,
                    "expected json, text or pretty",
                ));
            }
        };
        let output = match self.log_output.trim().to_ascii_lowercase().as_str() {
            "stdout" | "" => LogOutput::Stdout,
            "stderr" => LogOutput::Stderr,
            "discard" => LogOutput::Discard,
            _ => {
                return Err(bad(
                    "LOG_OUTPUT",
                    &self.log_output,
                    "expected stdout, stderr or discard",
                ));
            }
        };
        let max_request_body = self
            .max_request_body_bytes
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                bad(
                    "MAX_REQUEST_BODY_BYTES",
                    &self.max_request_body_bytes,
                    "expected a positive number of bytes",
                )
            })?;
        Ok(Config {
            client_proxy,
            upstream,
            drop_impersonation_headers: flag("DROP_IMPERSONATION_HEADERS", &self.drop_impersonation_headers)?
                .unwrap_or(false),
            webhook,
            monitoring,
            monitoring_auth,
            rules_path: self.rules_path.clone().filter(|p| !p.as_os_str().is_empty()),
            pprof_bind_address: self.pprof_bind_address.clone().filter(|p| !p.trim().is_empty()),
            log: LogConfig {
                level,
                format,
                output,
            },
            max_request_body,
            max_item: count("MAX_ITEM_BYTES", &self.max_item_bytes)?,
            max_response: count("MAX_RESPONSE_BYTES", &self.max_response_bytes)?,
            deadlines: self.deadlines()?,
            pod_ip: self.pod_ip.clone().filter(|p| !p.trim().is_empty()),
            max_connections: count("MAX_CONNECTIONS", &self.max_connections)?,
            monitoring_max_connections: count(
                "MONITORING_MAX_CONNECTIONS",
                &self.monitoring_max_connections,
            )?,
            remote_identity: crate::upstream::identity::RemoteIdentity::new(
                &self.remote_user,
                &self.remote_groups,
            )
            .map_err(|e| {
                let (name, v) = if self.remote_user.trim().is_empty() {
                    ("REMOTE_GROUPS", &self.remote_groups)
                } else {
                    ("REMOTE_USER", &self.remote_user)
                };
                bad(name, v, e.to_string())
            })?,
        })
    }

    /// The configurable deadlines over the fixed ones.
    fn deadlines(&self) -> Result<Deadlines, ConfigError> {
        Ok(Deadlines {
            header_read: duration("HEADER_READ_TIMEOUT", &self.header_read_timeout)?,
            upstream_response: duration("UPSTREAM_RESPONSE_TIMEOUT", &self.upstream_response_timeout)?,
            connection_idle: duration("CONNECTION_IDLE_TIMEOUT", &self.connection_idle_timeout)?,
            stream_idle: duration("STREAM_IDLE_TIMEOUT", &self.stream_idle_timeout)?,
            shutdown: duration("SHUTDOWN_TIMEOUT", &self.shutdown_timeout)?,
            readyz_poll: duration("READYZ_POLL_INTERVAL", &self.readyz_poll_interval)?,
            readyz_stale: duration("READYZ_STALE_AFTER", &self.readyz_stale_after)?,
            ..Deadlines::DEFAULT
        })
    }
}

/// A yes/no setting in the spellings Go's `strconv.ParseBool` and the Go sidecar accept
/// (`yes`/`no`, `true`/`false`, `1`/`0`, `t`/`f`, `on`/`off`, any case): `Some(None)` when
/// empty, `None` when not a yes/no value.
pub fn parse_flag(v: &str) -> Option<Option<bool>> {
    match v.trim().to_ascii_lowercase().as_str() {
        "" => Some(None),
        "yes" | "y" | "true" | "t" | "1" | "on" => Some(Some(true)),
        "no" | "n" | "false" | "f" | "0" | "off" => Some(Some(false)),
        _ => None,
    }
}

fn flag(name: &'static str, v: &str) -> Result<Option<bool>, ConfigError> {
    parse_flag(v).ok_or_else(|| bad(name, v, "expected yes or no (true/false, 1/0, on/off)"))
}

fn count(name: &'static str, v: &str) -> Result<usize, ConfigError> {
    v.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| bad(name, v, "expected a positive number"))
}

fn ip(name: &'static str, v: &str) -> Result<IpAddr, ConfigError> {
    let t = v.trim().trim_start_matches('[').trim_end_matches(']');
    match t {
        "" => Ok(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        "localhost" => Ok(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        _ => t.parse().map_err(|_| bad(name, v, "expected an IP address")),
    }
}

fn port(name: &'static str, v: &str) -> Result<u16, ConfigError> {
    v.trim()
        .parse()
        .map_err(|_| bad(name, v, "expected a port number (0-65535)"))
}

/// Go's `host:port` listen address; an empty host means all addresses.
fn bind_address(name: &'static str, v: &str) -> Result<SocketAddr, ConfigError> {
    let (host, p) = v
        .rsplit_once(':')
        .ok_or_else(|| bad(name, v, "expected HOST:PORT or :PORT"))?;
    Ok(SocketAddr::new(
        ip(name, host)?,
        port(name, p).map_err(|_| bad(name, v, "expected HOST:PORT or :PORT"))?,
    ))
}

/// A duration in Go's `time.ParseDuration` syntax (`300ms`, `1m30s`, `1.5h`, `2h45m10.5s`;
/// units `ns`, `us`/`µs`/`μs`, `ms`, `s`, `m`, `h`), or bare seconds (`30`). Negative durations
/// are refused.
///
/// Written here because the Go sidecar's settings use Go's grammar exactly: humantime and
/// similar crates accept other spellings (`1 day`, `30sec`) and miss `µs`.
pub fn parse_duration(v: &str) -> Option<Duration> {
    let t = v.trim();
    let t = t.strip_prefix('+').unwrap_or(t);
    if t.is_empty() {
        return None;
    }
    let number_len = |s: &str| {
        s.find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len())
    };
    if number_len(t) == t.len() {
        // Bare seconds (the Rust sidecar's extension; Go accepts a bare "0" only).
        let n: f64 = t.parse().ok()?;
        return Duration::try_from_secs_f64(n).ok();
    }
    let mut rest = t;
    let mut secs = 0.0_f64;
    while !rest.is_empty() {
        let n = number_len(rest);
        let num = &rest[..n];
        if num.is_empty() || num == "." {
            return None;
        }
        let value: f64 = num.parse().ok()?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        secs += value * scale;
        rest = &rest[u..];
    }
    Duration::try_from_secs_f64(secs).ok()
}

fn duration(name: &'static str, v: &str) -> Result<Duration, ConfigError> {
    parse_duration(v).ok_or_else(|| bad(name, v, "expected a duration such as 500ms, 30s or 2m"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: ProxyArgs,
    }

    fn args(extra: &[&str]) -> ProxyArgs {
        let mut v = vec!["t"];
        v.extend_from_slice(extra);
        T::try_parse_from(v).expect("parses").a
    }

    #[test]
    fn go_defaults() {
        // Flags only: the test environment must not leak in, so compare the defaults clap
        // applies when nothing is set (CI sets none of these variables).
        let c = args(&["--monitoring-bind-address", ":9090"])
            .resolve()
            .expect("valid");
        assert_eq!(c.client_proxy, Some("127.0.0.1:23915".parse().expect("addr")));
        assert_eq!(c.monitoring, Some("0.0.0.0:9090".parse().expect("addr")));
        assert_eq!(c.max_request_body, 3 << 20);
        assert!(c.webhook.is_none());
    }

    #[test]
    fn the_deadline_settings_default_to_the_deadlines_defaults() {
        let c = args(&[]).resolve().expect("valid");
        assert_eq!(c.deadlines, Deadlines::DEFAULT);
        let c = args(&["--upstream-response-timeout", "2m", "--stream-idle-timeout", "1h"])
            .resolve()
            .expect("valid");
        assert_eq!(c.deadlines.upstream_response, Duration::from_secs(120));
        assert_eq!(c.deadlines.stream_idle, Duration::from_secs(3600));
        assert_eq!(c.deadlines.header_read, Deadlines::DEFAULT.header_read);
    }

    #[test]
    fn webhook_names_old_and_new() {
        let c = args(&[
            "--webhook-address",
            "https://127.0.0.1:9443",
            "--webhook-proxy-port",
            "1234",
        ])
        .resolve()
        .expect("valid");
        let w = c.webhook.expect("webhook");
        assert_eq!(w.listen, "0.0.0.0:1234".parse().expect("addr"));
        let c = args(&[
            "--webhook-address",
            "https://127.0.0.1:9443",
            "--webhook-proxy-port",
            "1234",
            "--webhook-listen-port",
            "4321",
            "--webhook-listen-address",
            "127.0.0.1",
        ])
        .resolve()
        .expect("valid");
        assert_eq!(
            c.webhook.expect("webhook").listen,
            "127.0.0.1:4321".parse().expect("addr")
        );
    }

    #[test]
    fn bad_settings_name_the_variable() {
        let e = args(&["--client-proxy-port", "http"])
            .resolve()
            .expect_err("bad port");
        assert_eq!(
            e.to_string(),
            r#"CLIENT_PROXY_PORT="http": expected a port number (0-65535)"#
        );
        let e = args(&["--webhook-address", "https://x:1", "--webhook-cert-file", "/c"])
            .resolve()
            .expect_err("no key");
        assert!(e.to_string().starts_with("WEBHOOK_KEY_FILE"), "{e}");
        let e = args(&["--log-format", "xml"]).resolve().expect_err("format");
        assert!(e.to_string().starts_with("LOG_FORMAT"), "{e}");
        assert!(
            args(&["--client-proxy", "no"])
                .resolve()
                .expect("valid")
                .client_proxy
                .is_none()
        );
    }

    #[test]
    fn client_proxy_spellings() {
        for off in ["no", "NO", "false", "False", "0", "f", "off"] {
            let c = args(&["--client-proxy", off]).resolve().expect("valid");
            assert!(c.client_proxy.is_none(), "{off}");
        }
        for on in ["yes", "true", "TRUE", "1", "t", "on", ""] {
            let c = args(&["--client-proxy", on]).resolve().expect("valid");
            assert!(c.client_proxy.is_some(), "{on}");
        }
        let e = args(&["--client-proxy", "maybe"]).resolve().expect_err("bad");
        assert!(e.to_string().starts_with("CLIENT_PROXY="), "{e}");
    }

    #[test]
    fn hardening_settings() {
        let c = args(&[]).resolve().expect("valid");
        assert_eq!((c.max_connections, c.monitoring_max_connections), (2048, 64));
        assert!(!c.drop_impersonation_headers);
        assert!(c.pprof_bind_address.is_none());
        let c = args(&[
            "--max-connections",
            "10",
            "--drop-impersonation-headers",
            "true",
            "--pprof-bind-address",
            ":8129",
        ])
        .resolve()
        .expect("valid");
        assert_eq!(c.max_connections, 10);
        assert!(c.drop_impersonation_headers);
        assert_eq!(c.pprof_bind_address.as_deref(), Some(":8129"));
        let c = args(&["--remote-user", "u", "--remote-groups", "g1,g2"])
            .resolve()
            .expect("valid");
        assert!(c.remote_identity.is_set());
        let e = args(&["--remote-groups", "g"]).resolve().expect_err("no user");
        assert!(e.to_string().starts_with("REMOTE_GROUPS="), "{e}");
        let e = args(&["--max-connections", "0"]).resolve().expect_err("zero");
        assert!(e.to_string().starts_with("MAX_CONNECTIONS="), "{e}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_duration("x"), None);
        // Go's time.ParseDuration grammar.
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h2m3s"), Some(Duration::from_secs(3723)));
        assert_eq!(parse_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(
            parse_duration("2h45m10.5s"),
            Some(Duration::from_millis(9_910_500))
        );
        assert_eq!(parse_duration("250us"), Some(Duration::from_micros(250)));
        assert_eq!(parse_duration("250µs"), Some(Duration::from_micros(250)));
        assert_eq!(parse_duration("100ns"), Some(Duration::from_nanos(100)));
        assert_eq!(parse_duration("+5s"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        for bad in ["", "-5s", "1d", "s", "1m30", "1.2.3s", "30sec", ".s", "1 m"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}
