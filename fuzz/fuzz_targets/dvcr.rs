#![no_main]
//! Fuzz target `dvcr`: the data path's parsers of untrusted input (image references, pull
//! secrets, registry challenges, redirects, manifests, layers), see
//! `virtualization_dvcr::fuzzing::parsers`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| virtualization_dvcr::fuzzing::parsers(data));
