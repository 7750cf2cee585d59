//! JSON plumbing: a validating span scanner, byte edits, and a boundary finder for streams.

pub(crate) mod edit;
pub(crate) mod escape;
pub(crate) mod frame;
pub(crate) mod scan;

pub(crate) use edit::Edits;
pub(crate) use scan::{RawStr, Scanner, Str};
