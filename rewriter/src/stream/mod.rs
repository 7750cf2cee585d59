//! Streams.
