//! What `/metrics` shows, in the Prometheus text format (prometheus-client): the reconcile error
//! count and `d8_virtualization_virtualmachine_status_phase`, one series per VM and phase (1 for
//! the VM's phase, 0 for the others), as Deckhouse's controller exports it. Both are read at
//! scrape time from the controller's own state (its VM cache), so nothing goes stale when a VM
//! is deleted.

use kube::ResourceExt as _;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::resources::{VirtualMachine, VmPhase};

/// The phase metric's name.
pub const PHASE_METRIC: &str = "d8_virtualization_virtualmachine_status_phase";

/// Every phase, in the order the series are written.
pub const PHASES: [VmPhase; 9] = [
    VmPhase::Pending,
    VmPhase::Starting,
    VmPhase::Running,
    VmPhase::Pause,
    VmPhase::Stopping,
    VmPhase::Stopped,
    VmPhase::Terminating,
    VmPhase::Migrating,
    VmPhase::Degraded,
];

/// A VM as the phase metric shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmRow {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `status.nodeName`, empty when not scheduled.
    pub node: String,
    /// `status.phase`.
    pub phase: VmPhase,
}

impl VmRow {
    /// The row of `vm`; `None` while it has no phase yet.
    pub fn of(vm: &VirtualMachine) -> Option<VmRow> {
        let status = vm.status.as_ref()?;
        Some(VmRow {
            name: vm.name_any(),
            namespace: vm.namespace().unwrap_or_default(),
            uid: vm.uid().unwrap_or_default(),
            node: status.node_name.clone().unwrap_or_default(),
            phase: status.phase?,
        })
    }
}

/// The values of one scrape.
#[derive(Debug)]
struct Snapshot {
    errors: u64,
    vms: Vec<VmRow>,
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let errors = ConstCounter::new(self.errors);
        let metric = encoder.encode_descriptor(
            "virtualization_controller_reconcile_errors",
            "Reconciles that failed.",
            None,
            errors.metric_type(),
        )?;
        errors.encode(metric)?;
        let mut metric = encoder.encode_descriptor(
            PHASE_METRIC,
            "The phase of a VirtualMachine: one series per phase, 1 for the current one.",
            None,
            MetricType::Gauge,
        )?;
        for vm in &self.vms {
            for phase in PHASES {
                let phase_name = format!("{phase:?}");
                let labels = [
                    ("name", vm.name.as_str()),
                    ("namespace", vm.namespace.as_str()),
                    ("uid", vm.uid.as_str()),
                    ("node", vm.node.as_str()),
                    ("phase", phase_name.as_str()),
                ];
                ConstGauge::new(i64::from(vm.phase == phase)).encode(metric.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// The text of `/metrics` for `errors` failed reconciles and the VMs `vms`.
pub fn render(errors: u64, vms: Vec<VmRow>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Snapshot { errors, vms }));
    let mut out = String::new();
    // Writing into a String does not fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_series_per_phase_and_the_current_one_is_1() {
        let row = VmRow {
            name: "web".into(),
            namespace: "ns".into(),
            uid: "u-1".into(),
            node: "n1".into(),
            phase: VmPhase::Running,
        };
        let text = render(2, vec![row]);
        assert!(
            text.contains("virtualization_controller_reconcile_errors_total 2\n"),
            "{text}"
        );
        assert!(text.contains(&format!("# TYPE {PHASE_METRIC} gauge\n")), "{text}");
        let series: Vec<&str> = text.lines().filter(|l| l.starts_with(PHASE_METRIC)).collect();
        assert_eq!(series.len(), PHASES.len(), "{text}");
        assert!(
            series.contains(
                &r#"d8_virtualization_virtualmachine_status_phase{name="web",namespace="ns",uid="u-1",node="n1",phase="Running"} 1"#
            ),
            "{text}"
        );
        assert_eq!(series.iter().filter(|l| l.ends_with(" 1")).count(), 1, "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
