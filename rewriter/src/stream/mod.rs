//! Streaming rewriters for LIST bodies and WATCH event streams.
//!
//! Both are push-based state machines: feed them input in pieces of any size with
//! [`ListRewriter::feed`] / [`WatchRewriter::feed`], and they append rewritten output as soon
//! as a whole item or event is available. Memory stays bounded by the largest item plus one
//! piece of input. Splitting the input differently never changes the output.
//!
//! ```
//! use kube_api_rewriter::{Direction, Rules, object::Context, stream::ListRewriter};
//! let rules = Rules::builtin_kubevirt();
//! let body = br#"{"apiVersion":"internal.virtualization.deckhouse.io/v1","items":[{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachine","metadata":{"name":"a"}}],"kind":"InternalVirtualizationVirtualMachineList","metadata":{}}"#;
//! let mut lr = ListRewriter::new(&rules, Direction::Restore, Context::default());
//! let mut out = Vec::new();
//! for piece in body.chunks(7) {
//!     lr.feed(piece, &mut out).unwrap();
//! }
//! lr.finish(&mut out).unwrap();
//! assert_eq!(out, br#"{"apiVersion":"kubevirt.io/v1","items":[{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"a"}}],"kind":"VirtualMachineList","metadata":{}}"#);
//! ```

mod list;
mod watch;

pub use list::ListRewriter;
pub use watch::WatchRewriter;
