//! The conditions of every kind in one place: their types (this module's constants), their
//! reasons ([`reason`]), and how one is built ([`Builder`], [`condition`]), as `meta/v1`
//! `Condition` defines them: `lastTransitionTime` moves only when the status does. Nothing here
//! depends on a reconciler, so every reconciler (and [`crate::reconcile::report`], which images
//! and disks share) can use it.

use k8s_openapi::jiff::Timestamp;

use crate::resources::Condition;

/// `pub(crate)` string constants named after their values (`VirtualDiskNotFound` is
/// `VIRTUAL_DISK_NOT_FOUND`), which a test checks, so a moved or renamed one cannot change what
/// the controller writes.
macro_rules! names {
    ($($(#[$meta:meta])* $name:ident = $value:literal;)*) => {
        $($(#[$meta])* pub(crate) const $name: &str = $value;)*
        /// Every constant above, by name.
        #[cfg(test)]
        pub(crate) const ALL: &[(&str, &str)] = &[$((stringify!($name), $name)),*];
    };
}

names! {
    /// Whether the object can be used: images, disks, pools and snapshots.
    READY = "Ready";
    /// Whether the data source of an image or disk can be read.
    DATASOURCE_READY = "DatasourceReady";
    /// A VM: its instance runs.
    RUNNING = "Running";
    /// A VM: the spec is rendered into the KubeVirt VM and, when running, into the instance.
    CONFIGURATION_APPLIED = "ConfigurationApplied";
    /// A VM: the spec is in the KubeVirt VM, but the running instance needs a restart.
    AWAITING_RESTART_TO_APPLY_CONFIGURATION = "AwaitingRestartToApplyConfiguration";
    /// A VM: its class exists and allows its spec (set when the VM names a class).
    CLASS_READY = "ClassReady";
    /// A VM or VM snapshot: every block device of the VM is ready (set on a VM that has some).
    BLOCK_DEVICES_READY = "BlockDevicesReady";
    /// An attachment: its disk is ready.
    BLOCK_DEVICE_READY = "BlockDeviceReady";
    /// A VM snapshot or attachment: the state of its VM.
    VIRTUAL_MACHINE_READY = "VirtualMachineReady";
    /// A disk snapshot: its disk is ready.
    VIRTUAL_DISK_READY = "VirtualDiskReady";
    /// An attachment: its disk is plugged into the guest.
    ATTACHED = "Attached";
    /// An operation: it is done (or failed).
    COMPLETED = "Completed";
}

/// Why a condition has its status: the `reason` of every condition the controller writes.
pub(crate) mod reason {
    names! {
        // Data sources: the data Pods of images and disks, and what they read.
        PENDING = "Pending";
        PROVISIONING = "Provisioning";
        PROVISIONING_FAILED = "ProvisioningFailed";
        WAIT_FOR_USER_UPLOAD = "WaitForUserUpload";
        WAIT_FOR_CLAIM = "WaitForClaim";
        DATASOURCE_READY = "DatasourceReady";
        READY = "Ready";
        INVALID_CA_BUNDLE = "InvalidCABundle";
        INVALID_DATA_SOURCE = "InvalidDataSource";
        IMAGE_PULL_SECRET_NOT_FOUND = "ImagePullSecretNotFound";
        DVCR_NOT_CONFIGURED = "DVCRNotConfigured";
        VIRTUAL_IMAGE_NOT_FOUND = "VirtualImageNotFound";
        VIRTUAL_IMAGE_NOT_READY = "VirtualImageNotReady";
        VIRTUAL_DISK_NOT_FOUND = "VirtualDiskNotFound";
        VIRTUAL_DISK_NOT_READY = "VirtualDiskNotReady";
        // VirtualMachines.
        INVALID_SPEC = "InvalidSpec";
        VIRTUAL_MACHINE_CLASS_NOT_FOUND = "VirtualMachineClassNotFound";
        NOT_ALLOWED_BY_CLASS = "NotAllowedByClass";
        VIRTUAL_MACHINE_CLASS_READY = "VirtualMachineClassReady";
        BLOCK_DEVICES_READY = "BlockDevicesReady";
        BLOCK_DEVICES_NOT_READY = "BlockDevicesNotReady";
        VIRTUAL_MACHINE_RUNNING = "VirtualMachineRunning";
        VIRTUAL_MACHINE_NOT_RUNNING = "VirtualMachineNotRunning";
        CONFIGURATION_APPLIED = "ConfigurationApplied";
        RESTART_AWAITING_CHANGES = "RestartAwaitingChanges";
        VIRTUAL_MACHINE_NOT_FOUND = "VirtualMachineNotFound";
        // VirtualMachineOperations.
        NOT_ALLOWED_BY_RUN_POLICY = "NotAllowedByRunPolicy";
        RUN_POLICY_NOT_APPLIED = "RunPolicyNotApplied";
        KUBE_VIRT_VM_NOT_FOUND = "KubeVirtVMNotFound";
        SIGNAL_SENT = "SignalSent";
        MIGRATION_CREATED = "MigrationCreated";
        MIGRATION_FAILED = "MigrationFailed";
        OPERATION_COMPLETED = "OperationCompleted";
        // VirtualMachinePools.
        ALL_REPLICAS_READY = "AllReplicasReady";
        REPLICAS_NOT_READY = "ReplicasNotReady";
        // Snapshots of disks and VMs; the first while the cluster does not serve VolumeSnapshots
        // (`crate::apis::VOLUME_SNAPSHOTS`).
        SNAPSHOT_API_NOT_SERVED = "SnapshotAPINotServed";
        POTENTIALLY_INCONSISTENT = "PotentiallyInconsistent";
        SNAPSHOTTING = "Snapshotting";
        VOLUME_SNAPSHOT_FAILED = "VolumeSnapshotFailed";
        VOLUME_SNAPSHOT_NOT_READY = "VolumeSnapshotNotReady";
        VIRTUAL_MACHINE_TRANSITIONING = "VirtualMachineTransitioning";
        FREEZE_FAILED = "FreezeFailed";
        VIRTUAL_DISK_SNAPSHOT_FAILED = "VirtualDiskSnapshotFailed";
        // VirtualMachineBlockDeviceAttachments.
        CONFLICT = "Conflict";
        BLOCK_DEVICE_NOT_FOUND = "BlockDeviceNotFound";
        BLOCK_DEVICE_NOT_READY = "BlockDeviceNotReady";
        ATTACHMENT_REQUESTED = "AttachmentRequested";
        ATTACHED = "Attached";
        DETACHING = "Detaching";
    }
}

/// `True` or `False`.
pub fn status_str(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// Now, as `lastTransitionTime` writes it (RFC 3339, seconds).
pub fn now() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A condition of `type_`, keeping the old `lastTransitionTime` from `old` when the status did
/// not change. `message` is never empty: a custom resource's empty string can be read back as
/// `null`, which a `string` field rejects.
pub fn condition(
    old: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: &str,
) -> Condition {
    let message = message.into();
    debug_assert!(!message.is_empty(), "{type_}: empty message");
    let status = status_str(status);
    let last_transition_time = old
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or_else(|| now.to_owned(), |c| c.last_transition_time.clone());
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time,
        observed_generation: generation,
    }
}

/// The conditions of one status as it is written now: each keeps its `lastTransitionTime` from
/// the old conditions while its status stays, and carries the object's generation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Builder<'a> {
    old: &'a [Condition],
    generation: Option<i64>,
    now: &'a str,
}

impl<'a> Builder<'a> {
    /// Conditions replacing `old`, of an object of `generation`, at `now`.
    pub(crate) fn new(old: &'a [Condition], generation: Option<i64>, now: &'a str) -> Builder<'a> {
        Builder { old, generation, now }
    }

    /// The condition of `type_` ([`condition`]).
    pub(crate) fn make(
        &self,
        type_: &str,
        status: bool,
        reason: &str,
        message: impl Into<String>,
    ) -> Condition {
        condition(
            self.old,
            type_,
            status,
            reason,
            message,
            self.generation,
            self.now,
        )
    }
}

/// The condition of `type_` in `conditions`.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_with_the_status_only() {
        let c1 = condition(&[], "Running", true, "A", "m", Some(1), "t1");
        assert_eq!(c1.last_transition_time, "t1");
        let c2 = condition(
            std::slice::from_ref(&c1),
            "Running",
            true,
            "B",
            "m",
            Some(2),
            "t2",
        );
        assert_eq!(
            (c2.last_transition_time.as_str(), c2.reason.as_str()),
            ("t1", "B")
        );
        let c3 = condition(&[c2], "Running", false, "C", "m3", Some(2), "t3");
        assert_eq!(
            (c3.last_transition_time.as_str(), c3.status.as_str()),
            ("t3", "False")
        );
        assert!(now().ends_with('Z') && now().len() == 20, "{}", now());
    }

    #[test]
    fn builder_is_condition_with_its_old_generation_and_now() {
        let old = [condition(&[], READY, true, reason::READY, "m", Some(1), "t1")];
        let b = Builder::new(&old, Some(2), "t2");
        assert_eq!(
            b.make(READY, true, reason::READY, "n"),
            condition(&old, READY, true, reason::READY, "n", Some(2), "t2")
        );
        assert_eq!(
            b.make(READY, false, reason::PENDING, "n").last_transition_time,
            "t2"
        );
    }

    /// `VirtualDiskNotFound` is `VIRTUAL_DISK_NOT_FOUND`: a constant moved or renamed by hand
    /// cannot change what the controller writes.
    #[test]
    fn constants_are_named_after_their_values() {
        fn screaming_snake(value: &str) -> String {
            let c: Vec<char> = value.chars().collect();
            let mut out = String::new();
            for (i, &ch) in c.iter().enumerate() {
                let lower_before = i > 0 && c[i - 1].is_ascii_lowercase();
                let acronym_ends = i > 0
                    && c[i - 1].is_ascii_uppercase()
                    && c.get(i + 1).is_some_and(char::is_ascii_lowercase);
                if ch.is_ascii_uppercase() && (lower_before || acronym_ends) {
                    out.push('_');
                }
                out.push(ch.to_ascii_uppercase());
            }
            out
        }
        for (name, value) in ALL.iter().chain(reason::ALL) {
            assert_eq!(*name, screaming_snake(value), "{value}");
        }
        assert_eq!(screaming_snake("SnapshotAPINotServed"), "SNAPSHOT_API_NOT_SERVED");
        assert_eq!(screaming_snake("DVCRNotConfigured"), "DVCR_NOT_CONFIGURED");
    }
}
