#![no_main]
//! Fuzz target `proto`: see `kube_api_rewriter_fuzz::proto`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kube_api_rewriter_fuzz::proto(data));
