#![no_main]
//! Fuzz target `object`: see `kube_api_rewriter_fuzz::object`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kube_api_rewriter_fuzz::object(data));
