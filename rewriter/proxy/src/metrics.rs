//! Prometheus metrics with the Go sidecar's names and labels (prefix `kube_api_rewriter_`),
//! its bugs fixed: the invalid-JSON counter counts, `operation` is the side's own action, watch
//! events do not go into the request histogram. Plus `process_*` metrics from `/proc`.

use std::sync::Arc;
use std::time::Duration;

use kube_api_rewriter::Direction;
use kube_api_rewriter::Route;
use kube_api_rewriter_layer::{ByteCounter, Decision, Flow, Observe, Side};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Go's buckets for both duration histograms.
const BUCKETS: [f64; 13] = [
    0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0,
];

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// The labels of every metric: `name, resource, method, watch`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Common {
    /// `kube-api` or `webhook`.
    pub name: &'static str,
    /// The resource (original names), Go's `ResourceForLog`.
    pub resource: String,
    /// HTTP method.
    pub method: String,
    /// `1` for watches.
    pub watch: &'static str,
}

impl Common {
    /// The labels of a request through proxy `name`.
    pub fn of(name: &'static str, route: &Route) -> Common {
        Common {
            name,
            resource: crate::labels::resource(route),
            method: crate::labels::method(route.method()),
            watch: if route.watch() { "1" } else { "0" },
        }
    }
}

/// `name, resource, method, watch, decision`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `name, resource, method, watch`.
    #[prometheus(flatten)]
    pub common: Common,
    /// `rewrite` or `pass` (empty on `client_requests_total`: recorded before the decision).
    pub decision: &'static str,
}

/// Request labels plus `status` and `error`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `name, resource, method, watch`.
    #[prometheus(flatten)]
    pub common: Common,
    /// `rewrite` or `pass`.
    pub decision: &'static str,
    /// HTTP status code.
    pub status: String,
    /// `1` when the proxy failed the request.
    pub error: &'static str,
}

/// Request labels plus `status` (histogram).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DurationLabels {
    /// `name, resource, method, watch`.
    #[prometheus(flatten)]
    pub common: Common,
    /// `rewrite` or `pass`.
    pub decision: &'static str,
    /// HTTP status code.
    pub status: String,
}

/// `result` of a rules reload.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// `ok` or `error`.
    pub result: &'static str,
}

/// `name, resource, method, watch, status`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InvalidJsonLabels {
    /// `name, resource, method, watch`.
    #[prometheus(flatten)]
    pub common: Common,
    /// HTTP status code.
    pub status: String,
}

/// `name, resource, method, watch, side, operation, error`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RewriteLabels {
    /// `name, resource, method, watch`.
    #[prometheus(flatten)]
    pub common: Common,
    /// `client` (request body) or `target` (response body).
    pub side: &'static str,
    /// `rename` or `restore`.
    pub operation: &'static str,
    /// `1` when the rewrite failed.
    pub error: &'static str,
}

/// Rewrite labels without `error` (histogram).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RewriteDurationLabels {
    /// `name, resource, method, watch`.
    #[prometheus(flatten)]
    pub common: Common,
    /// `client` or `target`.
    pub side: &'static str,
    /// `rename` or `restore`.
    pub operation: &'static str,
}

/// The metrics hook of one proxy (`name`): what the shared rewriting path measures goes into
/// the process's families.
#[derive(Debug)]
pub struct ProxyMetrics {
    name: &'static str,
    metrics: Arc<Metrics>,
}

impl ProxyMetrics {
    /// The hook for proxy `name` (`kube-api` or `webhook`).
    pub fn new(name: &'static str, metrics: Arc<Metrics>) -> Self {
        Self { name, metrics }
    }
}

fn operation(route: &Route, side: Side) -> &'static str {
    let d = match side {
        Side::Client => route.request_direction(),
        Side::Target => route.response_direction(),
    };
    match d {
        Direction::Rename => "rename",
        Direction::Restore => "restore",
    }
}

fn side_label(side: Side) -> &'static str {
    match side {
        Side::Client => "client",
        Side::Target => "target",
    }
}

impl Observe for ProxyMetrics {
    fn byte_counter(&self, route: &Route, flow: Flow, decision: Decision) -> Option<ByteCounter> {
        let family = match flow {
            Flow::FromClient => &self.metrics.from_client_bytes,
            Flow::ToTarget => &self.metrics.to_target_bytes,
            Flow::FromTarget => &self.metrics.from_target_bytes,
            Flow::ToClient => &self.metrics.to_client_bytes,
        };
        let counter = family
            .get_or_create(&RequestLabels {
                common: Common::of(self.name, route),
                decision: decision.as_str(),
            })
            .clone();
        Some(Arc::new(move |n| {
            counter.inc_by(n);
        }))
    }

    fn rewritten(&self, route: &Route, side: Side, ok: bool, took: Duration) {
        let operation = operation(route, side);
        self.metrics
            .rewrites
            .get_or_create(&RewriteLabels {
                common: Common::of(self.name, route),
                side: side_label(side),
                operation,
                error: if ok { "0" } else { "1" },
            })
            .inc();
        self.metrics
            .rewrite_duration
            .get_or_create(&RewriteDurationLabels {
                common: Common::of(self.name, route),
                side: side_label(side),
                operation,
            })
            .observe(took.as_secs_f64());
    }

    fn invalid_json(&self, route: &Route, status: u16) {
        self.metrics
            .target_response_invalid_json
            .get_or_create(&InvalidJsonLabels {
                common: Common::of(self.name, route),
                status: status.to_string(),
            })
            .inc();
    }
}

/// All metrics of one process.
#[derive(Debug)]
pub struct Metrics {
    /// `client_requests_total`.
    pub client_requests: Family<RequestLabels, Counter>,
    /// `target_responses_total`.
    pub target_responses: Family<ResultLabels, Counter>,
    /// `target_response_invalid_json_total`.
    pub target_response_invalid_json: Family<InvalidJsonLabels, Counter>,
    /// `requests_handled_total`.
    pub requests_handled: Family<ResultLabels, Counter>,
    /// `request_handling_duration_seconds` (time to the response head).
    pub request_duration: Family<DurationLabels, Histogram, fn() -> Histogram>,
    /// `rewrites_total`.
    pub rewrites: Family<RewriteLabels, Counter>,
    /// `rewrite_duration_seconds` (CPU time spent rewriting one body).
    pub rewrite_duration: Family<RewriteDurationLabels, Histogram, fn() -> Histogram>,
    /// `from_client_bytes_total`.
    pub from_client_bytes: Family<RequestLabels, Counter>,
    /// `to_target_bytes_total`.
    pub to_target_bytes: Family<RequestLabels, Counter>,
    /// `from_target_bytes_total`.
    pub from_target_bytes: Family<RequestLabels, Counter>,
    /// `to_client_bytes_total`.
    pub to_client_bytes: Family<RequestLabels, Counter>,
    /// `rules_reloads_total{result}`: `ok` (new rules), `error` (old rules kept).
    pub rules_reloads: Family<ReloadLabels, Counter>,
    /// `rules_reload_failing`: 1 while the rule file fails validation (old rules serve).
    pub rules_reload_failing: prometheus_client::metrics::gauge::Gauge,
    registry: Registry,
}

impl Metrics {
    /// A registry with every metric registered.
    pub fn new() -> Arc<Metrics> {
        let mut m = Metrics {
            client_requests: Family::default(),
            target_responses: Family::default(),
            target_response_invalid_json: Family::default(),
            requests_handled: Family::default(),
            request_duration: Family::new_with_constructor(histogram),
            rewrites: Family::default(),
            rewrite_duration: Family::new_with_constructor(histogram),
            from_client_bytes: Family::default(),
            to_target_bytes: Family::default(),
            from_target_bytes: Family::default(),
            to_client_bytes: Family::default(),
            rules_reloads: Family::default(),
            rules_reload_failing: Default::default(),
            registry: Registry::default(),
        };
        let mut registry = Registry::default();
        {
            let r = registry.sub_registry_with_prefix("kube_api_rewriter");
            r.register(
                "client_requests",
                "Requests received from clients",
                m.client_requests.clone(),
            );
            r.register(
                "target_responses",
                "Responses received from the target",
                m.target_responses.clone(),
            );
            r.register(
                "target_response_invalid_json",
                "Target responses that should have been JSON and were not (passed untouched)",
                m.target_response_invalid_json.clone(),
            );
            r.register(
                "requests_handled",
                "Requests answered",
                m.requests_handled.clone(),
            );
            r.register(
                "request_handling_duration_seconds",
                "Time from the request to the response head",
                m.request_duration.clone(),
            );
            r.register("rewrites", "Body rewrites", m.rewrites.clone());
            r.register(
                "rewrite_duration_seconds",
                "Time spent rewriting one body",
                m.rewrite_duration.clone(),
            );
            r.register(
                "from_client_bytes",
                "Body bytes received from clients",
                m.from_client_bytes.clone(),
            );
            r.register(
                "to_target_bytes",
                "Body bytes sent to the target",
                m.to_target_bytes.clone(),
            );
            r.register(
                "from_target_bytes",
                "Body bytes received from the target",
                m.from_target_bytes.clone(),
            );
            r.register(
                "to_client_bytes",
                "Body bytes sent to clients",
                m.to_client_bytes.clone(),
            );
            r.register(
                "rules_reloads",
                "RULES_PATH reloads by result (error: the previous rules kept)",
                m.rules_reloads.clone(),
            );
            r.register(
                "rules_reload_failing",
                "1 while RULES_PATH fails validation and the previous rules serve",
                m.rules_reload_failing.clone(),
            );
        }
        registry.register_collector(Box::new(BuildInfo));
        registry.register_collector(Box::new(ProcessCollector::new()));
        m.registry = registry;
        Arc::new(m)
    }

    /// Records a rules reload (`Ok(false)`: the file says the same, not counted).
    pub fn rules_reloaded(&self, res: &Result<bool, String>) {
        let result = match res {
            Ok(false) => {
                self.rules_reload_failing.set(0);
                return;
            }
            Ok(true) => "ok",
            Err(_) => "error",
        };
        self.rules_reload_failing.set(i64::from(res.is_err()));
        self.rules_reloads.get_or_create(&ReloadLabels { result }).inc();
    }

    /// The text exposition (OpenMetrics).
    pub fn encode(&self) -> String {
        let mut s = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }
}

/// `kube_api_rewriter_build_info{version}` = 1.
#[derive(Debug)]
struct BuildInfo;

impl Collector for BuildInfo {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let labels = [("version", env!("CARGO_PKG_VERSION"))];
        let info = prometheus_client::metrics::info::Info::new(labels);
        let e = encoder.encode_descriptor(
            "kube_api_rewriter_build",
            "Build information",
            None,
            MetricType::Info,
        )?;
        info.encode(e)
    }
}

/// `process_*` metrics read from `/proc/self` on each scrape (Linux).
#[derive(Debug)]
struct ProcessCollector {
    ticks: f64,
    page: f64,
}

impl ProcessCollector {
    fn new() -> Self {
        // The USER_HZ and page size every Linux ABI the sidecar runs on uses.
        Self {
            ticks: 100.0,
            page: 4096.0,
        }
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
            return Ok(());
        };
        // Fields after the command name (which may contain spaces), 1-based from field 3.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            return Ok(());
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i - 3).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let cpu = (num(14) + num(15)) / self.ticks;
        let threads = num(20);
        let start_ticks = num(22);
        let vsize = num(23);
        let rss = num(24) * self.page;
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| {
                    l.strip_prefix("btime ")
                        .and_then(|v| v.trim().parse::<f64>().ok())
                })
            })
            .unwrap_or(0.0);
        let fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
        let max_fds = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("Max open files"))
                    .and_then(|l| l.split_whitespace().nth(3).and_then(|v| v.parse::<f64>().ok()))
            })
            .unwrap_or(0.0);

        let e = encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(cpu).encode(e)?;
        let gauges: [(&str, &str, f64); 6] = [
            ("process_resident_memory_bytes", "Resident memory size", rss),
            ("process_virtual_memory_bytes", "Virtual memory size", vsize),
            ("process_open_fds", "Open file descriptors", fds as f64),
            ("process_max_fds", "Limit of open file descriptors", max_fds),
            ("process_threads", "OS threads", threads),
            (
                "process_start_time_seconds",
                "Start time since the Unix epoch",
                boot + start_ticks / self.ticks,
            ),
        ];
        for (name, help, v) in gauges {
            let e = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(v).encode(e)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_go() {
        let m = Metrics::new();
        let l = RequestLabels {
            common: Common {
                name: "kube-api",
                resource: "virtualmachines".into(),
                method: "GET".into(),
                watch: "0",
            },
            decision: "",
        };
        m.client_requests.get_or_create(&l).inc();
        m.request_duration
            .get_or_create(&DurationLabels {
                common: Common {
                    name: "kube-api",
                    resource: "virtualmachines".into(),
                    method: "GET".into(),
                    watch: "0",
                },
                decision: "rewrite",
                status: "200".into(),
            })
            .observe(0.003);
        let text = m.encode();
        assert!(
            text.contains(r#"kube_api_rewriter_client_requests_total{name="kube-api",resource="virtualmachines",method="GET",watch="0",decision=""} 1"#),
            "{text}"
        );
        assert!(
            text.contains("kube_api_rewriter_request_handling_duration_seconds_bucket{"),
            "{text}"
        );
        assert!(text.contains("process_resident_memory_bytes "), "{text}");
        assert!(text.contains("process_cpu_seconds_total "), "{text}");
    }
}
