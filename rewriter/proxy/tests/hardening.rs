//! The proxy under hostile clients, against the real kube-apiserver: request body
//! limits on every route, the kubeconfig's impersonation fixing the identity, upgrades only for
//! streaming subresources, refused upgrades restored. Every case runs with `LOG_LEVEL=trace`, and
//! the logs it kept are checked for the test tokens as it ends.
//!
//! The cases share one control plane (each starts the proxies it needs) and run one after the
//! other (`kube_api_rewriter_testkit::Suite`); each case is a test of its own, and any one runs
//! alone by name (`cargo test -p kube-api-rewriter-proxy --test hardening -- NAME`).

use std::path::Path;

use kube_api_rewriter_testkit::*;

/// `curl -sS -D HEADERS -o BODY ARGS...`: (status line and lower-cased headers, body).
fn curl_full(dir: &Path, args: &[&str]) -> (String, String) {
    let h = dir.join("curl.headers");
    let b = dir.join("curl.body");
    let mut all = vec![
        "-sS",
        "-D",
        h.to_str().expect("utf-8"),
        "-o",
        b.to_str().expect("utf-8"),
    ];
    all.extend_from_slice(args);
    ok(&curl(&all));
    (
        std::fs::read_to_string(&h).expect("headers").to_ascii_lowercase(),
        String::from_utf8_lossy(&std::fs::read(&b).expect("body")).into_owned(),
    )
}

/// A kubeconfig for kube-apiserver with `token` and extra `user:` lines (impersonation).
fn kubeconfig(cp: &ControlPlane, name: &str, user: &str) -> std::path::PathBuf {
    let kc = cp.dir.join(format!("{name}.kubeconfig"));
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n{user}contexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n",
            cp.get("KUBE_APISERVER_URL"),
            cp.get("KUBE_CA_FILE"),
        ),
    )
    .expect("kubeconfig");
    kc
}

fn start(cp: &ControlPlane, kc: &Path, env: &[(&str, &str)]) -> ProxyProc {
    let mut all = vec![
        ("KUBECONFIG", kc.to_str().expect("utf-8")),
        ("LOG_LEVEL", "trace"),
    ];
    all.extend_from_slice(env);
    ProxyProc::start(&cp.dir, &all)
}

/// Sends `req` on a new connection and reads until the proxy closes it.
fn raw_request(port: u16, req: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .expect("timeout");
    s.write_all(req.as_bytes()).expect("write");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn main() -> std::process::ExitCode {
    Suite::new(setup)
        .case("monitoring_auth", logs_checked(true, monitoring_auth))
        // Its proxy logs at info: its logs are checked for the tokens only.
        .case("bounded_labels", logs_checked(false, bounded_labels))
        .case("chunked_body_limit", logs_checked(true, chunked_body_limit))
        .case("impersonation_fixed", logs_checked(true, impersonation_fixed))
        .case(
            "impersonation_with_certificates",
            logs_checked(true, impersonation_with_certificates),
        )
        .case(
            "impersonation_passed_or_dropped",
            logs_checked(true, impersonation_passed_or_dropped),
        )
        .case(
            "upgrade_only_for_streams",
            logs_checked(true, upgrade_only_for_streams),
        )
        .case(
            "refused_upgrade_restored",
            logs_checked(true, refused_upgrade_restored),
        )
        .run()
}

/// What every case of this file shares.
struct Env {
    cp: ControlPlane,
    /// The control plane's directory.
    dir: std::path::PathBuf,
    /// A kubeconfig for kube-apiserver with the admin's token.
    admin: std::path::PathBuf,
    /// The logs of the proxies the running case kept (`Env::keep`).
    logs: std::sync::Mutex<String>,
}

impl Env {
    fn keep(&self, p: &ProxyProc) {
        self.logs.lock().expect("logs").push_str(&p.logs());
    }
}

/// A control plane whose kube-apiserver accepts client certificates of its CA.
fn setup() -> Env {
    let cp = ControlPlane::up_with_apiserver_args(|dir| {
        format!("--client-ca-file={}", dir.join("pki/ca.crt").display())
    });
    let dir = cp.dir.clone();
    let admin = kubeconfig(&cp, "admin", &format!("    token: {}\n", cp.get("ADMIN_TOKEN")));
    Env {
        cp,
        dir,
        admin,
        logs: std::sync::Mutex::new(String::new()),
    }
}

/// Runs `case`, then checks the logs it kept (when all cases ran in one test, the logs of all
/// were checked at its end): the trace logs were kept (if `traced`: the case's proxies log at
/// trace) and no bearer token reached them.
fn logs_checked(traced: bool, case: fn(&Env)) -> impl Fn(&Env) + Send + Sync + 'static {
    move |e| {
        e.logs.lock().expect("logs").clear();
        case(e);
        let logs = std::mem::take(&mut *e.logs.lock().expect("logs"));
        if traced {
            assert!(
                logs.contains("TRACE") || logs.contains("DEBUG"),
                "trace logs were kept"
            );
        }
        for secret in [e.cp.get("ADMIN_TOKEN"), e.cp.get("USER1_TOKEN")] {
            assert!(!logs.contains(secret), "a bearer token reached the log");
        }
    }
}

// A chunked body over the limit gets 413 on every route: rewritten (VMs, config maps) and
// passed through (leases), instead of a 503 from the cut upstream request.
fn chunked_body_limit(e: &Env) {
    let p = start(&e.cp, &e.admin, &[("MAX_REQUEST_BODY_BYTES", "1000")]);
    let big = e.dir.join("big.json");
    std::fs::write(
        &big,
        format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"big"}},"data":{{"a":"{}"}}}}"#,
            "x".repeat(5000)
        ),
    )
    .expect("write");
    let data = format!("@{}", big.display());
    for path in [
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        "/api/v1/namespaces/default/configmaps",
        "/apis/kubevirt.io/v1/namespaces/default/virtualmachines",
    ] {
        let (h, b) = curl_full(
            &e.dir,
            &[
                "-H",
                "Transfer-Encoding: chunked",
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                &data,
                &p.url(path),
            ],
        );
        assert!(h.starts_with("http/1.1 413"), "{path}: {h}\n{b}");
        assert!(b.contains("RequestEntityTooLarge"), "{path}: {b}");
    }
    e.keep(&p);
}

// What identity did kube-apiserver see? `GET /api/v1/namespaces` with extra headers:
// (status line, body).
fn namespaces(e: &Env, p: &ProxyProc, headers: &[&str]) -> (String, String) {
    let mut args = Vec::new();
    for h in headers {
        args.extend_from_slice(&["-H", h]);
    }
    let url = p.url("/api/v1/namespaces");
    args.push(&url);
    let (h, b) = curl_full(&e.dir, &args);
    (h.lines().next().unwrap_or_default().trim().to_owned(), b)
}

fn forbidden_for(got: (String, String), user: &str) {
    assert_eq!(got.0, "http/1.1 403 forbidden", "{}", got.1);
    assert!(
        got.1.contains(&format!(r#"User \"{user}\""#)),
        "not {user}: {}",
        got.1
    );
}

// The kubeconfig's `as:` fixes the identity: a client's Impersonate-User cannot replace it
// and its Impersonate-Group cannot widen it.
fn impersonation_fixed(e: &Env) {
    let kc = kubeconfig(
        &e.cp,
        "as-user1",
        &format!("    token: {}\n    as: user1\n", e.cp.get("ADMIN_TOKEN")),
    );
    let p = start(&e.cp, &kc, &[]);
    forbidden_for(namespaces(e, &p, &[]), "user1");
    forbidden_for(namespaces(e, &p, &["Impersonate-Group: system:masters"]), "user1");
    forbidden_for(namespaces(e, &p, &["Impersonate-User: admin"]), "user1");
    forbidden_for(
        namespaces(
            e,
            &p,
            &["Impersonate-User: admin", "Impersonate-Group: system:masters"],
        ),
        "user1",
    );
    e.keep(&p);
}

// With a client certificate (admin, system:masters) the kubeconfig's `as:` applies too.
fn impersonation_with_certificates(e: &Env) {
    let pki = e.dir.join("pki");
    let certs = e.dir.join("client-certs");
    std::fs::create_dir_all(&certs).expect("dir");
    let (crt, key) = signed_cert(
        &certs,
        "admin",
        "admin/O=system:masters",
        None,
        &pki.join("ca.crt"),
        &pki.join("ca.key"),
    );
    let user = format!(
        "    client-certificate: {}\n    client-key: {}\n",
        crt.display(),
        key.display()
    );
    let p = start(&e.cp, &kubeconfig(&e.cp, "cert", &user), &[]);
    assert_eq!(
        namespaces(e, &p, &[]).0,
        "http/1.1 200 ok",
        "the certificate is admin's"
    );
    let p_as = start(
        &e.cp,
        &kubeconfig(&e.cp, "cert-as", &format!("{user}    as: user1\n")),
        &[],
    );
    forbidden_for(namespaces(e, &p_as, &[]), "user1");
    forbidden_for(
        namespaces(e, &p_as, &["Impersonate-Group: system:masters"]),
        "user1",
    );
    // A client's own Authorization does not lift the fixed identity: the connection still
    // carries the proxy's certificate, which kube-apiserver authenticates first.
    forbidden_for(
        namespaces(
            e,
            &p_as,
            &["Authorization: Bearer not-a-token", "Impersonate-User: admin"],
        ),
        "user1",
    );
    e.keep(&p);
    e.keep(&p_as);
}

// Without kubeconfig impersonation a client's headers pass, as behind `kubectl proxy`
// (kube-apiserver checks the proxy's right to impersonate), unless the setting drops them.
fn impersonation_passed_or_dropped(e: &Env) {
    let p = start(&e.cp, &e.admin, &[]);
    forbidden_for(namespaces(e, &p, &["Impersonate-User: user1"]), "user1");
    let d = start(&e.cp, &e.admin, &[("DROP_IMPERSONATION_HEADERS", "yes")]);
    assert_eq!(
        namespaces(e, &d, &["Impersonate-User: user1"]).0,
        "http/1.1 200 ok"
    );
    e.keep(&p);
    e.keep(&d);
}

// `Connection: Upgrade` on a list of a renamed resource does not skip rewriting.
fn upgrade_only_for_streams(e: &Env) {
    let p = start(&e.cp, &e.admin, &[]);
    p.apply_vm_crd();
    p.wait_until(std::time::Duration::from_secs(20), |p| {
        p.kubectl(&["get", "vm"]).status.success()
    });
    let url = p.url("/apis/kubevirt.io/v1/namespaces/default/virtualmachines");
    let (h, b) = curl_full(&e.dir, &[&WEBSOCKET_UPGRADE[..], &[&url]].concat());
    assert!(h.starts_with("http/1.1 200"), "{h}\n{b}");
    // kube-apiserver indents JSON for curl's user agent: read it, not its spelling.
    assert_eq!(parse_json(&b)["kind"], "VirtualMachineList", "not restored: {b}");
    assert!(!b.contains("InternalVirtualization"), "not restored: {b}");
    e.keep(&p);
}

// kube-apiserver refusing an upgrade of a renamed resource (no such subresource, no
// permission): the refusal's Status comes back in KubeVirt's names, as for any request.
fn refused_upgrade_restored(e: &Env) {
    let p = start(&e.cp, &e.admin, &[]);
    p.apply_vm_crd();
    p.wait_until(std::time::Duration::from_secs(20), |p| {
        p.kubectl(&["get", "vm"]).status.success()
    });
    let url = p.url("/apis/kubevirt.io/v1/namespaces/default/virtualmachines/vm1/portforward");
    let user1 = format!("Authorization: Bearer {}", e.cp.get("USER1_TOKEN"));
    for (who, code) in [(None, "404"), (Some(user1.as_str()), "403")] {
        let mut args = WEBSOCKET_UPGRADE.to_vec();
        if let Some(a) = who {
            args.extend_from_slice(&["-H", a]);
        }
        args.push(&url);
        let (h, b) = curl_full(&e.dir, &args);
        assert!(h.starts_with(&format!("http/1.1 {code}")), "{h}\n{b}");
        let v: serde_json::Value = serde_json::from_str(&b).expect("a JSON Status");
        assert_eq!(v["kind"], "Status", "{b}");
        assert_eq!(v["details"]["group"], "kubevirt.io", "not restored: {b}");
        assert_eq!(v["details"]["kind"], "virtualmachines", "not restored: {b}");
        let msg = v["message"].as_str().expect("message");
        assert!(msg.contains("virtualmachines.kubevirt.io"), "not restored: {b}");
        assert!(
            !b.contains("internal.virtualization") && !b.contains("internalvirtualization"),
            "not restored: {b}"
        );
    }
    e.keep(&p);
}

// Invented resources and methods do not grow /metrics without bound.
fn bounded_labels(e: &Env) {
    let p = start(&e.cp, &e.admin, &[("LOG_LEVEL", "info")]);
    for i in 0..1000 {
        let method = if i % 2 == 0 { "GET" } else { "BREW" };
        raw_request(
            p.port,
            &format!(
                "{method} /api/v1/namespaces/default/invented{i} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            ),
        );
    }
    let text = ok(&curl(&["-s", &p.mon("/metrics")]));
    assert!(text.contains(r#"resource="OTHER""#));
    assert!(text.contains(r#"method="OTHER""#));
    assert!(!text.contains(r#"method="BREW""#));
    let resources: std::collections::HashSet<&str> = text
        .split(r#"resource=""#)
        .skip(1)
        .filter_map(|t| t.split('"').next())
        .collect();
    // 100 unknown values are kept, then OTHER (before: one per invented name).
    assert!(resources.len() <= 105, "{} resource values", resources.len());
    assert!(text.len() < 2 << 20, "/metrics is {} bytes", text.len());
    e.keep(&p);
}

// MONITORING_AUTH: /metrics needs a token kube-apiserver accepts (TokenReview) whose user
// may `get` the named resource (SubjectAccessReview); health endpoints stay open.
fn monitoring_auth(e: &Env) {
    let attrs = r#"{"namespace":"default","verb":"get","group":"","version":"v1","resource":"services","name":"metrics"}"#;
    let p = start(&e.cp, &e.admin, &[("MONITORING_AUTH", attrs)]);
    let code = |path: &str, token: Option<&str>| {
        let auth = token.map(|t| format!("Authorization: Bearer {t}"));
        let url = p.mon(path);
        let mut args = vec!["-s", "-o", "/dev/null", "-w", "%{http_code}"];
        if let Some(a) = &auth {
            args.extend_from_slice(&["-H", a]);
        }
        args.push(&url);
        ok(&curl(&args))
    };
    assert_eq!(code("/metrics", None), "401");
    assert_eq!(code("/metrics", Some("not-a-token")), "401");
    assert_eq!(code("/metrics", Some(e.cp.get("USER1_TOKEN"))), "403");
    assert_eq!(code("/metrics", Some(e.cp.get("ADMIN_TOKEN"))), "200");
    // Cached: the same answers again.
    assert_eq!(code("/metrics", Some(e.cp.get("USER1_TOKEN"))), "403");
    assert_eq!(code("/metrics", Some(e.cp.get("ADMIN_TOKEN"))), "200");
    assert_eq!(code("/healthz", None), "200");
    p.wait_until(std::time::Duration::from_secs(10), |p| p.readyz() == "200");
    e.keep(&p);
    // A bad setting stops start-up, naming it.
    let o = std::process::Command::new(rewriter_bin())
        .env("MONITORING_AUTH", r#"{"verb":"get"}"#)
        .env("KUBECONFIG", &e.admin)
        .output()
        .expect("runs");
    assert!(!o.status.success());
    let out = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(out.contains("MONITORING_AUTH"), "{out}");
}
