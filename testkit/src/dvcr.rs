//! DVCR for the tests: `scripts/dvcr.sh` (Debian's docker-registry with TLS and htpasswd) as a
//! value that stops the registry when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::workspace;

/// A running registry (see `scripts/dvcr.sh`).
pub struct Dvcr {
    /// The state directory given to `up` (the registry's files are in `DIR/dvcr/`).
    pub dir: PathBuf,
    /// `127.0.0.1:PORT`.
    pub address: String,
    pub username: String,
    pub password: String,
    /// The CA of the registry's serving certificate.
    pub ca_file: PathBuf,
    /// A `.dockerconfigjson` file with the credentials.
    pub auth_file: PathBuf,
}

impl Dvcr {
    /// Starts the registry with its state in `dir/dvcr/`; panics with the script's output if
    /// it fails.
    pub fn up(dir: &Path) -> Dvcr {
        let o = Command::new(workspace().join("scripts/dvcr.sh"))
            .arg("up")
            .arg(dir)
            .output()
            .expect("scripts/dvcr.sh runs");
        assert!(
            o.status.success(),
            "scripts/dvcr.sh up failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let env = std::fs::read_to_string(dir.join("dvcr/env")).expect("dvcr env file");
        let get = |name: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .map(|v| v.trim_matches(|c| c == '\'' || c == '"').to_owned())
                .unwrap_or_else(|| panic!("{name} missing from {}/dvcr/env", dir.display()))
        };
        Dvcr {
            dir: dir.to_owned(),
            address: get("DVCR_ADDRESS"),
            username: get("DVCR_USERNAME"),
            password: get("DVCR_PASSWORD"),
            ca_file: PathBuf::from(get("DVCR_CA_FILE")),
            auth_file: PathBuf::from(get("DVCR_AUTH_FILE")),
        }
    }

    /// `https://ADDRESS`.
    pub fn url(&self) -> String {
        format!("https://{}", self.address)
    }
}

impl Drop for Dvcr {
    fn drop(&mut self) {
        let _ = Command::new(workspace().join("scripts/dvcr.sh"))
            .arg("down")
            .arg(&self.dir)
            .output();
    }
}
