//! Reconcile of a `VirtualMachineOperation`: Start, Stop or Restart sent as KubeVirt
//! `stateChangeRequests`, Migrate as a KubeVirt `VirtualMachineInstanceMigration`, then followed
//! until the VM gets there.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource as _, ResourceExt as _};
use serde_json::{Value, json};
use tracing::{info, instrument};

use super::wiring::Wiring;
use super::{Context, send_requests};
use crate::conditions::{COMPLETED, condition, now, reason};
use crate::kubevirt;
use crate::resources::{
    OperationPhase, OperationType, RunPolicy, VirtualMachine, VirtualMachineOperation,
    VirtualMachineOperationStatus,
};
use crate::{Error, Result};

/// What to do with an operation, decided from the operation, the VM's run policy and its
/// instance (pure; see [`decide`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do: the operation is finished.
    Done,
    /// Finish with this phase, reason and message.
    Finish(OperationPhase, &'static str, String),
    /// Send these requests, then wait (phase InProgress); `stopped` is the instance a restart
    /// stops.
    Send(Vec<Value>, Option<String>),
    /// Create the operation's migration of the running instance, then wait (phase InProgress).
    Migrate,
    /// Wait for the VM to get there.
    Wait(&'static str),
}

/// The instance of a VM as an operation sees it.
#[derive(Debug, Clone, Copy)]
pub struct Instance<'a> {
    /// Its uid.
    pub uid: &'a str,
    /// Whether its phase is Running.
    pub running: bool,
    /// The phase of this operation's migration, once it exists (`""` before KubeVirt sets one).
    pub migration: Option<&'a str>,
}

/// Decides the next step of operation `op` of type `t` on a VM with `policy` whose instance is
/// `vmi` (`None`: no instance).
pub fn decide(
    t: OperationType,
    status: &VirtualMachineOperationStatus,
    policy: RunPolicy,
    vmi: Option<Instance<'_>>,
) -> Step {
    use OperationPhase::*;
    use OperationType::*;
    match status.phase.unwrap_or(Pending) {
        Completed | Failed => Step::Done,
        Pending => {
            let forbidden = matches!(
                (t, policy),
                (Start | Restart, RunPolicy::AlwaysOff) | (Stop, RunPolicy::AlwaysOn)
            );
            if forbidden {
                return Step::Finish(
                    Failed,
                    reason::NOT_ALLOWED_BY_RUN_POLICY,
                    format!("{t:?} is not allowed for runPolicy {policy:?}"),
                );
            }
            match (t, vmi) {
                (Start, Some(i)) if i.running => Step::Finish(
                    Completed,
                    reason::OPERATION_COMPLETED,
                    "the VirtualMachine is already running".into(),
                ),
                (Start, _) => Step::Send(vec![kubevirt::start_request()], None),
                (Stop, None) => Step::Finish(
                    Completed,
                    reason::OPERATION_COMPLETED,
                    "the VirtualMachine is already stopped".into(),
                ),
                (Stop, Some(i)) => Step::Send(vec![kubevirt::stop_request(Some(i.uid))], None),
                (Restart, None) => Step::Finish(
                    Failed,
                    reason::VIRTUAL_MACHINE_NOT_RUNNING,
                    "a stopped VirtualMachine cannot be restarted".into(),
                ),
                (Restart, Some(i)) => Step::Send(
                    vec![kubevirt::stop_request(Some(i.uid)), kubevirt::start_request()],
                    Some(i.uid.to_owned()),
                ),
                (Migrate, Some(i)) if i.running => Step::Migrate,
                (Migrate, _) => Step::Finish(
                    Failed,
                    reason::VIRTUAL_MACHINE_NOT_RUNNING,
                    "only a running VirtualMachine can be migrated".into(),
                ),
            }
        }
        InProgress if t == Migrate => match vmi.map(|i| i.migration) {
            None => Step::Finish(
                Failed,
                reason::VIRTUAL_MACHINE_NOT_RUNNING,
                "the VirtualMachine stopped during the migration".into(),
            ),
            Some(Some("Succeeded")) => {
                Step::Finish(Completed, reason::OPERATION_COMPLETED, "Migrate done".into())
            }
            Some(Some("Failed")) => Step::Finish(
                Failed,
                reason::MIGRATION_FAILED,
                "KubeVirt reports the migration failed".into(),
            ),
            Some(_) => Step::Wait("waiting for the migration"),
        },
        InProgress => {
            let done = match (t, vmi) {
                (Start, Some(i)) => i.running,
                (Stop, None) => true,
                (Restart, Some(i)) => i.running && Some(i.uid) != status.stopped_instance_uid.as_deref(),
                _ => false,
            };
            if done {
                Step::Finish(Completed, reason::OPERATION_COMPLETED, format!("{t:?} done"))
            } else {
                Step::Wait(match t {
                    Start => "waiting for the VirtualMachine to run",
                    Stop => "waiting for the VirtualMachine to stop",
                    Restart => "waiting for a new instance to run",
                    Migrate => "waiting for the migration",
                })
            }
        }
    }
}

/// Whether the KubeVirt VM already has the runStrategy of the VM's run policy. A request sent
/// before it does can be undone at once: a Start to a KubeVirt VM still `Halted` (the VM
/// reconciler has not applied a new run policy yet, e.g. while its watch recovers from a
/// kube-apiserver restart) makes an instance that KubeVirt deletes again.
pub fn strategy_applied(kubevirt_run_strategy: Option<&str>, policy: RunPolicy) -> bool {
    kubevirt_run_strategy == Some(kubevirt::run_strategy(policy))
}

/// The VirtualMachineOperation controller: operations, brought back to [`reconcile`] by their
/// VM's KubeVirt VM and instance (by the name label) while they are not finished.
pub(crate) fn controller(w: &mut Wiring) -> BoxFuture<'static, ()> {
    let (api, all) = w.watch::<VirtualMachineOperation>(None);
    let ops = Controller::new(api, all);
    let op_store = ops.store();
    let ops_of = move |o: DynamicObject| {
        let ns = o.namespace();
        let name = o.labels().get(kubevirt::NAME_LABEL).cloned();
        op_store
            .state()
            .into_iter()
            .filter(|op| {
                op.namespace() == ns
                    && Some(&op.spec.virtual_machine_name) == name.as_ref()
                    && !matches!(
                        op.status.as_ref().and_then(|s| s.phase),
                        Some(OperationPhase::Completed | OperationPhase::Failed)
                    )
            })
            .map(|op| ObjectRef::from(op.as_ref()))
            .collect::<Vec<_>>()
    };
    let (kvvms, labelled) = w.watch_dynamic(&kubevirt::vm_resource(), Some(kubevirt::NAME_LABEL));
    let ops = ops.watches_with(kvvms, kubevirt::vm_resource(), labelled, ops_of.clone());
    let (vmis, labelled) = w.watch_dynamic(&kubevirt::vmi_resource(), Some(kubevirt::NAME_LABEL));
    let ops = ops.watches_with(vmis, kubevirt::vmi_resource(), labelled, ops_of);
    w.start(ops, reconcile)
}

/// Reconciles one operation. It reads the operation afresh first, so a Start or Stop is never
/// sent twice from a stale cache.
#[instrument(skip_all, fields(resource = "virtualmachineoperations.virtualization.deckhouse.io", namespace = op.namespace().unwrap_or_default(), name = %op.name_any()))]
pub async fn reconcile(op: Arc<VirtualMachineOperation>, ctx: Arc<Context>) -> Result<Action> {
    let ns = op.namespace().ok_or(Error::Missing("metadata.namespace"))?;
    let ops: Api<VirtualMachineOperation> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(op) = ops.get_opt(&op.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let status = op.status.clone().unwrap_or_default();
    if matches!(
        status.phase,
        Some(OperationPhase::Completed | OperationPhase::Failed)
    ) {
        return Ok(Action::await_change());
    }
    let vm_name = &op.spec.virtual_machine_name;
    let vms: Api<VirtualMachine> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(vm) = vms.get_opt(vm_name).await? else {
        let message = format!("VirtualMachine {vm_name} not found in namespace {ns}");
        finish(
            &ops,
            &op,
            OperationPhase::Failed,
            reason::VIRTUAL_MACHINE_NOT_FOUND,
            message,
        )
        .await?;
        return Ok(Action::await_change());
    };
    let kvvms: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, &kubevirt::vm_resource());
    let vmis: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, &kubevirt::vmi_resource());
    let Some(kvvm) = kvvms.get_opt(vm_name).await? else {
        write(
            &ops,
            &op,
            OperationPhase::Pending,
            reason::KUBE_VIRT_VM_NOT_FOUND,
            false,
            "waiting for the KubeVirt VM".into(),
            None,
        )
        .await?;
        return Ok(Action::requeue(Duration::from_secs(2)));
    };
    let vmi = vmis
        .get_opt(vm_name)
        .await?
        .filter(|i| i.meta().deletion_timestamp.is_none());
    let uid = vmi.as_ref().and_then(|i| i.uid());
    let vmims: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &ns, &kubevirt::migration_resource());
    let migration = match op.spec.type_ {
        OperationType::Migrate => vmims.get_opt(&kubevirt::migration_name(&op.name_any())).await?,
        _ => None,
    };
    let migration_phase = migration
        .as_ref()
        .map(|m| m.data["status"]["phase"].as_str().unwrap_or_default());
    let instance = vmi.as_ref().map(|i| Instance {
        uid: uid.as_deref().unwrap_or_default(),
        running: i.data["status"]["phase"] == "Running",
        migration: migration_phase,
    });
    match decide(op.spec.type_, &status, vm.spec.run_policy, instance) {
        Step::Done => Ok(Action::await_change()),
        Step::Finish(phase, reason, message) => {
            finish(&ops, &op, phase, reason, message).await?;
            Ok(Action::await_change())
        }
        Step::Send(..)
            if !strategy_applied(kvvm.data["spec"]["runStrategy"].as_str(), vm.spec.run_policy) =>
        {
            write(
                &ops,
                &op,
                OperationPhase::Pending,
                reason::RUN_POLICY_NOT_APPLIED,
                false,
                format!(
                    "waiting for the KubeVirt VM to take runPolicy {:?}",
                    vm.spec.run_policy
                ),
                None,
            )
            .await?;
            Ok(Action::requeue(Duration::from_secs(1)))
        }
        Step::Send(requests, stopped) => {
            send_requests(&kvvms, &kvvm, &requests).await?;
            write(
                &ops,
                &op,
                OperationPhase::InProgress,
                reason::SIGNAL_SENT,
                false,
                format!("{:?} sent", op.spec.type_),
                stopped,
            )
            .await?;
            Ok(Action::requeue(Duration::from_secs(10)))
        }
        Step::Migrate => {
            let m = kubevirt::migration(&op.name_any(), &op.uid().unwrap_or_default(), vm_name);
            let m: DynamicObject = serde_json::from_value(m)?;
            match vmims.create(&PostParams::default(), &m).await {
                Ok(_) => {}
                // Created by an earlier pass whose status write was lost.
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            write(
                &ops,
                &op,
                OperationPhase::InProgress,
                reason::MIGRATION_CREATED,
                false,
                format!("VirtualMachineInstanceMigration {} created", m.name_any()),
                None,
            )
            .await?;
            Ok(Action::requeue(Duration::from_secs(5)))
        }
        Step::Wait(message) => {
            write(
                &ops,
                &op,
                OperationPhase::InProgress,
                reason::SIGNAL_SENT,
                false,
                message.into(),
                status.stopped_instance_uid.clone(),
            )
            .await?;
            Ok(Action::requeue(Duration::from_secs(10)))
        }
    }
}

async fn finish(
    ops: &Api<VirtualMachineOperation>,
    op: &VirtualMachineOperation,
    phase: OperationPhase,
    reason: &str,
    message: String,
) -> Result<()> {
    info!(?phase, reason, %message, "operation finished");
    let stopped = op.status.as_ref().and_then(|s| s.stopped_instance_uid.clone());
    write(
        ops,
        op,
        phase,
        reason,
        phase == OperationPhase::Completed,
        message,
        stopped,
    )
    .await
}

/// Merge-patches the status (only this controller writes it) when it changes.
async fn write(
    ops: &Api<VirtualMachineOperation>,
    op: &VirtualMachineOperation,
    phase: OperationPhase,
    reason: &str,
    completed: bool,
    message: String,
    stopped_instance_uid: Option<String>,
) -> Result<()> {
    let old = op.status.clone().unwrap_or_default();
    let status = VirtualMachineOperationStatus {
        phase: Some(phase),
        conditions: vec![condition(
            &old.conditions,
            COMPLETED,
            completed,
            reason,
            message,
            op.meta().generation,
            &now(),
        )],
        stopped_instance_uid,
    };
    if old == status {
        return Ok(());
    }
    ops.patch_status(
        &op.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use OperationPhase::*;
    use OperationType::*;

    fn st(phase: OperationPhase, stopped: Option<&str>) -> VirtualMachineOperationStatus {
        VirtualMachineOperationStatus {
            phase: Some(phase),
            conditions: Vec::new(),
            stopped_instance_uid: stopped.map(str::to_owned),
        }
    }

    const RUNNING: Instance<'static> = Instance {
        uid: "a",
        running: true,
        migration: None,
    };

    #[test]
    fn requests_wait_for_the_run_policy_to_reach_kubevirt() {
        assert!(strategy_applied(Some("Manual"), RunPolicy::Manual));
        assert!(strategy_applied(
            Some("Manual"),
            RunPolicy::AlwaysOnUnlessStoppedManually
        ));
        assert!(!strategy_applied(Some("Halted"), RunPolicy::Manual));
        assert!(!strategy_applied(None, RunPolicy::Manual));
    }

    #[test]
    fn pending_operations_send_requests() {
        let p = RunPolicy::Manual;
        let fresh = VirtualMachineOperationStatus::default();
        assert_eq!(
            decide(Start, &fresh, p, None),
            Step::Send(vec![json!({"action": "Start"})], None)
        );
        assert_eq!(
            decide(Stop, &fresh, p, Some(RUNNING)),
            Step::Send(vec![json!({"action": "Stop", "uid": "a"})], None)
        );
        assert_eq!(
            decide(Restart, &fresh, p, Some(RUNNING)),
            Step::Send(
                vec![json!({"action": "Stop", "uid": "a"}), json!({"action": "Start"})],
                Some("a".into())
            )
        );
    }

    #[test]
    fn pending_operations_that_need_nothing_or_cannot_be_done() {
        let fresh = VirtualMachineOperationStatus::default();
        assert!(matches!(
            decide(Start, &fresh, RunPolicy::Manual, Some(RUNNING)),
            Step::Finish(Completed, ..)
        ));
        assert!(matches!(
            decide(Stop, &fresh, RunPolicy::Manual, None),
            Step::Finish(Completed, ..)
        ));
        assert!(matches!(
            decide(Restart, &fresh, RunPolicy::Manual, None),
            Step::Finish(Failed, "VirtualMachineNotRunning", _)
        ));
        assert!(matches!(
            decide(Start, &fresh, RunPolicy::AlwaysOff, None),
            Step::Finish(Failed, "NotAllowedByRunPolicy", _)
        ));
        assert!(matches!(
            decide(Stop, &fresh, RunPolicy::AlwaysOn, Some(RUNNING)),
            Step::Finish(Failed, "NotAllowedByRunPolicy", _)
        ));
    }

    #[test]
    fn in_progress_operations_complete_when_the_vm_gets_there() {
        let p = RunPolicy::Manual;
        let wip = st(InProgress, None);
        assert!(matches!(decide(Start, &wip, p, None), Step::Wait(_)));
        assert!(matches!(
            decide(Start, &wip, p, Some(RUNNING)),
            Step::Finish(Completed, ..)
        ));
        assert!(matches!(decide(Stop, &wip, p, Some(RUNNING)), Step::Wait(_)));
        assert!(matches!(decide(Stop, &wip, p, None), Step::Finish(Completed, ..)));
        let restart = st(InProgress, Some("a"));
        assert!(matches!(
            decide(Restart, &restart, p, Some(RUNNING)),
            Step::Wait(_)
        ));
        assert!(matches!(decide(Restart, &restart, p, None), Step::Wait(_)));
        let new = Instance { uid: "b", ..RUNNING };
        assert!(matches!(
            decide(Restart, &restart, p, Some(new)),
            Step::Finish(Completed, ..)
        ));
        assert_eq!(decide(Start, &st(Completed, None), p, None), Step::Done);
        assert_eq!(decide(Start, &st(Failed, None), p, None), Step::Done);
    }

    #[test]
    fn migrate_creates_a_migration_and_follows_it() {
        let p = RunPolicy::AlwaysOn;
        let fresh = VirtualMachineOperationStatus::default();
        assert_eq!(decide(Migrate, &fresh, p, Some(RUNNING)), Step::Migrate);
        let stopped = Instance {
            running: false,
            ..RUNNING
        };
        for vmi in [None, Some(stopped)] {
            assert!(matches!(
                decide(Migrate, &fresh, p, vmi),
                Step::Finish(Failed, "VirtualMachineNotRunning", _)
            ));
        }
        let wip = st(InProgress, None);
        let with = |phase| {
            Some(Instance {
                migration: phase,
                ..RUNNING
            })
        };
        for phase in [None, Some(""), Some("Scheduling"), Some("Running")] {
            assert!(
                matches!(decide(Migrate, &wip, p, with(phase)), Step::Wait(_)),
                "{phase:?}"
            );
        }
        assert!(matches!(
            decide(Migrate, &wip, p, with(Some("Succeeded"))),
            Step::Finish(Completed, ..)
        ));
        assert!(matches!(
            decide(Migrate, &wip, p, with(Some("Failed"))),
            Step::Finish(Failed, "MigrationFailed", _)
        ));
        assert!(matches!(
            decide(Migrate, &wip, p, None),
            Step::Finish(Failed, "VirtualMachineNotRunning", _)
        ));
    }
}
