#![no_main]
//! Fuzz target `list_stream`: see `kube_api_rewriter_fuzz::list_stream`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kube_api_rewriter_fuzz::list_stream(data));
