#![no_main]
//! Fuzz target `watch_stream`: see `kube_api_rewriter_fuzz::watch_stream`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kube_api_rewriter_fuzz::watch_stream(data));
