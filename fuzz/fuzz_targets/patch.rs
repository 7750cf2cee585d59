#![no_main]
//! Fuzz target `patch`: see `kube_api_rewriter_fuzz::patch`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kube_api_rewriter_fuzz::patch(data));
