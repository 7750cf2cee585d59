//! The open connections of one listener, for its connection cap: at the cap, the oldest
//! connection that has not yet sent a complete request is closed to admit a new one.
//!
//! A client that opens connections and sends nothing (or dribbles headers) can then never lock
//! out clients that do send requests, and one listener (say, monitoring) can never take more
//! file descriptors than its own cap.
//!
//! A connection counts until its last user is gone: an upgraded (spliced) connection outlives
//! its HTTP connection task, so the splice holds the connection's place with a [`Place`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// The open connections of a listener.
#[derive(Debug, Clone)]
pub struct Conns {
    inner: Arc<Mutex<State>>,
    cap: usize,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// By id: ids grow, so the first entries are the oldest connections.
    open: BTreeMap<u64, Entry>,
}

#[derive(Debug)]
struct Entry {
    requested: Arc<AtomicBool>,
    evict: Arc<Notify>,
}

/// The answer to a new connection.
#[derive(Debug)]
pub enum Admit {
    /// Served; the guard leaves the set when dropped.
    Open(Guard),
    /// At the cap with every connection busy: close the new one.
    Full,
}

/// One admitted connection.
#[derive(Debug)]
pub struct Guard {
    place: Place,
    requested: Arc<AtomicBool>,
    evict: Arc<Notify>,
}

/// A share in a connection's place under the cap: the place frees when the [`Guard`] and every
/// `Place` are gone. The server puts one in each request's extensions; an upgrade moves it into
/// the splice.
#[derive(Debug, Clone)]
pub struct Place {
    _occupant: Arc<Occupant>,
}

#[derive(Debug)]
/// The entry of one connection in the set: removed when the last share is gone.
struct Occupant {
    id: u64,
    conns: Conns,
}

impl Guard {
    /// Set it once the connection has sent a complete request: it is no longer evicted.
    pub fn requested(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.requested)
    }

    /// A share in this connection's place, for what outlives the connection task.
    pub fn place(&self) -> Place {
        self.place.clone()
    }

    /// Completes when the connection is to be closed for a newer one.
    pub fn evicted(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let n = Arc::clone(&self.evict);
        async move { n.notified().await }
    }
}

impl Drop for Occupant {
    fn drop(&mut self) {
        let mut st = self.conns.inner.lock().unwrap_or_else(|p| p.into_inner());
        st.open.remove(&self.id);
    }
}

impl Conns {
    /// At most `cap` connections (at least one).
    pub fn new(cap: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(State::default())),
            cap: cap.max(1),
        }
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).open.len()
    }

    /// True when none is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Admits a new connection, evicting the oldest one without a complete request when at
    /// the cap.
    pub fn admit(&self) -> Admit {
        let mut st = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if st.open.len() >= self.cap {
            let idle = st
                .open
                .iter()
                .find(|(_, e)| !e.requested.load(Ordering::Relaxed))
                .map(|(id, _)| *id);
            match idle.and_then(|id| st.open.remove(&id)) {
                // `notify_one` stores a permit: the connection's task sees it even if it is
                // not waiting yet.
                Some(e) => e.evict.notify_one(),
                None => return Admit::Full,
            }
        }
        let id = st.next;
        st.next += 1;
        let requested = Arc::new(AtomicBool::new(false));
        let evict = Arc::new(Notify::new());
        st.open.insert(
            id,
            Entry {
                requested: Arc::clone(&requested),
                evict: Arc::clone(&evict),
            },
        );
        Admit::Open(Guard {
            place: Place {
                _occupant: Arc::new(Occupant {
                    id,
                    conns: self.clone(),
                }),
            },
            requested,
            evict,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(c: &Conns) -> Guard {
        match c.admit() {
            Admit::Open(g) => g,
            Admit::Full => panic!("refused"),
        }
    }

    fn is_evicted(g: &Guard) -> bool {
        futures_lite_now(g.evicted())
    }

    /// Polls a future once.
    fn futures_lite_now(f: impl std::future::Future<Output = ()>) -> bool {
        let mut f = std::pin::pin!(f);
        let waker = std::task::Waker::noop();
        f.as_mut()
            .poll(&mut std::task::Context::from_waker(waker))
            .is_ready()
    }

    #[test]
    fn the_oldest_connection_without_a_request_makes_room() {
        let c = Conns::new(3);
        let a = open(&c);
        let b = open(&c);
        let d = open(&c);
        a.requested().store(true, Ordering::Relaxed);
        let e = open(&c);
        assert!(!is_evicted(&a), "a sent a request");
        assert!(is_evicted(&b), "b is the oldest idle one");
        assert!(!is_evicted(&d));
        assert_eq!(c.len(), 3);
        d.requested().store(true, Ordering::Relaxed);
        e.requested().store(true, Ordering::Relaxed);
        assert!(matches!(c.admit(), Admit::Full), "every connection is busy");
        drop(a);
        let _f = open(&c);
        assert_eq!(c.len(), 3);
        drop(b);
        assert_eq!(c.len(), 3, "an evicted guard was already removed");
    }

    #[test]
    fn a_held_connection_keeps_its_place_after_its_guard() {
        let c = Conns::new(1);
        let g = open(&c);
        g.requested().store(true, Ordering::Relaxed);
        let spliced = g.place();
        drop(g);
        assert_eq!(c.len(), 1, "the splice still holds the place");
        assert!(matches!(c.admit(), Admit::Full));
        drop(spliced);
        assert!(c.is_empty());
        let _h = open(&c);
    }
}
