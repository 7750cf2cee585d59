//! Every parser of untrusted input at once, for the `dvcr` fuzz target (feature `internals`):
//! image references and pull secrets a user writes, and what a registry answers (its
//! `WWW-Authenticate` challenge, redirect `Location`, manifests and layers).

use std::str::FromStr as _;

use crate::auth::Challenge;
use crate::{Credentials, ImageReference, TerminationMessage};

/// Feeds `data` to each parser; none may panic.
pub fn parsers(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(r) = ImageReference::from_str(&text) {
        // A parsed reference prints as one that parses to the same.
        let again = ImageReference::from_str(&r.to_string()).expect("a printed reference parses");
        assert_eq!(again, r);
    }
    let _ = Challenge::parse(&text);
    let _ = Credentials::from_docker_config_json(data, "127.0.0.1:5000");
    let _ = serde_json::from_slice::<TerminationMessage>(data);
    let _ = serde_json::from_slice::<crate::source::Manifest>(data);
    let _ = crate::registry::resolve("https://registry.example:5000/v2/x/blobs/sha256:0", &text);
    let out = std::env::temp_dir().join(format!("dvcr-fuzz-{}.img", std::process::id()));
    let _ = crate::layer::extract_disk(data, &out);
    let _ = std::fs::remove_file(&out);
}
