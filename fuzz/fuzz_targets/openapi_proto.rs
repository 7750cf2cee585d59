#![no_main]
//! Fuzz target `openapi_proto`: see `kube_api_rewriter_fuzz::openapi_proto`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kube_api_rewriter_fuzz::openapi_proto(data));
