//! [`run`]: starts every kind's controller, each built by its own module, and what runs beside
//! them ([`super::wiring`]), and joins them until a shutdown signal.

use std::sync::Arc;

use super::wiring::Wiring;
use super::{Context, pool, vd, vdsnapshot, vi, vm, vmbda, vmop, vmsnapshot};

/// Runs the VirtualMachine, VirtualMachineOperation, VirtualDisk, VirtualImage, pool, snapshot
/// and attachment controllers until SIGTERM or Ctrl+C, then lets running reconciles finish.
/// Beside them, follows which APIs are served ([`crate::apis::follow`]) and sets
/// [`Context::listed`] once every resource they watch could be listed.
pub async fn run(ctx: Arc<Context>) {
    let mut w = Wiring::new(ctx);
    let controllers = vec![
        vm::controller(&mut w),
        vmop::controller(&mut w),
        vd::controller(&mut w),
        vi::controller(&mut w),
        pool::controller(&mut w),
        vdsnapshot::controller(&mut w),
        vmsnapshot::controller(&mut w),
        vmbda::controller(&mut w),
    ];
    let beside = w.start_beside();
    futures::future::join_all(controllers).await;
    drop(beside);
}
