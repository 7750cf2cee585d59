//! Watches through the proxy: `kubectl get -w` (table and JSON events) and a single large
//! event over raw HTTP.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube_api_rewriter_testkit::*;
use serde_json::Value;

use crate::assertions::assert_original;
use crate::env;
use crate::manifests::vm;

/// `kubectl get vm -w --output-watch-events` sees a VM added, modified and deleted, with
/// original names; `-o json` watch events hold the objects with original names.
#[test]
fn get_watch() {
    let e = env();
    let p = &e.p;
    let ns = "kcw";
    e.namespace(ns);
    let mut w = Command::new(kubectl_bin())
        .env("KUBECONFIG", e.pkc())
        .args(["get", "vm", "-n", ns, "-w", "--output-watch-events"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    let out = w.stdout.take().expect("stdout");
    let rx = line_channel(out);
    // kubectl prints nothing until the first event: give it time to open the watch.
    std::thread::sleep(Duration::from_millis(1500));
    e.apply(&vm(ns, "w1", &[("kubevirt.io/created-by", "w")], ""));
    ok(&p.kubectl(&["label", "vm", "w1", "-n", ns, "kubevirt.io/step=2"]));
    ok(&p.kubectl(&["delete", "vm", "w1", "-n", ns]));
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && !lines.iter().any(|l: &String| l.starts_with("DELETED")) {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            lines.push(l);
        }
    }
    let _ = w.kill();
    let out = w.wait_with_output().expect("kubectl ends");
    let text = lines.join("\n");
    let events: Vec<&str> = lines
        .iter()
        .filter(|l| l.split_whitespace().nth(1) == Some("w1"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        events.first() == Some(&"ADDED") && events.contains(&"MODIFIED") && events.last() == Some(&"DELETED"),
        "{text}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.starts_with("EVENT") && !text.contains("nternalVirtualization"),
        "{text}"
    );
    // -o json watch: the objects themselves (the initial ADDED of a VM already there).
    e.apply(&vm(ns, "w2", &[("kubevirt.io/created-by", "w")], ""));
    let mut w = Command::new(kubectl_bin())
        .env("KUBECONFIG", e.pkc())
        .args(["get", "vm", "-n", ns, "-w", "-o", "json", "--output-watch-events"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl");
    let out = w.stdout.take().expect("stdout");
    let events: Value = {
        let mut de = serde_json::Deserializer::from_reader(out).into_iter::<Value>();
        let first = de.next().and_then(Result::ok).unwrap_or(Value::Null);
        let _ = w.kill();
        let _ = w.wait();
        first
    };
    assert_eq!(events["type"], "ADDED", "{events}");
    assert_eq!(events["object"]["kind"], "VirtualMachine", "{events}");
    assert_original(&events);
}

/// A single large watch event must reach the client while the watch is open, without waiting
/// for the next event.
#[test]
fn watch_large_event() {
    let e = env();
    let (cp, p) = (&e.cp, &e.p);
    let ns = "big-watch";
    e.namespace(ns);
    let mut w = Command::new("curl")
        .args([
            "-sS",
            "-N",
            // Only `big`: the controller-manager publishes kube-root-ca.crt in every
            // namespace.
            &p.url(&format!(
                "/api/v1/namespaces/{ns}/configmaps?watch=1&fieldSelector=metadata.name%3Dbig"
            )),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("curl");
    let out = w.stdout.take().expect("stdout");
    let rx = line_channel(out);
    std::thread::sleep(Duration::from_millis(500));
    let f = cp.dir.join("big.txt");
    std::fs::write(&f, "x".repeat(64 << 10)).expect("write");
    ok(&cp.kubectl(&[
        "create",
        "configmap",
        "big",
        "-n",
        ns,
        &format!("--from-file=k={}", f.display()),
    ]));
    let got = rx.recv_timeout(Duration::from_secs(5));
    let _ = w.kill();
    let _ = w.wait();
    match got {
        Ok(line) => assert!(line.len() > 64 << 10, "{}", line.len()),
        Err(_) => panic!("a 64 KiB watch event was held by the proxy (no line within 5 s)"),
    }
}
