//! What the environment variables choose (the names `scripts/control-plane.sh` read).

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// The environment variables the control plane reads, with their meaning.
pub const VARIABLES: [(&str, &str); 6] = [
    (
        "KUBE_VERSION",
        "Kubernetes release (default: the one tools/go/kubernetes pins)",
    ),
    (
        "KUBE_BIN_DIR",
        "a directory with the four Kubernetes binaries (default: built by scripts/go-build.sh)",
    ),
    ("ETCD_BIN", "etcd binary (default: built by scripts/go-build.sh)"),
    (
        "KAR_READY_TIMEOUT",
        "seconds to wait for each component (default 60)",
    ),
    (
        "KAR_STOP_TIMEOUT",
        "seconds between TERM and KILL (default 5; 0 = KILL at once)",
    ),
    (
        "KAR_APISERVER_EXTRA_ARGS",
        "extra kube-apiserver flags (whitespace-separated), saved at `up`",
    ),
];

/// How the control plane is brought up and down.
#[derive(Debug, Clone)]
pub struct Config {
    /// `KUBE_VERSION`: the release `scripts/go-build.sh` builds when `kube_bin_dir` is unset.
    pub kube_version: Option<String>,
    /// `KUBE_BIN_DIR`: kube-apiserver, kube-controller-manager, kube-scheduler and kubectl.
    pub kube_bin_dir: Option<PathBuf>,
    /// `ETCD_BIN`.
    pub etcd_bin: Option<PathBuf>,
    /// `KAR_READY_TIMEOUT`: the deadline of each readiness wait.
    pub ready_timeout: Duration,
    /// `KAR_STOP_TIMEOUT`: between TERM and KILL (zero: KILL at once). kube-apiserver with
    /// open watches does not exit on TERM (it waits ~60 s), so it gets KILLed.
    pub stop_timeout: Duration,
    /// `KAR_APISERVER_EXTRA_ARGS`, split on whitespace; saved in `DIR/kube-apiserver.args` at `up`.
    pub apiserver_extra_args: Vec<String>,
    /// Where `go-build.sh` lives (the repository's `scripts/`).
    pub scripts_dir: PathBuf,
}

impl Config {
    /// From the process environment.
    pub fn from_env() -> Result<Config> {
        Config::from_vars(|k| std::env::var(k).ok())
    }

    /// From a lookup of the variables in [`VARIABLES`]; an empty value counts as unset.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let get = |k: &str| get(k).filter(|v| !v.is_empty());
        let secs = |k: &str, default: u64| -> Result<Duration> {
            match get(k) {
                None => Ok(Duration::from_secs(default)),
                Some(v) => v
                    .trim()
                    .parse()
                    .map(Duration::from_secs)
                    .map_err(|_| Error::Usage(format!("{k}={v}: a whole number of seconds expected"))),
            }
        };
        Ok(Config {
            kube_version: get("KUBE_VERSION"),
            kube_bin_dir: get("KUBE_BIN_DIR").map(PathBuf::from),
            etcd_bin: get("ETCD_BIN").map(PathBuf::from),
            ready_timeout: secs("KAR_READY_TIMEOUT", 60)?,
            stop_timeout: secs("KAR_STOP_TIMEOUT", 5)?,
            apiserver_extra_args: get("KAR_APISERVER_EXTRA_ARGS")
                .map(|v| v.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default(),
            scripts_dir: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("scripts"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<Config> {
        Config::from_vars(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned()))
    }

    #[test]
    fn defaults() {
        let c = config(&[]).unwrap();
        assert_eq!(c.ready_timeout, Duration::from_secs(60));
        assert_eq!(c.stop_timeout, Duration::from_secs(5));
        assert!(c.kube_bin_dir.is_none() && c.etcd_bin.is_none() && c.kube_version.is_none());
        assert!(c.apiserver_extra_args.is_empty());
        assert!(c.scripts_dir.join("go-build.sh").exists());
    }

    #[test]
    fn variables() {
        let c = config(&[
            ("KUBE_BIN_DIR", "/k"),
            ("ETCD_BIN", ""),
            ("KAR_STOP_TIMEOUT", "0"),
            ("KAR_READY_TIMEOUT", "7"),
            ("KAR_APISERVER_EXTRA_ARGS", " --a=1\n --b=2 "),
        ])
        .unwrap();
        assert_eq!(c.kube_bin_dir, Some(PathBuf::from("/k")));
        assert_eq!(c.etcd_bin, None);
        assert!(c.stop_timeout.is_zero());
        assert_eq!(c.ready_timeout, Duration::from_secs(7));
        assert_eq!(c.apiserver_extra_args, ["--a=1", "--b=2"]);
        assert!(config(&[("KAR_READY_TIMEOUT", "soon")]).is_err());
    }
}
