//! A large LIST rewritten on a thread of tokio's blocking pool, so that the sockets and the
//! rewrite run on different cores.
//!
//! Inline, the task that rewrites a LIST, the upstream connection and the client connection wake
//! each other in turn, so the runtime keeps all three on one worker: the rewrite (about 60% of
//! the proxy's CPU for a LIST) and the socket copies (about 30%) take turns on one core. Once a
//! LIST has shown itself large, the rest of its [`Pump`] runs on the blocking pool, reading
//! upstream through a read-ahead task: the rewrite runs while the workers read from upstream
//! and write the output already made to the client.
//!
//! At most one LIST per core beyond the first is offloaded at once ([`permit`]), so a burst of
//! large LISTs (or slow clients holding them) never takes more threads than there are cores to
//! run them; the others stay inline.

use std::sync::{Arc, LazyLock};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::Pump;
use crate::body;

/// Input a LIST is rewritten inline for before it is offloaded: small LISTs, by far the most,
/// never pay the hand-offs.
pub(super) const AFTER: usize = 1 << 20;
/// Upstream frames read ahead (hyper's are up to about 400 KiB).
const READ_AHEAD: usize = 4;

/// Offloaded LISTs at once: one per core beyond the first (none on one core).
static PERMITS: LazyLock<Arc<Semaphore>> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    Arc::new(Semaphore::new(cores - 1))
});

/// A permit to offload a LIST, if one is free.
pub(super) fn permit() -> Option<OwnedSemaphorePermit> {
    Arc::clone(&PERMITS).try_acquire_owned().ok()
}

/// Moves the rest of `p` to the blocking pool; the permit is held until it ends.
pub(super) fn detach(mut p: Pump, permit: OwnedSemaphorePermit) {
    p.upstream = body::prefetched(p.upstream, READ_AHEAD);
    p.offloaded = true;
    let rt = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        rt.block_on(p.run());
    });
}
