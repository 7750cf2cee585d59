//! The `virtualization-controller` binary.

fn main() {}
