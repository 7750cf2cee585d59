#![no_main]
//! Fuzz target `admission`: see `kube_api_rewriter_fuzz::admission`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kube_api_rewriter_fuzz::admission(data));
