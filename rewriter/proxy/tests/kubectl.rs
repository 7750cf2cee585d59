//! kubectl through the proxy against the real local kube-apiserver (scripts/control-plane.sh):
//! what users of `kubevirt.io` rely on, each case checked against what kube-apiserver holds
//! (read directly with the admin kubeconfig).
//!
//! One control plane and one proxy (API proxy + webhook proxy in front of `webhook_double`)
//! for the whole file; the cases run in order inside one test so that everything is stopped at
//! the end whatever happens.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use kube_api_rewriter_testkit::*;
use serde_json::{Value, json};

const INTERNAL: &str = "internal.virtualization.deckhouse.io";
const UP_VM: &str = "internalvirtualizationvirtualmachines.internal.virtualization.deckhouse.io";
const RENAMED_PREFIX: &str = "kubevirt.internal.virtualization.deckhouse.io/";
const DENIAL: &str = "webhook_double says no to deny-me";

// ---------------------------------------------------------------- webhook_double

/// A validating webhook on 127.0.0.1 (HTTPS): records every AdmissionReview it receives with
/// its path, allows everything except objects named `deny-me`.
struct WebhookDouble {
    port: u16,
    reviews: Arc<Mutex<Vec<(String, Value)>>>,
}

impl WebhookDouble {
    fn reviews(&self) -> Vec<(String, Value)> {
        self.reviews.lock().expect("lock").clone()
    }
}

async fn webhook_serve(
    reviews: Arc<Mutex<Vec<(String, Value)>>>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let path = req.uri().path().to_owned();
    let body = req.into_body().collect().await?.to_bytes();
    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    reviews.lock().expect("lock").push((path, review.clone()));
    let request = &review["request"];
    let name = request["name"]
        .as_str()
        .or_else(|| request["object"]["metadata"]["name"].as_str())
        .unwrap_or("");
    let mut response = json!({"uid": request["uid"], "allowed": name != "deny-me"});
    if name == "deny-me" {
        response["status"] = json!({"code": 403, "reason": "Forbidden", "message": DENIAL});
    }
    let out = json!({
        "apiVersion": review["apiVersion"].as_str().unwrap_or("admission.k8s.io/v1"),
        "kind": "AdmissionReview",
        "response": response,
    });
    let mut r = Response::new(Full::new(Bytes::from(out.to_string())));
    r.headers_mut()
        .insert("content-type", "application/json".parse().expect("hv"));
    Ok(r)
}

/// Starts the double on a free port in a background runtime, serving `cert`/`key`.
fn webhook_double(cert: &Path, key: &Path) -> WebhookDouble {
    use kube_api_rewriter_proxy::tls;
    let certs = tls::load_certs(cert).expect("cert");
    let key = tls::load_key(key).expect("key");
    let mut cfg = rustls::ServerConfig::builder_with_provider(tls::provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let reviews = Arc::new(Mutex::new(Vec::new()));
    let r2 = Arc::clone(&reviews);
    let port = spawn_double(move |s| {
        let acceptor = acceptor.clone();
        let reviews = Arc::clone(&r2);
        async move {
            let Ok(tls) = acceptor.accept(s).await else { return };
            let svc = hyper::service::service_fn(move |req| webhook_serve(Arc::clone(&reviews), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), svc)
                .await;
        }
    });
    WebhookDouble { port, reviews }
}

/// A CA and a serving certificate for 127.0.0.1 signed by it: (ca.crt, tls.crt, tls.key).
fn webhook_certs(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).expect("dir");
    let script = r#"set -e
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
openssl req -x509 $ec -days 2 -keyout ca.key -out ca.crt -subj /CN=e2e-webhook-ca
openssl req $ec -keyout tls.key -out tls.csr -subj /CN=127.0.0.1
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile ext -out tls.crt
"#;
    let o = Command::new("bash")
        .args(["-c", script])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("openssl runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (dir.join("ca.crt"), dir.join("tls.crt"), dir.join("tls.key"))
}

// ---------------------------------------------------------------- helpers

fn yaml_file(path: &str) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A VirtualMachine manifest with original names; `meta` is extra YAML under `metadata:`
/// (indented by four spaces).
fn vm(ns: &str, name: &str, labels: &[(&str, &str)], meta: &str) -> String {
    let labels = labels
        .iter()
        .map(|(k, v)| format!("\"{k}\": \"{v}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{{labels}}}\n{meta}spec:\n  running: false\n  template:\n    metadata:\n      labels: {{kubevirt.io/domain: {name}}}\n    spec:\n      domain:\n        devices: {{}}\n        resources: {{requests: {{memory: 64Mi}}}}\n"
    )
}

fn keys(v: &Value) -> Vec<String> {
    v.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// An object as kube-apiserver holds it: renamed group/kind, and no `kubevirt.io/` key in
/// labels, annotations, finalizers, ownerReferences or managedFields (of `metadata`; the pod
/// template's labels in `spec` are left as the client wrote them, as Go does).
fn assert_upstream_renamed(v: &Value) {
    let m = &v["metadata"];
    assert_eq!(v["apiVersion"], format!("{INTERNAL}/v1"), "{v}");
    assert_eq!(v["kind"], "InternalVirtualizationVirtualMachine", "{v}");
    for k in keys(&m["labels"]).iter().chain(&keys(&m["annotations"])) {
        assert!(!k.starts_with("kubevirt.io/"), "original key {k} upstream: {m}");
    }
    for f in strings(&m["finalizers"]) {
        assert!(
            !f.starts_with("kubevirt.io/"),
            "original finalizer {f} upstream: {m}"
        );
    }
    for o in m["ownerReferences"].as_array().into_iter().flatten() {
        let av = o["apiVersion"].as_str().unwrap_or("");
        assert!(
            !av.starts_with("kubevirt.io/"),
            "original ownerReference upstream: {o}"
        );
    }
    for mf in m["managedFields"].as_array().into_iter().flatten() {
        assert!(
            !mf["apiVersion"]
                .as_str()
                .unwrap_or("")
                .starts_with("kubevirt.io/"),
            "{mf}"
        );
        assert!(
            !mf["fieldsV1"]["f:metadata"]
                .to_string()
                .contains("f:kubevirt.io/"),
            "original managedFields key upstream: {mf}"
        );
    }
}

/// An object as a client sees it through the proxy: original names only (the client's own
/// `last-applied-configuration` annotation is not looked at, it is opaque text).
fn assert_original(v: &Value) {
    let mut v = v.clone();
    if let Some(a) = v["metadata"]["annotations"].as_object_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    let s = v.to_string();
    for needle in [
        INTERNAL,
        "InternalVirtualization",
        "internalvirtualization",
        RENAMED_PREFIX,
    ] {
        assert!(!s.contains(needle), "{needle} leaks through the proxy: {s}");
    }
}

fn names(list: &Value) -> BTreeSet<String> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_owned))
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

// ---------------------------------------------------------------- the suite

#[test]
fn kubectl_through_proxy() {
    let cp = ControlPlane::up();
    let dir = cp.dir.clone();
    let (ca, crt, key) = webhook_certs(&dir.join("webhook-certs"));
    let double = webhook_double(&crt, &key);
    let wh_port = free_port();
    let p = ProxyProc::start(
        &dir,
        &[
            ("KUBECONFIG", cp.kubeconfig()),
            ("WEBHOOK_ADDRESS", &format!("https://127.0.0.1:{}", double.port)),
            ("WEBHOOK_LISTEN_ADDRESS", "127.0.0.1"),
            ("WEBHOOK_LISTEN_PORT", &wh_port.to_string()),
            ("WEBHOOK_CERT_FILE", crt.to_str().expect("utf-8")),
            ("WEBHOOK_KEY_FILE", key.to_str().expect("utf-8")),
        ],
    );
    let pkc = p.kubeconfig.to_str().expect("utf-8").to_owned();
    let upstream_vm = |ns: &str, name: &str| {
        parse_json(&ok(&cp.kubectl(&[
            "get",
            UP_VM,
            name,
            "-n",
            ns,
            "-o",
            "json",
            "--show-managed-fields",
        ])))
    };
    let proxy_vm =
        |ns: &str, name: &str| parse_json(&ok(&p.kubectl(&["get", "vm", name, "-n", ns, "-o", "json"])));

    let crds = || {
        for f in ["virtualmachines", "virtualmachineinstances", "kubevirt"] {
            ok(&p.kubectl(&[
                "apply",
                "-f",
                &format!("{}/original/{f}.yaml", crd_fixtures().display()),
            ]));
        }
        let up = parse_json(&ok(&cp.kubectl(&["get", "crd", "-o", "json"])));
        let up_names = names(&up);
        for n in &up_names {
            assert!(!n.ends_with(".kubevirt.io"), "original CRD upstream: {n}");
        }
        for f in ["virtualmachines", "virtualmachineinstances", "kubevirt"] {
            let want = yaml_file(&format!("{}/renamed/{f}.yaml", crd_fixtures().display()));
            let name = want["metadata"]["name"].as_str().expect("name");
            assert!(
                name.starts_with("internalvirtualization") && name.ends_with(INTERNAL),
                "{name}"
            );
            let got = up["items"]
                .as_array()
                .expect("items")
                .iter()
                .find(|c| c["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("{name} not upstream; upstream has {up_names:?}"));
            assert_eq!(got["spec"]["group"], want["spec"]["group"], "{name}");
            for k in ["kind", "listKind", "plural", "singular"] {
                assert_eq!(got["spec"]["names"][k], want["spec"]["names"][k], "{name} {k}");
            }
            if got["spec"]["names"]["shortNames"] != want["spec"]["names"]["shortNames"] {
                eprintln!(
                    "note: {name} shortNames {} upstream, {} in renamed/ (KubeVirt's own differ)",
                    got["spec"]["names"]["shortNames"], want["spec"]["names"]["shortNames"]
                );
            }
            // The full schema landed (not trimmed on the way).
            let props = &got["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
            assert!(
                props["properties"].as_object().is_some_and(|m| !m.is_empty()),
                "{name}"
            );
        }
        for crd in [
            "virtualmachines.kubevirt.io",
            "virtualmachineinstances.kubevirt.io",
            "kubevirts.kubevirt.io",
        ] {
            if let Some(err) = wait_crd_established(&p, crd) {
                panic!("kubectl wait --for condition=established crd/{crd} through the proxy: {err}");
            }
        }
        let through = parse_json(&ok(&p.kubectl(&[
            "get",
            "crd",
            "virtualmachines.kubevirt.io",
            "-o",
            "json",
        ])));
        assert_eq!(through["spec"]["group"], "kubevirt.io");
        assert_eq!(through["spec"]["names"]["kind"], "VirtualMachine");
        assert_eq!(through["spec"]["names"]["shortNames"], json!(["vm", "vms"]));
        // Wait until the renamed resource is served.
        p.wait_until(Duration::from_secs(30), |p| {
            p.kubectl(&["get", "vm", "-A"]).status.success()
        });
    };

    let api_resources = || {
        let out = ok(&p.kubectl(&["api-resources"]));
        assert!(
            !out.contains("internalvirtualization") && !out.contains(INTERNAL),
            "{out}"
        );
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some("virtualmachines"))
            .unwrap_or_else(|| panic!("no virtualmachines:\n{out}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            cols,
            [
                "virtualmachines",
                "vm,vms",
                "kubevirt.io/v1",
                "true",
                "VirtualMachine"
            ],
            "{out}"
        );
        let groups = ok(&p.kubectl(&["api-versions"]));
        assert!(groups.lines().any(|l| l == "kubevirt.io/v1"), "{groups}");
        assert!(!groups.contains(INTERNAL), "{groups}");
    };

    // kubectl reads the OpenAPI documents through the proxy, which restores them
    // (tests/openapi.rs checks explain and validation in depth).
    let explain = || {
        // kube-apiserver publishes a new CRD's schema a few seconds after it is established.
        p.wait_until(Duration::from_secs(60), |p| {
            p.kubectl(&["explain", "vm"]).status.success()
        });
        let out = ok(&p.kubectl(&["explain", "vm"]));
        assert!(
            out.contains("VirtualMachine") && !out.contains("InternalVirtualization"),
            "{out}"
        );
    };

    let apply_get = || {
        ok(&cp.kubectl(&["create", "namespace", "kc"]));
        let fin = "  finalizers: [kubevirt.io/virtualMachineControllerFinalize]\n  annotations: {kubevirt.io/note: hello}\n  ownerReferences:\n  - {apiVersion: kubevirt.io/v1, kind: VirtualMachineInstance, name: owner, uid: 6f0c0d3c-4f6e-4a8f-9d6c-000000000001}\n";
        for (name, by, x, meta) in [
            ("vm-a", "x", "a", fin),
            ("vm-b", "x", "b", ""),
            ("vm-c", "y", "c", ""),
        ] {
            let y = vm(
                "kc",
                name,
                &[("kubevirt.io/created-by", by), ("kubevirt.io/x", x)],
                meta,
            );
            ok(&kubectl_in(&pkc, &["apply", "-f", "-"], &y));
        }
        // Table
        let table = ok(&p.kubectl(&["get", "vm", "-n", "kc"]));
        let head: Vec<&str> = table.lines().next().unwrap_or("").split_whitespace().collect();
        assert_eq!(head, ["NAME", "AGE", "STATUS", "READY"], "{table}");
        let rows: Vec<&str> = table
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(rows, ["vm-a", "vm-b", "vm-c"], "{table}");
        // -o yaml
        let y = ok(&p.kubectl(&["get", "vm", "vm-a", "-n", "kc", "-o", "yaml"]));
        for want in [
            "apiVersion: kubevirt.io/v1",
            "kind: VirtualMachine",
            "kubevirt.io/created-by: x",
            "kubevirt.io/note: hello",
            "- kubevirt.io/virtualMachineControllerFinalize",
            "kind: VirtualMachineInstance",
        ] {
            assert!(y.contains(want), "missing {want:?}:\n{y}");
        }
        assert!(
            !y.contains("nternalVirtualization") && !y.contains("internal.virtualization.deckhouse.io/"),
            "{y}"
        );
        let through = proxy_vm("kc", "vm-a");
        assert_original(&through);
        assert_eq!(
            through["metadata"]["ownerReferences"][0]["apiVersion"],
            "kubevirt.io/v1"
        );
        // Upstream: renamed only.
        let up = upstream_vm("kc", "vm-a");
        assert_upstream_renamed(&up);
        let m = &up["metadata"];
        assert_eq!(m["labels"][format!("{RENAMED_PREFIX}created-by")], "x", "{m}");
        assert_eq!(m["annotations"][format!("{RENAMED_PREFIX}note")], "hello", "{m}");
        assert_eq!(
            m["finalizers"],
            json!([format!("{RENAMED_PREFIX}virtualMachineControllerFinalize")]),
            "{m}"
        );
        assert_eq!(
            m["ownerReferences"][0]["apiVersion"],
            format!("{INTERNAL}/v1"),
            "{m}"
        );
        assert_eq!(
            m["ownerReferences"][0]["kind"], "InternalVirtualizationVirtualMachineInstance",
            "{m}"
        );
        // Client-side apply again with a change: kubectl's 3-way merge patch.
        let y = vm(
            "kc",
            "vm-b",
            &[
                ("kubevirt.io/created-by", "x"),
                ("kubevirt.io/x", "b"),
                ("kubevirt.io/applied", "twice"),
            ],
            "",
        );
        let out = ok(&kubectl_in(&pkc, &["apply", "-f", "-"], &y));
        assert!(
            out.contains("virtualmachine.kubevirt.io/vm-b configured"),
            "{out}"
        );
        let up = upstream_vm("kc", "vm-b");
        assert_upstream_renamed(&up);
        assert_eq!(
            up["metadata"]["labels"][format!("{RENAMED_PREFIX}applied")],
            "twice"
        );
    };

    let apply_server_side = || {
        let y = vm("kc", "vm-ssa", &[("kubevirt.io/created-by", "ssa")], "");
        let out = ok(&kubectl_in(
            &pkc,
            &["apply", "--server-side", "--field-manager=e2e", "-f", "-"],
            &y,
        ));
        assert!(
            out.contains("virtualmachine.kubevirt.io/vm-ssa serverside-applied"),
            "{out}"
        );
        let y = vm(
            "kc",
            "vm-ssa",
            &[("kubevirt.io/created-by", "ssa"), ("kubevirt.io/second", "yes")],
            "",
        );
        ok(&kubectl_in(
            &pkc,
            &["apply", "--server-side", "--field-manager=e2e", "-f", "-"],
            &y,
        ));
        let through = parse_json(&ok(&p.kubectl(&[
            "get",
            "vm",
            "vm-ssa",
            "-n",
            "kc",
            "-o",
            "json",
            "--show-managed-fields",
        ])));
        assert_original(&through);
        let mf = through["metadata"]["managedFields"].to_string();
        assert!(
            mf.contains("f:kubevirt.io/second") && mf.contains("\"e2e\""),
            "{mf}"
        );
        let up = upstream_vm("kc", "vm-ssa");
        assert_upstream_renamed(&up);
        let mf = up["metadata"]["managedFields"].to_string();
        assert!(mf.contains(&format!("f:{RENAMED_PREFIX}second")), "{mf}");
        // A conflict with another manager comes back as a Status naming original names.
        let y = vm("kc", "vm-ssa", &[("kubevirt.io/created-by", "other")], "");
        let err = fails(&kubectl_in(
            &pkc,
            &["apply", "--server-side", "--field-manager=other", "-f", "-"],
            &y,
        ));
        assert!(
            err.contains("Apply failed with 1 conflict") && err.contains("created-by"),
            "{err}"
        );
        // The same conflict as raw HTTP: a 409 Status for the original resource.
        let body = r#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"vm-ssa","namespace":"kc","labels":{"kubevirt.io/created-by":"other"}}}"#;
        let s = ok(&curl(&[
            "-sS",
            "-w",
            "\n%{http_code}",
            "-X",
            "PATCH",
            "-H",
            "Content-Type: application/apply-patch+yaml",
            "--data-binary",
            body,
            &p.url("/apis/kubevirt.io/v1/namespaces/kc/virtualmachines/vm-ssa?fieldManager=other"),
        ]));
        let (st, code) = s.rsplit_once('\n').expect("code");
        let st = parse_json(st);
        assert_eq!(code, "409", "{st}");
        assert_eq!(st["reason"], "Conflict", "{st}");
        let field = st["details"]["causes"][0]["field"].as_str().unwrap_or("");
        assert!(!err.contains(INTERNAL), "{err}");
        assert_eq!(field, ".metadata.labels.kubevirt.io/created-by", "{st}");
    };

    let patch = || {
        ok(&p.kubectl(&[
            "patch",
            "vm",
            "vm-c",
            "-n",
            "kc",
            "--type=json",
            "-p",
            r#"[{"op":"add","path":"/metadata/labels/kubevirt.io~1json","value":"yes"},{"op":"add","path":"/metadata/finalizers","value":["kubevirt.io/json-finalizer"]}]"#,
        ]));
        ok(&p.kubectl(&[
            "patch",
            "vm",
            "vm-c",
            "-n",
            "kc",
            "--type=merge",
            "-p",
            r#"{"metadata":{"annotations":{"kubevirt.io/merged":"yes"},"labels":{"kubevirt.io/x":null}}}"#,
        ]));
        let through = proxy_vm("kc", "vm-c");
        assert_original(&through);
        let l = &through["metadata"]["labels"];
        assert_eq!(l["kubevirt.io/json"], "yes", "{l}");
        assert!(l.get("kubevirt.io/x").is_none(), "{l}");
        assert_eq!(through["metadata"]["annotations"]["kubevirt.io/merged"], "yes");
        assert_eq!(
            through["metadata"]["finalizers"],
            json!(["kubevirt.io/json-finalizer"])
        );
        let up = upstream_vm("kc", "vm-c");
        assert_upstream_renamed(&up);
        let m = &up["metadata"];
        assert_eq!(m["labels"][format!("{RENAMED_PREFIX}json")], "yes", "{m}");
        assert!(m["labels"].get(format!("{RENAMED_PREFIX}x")).is_none(), "{m}");
        assert_eq!(m["annotations"][format!("{RENAMED_PREFIX}merged")], "yes", "{m}");
        assert_eq!(
            m["finalizers"],
            json!([format!("{RENAMED_PREFIX}json-finalizer")]),
            "{m}"
        );
        // Strategic merge: custom resources do not take it; kubectl gets the server's Status.
        let err = fails(&p.kubectl(&[
            "patch",
            "vm",
            "vm-c",
            "-n",
            "kc",
            "--type=strategic",
            "-p",
            r#"{"metadata":{"labels":{"kubevirt.io/smp":"no"}}}"#,
        ]));
        assert!(
            err.contains("UnsupportedMediaType") || err.contains("unknown format"),
            "not a Status from the server: {err}"
        );
        assert!(!err.contains(INTERNAL), "{err}");
    };

    let label_annotate = || {
        let out = ok(&p.kubectl(&["label", "vm", "vm-b", "-n", "kc", "kubevirt.io/labeled=yes"]));
        assert!(out.contains("virtualmachine.kubevirt.io/vm-b labeled"), "{out}");
        let out = ok(&p.kubectl(&["annotate", "vm", "vm-b", "-n", "kc", "kubevirt.io/annotated=yes"]));
        assert!(out.contains("virtualmachine.kubevirt.io/vm-b annotated"), "{out}");
        ok(&p.kubectl(&["label", "vm", "vm-b", "-n", "kc", "kubevirt.io/applied-"]));
        let through = proxy_vm("kc", "vm-b");
        assert_original(&through);
        assert_eq!(through["metadata"]["labels"]["kubevirt.io/labeled"], "yes");
        assert!(through["metadata"]["labels"].get("kubevirt.io/applied").is_none());
        assert_eq!(through["metadata"]["annotations"]["kubevirt.io/annotated"], "yes");
        let up = upstream_vm("kc", "vm-b");
        assert_upstream_renamed(&up);
        let m = &up["metadata"];
        assert_eq!(m["labels"][format!("{RENAMED_PREFIX}labeled")], "yes", "{m}");
        assert!(
            m["labels"].get(format!("{RENAMED_PREFIX}applied")).is_none(),
            "{m}"
        );
        assert_eq!(
            m["annotations"][format!("{RENAMED_PREFIX}annotated")],
            "yes",
            "{m}"
        );
    };

    let selectors = || {
        // vm-a {created-by: x, x: a}, vm-b {created-by: x, x: b}, vm-c {created-by: y} (x removed),
        // vm-ssa {created-by: ssa}.
        for (sel, want) in [
            ("kubevirt.io/created-by=x", set(&["vm-a", "vm-b"])),
            ("kubevirt.io/x in (a,b)", set(&["vm-a", "vm-b"])),
            ("kubevirt.io/x notin (a)", set(&["vm-b", "vm-c", "vm-ssa"])),
            ("kubevirt.io/x!=a", set(&["vm-b", "vm-c", "vm-ssa"])),
            ("kubevirt.io/x", set(&["vm-a", "vm-b"])),
            ("!kubevirt.io/x", set(&["vm-c", "vm-ssa"])),
            ("kubevirt.io/created-by=x,kubevirt.io/x!=a", set(&["vm-b"])),
        ] {
            let list = parse_json(&ok(
                &p.kubectl(&["get", "vm", "-n", "kc", "-l", sel, "-o", "json"])
            ));
            assert_eq!(names(&list), want, "-l {sel}");
            assert_original(&list);
        }
        // The same selector in renamed form, directly, agrees.
        let up = parse_json(&ok(&cp.kubectl(&[
            "get",
            UP_VM,
            "-n",
            "kc",
            "-l",
            &format!("{RENAMED_PREFIX}x in (a,b)"),
            "-o",
            "json",
        ])));
        assert_eq!(names(&up), set(&["vm-a", "vm-b"]));
        for item in up["items"].as_array().into_iter().flatten() {
            assert_upstream_renamed(item);
        }
        // Table output with a selector (kubectl's default Accept).
        let t = ok(&p.kubectl(&["get", "vms", "-n", "kc", "-l", "kubevirt.io/created-by=y"]));
        assert!(
            t.starts_with("NAME") && t.contains("vm-c") && !t.contains("vm-a"),
            "{t}"
        );
    };

    let delete = || {
        // vm-a has a finalizer: delete marks it, upstream keeps the renamed finalizer.
        let out = ok(&p.kubectl(&["delete", "vm", "vm-a", "-n", "kc", "--wait=false"]));
        assert!(
            out.contains("virtualmachine.kubevirt.io \"vm-a\" deleted"),
            "{out}"
        );
        let up = upstream_vm("kc", "vm-a");
        assert_upstream_renamed(&up);
        assert!(up["metadata"]["deletionTimestamp"].is_string(), "{up}");
        let through = proxy_vm("kc", "vm-a");
        assert_eq!(
            through["metadata"]["finalizers"],
            json!(["kubevirt.io/virtualMachineControllerFinalize"])
        );
        ok(&p.kubectl(&[
            "patch",
            "vm",
            "vm-a",
            "-n",
            "kc",
            "--type=json",
            "-p",
            r#"[{"op":"test","path":"/metadata/finalizers/0","value":"kubevirt.io/virtualMachineControllerFinalize"},{"op":"remove","path":"/metadata/finalizers"}]"#,
        ]));
        let err = fails(&p.kubectl(&["get", "vm", "vm-a", "-n", "kc"]));
        assert!(
            err.contains("NotFound") && err.contains("virtualmachines.kubevirt.io \"vm-a\" not found"),
            "{err}"
        );
        assert!(!cp.kubectl(&["get", UP_VM, "vm-a", "-n", "kc"]).status.success());
        // A plain delete (waits until gone).
        ok(&p.kubectl(&["delete", "vm", "vm-ssa", "-n", "kc", "--timeout=30s"]));
        let up = parse_json(&ok(&cp.kubectl(&["get", UP_VM, "-n", "kc", "-o", "json"])));
        assert_eq!(names(&up), set(&["vm-b", "vm-c"]));
        let err = fails(&p.kubectl(&["delete", "vm", "nope", "-n", "kc"]));
        assert!(
            err.contains("virtualmachines.kubevirt.io \"nope\" not found"),
            "{err}"
        );
    };

    let get_watch = || {
        ok(&cp.kubectl(&["create", "namespace", "kcw"]));
        let mut w = Command::new(kubectl_bin())
            .env("KUBECONFIG", &pkc)
            .args(["get", "vm", "-n", "kcw", "-w", "--output-watch-events"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl");
        let out = w.stdout.take().expect("stdout");
        let rx = line_channel(out);
        // kubectl prints nothing until the first event: give it time to open the watch.
        std::thread::sleep(Duration::from_millis(1500));
        ok(&kubectl_in(
            &pkc,
            &["apply", "-f", "-"],
            &vm("kcw", "w1", &[("kubevirt.io/created-by", "w")], ""),
        ));
        ok(&p.kubectl(&["label", "vm", "w1", "-n", "kcw", "kubevirt.io/step=2"]));
        ok(&p.kubectl(&["delete", "vm", "w1", "-n", "kcw"]));
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
            events.first() == Some(&"ADDED")
                && events.contains(&"MODIFIED")
                && events.last() == Some(&"DELETED"),
            "{text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.starts_with("EVENT") && !text.contains("nternalVirtualization"),
            "{text}"
        );
        // -o json watch: the objects themselves.
        let mut w = Command::new(kubectl_bin())
            .env("KUBECONFIG", &pkc)
            .args([
                "get",
                "vm",
                "-n",
                "kc",
                "-w",
                "-o",
                "json",
                "--output-watch-events",
            ])
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
    };

    let rbac = || {
        ok(&cp.kubectl(&["create", "namespace", "rbac"]));
        ok(&kubectl_in(
            &pkc,
            &["apply", "-f", "-"],
            &vm("rbac", "r1", &[("kubevirt.io/created-by", "r")], ""),
        ));
        let manifests = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: vm-reader, namespace: rbac}\nrules:\n- apiGroups: [kubevirt.io]\n  resources: [virtualmachines]\n  verbs: [get, list]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: vm-reader, namespace: rbac}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: vm-reader}\nsubjects:\n- {apiGroup: rbac.authorization.k8s.io, kind: User, name: user1}\n";
        ok(&kubectl_in(&pkc, &["apply", "-f", "-"], manifests));
        let up = parse_json(&ok(&cp.kubectl(&[
            "get",
            "role",
            "vm-reader",
            "-n",
            "rbac",
            "-o",
            "json",
        ])));
        assert_eq!(
            up["rules"],
            json!([{"apiGroups": [INTERNAL], "resources": ["internalvirtualizationvirtualmachines"], "verbs": ["get", "list"]}]),
            "{up}"
        );
        let through = parse_json(&ok(&p.kubectl(&[
            "get",
            "role",
            "vm-reader",
            "-n",
            "rbac",
            "-o",
            "json",
        ])));
        assert_eq!(
            through["rules"][0]["apiGroups"],
            json!(["kubevirt.io"]),
            "{through}"
        );
        assert_eq!(
            through["rules"][0]["resources"],
            json!(["virtualmachines"]),
            "{through}"
        );
        let rb = parse_json(&ok(&cp.kubectl(&[
            "get",
            "rolebinding",
            "vm-reader",
            "-n",
            "rbac",
            "-o",
            "json",
        ])));
        assert_eq!(rb["subjects"][0]["name"], "user1");
        assert_eq!(rb["roleRef"]["name"], "vm-reader");

        // Impersonation through the proxy (admin credentials + Impersonate-User).
        let out = ok(&p.kubectl(&["get", "vm", "-n", "rbac", "--as", "user1", "-o", "name"]));
        assert_eq!(out.trim(), "virtualmachine.kubevirt.io/r1");
        let err = fails(&p.kubectl(&["get", "pods", "-n", "rbac", "--as", "user1"]));
        assert!(
            err.contains("Forbidden") && err.contains("\"user1\" cannot list resource \"pods\""),
            "{err}"
        );
        let err = fails(&p.kubectl(&["get", "vm", "-n", "kc", "--as", "user1"]));
        assert!(
            err.contains("Forbidden")
                && err.contains("cannot list resource \"virtualmachines\" in API group \"kubevirt.io\""),
            "{err}"
        );
        assert!(!err.contains(INTERNAL), "{err}");
        let err = fails(&p.kubectl(&["delete", "vm", "r1", "-n", "rbac", "--as", "user1"]));
        assert!(err.contains("Forbidden"), "{err}");

        // user1's own token through the proxy.
        let bearer = format!("Authorization: Bearer {}", cp.get("USER1_TOKEN"));
        let get = |path: &str| {
            let s = ok(&curl(&[
                "-sS",
                "-w",
                "\n%{http_code}",
                "-H",
                &bearer,
                &p.url(path),
            ]));
            let (body, code) = s.rsplit_once('\n').expect("code");
            (code.to_owned(), parse_json(body))
        };
        let (code, list) = get("/apis/kubevirt.io/v1/namespaces/rbac/virtualmachines");
        assert_eq!(code, "200", "{list}");
        assert_eq!(list["kind"], "VirtualMachineList", "{list}");
        assert_eq!(names(&list), set(&["r1"]));
        assert_original(&list);
        let (code, one) = get("/apis/kubevirt.io/v1/namespaces/rbac/virtualmachines/r1");
        assert_eq!(
            (code.as_str(), &one["kind"]),
            ("200", &json!("VirtualMachine")),
            "{one}"
        );
        for path in [
            "/api/v1/namespaces/rbac/pods",
            "/apis/kubevirt.io/v1/namespaces/kc/virtualmachines",
            "/apis/kubevirt.io/v1/virtualmachines",
            "/apis/kubevirt.io/v1/namespaces/rbac/virtualmachineinstances",
        ] {
            let (code, st) = get(path);
            assert_eq!(code, "403", "{path}: {st}");
            assert_eq!(st["reason"], "Forbidden", "{st}");
            assert!(!st.to_string().contains(INTERNAL), "{st}");
        }
        let (code, st) = get("/apis/kubevirt.io/v1/namespaces/kc/virtualmachines");
        assert!(
            code == "403"
                && st["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("in API group \"kubevirt.io\"")),
            "{st}"
        );

        // The access review kubectl auth can-i sends (JSON), impersonated and with user1's token.
        let review = |verb: &str, resource: &str, ns: &str, auth: &[&str]| {
            let body = json!({
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"namespace": ns, "verb": verb, "group": "kubevirt.io", "resource": resource}},
            })
            .to_string();
            let mut args = vec![
                "-sS",
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                &body,
            ];
            args.extend_from_slice(auth);
            let url = p.url("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews");
            args.push(&url);
            let v = parse_json(&ok(&curl(&args)));
            assert_eq!(v["kind"], "SelfSubjectAccessReview", "{v}");
            assert_eq!(v["spec"]["resourceAttributes"]["group"], "kubevirt.io", "{v}");
            assert_eq!(v["spec"]["resourceAttributes"]["resource"], resource, "{v}");
            v["status"]["allowed"] == json!(true)
        };
        for auth in [vec!["-H", "Impersonate-User: user1"], vec!["-H", bearer.as_str()]] {
            assert!(review("list", "virtualmachines", "rbac", &auth), "{auth:?}");
            assert!(review("get", "virtualmachines", "rbac", &auth), "{auth:?}");
            assert!(!review("delete", "virtualmachines", "rbac", &auth), "{auth:?}");
            assert!(!review("list", "virtualmachines", "kc", &auth), "{auth:?}");
            assert!(
                !review("list", "virtualmachineinstances", "rbac", &auth),
                "{auth:?}"
            );
        }

        // kubectl auth can-i itself.
        let can = |verb: &str, what: &str, ns: &str| {
            let o = p.kubectl(&["auth", "can-i", verb, what, "--as", "user1", "-n", ns]);
            (
                String::from_utf8_lossy(&o.stdout).trim().to_owned(),
                String::from_utf8_lossy(&o.stderr).trim().to_owned(),
            )
        };
        let (yes, err) = can("list", "virtualmachines.kubevirt.io", "rbac");
        // kubectl sends the review as protobuf: its resourceAttributes are renamed on the wire.
        assert_eq!(yes, "yes", "{err}");
        assert_eq!(can("get", "vm", "rbac").0, "yes");
        assert_eq!(can("delete", "virtualmachines.kubevirt.io", "rbac").0, "no");
        assert_eq!(can("list", "virtualmachines.kubevirt.io", "kc").0, "no");
        assert_eq!(can("list", "pods", "rbac").0, "no");
    };

    let admission = || {
        ok(&cp.kubectl(&["create", "namespace", "adm"]));
        ok(&cp.kubectl(&["label", "namespace", "adm", "e2e-admission=on"]));
        let ca_b64 = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(std::fs::read(&ca).expect("ca"))
        };
        let vwc = format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {{name: e2e-vm-validate}}\nwebhooks:\n- name: vm-validate.e2e.example.com\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  failurePolicy: Fail\n  timeoutSeconds: 10\n  clientConfig:\n    url: https://127.0.0.1:{wh_port}/virtualmachines-validate\n    caBundle: {ca_b64}\n  rules:\n  - apiGroups: [kubevirt.io]\n    apiVersions: [v1]\n    operations: [CREATE]\n    resources: [virtualmachines]\n  namespaceSelector:\n    matchLabels: {{e2e-admission: \"on\"}}\n"
        );
        ok(&kubectl_in(&pkc, &["apply", "-f", "-"], &vwc));
        let up = parse_json(&ok(&cp.kubectl(&[
            "get",
            "validatingwebhookconfiguration",
            "e2e-vm-validate",
            "-o",
            "json",
        ])));
        let rule = &up["webhooks"][0]["rules"][0];
        assert_eq!(rule["apiGroups"], json!([INTERNAL]), "{up}");
        assert_eq!(
            rule["resources"],
            json!(["internalvirtualizationvirtualmachines"]),
            "{up}"
        );
        assert_eq!(
            up["webhooks"][0]["clientConfig"]["url"],
            format!("https://127.0.0.1:{wh_port}/virtualmachines-validate")
        );
        let through = parse_json(&ok(&p.kubectl(&[
            "get",
            "validatingwebhookconfiguration",
            "e2e-vm-validate",
            "-o",
            "json",
        ])));
        assert_eq!(
            through["webhooks"][0]["rules"][0]["apiGroups"],
            json!(["kubevirt.io"]),
            "{through}"
        );
        assert_eq!(
            through["webhooks"][0]["rules"][0]["resources"],
            json!(["virtualmachines"]),
            "{through}"
        );

        // kube-apiserver picks the configuration up within a moment: create VMs until the
        // double has seen one.
        let t = Instant::now();
        let mut n = 0;
        while double.reviews().is_empty() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "kube-apiserver never called the webhook; proxy log:\n{}",
                p.logs()
            );
            n += 1;
            let y = vm(
                "adm",
                &format!("allow-{n}"),
                &[("kubevirt.io/created-by", "adm")],
                "",
            );
            ok(&kubectl_in(&pkc, &["apply", "-f", "-"], &y));
            std::thread::sleep(Duration::from_millis(300));
        }
        let (path, review) = double.reviews().last().cloned().expect("a review");
        assert_eq!(path, "/virtualmachines-validate");
        let req = &review["request"];
        assert_eq!(
            req["kind"],
            json!({"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachine"}),
            "{review}"
        );
        assert_eq!(
            req["resource"],
            json!({"group": "kubevirt.io", "version": "v1", "resource": "virtualmachines"}),
            "{review}"
        );
        assert_eq!(req["operation"], "CREATE");
        assert_eq!(req["object"]["apiVersion"], "kubevirt.io/v1", "{review}");
        assert_eq!(req["object"]["kind"], "VirtualMachine", "{review}");
        assert_eq!(
            req["object"]["metadata"]["labels"]["kubevirt.io/created-by"], "adm",
            "{review}"
        );
        assert_original(&review);

        // A denial reaches kubectl with the double's message.
        let err = fails(&kubectl_in(
            &pkc,
            &["apply", "-f", "-"],
            &vm("adm", "deny-me", &[("kubevirt.io/created-by", "adm")], ""),
        ));
        assert!(
            err.contains("admission webhook \"vm-validate.e2e.example.com\" denied the request")
                && err.contains(DENIAL),
            "{err}"
        );
        assert!(
            !cp.kubectl(&["get", UP_VM, "deny-me", "-n", "adm"])
                .status
                .success()
        );
        let last = double.reviews().last().cloned().expect("a review").1;
        assert_eq!(last["request"]["object"]["metadata"]["name"], "deny-me");
        assert_eq!(last["request"]["kind"]["group"], "kubevirt.io");
        ok(&p.kubectl(&["delete", "validatingwebhookconfiguration", "e2e-vm-validate"]));
    };

    let protobuf_create = || {
        // kubectl sends protobuf bodies when it creates built-in objects with its typed client.
        ok(&p.kubectl(&["create", "namespace", "pb"]));
        ok(&cp.kubectl(&["get", "namespace", "pb"]));
        // The JSON path for the same object works.
        let out = ok(&kubectl_in(
            &pkc,
            &["apply", "-f", "-"],
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: pb-json, labels: {kubevirt.io/ns: \"yes\"}}\n",
        ));
        assert!(out.contains("namespace/pb-json created"), "{out}");
        let up = parse_json(&ok(&cp.kubectl(&["get", "namespace", "pb-json", "-o", "json"])));
        assert!(up["metadata"]["labels"].get("kubevirt.io/ns").is_none(), "{up}");
        let through = parse_json(&ok(&p.kubectl(&["get", "namespace", "pb-json", "-o", "json"])));
        assert_eq!(
            through["metadata"]["labels"]["kubevirt.io/ns"], "yes",
            "{through}"
        );
    };

    let watch_large_event = || {
        // A single large watch event must reach the client while the watch is open, without
        // waiting for the next event.
        let ns = "big-watch";
        ok(&cp.kubectl(&["create", "namespace", ns]));
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
        let f = dir.join("big.txt");
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
    };

    run_cases(&[
        ("crds_renamed_and_established", &crds),
        ("api_resources", &api_resources),
        ("explain", &explain),
        ("apply_get_table_yaml", &apply_get),
        ("apply_server_side", &apply_server_side),
        ("patch_json_merge_strategic", &patch),
        ("label_annotate", &label_annotate),
        ("label_selectors", &selectors),
        ("delete_with_finalizer", &delete),
        ("get_watch", &get_watch),
        ("rbac_role_for_user1", &rbac),
        ("admission_webhook", &admission),
        ("protobuf_create_core", &protobuf_create),
        ("watch_large_event", &watch_large_event),
    ]);
}
