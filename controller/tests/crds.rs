//! The committed CRDs under `controller/crds/` are what the Rust types generate.
//! `UPDATE_CRDS=1 cargo test -p virtualization-controller --test crds` rewrites them.

use std::path::Path;

use virtualization_controller::resources::{crd_text, crds};

#[test]
fn committed_crds_match_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    let update = std::env::var_os("UPDATE_CRDS").is_some();
    let mut stale = Vec::new();
    for (file, crd) in crds() {
        let want = crd_text(&crd);
        let path = dir.join(file);
        if update {
            std::fs::write(&path, &want).expect("write CRD");
            continue;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have != want {
            stale.push(file);
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?} differ from the types; run UPDATE_CRDS=1 cargo test -p virtualization-controller --test crds"
    );
}
