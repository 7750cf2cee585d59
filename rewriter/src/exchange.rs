//! Exchange.
