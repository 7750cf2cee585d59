//! `virtualization-dvcr` end to end: a real registry (`scripts/dvcr.sh`), real qemu-img, the
//! binary as a child process, images served by a local HTTP server. The tests of this binary
//! share one registry; each runs alone by name too (`cargo test -p virtualization-dvcr --test
//! e2e -- NAME`).

mod import;
mod registry_api;
mod token;
mod upload;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use kube_api_rewriter_testkit::{Dvcr, FileServer, free_port, make_ca, shared, signed_cert, temp_dir};
use virtualization_dvcr::TerminationMessage;

const BIN: &str = env!("CARGO_BIN_EXE_virtualization-dvcr");
const MIB: usize = 1 << 20;

struct Env {
    /// Taken when the environment is dropped, so the registry stops before its files go.
    dvcr: Option<Dvcr>,
    root: PathBuf,
    files: FileServer,
    /// Served files: disk.raw (12 MiB of random data), disk.qcow2 (of it), page.html, disk.iso.
    dir: PathBuf,
}

fn env() -> Arc<Env> {
    static SLOT: Mutex<Weak<Env>> = Mutex::new(Weak::new());
    shared(&SLOT, || {
        let root = temp_dir("dvcr-e2e");
        let dvcr = Dvcr::up(&root);
        let dir = root.join("files");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("disk.raw"), random(12 * MIB)).unwrap();
        qemu(&[
            "convert",
            "-f",
            "raw",
            "-O",
            "qcow2",
            path(&dir.join("disk.raw")),
            path(&dir.join("disk.qcow2")),
        ]);
        std::fs::write(
            dir.join("page.html"),
            "<!DOCTYPE html>\n<html><body>Sign in</body></html>\n".repeat(100),
        )
        .unwrap();
        std::fs::write(dir.join("disk.iso"), iso_bytes()).unwrap();
        let files = FileServer::start(&dir);
        Env {
            dvcr: Some(dvcr),
            root,
            files,
            dir,
        }
    })
}

impl Drop for Env {
    fn drop(&mut self) {
        drop(self.dvcr.take());
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn random(len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    use std::io::Read as _;
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut buf)
        .unwrap();
    buf
}

/// An ISO 9660 image as far as detection goes: the volume descriptor magic at 0x8001, padded
/// to 2048-byte sectors.
fn iso_bytes() -> Vec<u8> {
    let mut b = random(64 * 2048);
    b[0x8000] = 1;
    b[0x8001..0x8006].copy_from_slice(b"CD001");
    b
}

fn qemu(args: &[&str]) -> String {
    let o = Command::new("qemu-img")
        .args(args)
        .output()
        .expect("qemu-img runs");
    assert!(
        o.status.success(),
        "qemu-img {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn sha256_file(p: &Path) -> String {
    let data = std::fs::read(p).unwrap();
    hex(ring::digest::digest(&ring::digest::SHA256, &data).as_ref())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

struct Run {
    ok: bool,
    message: TerminationMessage,
    stderr: String,
}

/// Runs `virtualization-dvcr import` with `vars`.
fn import(vars: &[(&str, String)]) -> Run {
    let work = temp_dir("dvcr-run");
    let tm = work.join("termination-log");
    let scratch = work.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let mut c = Command::new(BIN);
    c.arg("import")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("TERMINATION_MESSAGE_PATH", &tm)
        .env("SCRATCH_DIR", &scratch)
        .stdin(Stdio::null());
    for (k, v) in vars {
        c.env(k, v);
    }
    let o = c.output().expect("virtualization-dvcr runs");
    let text = std::fs::read_to_string(&tm).unwrap_or_default();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(
        text.lines().count(),
        1,
        "one line expected in the termination message: {text:?}\n{stderr}"
    );
    let message: TerminationMessage =
        serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
    // The scratch directory is cleaned up.
    assert_eq!(
        std::fs::read_dir(&scratch).unwrap().count(),
        0,
        "scratch left behind"
    );
    let _ = std::fs::remove_dir_all(&work);
    Run {
        ok: o.status.success(),
        message,
        stderr,
    }
}

fn succeeds(r: Run) -> TerminationMessage {
    assert!(
        r.ok && r.message.error.is_none(),
        "import failed: {:?}\n{}",
        r.message,
        r.stderr
    );
    r.message
}

fn fails(r: Run, expected: &str) {
    assert!(!r.ok, "import unexpectedly succeeded: {:?}", r.message);
    let e = r.message.error.clone().unwrap_or_default();
    assert!(
        e.contains(expected),
        "error {e:?} does not contain {expected:?}\n{}",
        r.stderr
    );
    assert!(r.message.format.is_none(), "{:?}", r.message);
}
