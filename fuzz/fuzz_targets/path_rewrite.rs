#![no_main]
//! Fuzz target `path_rewrite`: see `kube_api_rewriter_fuzz::path_rewrite`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kube_api_rewriter_fuzz::path_rewrite(data));
