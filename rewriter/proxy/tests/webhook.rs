//! The webhook listener's certificate reloads when the files change, Kubernetes style (a
//! `..data` symlink swapped to a new directory), without a restart.

use std::path::Path;
use std::time::Duration;

use kube_api_rewriter_testkit::*;

fn make_cert(dir: &Path, cn: &str) {
    std::fs::create_dir_all(dir).expect("dir");
    self_signed_cert(&dir.join("tls.crt"), &dir.join("tls.key"), cn);
}

fn swap_data(dir: &Path, target: &str) {
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).expect("symlink");
    std::fs::rename(&tmp, dir.join("..data")).expect("atomic swap");
}

fn served_cn(port: u16) -> String {
    let o = curl(&[
        "-sk",
        "-v",
        "-o",
        "/dev/null",
        &format!("https://127.0.0.1:{port}/"),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    err.lines()
        .find_map(|l| l.split("subject: ").nth(1))
        .unwrap_or("")
        .trim()
        .to_owned()
}

#[test]
fn certificate_reloads_without_restart() {
    let dir = temp_dir("webhook");
    let certs = dir.join("certs");
    make_cert(&certs.join("v1"), "one");
    make_cert(&certs.join("v2"), "two");
    swap_data(&certs, "v1");
    for f in ["tls.crt", "tls.key"] {
        std::os::unix::fs::symlink(format!("..data/{f}"), certs.join(f)).expect("symlink");
    }
    let port = free_port();
    let p = ProxyProc::start(
        &dir,
        &[
            ("CLIENT_PROXY", "no"),
            ("WEBHOOK_ADDRESS", &format!("https://127.0.0.1:{}", free_port())),
            ("WEBHOOK_LISTEN_ADDRESS", "127.0.0.1"),
            ("WEBHOOK_LISTEN_PORT", &port.to_string()),
            (
                "WEBHOOK_CERT_FILE",
                certs.join("tls.crt").to_str().expect("utf-8"),
            ),
            ("WEBHOOK_KEY_FILE", certs.join("tls.key").to_str().expect("utf-8")),
        ],
    );
    assert_eq!(served_cn(port), "CN=one", "{}", p.logs());
    // Unreachable target: a Status, over TLS.
    let s = ok(&curl(&[
        "-sk",
        "-w",
        "\n%{http_code}",
        &format!("https://127.0.0.1:{port}/validate-x"),
    ]));
    assert!(s.ends_with("\n503") && s.contains("\"kind\":\"Status\""), "{s}");
    swap_data(&certs, "v2");
    p.wait_until(Duration::from_secs(5), |_| served_cn(port) == "CN=two");
    let _ = std::fs::remove_dir_all(&dir);
}
