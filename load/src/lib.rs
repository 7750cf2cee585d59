//! The proxy under load and faults, against the real kube-apiserver.
//!
//! One control plane and one proxy process go through the phases in order, each checking what
//! users rely on and printing what it measured:
//!
//! 1. `watches`: N concurrent watches through the proxy (one connection each, as client-go over
//!    plain HTTP) and one direct watch (`kubectl get --raw`) while 100 objects are created and
//!    changed 10 times each: every proxy watch must see exactly the direct watch's events, in
//!    order, with restored names. Peak RSS and CPU seconds of the proxy are printed.
//! 2. `restart`: kube-apiserver is killed under those watches: each ends cleanly or between two
//!    events (never inside one), the proxy's `/readyz` goes unready, and ready again once
//!    kube-apiserver is back; the proxy is the same process. Every client re-lists (the list must
//!    match what its watch saw) and watches from the list's resourceVersion; one more change of
//!    every object must reach every client exactly as the direct watch sees it.
//! 3. `slow`: a client that stops reading a large LIST and one that stops reading a busy watch:
//!    the proxy's RSS grows by less than half the LIST, the other watches get every event, and
//!    the stalled LIST is whole once read.
//! 4. `flood`: thousands of idle and half-open connections to the monitoring and API ports: a
//!    GET on the API port still answers (its latency with and without them is printed).
//! 5. `sigterm`: SIGTERM while LISTs are being read and the watches are open: every LIST is
//!    whole, every watch ends on an event boundary, the proxy exits within `SHUTDOWN_TIMEOUT`.
//!
//! A stalled upstream body cannot be made with the real server; that case lives with the test
//! doubles (`rewriter/proxy/tests/doubles.rs`).

pub mod client;
mod suite;

pub use suite::{Figures, Settings, run};
