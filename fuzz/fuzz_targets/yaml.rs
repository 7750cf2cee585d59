#![no_main]
//! Fuzz target `yaml`: see `kube_api_rewriter_fuzz::yaml`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kube_api_rewriter_fuzz::yaml(data));
