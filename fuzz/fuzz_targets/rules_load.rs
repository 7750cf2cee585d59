#![no_main]
//! Fuzz target `rules_load`: see `kube_api_rewriter_fuzz::rules_load`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kube_api_rewriter_fuzz::rules_load(data));
