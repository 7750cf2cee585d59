#![no_main]
//! Fuzz target `scan_diff`: see `kube_api_rewriter_fuzz::scan_diff`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kube_api_rewriter_fuzz::scan_diff(data));
