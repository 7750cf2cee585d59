//! The command-line tools the tests run (curl, kubectl, openssl) and checks of their output.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

use crate::kubectl_bin;

/// curl arguments that ask for a WebSocket upgrade (the handshake's headers, with RFC 6455's
/// sample key).
pub const WEBSOCKET_UPGRADE: [&str; 8] = [
    "-H",
    "Connection: Upgrade",
    "-H",
    "Upgrade: websocket",
    "-H",
    "Sec-WebSocket-Version: 13",
    "-H",
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
];

/// The HTTP status code of a curl request (`-s -o /dev/null -w %{http_code}` before `args`):
/// `"000"` when no answer came (refused, reset, timed out).
pub fn http_status(args: &[&str]) -> String {
    let mut all = vec!["-s", "-o", "/dev/null", "-w", "%{http_code}"];
    all.extend_from_slice(args);
    String::from_utf8_lossy(&curl(&all).stdout).into_owned()
}

pub fn curl(args: &[&str]) -> Output {
    Command::new("curl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("curl runs")
}

pub fn kubectl(kubeconfig: &str, args: &[&str]) -> Output {
    Command::new(kubectl_bin())
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("kubectl runs")
}

/// kubectl with `input` on stdin (for `-f -`).
pub fn kubectl_in(kubeconfig: &str, args: &[&str], input: &str) -> Output {
    let mut c = Command::new(kubectl_bin())
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    c.stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    c.wait_with_output().expect("kubectl ends")
}

/// Parses JSON or panics showing the text.
pub fn parse_json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// A command that must fail: its stderr.
pub fn fails(o: &Output) -> String {
    assert!(
        !o.status.success(),
        "command unexpectedly succeeded:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "command failed ({}):\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs `openssl` with `args`; panics with its stderr on failure.
pub fn openssl(args: &[&str]) {
    let o = Command::new("openssl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("openssl runs");
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}
