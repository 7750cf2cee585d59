//! Where things are: the binaries the tests run, the repository's test data, temporary
//! directories and free loopback ports.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The `kube-api-rewriter` binary: `$KUBE_API_REWRITER_BIN`, else [`workspace_bin`]'s.
pub fn rewriter_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("KUBE_API_REWRITER_BIN") {
        return PathBuf::from(p);
    }
    workspace_bin("kube-api-rewriter-proxy", "kube-api-rewriter")
}

/// The binary `bin` of the workspace package `package`: the one beside the running test
/// executable (`target/<profile>/`), built with `cargo build` first if it is missing.
pub fn workspace_bin(package: &str, bin: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test> -> target/<profile>/<bin>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable under target/<profile>/deps");
    let path = profile_dir.join(bin);
    if !path.exists() {
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        c.current_dir(workspace())
            .args(["build", "--locked", "-p", package, "--bin", bin]);
        if release {
            c.arg("--release");
        }
        assert!(
            c.status().expect("cargo runs").success(),
            "building {bin} of {package} failed"
        );
    }
    path
}

/// The directory of the Kubernetes release the tests run (kube-apiserver,
/// kube-controller-manager, kube-scheduler, kubectl): `$KUBE_BIN_DIR`, else what
/// `scripts/go-build.sh kubernetes [$KUBE_VERSION]` prints (it builds once, then answers from
/// its cache).
pub fn kube_bin_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(d) = std::env::var_os("KUBE_BIN_DIR") {
            return PathBuf::from(d);
        }
        let mut c = Command::new(workspace().join("scripts/go-build.sh"));
        c.arg("kubernetes");
        if let Some(v) = std::env::var_os("KUBE_VERSION").filter(|v| !v.is_empty()) {
            c.arg(v);
        }
        let o = c
            .stderr(Stdio::inherit())
            .output()
            .expect("scripts/go-build.sh runs");
        assert!(o.status.success(), "scripts/go-build.sh kubernetes failed");
        PathBuf::from(String::from_utf8(o.stdout).expect("utf-8 path").trim())
    })
}

/// The release's kubectl (see [`kube_bin_dir`]).
pub fn kubectl_bin() -> PathBuf {
    kube_bin_dir().join("kubectl")
}

/// The repository's `testdata/` (kube-apiserver captures, KubeVirt CRDs, Go rule sets).
pub fn testdata() -> PathBuf {
    workspace().join("testdata")
}

/// The KubeVirt CRD fixtures (`original`, `original`, `renamed`).
pub fn crd_fixtures() -> PathBuf {
    testdata().join("kubevirt-crds")
}

/// The repository's root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("workspace root")
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let d = std::env::temp_dir().join(format!("kar-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// A free loopback port (bound and released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}
