//! End to end against the real local kube-apiserver (scripts/control-plane.sh): kubectl and
//! curl through the proxy binary, compared with what kube-apiserver holds.
//!
//! One control plane and one proxy for the whole file (`kube_api_rewriter_testkit::Suite`),
//! brought down at the end whatever happens. Each case is a test of its own, run one at a time
//! in the order below; any one runs alone by name, e.g.
//! `cargo test -p kube-api-rewriter-proxy --test apiserver -- --exact watch` (without `--exact`
//! the name is a substring: `-- watch` runs `sigterm_watch` too). The setup runs `crds_renamed`
//! and `crud_patch_apply`, whose CRDs and VirtualMachines (vm1, vm2) the other cases need.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube_api_rewriter_testkit::*;

const INTERNAL: &str = "internal.virtualization.deckhouse.io";

fn vm_yaml(name: &str) -> String {
    format!(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: {name}\n  namespace: default\n  labels:\n    kubevirt.io/vm: {name}\nspec:\n  running: false\n  template:\n    metadata:\n      labels: {{kubevirt.io/domain: {name}}}\n    spec:\n      domain:\n        devices: {{}}\n        resources: {{requests: {{memory: 64Mi}}}}\n"
    )
}

fn apply_stdin(kubeconfig: &str, yaml: &str, extra: &[&str]) -> std::process::Output {
    kubectl_in(kubeconfig, &[&["apply", "-f", "-"][..], extra].concat(), yaml)
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

fn main() -> std::process::ExitCode {
    Suite::new(setup)
        .case("crds_renamed", crds_renamed)
        .case("crud_patch_apply", crud)
        .case("table_and_metadata", table)
        .case("statuses_restored", statuses)
        .case("pass_through", pass_through)
        .case("watch", watch)
        .case("body_limit", body_limit)
        .case("metrics", metrics)
        .case("token_file", token_file)
        .case("layer_example", layer_example)
        .case("sigterm_watch", sigterm_watch)
        .case("readyz", readyz)
        .on_failure(|e: &Env| eprintln!("proxy log:\n{}", e.p.logs()))
        .run()
}

/// What every case of this file shares.
struct Env {
    /// The proxy; declared first so it stops before the control plane.
    p: ProxyProc,
    cp: ControlPlane,
    /// The control plane's directory.
    dir: PathBuf,
    /// kube-apiserver's URL, its CA file and the admin's `Authorization` header.
    direct: String,
    ca: String,
    admin: String,
    /// The proxy's kubeconfig.
    pkc: String,
}

/// A control plane and a proxy in front of it, with KubeVirt's CRDs applied through the proxy
/// and vm1, vm2 made: `crds_renamed` and `crud_patch_apply`, which the other cases need (run
/// again as cases they apply the same objects again, which changes nothing).
fn setup() -> Env {
    let cp = ControlPlane::up();
    let dir = cp.dir.clone();
    let p = ProxyProc::start(&dir, &[("KUBECONFIG", cp.kubeconfig())]);
    let direct = cp.get("KUBE_APISERVER_URL").to_owned();
    let ca = cp.get("KUBE_CA_FILE").to_owned();
    let admin = format!("Authorization: Bearer {}", cp.get("ADMIN_TOKEN"));
    let pkc = p.kubeconfig.to_str().expect("utf-8").to_owned();
    let e = Env {
        p,
        cp,
        dir,
        direct,
        ca,
        admin,
        pkc,
    };
    crds_renamed(&e);
    crud(&e);
    e
}

fn crds_renamed(e: &Env) {
    let f = crd_fixtures().join("original");
    let f = f.display();
    for name in [
        "virtualmachines.yaml",
        "virtualmachineinstances.yaml",
        "kubevirt.yaml",
    ] {
        ok(&e.p.kubectl(&["apply", "-f", &format!("{f}/{name}")]));
    }
    let upstream = ok(&e.cp.kubectl(&["get", "crd", "-o", "name"]));
    assert!(
        upstream.contains(&format!("internalvirtualizationvirtualmachines.{INTERNAL}")),
        "{upstream}"
    );
    assert!(!upstream.contains("virtualmachines.kubevirt.io"), "{upstream}");
    let through = ok(&e.p.kubectl(&["get", "crd", "-o", "name"]));
    assert!(
        through.contains("customresourcedefinition.apiextensions.k8s.io/virtualmachines.kubevirt.io"),
        "{through}"
    );
    // Wait until the renamed resource is served.
    e.p.wait_until(Duration::from_secs(20), |p| {
        p.kubectl(&["get", "vm"]).status.success()
    });
}

fn crud(e: &Env) {
    ok(&apply_stdin(&e.pkc, &vm_yaml("vm1"), &[]));
    let got = json(&ok(&e.p.kubectl(&["get", "vm", "vm1", "-o", "json"])));
    assert_eq!(got["apiVersion"], "kubevirt.io/v1");
    assert_eq!(got["kind"], "VirtualMachine");
    assert_eq!(got["metadata"]["labels"]["kubevirt.io/vm"], "vm1");
    let up = json(&ok(&e.cp.kubectl(&[
        "get",
        &format!("internalvirtualizationvirtualmachines.{INTERNAL}"),
        "vm1",
        "-o",
        "json",
    ])));
    assert_eq!(up["apiVersion"], format!("{INTERNAL}/v1"));
    assert_eq!(up["kind"], "InternalVirtualizationVirtualMachine");
    assert!(up["metadata"]["labels"].get("kubevirt.io/vm").is_none(), "{up}");
    // Merge patch and server-side apply through the proxy.
    ok(&e.p.kubectl(&[
        "patch",
        "vm",
        "vm1",
        "--type=merge",
        "-p",
        r#"{"metadata":{"labels":{"kubevirt.io/patched":"yes"}}}"#,
    ]));
    ok(&apply_stdin(
        &e.pkc,
        &vm_yaml("vm2"),
        &["--server-side", "--field-manager=e2e"],
    ));
    let list = json(&ok(&e.p.kubectl(&["get", "vm", "-o", "json"])));
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 2, "{list}");
    assert!(
        items
            .iter()
            .all(|i| i["kind"] == "VirtualMachine" && i["apiVersion"] == "kubevirt.io/v1"),
        "{list}"
    );
    assert_eq!(items[0]["metadata"]["labels"]["kubevirt.io/patched"], "yes");
    let raw = ok(&e.p.kubectl(&["get", "vm", "-o", "json"]));
    assert!(!raw.contains(INTERNAL), "renamed names leak: {raw}");
}

fn table(e: &Env) {
    let out = ok(&e.p.kubectl(&["get", "vm"]));
    assert!(
        out.starts_with("NAME") && out.contains("vm1") && out.contains("vm2"),
        "{out}"
    );
    let t = ok(&curl(&[
        "-sS",
        "-H",
        "Accept: application/json;as=Table;v=v1;g=meta.k8s.io",
        &e.p.url("/apis/kubevirt.io/v1/namespaces/default/virtualmachines"),
    ]));
    let v = json(&t);
    assert_eq!(v["kind"], "Table", "{t}");
    assert_eq!(v["rows"].as_array().map(Vec::len), Some(2), "{t}");
    let pom = ok(&curl(&[
        "-sS",
        "-H",
        "Accept: application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
        &e.p.url("/apis/kubevirt.io/v1/namespaces/default/virtualmachines"),
    ]));
    let v = json(&pom);
    assert_eq!(v["kind"], "PartialObjectMetadataList", "{pom}");
    assert_eq!(
        v["items"][0]["metadata"]["labels"]["kubevirt.io/vm"], "vm1",
        "{pom}"
    );
}

fn statuses(e: &Env) {
    let nf = curl(&[
        "-sS",
        "-w",
        "\n%{http_code}",
        &e.p.url("/apis/kubevirt.io/v1/namespaces/default/virtualmachines/nope"),
    ]);
    let s = ok(&nf);
    assert!(s.ends_with("\n404"), "{s}");
    let v = json(s.trim_end_matches("\n404"));
    assert_eq!(v["kind"], "Status");
    assert_eq!(v["reason"], "NotFound");
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("virtualmachines.kubevirt.io") && !m.contains(INTERNAL)),
        "{v}"
    );
    let dup = apply_stdin(&e.pkc, &vm_yaml("vm1"), &[]);
    assert!(dup.status.success());
    let create = Command::new(kubectl_bin())
        .env("KUBECONFIG", &e.pkc)
        .args(["create", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    let mut create = create;
    {
        use std::io::Write;
        create
            .stdin
            .take()
            .expect("stdin")
            .write_all(vm_yaml("vm1").as_bytes())
            .expect("write");
    }
    let o = create.wait_with_output().expect("ends");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("AlreadyExists") && err.contains("virtualmachines.kubevirt.io \"vm1\" already exists"),
        "{err}"
    );
    // 403: a user without rights, with their own token passed through.
    let s = ok(&curl(&[
        "-sS",
        "-w",
        "\n%{http_code}",
        "-H",
        &format!("Authorization: Bearer {}", e.cp.get("USER1_TOKEN")),
        &e.p.url("/apis/kubevirt.io/v1/namespaces/default/virtualmachines"),
    ]));
    assert!(s.ends_with("\n403"), "{s}");
    assert!(
        s.contains("\"reason\":\"Forbidden\"") && s.contains("virtualmachines") && !s.contains(INTERNAL),
        "{s}"
    );
}

fn pass_through(e: &Env) {
    // Not rewritten: byte for byte what kube-apiserver sends (/openapi/v2: what the core's
    // OpenAPI restore makes of it, tests/openapi.rs checks it in depth).
    ok(&e.cp.kubectl(&[
        "create",
        "configmap",
        "cm1",
        "--from-literal=k=kubevirt.io/v1 VirtualMachine",
    ]));
    for path in [
        "/version",
        "/api/v1/namespaces/default/configmaps/cm1",
        "/openapi/v2",
    ] {
        let straight = || {
            curl(&[
                "-sS",
                "--compressed",
                "--cacert",
                &e.ca,
                "-H",
                &e.admin,
                &format!("{}{path}", e.direct),
            ])
        };
        // /openapi/v2 changes for a while after CRDs are created: compare against a
        // direct answer that stayed the same around the proxied one.
        let mut same = false;
        for _ in 0..10 {
            let before = straight();
            let through = curl(&["-sS", "--compressed", &e.p.url(path)]);
            let after = straight();
            assert!(through.status.success() && before.status.success());
            assert!(!through.stdout.is_empty());
            if before.stdout == after.stdout {
                let want = if path == "/openapi/v2" {
                    let rules = kube_api_rewriter::Rules::builtin_kubevirt();
                    kube_api_rewriter::openapi::json::restore(&rules, &before.stdout)
                        .expect("valid JSON")
                        .into_owned()
                } else {
                    before.stdout.clone()
                };
                assert!(through.stdout == want, "{path} differs");
                same = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        assert!(same, "{path} never settled");
    }
    // The length kube-apiserver declares reaches the client: the body is read ahead in
    // frames, not re-framed as chunks.
    let length = |url: &str, extra: &[&str]| {
        let mut args = vec!["-sS", "-o", "/dev/null", "-D", "-"];
        args.extend_from_slice(extra);
        args.push(url);
        let head = String::from_utf8(curl(&args).stdout).unwrap();
        head.lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().to_owned())
            })
            .unwrap_or_else(|| panic!("no Content-Length in {head}"))
    };
    let cm = "/api/v1/namespaces/default/configmaps/cm1";
    assert_eq!(
        length(&e.p.url(cm), &[]),
        length(&format!("{}{cm}", e.direct), &["--cacert", &e.ca, "-H", &e.admin])
    );
    // YAML for a rewritten resource: asked of upstream as JSON, restored, converted (Go sent
    // it empty; tests/yaml.rs has the rest).
    let path = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines/vm1";
    let yaml = ok(&curl(&[
        "-sS",
        "-D",
        "-",
        "-H",
        "Accept: application/yaml",
        &e.p.url(path),
    ]));
    assert!(
        yaml.contains("content-type: application/yaml") || yaml.contains("Content-Type: application/yaml"),
        "{yaml}"
    );
    assert!(yaml.contains("name: vm1"), "{yaml}");
    assert!(yaml.contains("kind: VirtualMachine\n"), "{yaml}");
}

fn watch(e: &Env) {
    let mut w = Command::new("curl")
        .args([
            "-sS",
            "-N",
            &e.p.url("/apis/kubevirt.io/v1/namespaces/default/virtualmachines?watch=1&resourceVersion=0"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("curl");
    let out = w.stdout.take().expect("stdout");
    let rx = line_channel(out);
    // Initial ADDED events for vm1, vm2, then one caused by a change made upstream directly.
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.len() < 2 && Instant::now() < deadline {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            seen.push(l);
        }
    }
    ok(&e.cp.kubectl(&[
        "label",
        &format!("internalvirtualizationvirtualmachines.{INTERNAL}"),
        "vm2",
        "extra=1",
    ]));
    let l = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("MODIFIED event arrives while the watch is open");
    seen.push(l);
    let _ = w.kill();
    let _ = w.wait();
    assert_eq!(seen.len(), 3, "{seen:?}");
    for l in &seen {
        let v = json(l);
        assert_eq!(v["object"]["kind"], "VirtualMachine", "{l}");
        assert_eq!(v["object"]["apiVersion"], "kubevirt.io/v1", "{l}");
    }
    assert_eq!(json(&seen[2])["type"], "MODIFIED");
}

fn body_limit(e: &Env) {
    let big = "x".repeat(4 << 20);
    let body = format!(
        r#"{{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{{"name":"big","annotations":{{"a":"{big}"}}}}}}"#
    );
    let f = e.dir.join("big.json");
    std::fs::write(&f, body).expect("write");
    let s = ok(&curl(&[
        "-sS",
        "-w",
        "\n%{http_code}",
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        &format!("@{}", f.display()),
        &e.p.url("/apis/kubevirt.io/v1/namespaces/default/virtualmachines"),
    ]));
    assert!(s.ends_with("\n413"), "{s}");
    assert!(s.contains("\"reason\":\"RequestEntityTooLarge\""), "{s}");
}

fn metrics(e: &Env) {
    let m = ok(&curl(&["-sS", &e.p.mon("/metrics")]));
    for needle in [
        "kube_api_rewriter_client_requests_total{name=\"kube-api\",resource=\"virtualmachines\",method=\"GET\",watch=\"0\",decision=\"\"}",
        "kube_api_rewriter_requests_handled_total{",
        "kube_api_rewriter_rewrites_total{name=\"kube-api\",resource=\"virtualmachines\",method=\"GET\",watch=\"0\",side=\"target\",operation=\"restore\",error=\"0\"}",
        "kube_api_rewriter_request_handling_duration_seconds_bucket{",
        "kube_api_rewriter_to_client_bytes_total{",
        "process_resident_memory_bytes",
    ] {
        assert!(m.contains(needle), "missing {needle}:\n{m}");
    }
    let logs = e.p.logs();
    assert!(
        !logs.contains(e.cp.get("ADMIN_TOKEN")) && !logs.contains(e.cp.get("USER1_TOKEN")),
        "a token reached the log"
    );
}

fn token_file(e: &Env) {
    let tok = e.dir.join("token");
    std::fs::write(&tok, e.cp.get("ADMIN_TOKEN")).expect("token");
    let kc = e.dir.join("tokenfile.kubeconfig");
    let text = std::fs::read_to_string(e.cp.kubeconfig()).expect("kubeconfig");
    let text = text.replace(
        &format!("token: {}", e.cp.get("ADMIN_TOKEN")),
        &format!("tokenFile: {}", tok.display()),
    );
    std::fs::write(&kc, text).expect("kubeconfig");
    let q = ProxyProc::start(&e.dir, &[("KUBECONFIG", kc.to_str().expect("utf-8"))]);
    let code = |q: &ProxyProc| http_status(&[&q.url("/api/v1/namespaces")]);
    assert_eq!(code(&q), "200");
    // A rotated token is picked up without a restart.
    std::fs::write(&tok, "not-a-token").expect("token");
    q.wait_until(Duration::from_secs(5), |q| code(q) == "401");
    std::fs::write(&tok, e.cp.get("ADMIN_TOKEN")).expect("token");
    q.wait_until(Duration::from_secs(5), |q| code(q) == "200");
}

fn layer_example(e: &Env) {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_kube-api-rewriter"))
        .parent()
        .expect("dir")
        .join("examples/kube_client_layer");
    let o = Command::new(&exe)
        .env("KUBECONFIG", e.cp.kubeconfig())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (build it first: cargo build --examples)", exe.display()));
    let out = ok(&o);
    assert!(out.contains("kubevirt.io/v1 VirtualMachine default/vm1"), "{out}");
}

fn readyz(e: &Env) {
    let code = |p: &ProxyProc| p.readyz();
    e.p.wait_until(Duration::from_secs(10), |p| code(p) == "200");
    assert!(e.cp.script("stop-apiserver").status.success());
    e.p.wait_until(Duration::from_secs(10), |p| code(p) == "503");
    // Requests meanwhile get a Status, not a hang or a bare error.
    let s = ok(&curl(&[
        "-sS",
        "-w",
        "\n%{http_code}",
        &e.p.url("/apis/kubevirt.io/v1/virtualmachines"),
    ]));
    assert!(s.ends_with("\n503") && s.contains("\"kind\":\"Status\""), "{s}");
    assert!(e.cp.script("start-apiserver").status.success());
    e.p.wait_until(Duration::from_secs(20), |p| code(p) == "200");
}

fn sigterm_watch(e: &Env) {
    let mut q = ProxyProc::start(&e.dir, &[("KUBECONFIG", e.cp.kubeconfig())]);
    let mut w = Command::new("curl")
        .args([
            "-sS",
            "-N",
            &q.url("/apis/kubevirt.io/v1/namespaces/default/virtualmachines?watch=1&resourceVersion=0"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("curl");
    let mut out = BufReader::new(w.stdout.take().expect("stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("an event");
    assert!(first.contains("\"kind\":\"VirtualMachine\""), "{first}");
    q.signal("TERM");
    let t = Instant::now();
    let st = loop {
        if let Some(st) = w.try_wait().expect("wait") {
            break st;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the watch did not end after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // curl exits 0 only when the chunked body ended properly (18 for a cut transfer).
    assert!(st.success(), "watch ended uncleanly: {st}");
    assert_eq!(
        q.wait_exit(Duration::from_secs(5)),
        Some(0),
        "proxy did not exit cleanly:\n{}",
        q.logs()
    );
}
