//! On the wire, end to end: gzip from the real kube-apiserver, client certificates to it,
//! HTTP/2 to an upstream that offers it (an in-process TLS test double with ALPN), and a full
//! AdmissionReview round trip through the webhook proxy to a TLS webhook test double.
//!
//! The two kube-apiserver tests share one control plane and one proxy
//! (`kube_api_rewriter_testkit::shared`) while they run at the same time; each test runs alone
//! by name (`cargo test -p kube-api-rewriter-proxy --test wire -- NAME`).

use std::convert::Infallible;
use std::io::Read as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube_api_rewriter_proxy::tls::{self, ReloadingCert};
use kube_api_rewriter_testkit::*;
use tokio_rustls::TlsAcceptor;

#[path = "wire/tls_doubles.rs"]
mod tls_doubles;
use tls_doubles::{Seen, seen_now, self_signed, tls_double, tls_double_serving, upstream_for, watch_request};

const INTERNAL: &str = "internal.virtualization.deckhouse.io";

fn json(s: &[u8]) -> serde_json::Value {
    serde_json::from_slice(s).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(s)))
}

/// `curl -sS -D HEADERS -o BODY ARGS...`: (lower-cased headers, body).
fn curl_full(dir: &Path, args: &[&str]) -> (String, Vec<u8>) {
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
        std::fs::read(&b).expect("body"),
    )
}

fn gunzip(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(b)
        .read_to_end(&mut out)
        .expect("a gzip body");
    out
}

fn vm_doc(name: &str, pad: usize) -> String {
    format!(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: {name}\n  namespace: default\n  labels:\n    kubevirt.io/vm: {name}\n  annotations:\n    kubevirt.io/pad: \"{}\"\nspec:\n  running: false\n  template:\n    metadata:\n      labels: {{kubevirt.io/domain: {name}}}\n    spec:\n      domain:\n        devices: {{}}\n        resources: {{requests: {{memory: 64Mi}}}}\n---\n",
        "x".repeat(pad)
    )
}

fn kubectl_stdin(kubeconfig: &Path, args: &[&str], input: &str) -> std::process::Output {
    use std::io::Write as _;
    let mut c = std::process::Command::new(kubectl_bin())
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl");
    c.stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    c.wait_with_output().expect("kubectl ends")
}

/// A client certificate signed by the control plane's CA (the apiserver's `--client-ca-file`).
fn client_cert(pki: &Path, out: &Path, name: &str, subject: &str) -> (String, String) {
    let key = out.join(format!("{name}.key"));
    let csr = out.join(format!("{name}.csr"));
    let crt = out.join(format!("{name}.crt"));
    let ext = out.join("client.ext");
    std::fs::write(
        &ext,
        "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n",
    )
    .expect("ext");
    let p = |p: &Path| p.to_str().expect("utf-8").to_owned();
    openssl(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-subj",
        subject,
        "-keyout",
        &p(&key),
        "-out",
        &p(&csr),
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &p(&csr),
        "-CA",
        &p(&pki.join("ca.crt")),
        "-CAkey",
        &p(&pki.join("ca.key")),
        "-CAserial",
        &p(&out.join("test.srl")),
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        &p(&ext),
        "-out",
        &p(&crt),
    ]);
    (p(&crt), p(&key))
}

/// What the two kube-apiserver tests share.
struct Env {
    /// The proxy; declared first so it stops before the control plane.
    p: ProxyProc,
    cp: ControlPlane,
    /// kube-apiserver's URL, its CA file and the admin's `Authorization` header.
    direct: String,
    ca: String,
    admin: String,
}

/// A control plane that takes client certificates signed by its CA and a proxy in front of it,
/// with the VM CRD and three VMs in `default` made through the proxy (`gzip_against_kube_apiserver`
/// lists them, `client_certificates_against_kube_apiserver` reads one): made by the first test
/// that asks, shared by those running at the same time.
fn env() -> Arc<Env> {
    static ENV: Mutex<Weak<Env>> = Mutex::new(Weak::new());
    shared(&ENV, || {
        let cp = ControlPlane::up_with_apiserver_args(|dir| {
            format!("--client-ca-file={}", dir.join("pki/ca.crt").display())
        });
        let p = ProxyProc::start(&cp.dir, &[("KUBECONFIG", cp.kubeconfig())]);
        p.apply_vm_crd();
        p.wait_until(Duration::from_secs(20), |p| {
            p.kubectl(&["get", "vm"]).status.success()
        });
        // One VM over 128 KiB (kube-apiserver gzips bodies from 128 KiB when asked), two small.
        let docs = format!(
            "{}{}{}",
            vm_doc("big", 150 << 10),
            vm_doc("small-a", 10),
            vm_doc("small-b", 10)
        );
        ok(&kubectl_stdin(&p.kubeconfig, &["create", "-f", "-"], &docs));
        Env {
            direct: cp.get("KUBE_APISERVER_URL").to_owned(),
            ca: cp.get("KUBE_CA_FILE").to_owned(),
            admin: format!("Authorization: Bearer {}", cp.get("ADMIN_TOKEN")),
            p,
            cp,
        }
    })
}

#[test]
fn gzip_against_kube_apiserver() {
    let e = env();
    let (p, direct, ca, admin) = (&e.p, &e.direct, &e.ca, &e.admin);
    // curl's files in a directory of this test's own: the other test may run at the same time.
    let dir = e.cp.dir.join("gzip");
    std::fs::create_dir_all(&dir).expect("dir");
    // Upstream really gzips these (otherwise this test proves nothing).
    let (h, _) = curl_full(
        &dir,
        &[
            "--cacert",
            ca,
            "-H",
            admin,
            "-H",
            "Accept-Encoding: gzip",
            &format!("{direct}/apis/{INTERNAL}/v1/namespaces/default/internalvirtualizationvirtualmachines"),
        ],
    );
    assert!(
        h.contains("content-encoding: gzip"),
        "upstream did not gzip:\n{h}"
    );

    let check_list = |body: &[u8]| {
        let v = json(body);
        assert_eq!(v["kind"], "VirtualMachineList");
        let items = v["items"].as_array().expect("items");
        assert_eq!(items.len(), 3, "{v}");
        for i in items {
            assert_eq!(i["apiVersion"], "kubevirt.io/v1");
            assert_eq!(i["kind"], "VirtualMachine");
            assert!(i["metadata"]["labels"]["kubevirt.io/vm"].is_string(), "{i}");
            assert!(i["metadata"]["annotations"]["kubevirt.io/pad"].is_string());
        }
        assert!(memchr::memmem::find(body, INTERNAL.as_bytes()).is_none());
    };
    let list = p.url("/apis/kubevirt.io/v1/namespaces/default/virtualmachines");
    // A client that accepts gzip gets gzip (a streamed LIST)...
    let (h, b) = curl_full(&dir, &["-H", "Accept-Encoding: gzip", &list]);
    assert!(h.starts_with("http/1.1 200"), "{h}");
    assert!(h.contains("content-encoding: gzip"), "{h}");
    check_list(&gunzip(&b));
    // ...and a whole object too.
    let one = p.url("/apis/kubevirt.io/v1/namespaces/default/virtualmachines/big");
    let (h, b) = curl_full(&dir, &["-H", "Accept-Encoding: gzip", &one]);
    assert!(h.contains("content-encoding: gzip"), "{h}");
    let v = json(&gunzip(&b));
    assert_eq!(v["kind"], "VirtualMachine");
    assert_eq!(v["metadata"]["labels"]["kubevirt.io/vm"], "big");
    // A client that does not gets plain JSON.
    let (h, b) = curl_full(&dir, &[&list]);
    assert!(!h.contains("content-encoding"), "{h}");
    check_list(&b);
    let (h, b) = curl_full(&dir, &[&one]);
    assert!(!h.contains("content-encoding"), "{h}");
    assert_eq!(json(&b)["kind"], "VirtualMachine");
}

#[test]
fn client_certificates_against_kube_apiserver() {
    let e = env();
    let (dir, direct, ca) = (&e.cp.dir, &e.direct, &e.ca);
    let pki = dir.join("pki");
    let certs = dir.join("client-certs");
    std::fs::create_dir_all(&certs).expect("dir");
    // admin in system:masters, by file paths.
    let (crt, key) = client_cert(&pki, &certs, "admin", "/O=system:masters/CN=admin");
    let kc = dir.join("cert.kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {direct}\n    certificate-authority: {ca}\nusers:\n- name: admin\n  user:\n    client-certificate: {crt}\n    client-key: {key}\ncontexts:\n- name: c\n  context: {{cluster: c, user: admin}}\ncurrent-context: c\n"
        ),
    )
    .expect("kubeconfig");
    let pc = ProxyProc::start(dir, &[("KUBECONFIG", kc.to_str().expect("utf-8"))]);
    let out = ok(&pc.kubectl(&["get", "ns", "-o", "name"]));
    assert!(out.contains("namespace/default"), "{out}");
    let vms = ok(&pc.kubectl(&["get", "vm", "-o", "name"]));
    assert!(vms.contains("virtualmachine.kubevirt.io/small-a"), "{vms}");

    // A user without groups, inline data: the identity is the certificate's.
    let (crt, key) = client_cert(&pki, &certs, "cert-user", "/CN=cert-user");
    let b64 = |p: &str| base64::engine::general_purpose::STANDARD.encode(std::fs::read(p).expect("read"));
    let kc = dir.join("cert-user.kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {direct}\n    certificate-authority: {ca}\nusers:\n- name: u\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n",
            b64(&crt),
            b64(&key)
        ),
    )
    .expect("kubeconfig");
    let pu = ProxyProc::start(dir, &[("KUBECONFIG", kc.to_str().expect("utf-8"))]);
    let (h, b) = curl_full(dir, &[&pu.url("/api/v1/namespaces")]);
    assert!(h.starts_with("http/1.1 403"), "{h}");
    let msg = String::from_utf8_lossy(&b);
    assert!(msg.contains("User \\\"cert-user\\\""), "{msg}");
    let log = pc.logs() + &pu.logs();
    assert!(!log.contains("PRIVATE KEY"), "key material in the log");
}

// ------------------------------------------------------------------------------------ TLS doubles

fn h2_handler(s: &Seen) -> (StatusCode, String) {
    if s.path.contains("/exec") {
        // An upgrade the double refuses: an ordinary response for the client.
        return (
            StatusCode::BAD_REQUEST,
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":400}"#.into(),
        );
    }
    if s.path.ends_with("/big") {
        return (StatusCode::OK, "x".repeat(BIG_BODY));
    }
    if s.path.contains("watch=1") {
        return (
            StatusCode::OK,
            "{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"a\"}}}\n".into(),
        );
    }
    (
        StatusCode::OK,
        r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}"#.into(),
    )
}

#[test]
fn http2_to_an_upstream_that_offers_it() {
    let dir = temp_dir("h2");
    let (addr, seen_shared) = tls_double(&dir.join("double"), h2_handler);
    let kc = dir.join("double.kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: d\n  cluster:\n    server: https://{addr}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: doubletoken\ncontexts:\n- name: d\n  context: {{cluster: d, user: u}}\ncurrent-context: d\n"
        ),
    )
    .expect("kubeconfig");
    let p = ProxyProc::start(&dir, &[("KUBECONFIG", kc.to_str().expect("utf-8"))]);
    let s = ok(&curl(&[
        "-sS",
        "--http1.1",
        &p.url("/api/v1/namespaces/default/configmaps"),
    ]));
    assert!(s.contains("ConfigMapList"), "{s}");
    // Upgrades go over their own HTTP/1.1 connection.
    let url = p.url("/api/v1/namespaces/default/pods/p/exec?command=sh");
    let o = curl(&[&["-sS", "--http1.1"][..], &WEBSOCKET_UPGRADE, &[&url]].concat());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("\"code\":400"),
        "{o:?}"
    );
    let seen = seen_now(&seen_shared);
    let cm: Vec<_> = seen.iter().filter(|s| s.path.contains("/configmaps")).collect();
    assert_eq!(cm.len(), 1, "{seen:?}");
    assert_eq!(cm[0].version, http::Version::HTTP_2, "{seen:?}");
    let exec: Vec<_> = seen.iter().filter(|s| s.path.contains("/exec")).collect();
    assert_eq!(exec.len(), 1, "{seen:?}");
    assert_eq!(exec[0].version, http::Version::HTTP_11, "{seen:?}");
    // Watches too: each on a connection of its own that the body drives, whose burst of
    // events is read and rewritten in one go rather than handed over event by event.
    let s = ok(&curl(&[
        "-sS",
        "--http1.1",
        &p.url("/api/v1/namespaces/default/configmaps?watch=1"),
    ]));
    assert!(s.contains(r#""name":"a""#), "{s}");
    let seen = seen_now(&seen_shared);
    let w: Vec<_> = seen.iter().filter(|s| s.path.contains("watch=1")).collect();
    assert_eq!(w.len(), 1, "{seen:?}");
    assert_eq!(w[0].version, http::Version::HTTP_11, "{seen:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The body `h2_handler` answers `/big` with.
const BIG_BODY: usize = 2 << 20;

/// A large body from an HTTP/2 upstream comes in frames of up to the proxy's announced size,
/// not the protocol's default 16 KiB (each frame is taken and written on its own).
#[test]
fn http2_upstreams_send_large_bodies_in_large_frames() {
    let dir = temp_dir("h2-frames");
    let (addr, seen) = tls_double(&dir, h2_handler);
    let (rt, up) = upstream_for(addr);
    let (total, largest) = rt.block_on(async {
        let req = Request::get(up.uri("/api/v1/big").expect("uri"))
            .body(kube_api_rewriter_layer::body::empty())
            .expect("request");
        let mut body = up.send(req, None).await.expect("answered").into_body();
        let (mut total, mut largest) = (0, 0);
        while let Some(f) = body.frame().await {
            if let Ok(d) = f.expect("frame").into_data() {
                total += d.len();
                largest = largest.max(d.len());
            }
        }
        (total, largest)
    });
    assert_eq!(seen_now(&seen)[0].version, http::Version::HTTP_2);
    assert_eq!(total, BIG_BODY);
    assert!(largest > 64 << 10, "largest DATA frame {largest} bytes");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An upstream that speaks only HTTP/2 fails the HTTP/1.1 connection a watch asks for: that
/// watch is still answered, over the pool, and the next one does not knock again.
#[test]
fn watches_to_an_upstream_speaking_only_http2_go_through_the_pool() {
    let dir = temp_dir("h2-only");
    let (addr, seen, conns) = tls_double_serving(&dir, h2_handler, true);
    let (rt, up) = upstream_for(addr);
    rt.block_on(async {
        for i in 0..2 {
            let resp = up.send_watch(watch_request(&up, i)).await.expect("answered");
            assert_eq!(resp.status(), StatusCode::OK);
            let b = resp.into_body().collect().await.expect("body").to_bytes();
            assert!(b.starts_with(br#"{"type":"ADDED""#), "{b:?}");
        }
    });
    let seen = seen_now(&seen);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen.iter().all(|s| s.version == http::Version::HTTP_2),
        "{seen:?}"
    );
    assert_eq!(
        conns.load(Ordering::SeqCst),
        2,
        "one failed HTTP/1.1 connection and one pooled HTTP/2 connection: after the failure, watches keep to the pool for a while"
    );
    assert_eq!(up.own_watches(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// At most `MAX_OWN_WATCHES` watches hold a connection of their own; the next shares the
/// pooled HTTP/2 connections, and every place comes back when its watch ends.
#[test]
fn own_watch_connections_are_bounded_and_given_back() {
    use kube_api_rewriter_proxy::upstream::MAX_OWN_WATCHES;
    let dir = temp_dir("own-watches");
    let (addr, seen) = tls_double(&dir, h2_handler);
    let (rt, up) = upstream_for(addr);
    rt.block_on(async {
        let mut held = Vec::new();
        for i in 0..=MAX_OWN_WATCHES {
            let resp = up.send_watch(watch_request(&up, i)).await.expect("answered");
            assert_eq!(resp.status(), StatusCode::OK);
            held.push(resp);
        }
        assert_eq!(up.own_watches(), MAX_OWN_WATCHES);
        // One read to its end: that watch's place is free again.
        let first = held.remove(0);
        first.into_body().collect().await.expect("body");
        assert_eq!(up.own_watches(), MAX_OWN_WATCHES - 1);
        drop(held);
        assert_eq!(up.own_watches(), 0);
    });
    let seen = seen_now(&seen);
    let by = |v| seen.iter().filter(|s| s.version == v).count();
    assert_eq!(
        (by(http::Version::HTTP_11), by(http::Version::HTTP_2)),
        (MAX_OWN_WATCHES, 1),
        "watches on their own HTTP/1.1 connections, and one over the pool"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn webhook_handler(s: &Seen) -> (StatusCode, String) {
    let v: serde_json::Value = serde_json::from_slice(&s.body).unwrap_or_default();
    let uid = v["request"]["uid"].as_str().unwrap_or("").to_owned();
    let patch = base64::engine::general_purpose::STANDARD
        .encode(r#"[{"op":"add","path":"/metadata/labels/kubevirt.io~1x","value":"y"}]"#);
    let resp = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch},
    });
    (StatusCode::OK, resp.to_string())
}

#[test]
fn admission_review_round_trip_through_the_webhook_proxy() {
    let dir = temp_dir("admission");
    let (addr, seen) = tls_double(&dir.join("double"), webhook_handler);
    let (crt, key) = self_signed(&dir.join("listener"), "webhook-proxy");
    let port = free_port();
    let p = ProxyProc::start(
        &dir,
        &[
            ("CLIENT_PROXY", "no"),
            ("WEBHOOK_ADDRESS", &format!("https://{addr}")),
            ("WEBHOOK_SERVER_NAME", "localhost"),
            ("WEBHOOK_LISTEN_ADDRESS", "127.0.0.1"),
            ("WEBHOOK_LISTEN_PORT", &port.to_string()),
            ("WEBHOOK_CERT_FILE", crt.to_str().expect("utf-8")),
            ("WEBHOOK_KEY_FILE", key.to_str().expect("utf-8")),
        ],
    );
    // What kube-apiserver sends for the renamed resource.
    let gvk = serde_json::json!({"group": INTERNAL, "version": "v1", "kind": "InternalVirtualizationVirtualMachine"});
    let gvr = serde_json::json!({"group": INTERNAL, "version": "v1", "resource": "internalvirtualizationvirtualmachines"});
    let review = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0d9f3c1e-1111-2222-3333-444455556666",
            "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": "vm1", "namespace": "default", "operation": "CREATE",
            "userInfo": {"username": "admin", "groups": ["system:masters"]},
            "object": {
                "apiVersion": format!("{INTERNAL}/v1"),
                "kind": "InternalVirtualizationVirtualMachine",
                "metadata": {"name": "vm1", "namespace": "default",
                    "labels": {"kubevirt.internal.virtualization.deckhouse.io/vm": "vm1"}},
                "spec": {"running": false},
            },
            "oldObject": null, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    });
    let body = review.to_string();
    let (h, b) = curl_full(
        &dir,
        &[
            "-k",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &body,
            &format!("https://127.0.0.1:{port}/virtualmachines-mutate?timeout=10s"),
        ],
    );
    assert!(
        h.starts_with("http/1.1 200") || h.starts_with("http/2 200"),
        "{h}\n{}",
        p.logs()
    );

    // The webhook got the original names, and the query.
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].path, "/virtualmachines-mutate?timeout=10s");
    let got = json(&seen[0].body);
    let r = &got["request"];
    assert_eq!(r["kind"]["group"], "kubevirt.io", "{got}");
    assert_eq!(r["kind"]["kind"], "VirtualMachine", "{got}");
    assert_eq!(r["resource"]["resource"], "virtualmachines", "{got}");
    assert_eq!(r["object"]["apiVersion"], "kubevirt.io/v1", "{got}");
    assert_eq!(r["object"]["kind"], "VirtualMachine", "{got}");
    assert_eq!(
        r["object"]["metadata"]["labels"]["kubevirt.io/vm"], "vm1",
        "{got}"
    );
    assert!(
        !String::from_utf8_lossy(&seen[0].body).contains(INTERNAL),
        "{got}"
    );

    // kube-apiserver gets the patch in renamed terms.
    let out = json(&b);
    let resp = &out["response"];
    assert_eq!(resp["uid"], "0d9f3c1e-1111-2222-3333-444455556666", "{out}");
    assert_eq!(resp["allowed"], true, "{out}");
    assert_eq!(resp["patchType"], "JSONPatch", "{out}");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(resp["patch"].as_str().expect("patch"))
        .expect("base64");
    let patch = json(&patch);
    assert_eq!(
        patch,
        serde_json::json!([{"op": "add", "path": "/metadata/labels/kubevirt.internal.virtualization.deckhouse.io~1x", "value": "y"}]),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// --------------------------------------------------------------- streams beyond one connection

/// Requests a test double held open at once, and the most on any one of its connections.
#[derive(Debug, Default)]
struct Held {
    now: usize,
    per_conn: std::collections::HashMap<usize, usize>,
    most_on_one: usize,
    conns: usize,
}

/// 300 long requests at once through [`Upstream`] to an HTTP/2 server allowing 250 streams per
/// connection (kube-apiserver's limit, Go's default): every one reaches the server and is answered, over
/// more than one connection. hyper alone would queue the 251st behind the first 250, which
/// answer only once all 300 have arrived (as watches never free their stream): a hang.
#[test]
fn long_requests_beyond_one_connections_stream_limit_are_all_answered() {
    const N: usize = 300;
    tls::install_default_provider();
    let dir = temp_dir("lanes");
    let (crt, key) = self_signed(&dir, "double");
    let rc = ReloadingCert::load(&crt, &key).expect("certificate");
    let acc = TlsAcceptor::from(Arc::new(tls::server_config(rc).expect("server config")));
    let held = Arc::new(Mutex::new(Held::default()));
    let (all_in, all_in_rx) = tokio::sync::watch::channel(false);
    let all_in = Arc::new(all_in);
    let h = Arc::clone(&held);
    let port = spawn_double(move |s| {
        let (acc, held, all_in, all_in_rx) = (
            acc.clone(),
            Arc::clone(&h),
            Arc::clone(&all_in),
            all_in_rx.clone(),
        );
        async move {
            let Ok(s) = acc.accept(s).await else { return };
            let conn = {
                let mut h = held.lock().expect("lock");
                h.conns += 1;
                h.conns
            };
            let svc = hyper::service::service_fn(move |_req: Request<Incoming>| {
                let (held, all_in, mut all_in_rx) =
                    (Arc::clone(&held), Arc::clone(&all_in), all_in_rx.clone());
                async move {
                    {
                        let mut h = held.lock().expect("lock");
                        h.now += 1;
                        let on = h.per_conn.entry(conn).or_default();
                        *on += 1;
                        let on = *on;
                        h.most_on_one = h.most_on_one.max(on);
                        if h.now == N {
                            let _ = all_in.send(true);
                        }
                    }
                    // Held open, as a watch is, until every request has arrived.
                    let _ = all_in_rx.wait_for(|a| *a).await;
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"{}"))))
                }
            });
            let mut b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            b.http2().max_concurrent_streams(250);
            let _ = b.serve_connection(TokioIo::new(s), svc).await;
        }
    });
    let (rt, up) = upstream_for(SocketAddr::from(([127, 0, 0, 1], port)));
    let answered = rt.block_on(async move {
        let tasks: Vec<_> = (0..N)
            .map(|i| {
                let up = Arc::clone(&up);
                tokio::spawn(async move {
                    let req = Request::get(up.uri(&format!("/long/{i}")).expect("uri"))
                        .body(kube_api_rewriter_layer::body::empty())
                        .expect("request");
                    let resp = up.send(req, None).await.expect("answered");
                    assert_eq!(resp.status(), StatusCode::OK);
                    resp.into_body().collect().await.expect("body").to_bytes()
                })
            })
            .collect();
        let mut answered = 0;
        for t in tasks {
            let b = tokio::time::timeout(Duration::from_secs(60), t)
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "only {answered} of {N} answered within 60 s; the server held {:?}",
                        held.lock().expect("lock")
                    )
                })
                .expect("task");
            assert_eq!(&b[..], b"{}");
            answered += 1;
        }
        let h = held.lock().expect("lock");
        assert!(h.conns >= 2 && h.most_on_one <= 250, "{h:?}");
        answered
    });
    assert_eq!(answered, N);
    let _ = std::fs::remove_dir_all(&dir);
}

/// kube-apiserver may close an HTTP/2 connection while requests are being sent on it (seen
/// under load: `stream closed because of a broken pipe` for every request of one connection).
/// A GET that had no response head yet is sent again on a new connection, as Go's transport
/// does: here the double drops its first connection right after the TLS handshake, and both a
/// GET and a watch are answered.
#[test]
fn a_get_whose_connection_breaks_before_the_head_is_sent_again() {
    tls::install_default_provider();
    let dir = temp_dir("retry");
    let (crt, key) = self_signed(&dir, "double");
    let rc = ReloadingCert::load(&crt, &key).expect("certificate");
    let acc = TlsAcceptor::from(Arc::new(tls::server_config(rc).expect("server config")));
    let conns = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = Arc::clone(&conns);
    let port = spawn_double(move |s| {
        let (acc, conns) = (acc.clone(), Arc::clone(&c));
        async move {
            let Ok(s) = acc.accept(s).await else { return };
            // Every other connection is dropped as soon as it is up.
            if conns.fetch_add(1, std::sync::atomic::Ordering::SeqCst) % 2 == 0 {
                drop(s);
                return;
            }
            let svc = hyper::service::service_fn(|_req: Request<Incoming>| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"{}"))))
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(s), svc)
                .await;
        }
    });
    let (rt, up) = upstream_for(SocketAddr::from(([127, 0, 0, 1], port)));
    rt.block_on(async move {
        for path in ["/api/v1/namespaces/default/pods", "/api/v1/pods?watch=1"] {
            let req = Request::get(up.uri(path).expect("uri"))
                .body(kube_api_rewriter_layer::body::empty())
                .expect("request");
            let resp = up
                .send(req, None)
                .await
                .unwrap_or_else(|e| panic!("{path}: {e:?}"));
            assert_eq!(resp.status(), StatusCode::OK, "{path}");
            let b = resp.into_body().collect().await.expect("body").to_bytes();
            assert_eq!(&b[..], b"{}");
        }
    });
    assert!(
        conns.load(std::sync::atomic::Ordering::SeqCst) >= 2,
        "the double saw one connection: nothing was dropped"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
