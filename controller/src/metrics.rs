//! What `/metrics` shows, in the Prometheus text format (prometheus-client): the reconcile error
//! count and `d8_virtualization_virtualmachine_status_phase`, one series per VM and phase (1 for
//! the VM's phase, 0 for the others), as Deckhouse's controller exports it, and the same for
//! disks (`d8_virtualization_virtualdisk_status_phase`) and images
//! (`d8_virtualization_virtualimage_status_phase`), disk and VM snapshots
//! (`..._virtualdisksnapshot_status_phase`, `..._virtualmachinesnapshot_status_phase`) and
//! attachments (`..._virtualmachineblockdeviceattachment_status_phase`), and
//! `virtualization_controller_api_served{group,version,resource}` for each API it uses
//! ([`crate::apis`]). All are read at scrape time from the
//! controller's own state (its caches), so nothing goes stale when an object is deleted.

use kube::ResourceExt as _;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::resources::{
    AttachmentPhase, DiskPhase, ImagePhase, SnapshotPhase, VirtualDisk, VirtualDiskSnapshot, VirtualImage,
    VirtualMachine, VirtualMachineBlockDeviceAttachment, VirtualMachineSnapshot, VmPhase,
};

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

/// The disk phase metric's name.
pub const DISK_PHASE_METRIC: &str = "d8_virtualization_virtualdisk_status_phase";
/// The image phase metric's name.
pub const IMAGE_PHASE_METRIC: &str = "d8_virtualization_virtualimage_status_phase";

/// The disk snapshot phase metric's name.
pub const DISK_SNAPSHOT_PHASE_METRIC: &str = "d8_virtualization_virtualdisksnapshot_status_phase";
/// The VM snapshot phase metric's name.
pub const VM_SNAPSHOT_PHASE_METRIC: &str = "d8_virtualization_virtualmachinesnapshot_status_phase";
/// The attachment phase metric's name.
pub const ATTACHMENT_PHASE_METRIC: &str =
    "d8_virtualization_virtualmachineblockdeviceattachment_status_phase";

/// Every disk phase, in the order the series are written.
pub const DISK_PHASES: [DiskPhase; 8] = [
    DiskPhase::Pending,
    DiskPhase::Provisioning,
    DiskPhase::WaitForUserUpload,
    DiskPhase::WaitForFirstConsumer,
    DiskPhase::Ready,
    DiskPhase::Failed,
    DiskPhase::Lost,
    DiskPhase::Terminating,
];

/// Every image phase, in the order the series are written.
pub const IMAGE_PHASES: [ImagePhase; 6] = [
    ImagePhase::Pending,
    ImagePhase::Provisioning,
    ImagePhase::WaitForUserUpload,
    ImagePhase::Ready,
    ImagePhase::Failed,
    ImagePhase::Terminating,
];

/// A disk or image as its phase metric shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRow {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `status.phase`.
    pub phase: String,
}

impl ObjectRow {
    /// The row of a disk; `None` while it has no phase yet.
    pub fn of_disk(vd: &VirtualDisk) -> Option<ObjectRow> {
        let phase = vd.status.as_ref()?.phase?;
        Some(Self::new(vd, format!("{phase:?}")))
    }

    /// The row of an image; `None` while it has no phase yet.
    pub fn of_image(vi: &VirtualImage) -> Option<ObjectRow> {
        let phase = vi.status.as_ref()?.phase?;
        Some(Self::new(vi, format!("{phase:?}")))
    }

    /// The row of a disk snapshot; `None` while it has no phase yet.
    pub fn of_disk_snapshot(s: &VirtualDiskSnapshot) -> Option<ObjectRow> {
        Some(Self::new(s, s.status.as_ref()?.phase?.as_str().to_owned()))
    }

    /// The row of a VM snapshot; `None` while it has no phase yet.
    pub fn of_vm_snapshot(s: &VirtualMachineSnapshot) -> Option<ObjectRow> {
        Some(Self::new(s, s.status.as_ref()?.phase?.as_str().to_owned()))
    }

    /// The row of an attachment; `None` while it has no phase yet.
    pub fn of_attachment(a: &VirtualMachineBlockDeviceAttachment) -> Option<ObjectRow> {
        Some(Self::new(a, a.status.as_ref()?.phase?.as_str().to_owned()))
    }

    fn new(o: &impl kube::Resource, phase: String) -> ObjectRow {
        ObjectRow {
            name: o.meta().name.clone().unwrap_or_default(),
            namespace: o.meta().namespace.clone().unwrap_or_default(),
            uid: o.meta().uid.clone().unwrap_or_default(),
            phase,
        }
    }
}

/// What one scrape shows.
#[derive(Debug, Default)]
pub struct Rows {
    /// Failed reconciles.
    pub errors: u64,
    /// VMs with a phase.
    pub vms: Vec<VmRow>,
    /// Disks with a phase.
    pub disks: Vec<ObjectRow>,
    /// Images with a phase.
    pub images: Vec<ObjectRow>,
    /// Disk snapshots with a phase.
    pub disk_snapshots: Vec<ObjectRow>,
    /// VM snapshots with a phase.
    pub vm_snapshots: Vec<ObjectRow>,
    /// Attachments with a phase.
    pub attachments: Vec<ObjectRow>,
    /// The APIs the controller uses, with whether they are served (`None`: not asked yet).
    pub apis: Vec<(crate::apis::ApiName, Option<bool>)>,
}

/// The served-API gauge's name.
pub const API_SERVED_METRIC: &str = "virtualization_controller_api_served";

/// The values of one scrape.
#[derive(Debug)]
struct Snapshot(Rows);

/// Writes one phase family: a series per object and phase, 1 for its phase.
fn encode_phases(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: &[ObjectRow],
    phases: &[String],
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for row in rows {
        for phase in phases {
            let labels = [
                ("name", row.name.as_str()),
                ("namespace", row.namespace.as_str()),
                ("uid", row.uid.as_str()),
                ("phase", phase.as_str()),
            ];
            ConstGauge::new(i64::from(&row.phase == phase)).encode(metric.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let errors = ConstCounter::new(self.0.errors);
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
        for vm in &self.0.vms {
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
        encode_phases(
            &mut encoder,
            DISK_PHASE_METRIC,
            "The phase of a VirtualDisk: one series per phase, 1 for the current one.",
            &self.0.disks,
            &DISK_PHASES.map(|p| format!("{p:?}")),
        )?;
        encode_phases(
            &mut encoder,
            IMAGE_PHASE_METRIC,
            "The phase of a VirtualImage: one series per phase, 1 for the current one.",
            &self.0.images,
            &IMAGE_PHASES.map(|p| format!("{p:?}")),
        )?;
        let snapshot_phases = SnapshotPhase::ALL.map(|p| p.as_str().to_owned());
        encode_phases(
            &mut encoder,
            DISK_SNAPSHOT_PHASE_METRIC,
            "The phase of a VirtualDiskSnapshot: one series per phase, 1 for the current one.",
            &self.0.disk_snapshots,
            &snapshot_phases,
        )?;
        encode_phases(
            &mut encoder,
            VM_SNAPSHOT_PHASE_METRIC,
            "The phase of a VirtualMachineSnapshot: one series per phase, 1 for the current one.",
            &self.0.vm_snapshots,
            &snapshot_phases,
        )?;
        encode_phases(
            &mut encoder,
            ATTACHMENT_PHASE_METRIC,
            "The phase of a VirtualMachineBlockDeviceAttachment: one series per phase, 1 for the current one.",
            &self.0.attachments,
            &AttachmentPhase::ALL.map(|p| p.as_str().to_owned()),
        )?;
        let mut metric = encoder.encode_descriptor(
            API_SERVED_METRIC,
            "Whether the cluster serves an API the controller uses: 1 served, 0 not (an optional API's features wait, a required one keeps the controller unready); absent until discovery was asked.",
            None,
            MetricType::Gauge,
        )?;
        for (api, served) in &self.0.apis {
            let Some(served) = served else { continue };
            let labels = [
                ("group", api.group),
                ("version", api.version),
                ("resource", api.resource),
            ];
            ConstGauge::new(i64::from(*served)).encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// The text of `/metrics` for `rows`.
pub fn render(rows: Rows) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Snapshot(rows)));
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
        let disk = ObjectRow {
            name: "root".into(),
            namespace: "ns".into(),
            uid: "u-2".into(),
            phase: "Provisioning".into(),
        };
        let text = render(Rows {
            errors: 2,
            vms: vec![row],
            disks: vec![disk],
            attachments: vec![ObjectRow {
                name: "hot".into(),
                namespace: "ns".into(),
                uid: "u-3".into(),
                phase: "Attached".into(),
            }],
            ..Default::default()
        });
        assert!(
            text.contains(
                r#"d8_virtualization_virtualmachineblockdeviceattachment_status_phase{name="hot",namespace="ns",uid="u-3",phase="Attached"} 1"#
            ),
            "{text}"
        );
        for family in [
            DISK_SNAPSHOT_PHASE_METRIC,
            VM_SNAPSHOT_PHASE_METRIC,
            ATTACHMENT_PHASE_METRIC,
        ] {
            assert!(text.contains(&format!("# TYPE {family} gauge\n")), "{text}");
        }
        let disks: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(DISK_PHASE_METRIC))
            .collect();
        assert_eq!(disks.len(), DISK_PHASES.len(), "{text}");
        assert!(
            disks.contains(
                &r#"d8_virtualization_virtualdisk_status_phase{name="root",namespace="ns",uid="u-2",phase="Provisioning"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(&format!("# TYPE {IMAGE_PHASE_METRIC} gauge\n")),
            "{text}"
        );
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
