//! JSON plumbing: a validating span scanner, byte edits, and a boundary finder for streams.

pub mod edit;
pub mod frame;
pub mod scan;

pub use edit::Edits;
pub use scan::{RawStr, Scanner, Str};
