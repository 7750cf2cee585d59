//! Certificate reloads on a Secret volume's `..data` swap: the serving certificate, and the
//! client certificate presented to virt-api (direct mode).

use std::process::{Command, Stdio};
use std::time::Duration;

use kube_api_rewriter_testkit as tk;

use crate::client::vm_path;
use crate::env::{Env, GROUP_PATH, secret_volume, wait_for};

/// The serving certificate is reloaded on a `..data` swap (to one of this mode's own), and the
/// aggregator keeps reaching us.
pub fn reload(e: &Env) {
    let subject = format!("virtualization-api-rotated-{}", e.mode.name());
    let before = served_subject(e.server.port);
    assert!(
        before.contains("virtualization-api") && !before.contains(&subject),
        "{before}"
    );
    let module_key = e.dir.join("virtualization-ca.key");
    let (crt, key) = tk::signed_cert(
        &e.dir,
        &subject,
        &subject,
        Some("DNS:virtualization-api.d8-virtualization.svc,DNS:localhost,IP:127.0.0.1"),
        &e.module_ca,
        &module_key,
    );
    secret_volume(
        &e.dir.join("serving-secret"),
        &format!("..{}", e.mode.name()),
        &crt,
        &key,
    );
    wait_for(
        "the rotated certificate is served",
        Duration::from_secs(20),
        || served_subject(e.server.port).contains(&subject),
    );
    assert!(
        e.server.logs().contains("certificate reloaded"),
        "{}",
        e.server.logs()
    );
    // The aggregator keeps reaching us with the new certificate (same CA).
    let out = tk::ok(&e.kubectl(&["get", "--raw", GROUP_PATH]));
    assert!(out.contains("virtualmachines/console"), "{out}");
}

/// The refused server gets the right client certificate (a ..data swap) and reaches virt-api.
/// Direct mode only (the case list has no sidecar trial): in sidecar mode the sidecar holds
/// the certificate. It leaves the refused server accepted, so it runs after `bad_input` (see
/// `CASES`): swapping the rogue certificate back does not make virt-api refuse the server again
/// promptly (the server keeps reaching virt-api), so it is not put back.
pub fn proxy_cert_reload(e: &Env) {
    let put = || {
        e.admin(
            &e.server_refused,
            &["-X", "PUT", "-d", "{}"],
            &vm_path("vm-running", "unfreeze"),
        )
    };
    assert_eq!(put().0, 503);
    secret_volume(
        &e.dir.join("refused-proxy-secret"),
        "..v2",
        &e.dir.join("proxy.crt"),
        &e.dir.join("proxy.key"),
    );
    wait_for(
        "virt-api accepts the new client certificate",
        Duration::from_secs(20),
        || put().0 == 200,
    );
    assert!(e.server_refused.logs().contains("certificate reloaded"));
}

/// The subject of the certificate `port` serves now (a new connection).
fn served_subject(port: u16) -> String {
    let o = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{port}"),
            "-servername",
            "localhost",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("openssl runs");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    text.lines()
        .find(|l| l.starts_with("subject="))
        .unwrap_or("")
        .to_owned()
}
