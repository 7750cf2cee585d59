//! OpenAPI through the proxy on the real kube-apiserver with KubeVirt's full-schema CRDs
//! (applied through the proxy): `kubectl explain` and `kubectl apply --validate=strict` work
//! for the original kinds through the proxy exactly as they do directly for the renamed kinds,
//! the ETag carries the rules version, and `/openapi/v3`'s index and the group-version documents
//! it points at are restored. And `RULES_PATH` swapped under a running proxy the way a ConfigMap
//! update does it: new rules without a restart, an invalid file keeps the old ones.
//!
//! The cases share one control plane and one proxy, with the CRDs applied (and their schemas
//! published) in the setup, and run one after the other
//! (`kube_api_rewriter_testkit::Suite`); any one runs alone by name
//! (`cargo test -p kube-api-rewriter-proxy --test openapi -- NAME`).

use std::process::Output;
use std::time::{Duration, Instant};

use kube_api_rewriter_testkit::*;

const INTERNAL: &str = "internal.virtualization.deckhouse.io";
const UP_VM: &str = "internalvirtualizationvirtualmachines";

/// A VirtualMachine; `extra` is one more line under `spec:` (two spaces in).
fn vm(api_version: &str, kind: &str, name: &str, extra: &str) -> String {
    format!(
        "apiVersion: {api_version}\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n{extra}  running: false\n  template:\n    spec:\n      domain:\n        devices: {{}}\n        resources: {{requests: {{memory: 64Mi}}}}\n"
    )
}

/// Retries `f` (kube-apiserver publishes a new CRD's schema in /openapi/v2 a few seconds after
/// the CRD is established) until it succeeds; the last output on failure.
fn eventually(limit: Duration, mut f: impl FnMut() -> Output) -> Output {
    let t = Instant::now();
    loop {
        let o = f();
        if o.status.success() || t.elapsed() > limit {
            return o;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// How long kube-apiserver may take to publish a new CRD's schema.
const LIMIT: Duration = Duration::from_secs(60);

fn no_internal_names(s: &str) {
    for needle in [INTERNAL, "InternalVirtualization", "internalvirtualization"] {
        assert!(!s.contains(needle), "{needle} leaks through the proxy:\n{s}");
    }
}

fn main() -> std::process::ExitCode {
    Suite::new(setup)
        .case("crds", crds)
        .case("explain", explain)
        .case("validate", validate)
        .case("documents", documents)
        .case("reload", reload)
        .on_failure(|e: &Env| eprintln!("proxy log:\n{}", e.p.logs()))
        .run()
}

/// What every case of this file shares.
struct Env {
    /// The proxy; declared first so it stops before the control plane.
    p: ProxyProc,
    cp: ControlPlane,
    /// The proxy's kubeconfig.
    pkc: String,
    /// kube-apiserver's URL, its CA file and the admin's `Authorization` header.
    direct: String,
    ca: String,
    admin: String,
}

/// A control plane and a proxy in front of it, with KubeVirt's CRDs applied through the proxy
/// (the `crds` case, which every other case needs) and their schemas published.
fn setup() -> Env {
    let cp = ControlPlane::up();
    let p = ProxyProc::start(&cp.dir, &[("KUBECONFIG", cp.kubeconfig())]);
    let e = Env {
        pkc: p.kubeconfig.to_str().expect("utf-8").to_owned(),
        direct: cp.get("KUBE_APISERVER_URL").to_owned(),
        ca: cp.get("KUBE_CA_FILE").to_owned(),
        admin: format!("Authorization: Bearer {}", cp.get("ADMIN_TOKEN")),
        p,
        cp,
    };
    crds(&e);
    // The schema of a new CRD shows in /openapi/v3 and /openapi/v2 a few seconds after it is
    // established; `documents` reads both without waiting.
    for output in ["plaintext", "plaintext-openapiv2"] {
        ok(&eventually(LIMIT, || {
            e.p.kubectl(&["explain", "vm", "--output", output])
        }));
    }
    e
}

fn crds(e: &Env) {
    for f in ["virtualmachines", "virtualmachineinstances", "kubevirt"] {
        ok(&e.p.kubectl(&[
            "apply",
            "-f",
            &format!("{}/original/{f}.yaml", crd_fixtures().display()),
        ]));
    }
    for crd in [
        "virtualmachines.kubevirt.io",
        "virtualmachineinstances.kubevirt.io",
        "kubevirts.kubevirt.io",
    ] {
        if let Some(err) = wait_crd_established(&e.p, crd) {
            panic!("crd/{crd} not established: {err}");
        }
    }
}

fn explain(e: &Env) {
    for (what, field) in [("", "VirtualMachine"), (".spec.template", "template")] {
        // Directly, for the renamed kind: the baseline.
        let o = eventually(LIMIT, || e.cp.kubectl(&["explain", &format!("{UP_VM}{what}")]));
        let up = ok(&o);
        assert!(up.contains("InternalVirtualizationVirtualMachine"), "{up}");
        // Through the proxy, for the original kind.
        let o = eventually(LIMIT, || e.p.kubectl(&["explain", &format!("vm{what}")]));
        let out = ok(&o);
        assert!(
            out.contains("VirtualMachine") && out.contains("kubevirt.io"),
            "{out}"
        );
        assert!(out.contains(field), "{out}");
        no_internal_names(&out);
    }
    let out = ok(&e.p.kubectl(&["explain", "vm.spec.template.spec.domain"]));
    assert!(out.contains("devices"), "{out}");
    no_internal_names(&out);
}

fn validate(e: &Env) {
    let apply = |kc: &str, y: &str| {
        kubectl_in(
            kc,
            &["apply", "--validate=strict", "--dry-run=server", "-f", "-"],
            y,
        )
    };
    let up_av = format!("{INTERNAL}/v1");
    let up_kind = "InternalVirtualizationVirtualMachine";
    // Directly: an unknown spec field is rejected, a valid object accepted.
    let o = eventually(LIMIT, || {
        apply(e.cp.kubeconfig(), &vm(&up_av, up_kind, "direct-ok", ""))
    });
    ok(&o);
    let err = fails(&apply(
        e.cp.kubeconfig(),
        &vm(&up_av, up_kind, "direct-bad", "  bogusField: 1\n"),
    ));
    assert!(err.contains("bogusField"), "{err}");
    // Through the proxy, with the original names.
    let o = eventually(LIMIT, || {
        apply(&e.pkc, &vm("kubevirt.io/v1", "VirtualMachine", "proxy-ok", ""))
    });
    let out = ok(&o);
    assert!(out.contains("proxy-ok"), "{out}");
    let err = fails(&apply(
        &e.pkc,
        &vm(
            "kubevirt.io/v1",
            "VirtualMachine",
            "proxy-bad",
            "  bogusField: 1\n",
        ),
    ));
    assert!(err.contains("bogusField"), "{err}");
    assert!(err.contains("VirtualMachine"), "{err}");
    no_internal_names(&err);
}

fn documents(e: &Env) {
    let direct = &e.direct;
    let headers = |url: &str, extra: &[&str]| {
        let mut args = vec![
            "-sS",
            "-o",
            "/dev/null",
            "-D",
            "-",
            "--cacert",
            &e.ca,
            "-H",
            &e.admin,
        ];
        args.extend_from_slice(extra);
        args.push(url);
        ok(&curl(&args))
    };
    let etag_of = |h: &str| {
        h.lines()
            .find_map(|l| {
                l.split_once(':')
                    .filter(|(k, _)| k.eq_ignore_ascii_case("etag"))
                    .map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_else(|| panic!("no ETag:\n{h}"))
    };
    let up = etag_of(&headers(&format!("{direct}/openapi/v2"), &[]));
    let h = headers(&e.p.url("/openapi/v2"), &[]);
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    let ours = etag_of(&h);
    assert!(
        ours.starts_with(up.trim_end_matches('"')) && ours.contains("-r") && ours != up,
        "upstream {up}, proxy {ours}"
    );
    // The client's cached copy is still good: 304 with our ETag.
    let inm = format!("If-None-Match: {ours}");
    let h = headers(&e.p.url("/openapi/v2"), &["-H", &inm]);
    assert!(h.starts_with("HTTP/1.1 304"), "{h}");
    assert_eq!(etag_of(&h), ours);
    // Upstream's own ETag (no rules version) is not ours: the whole document again.
    let inm = format!("If-None-Match: {up}");
    let h = headers(&e.p.url("/openapi/v2"), &["-H", &inm]);
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    // JSON: original names only, the rest as kube-apiserver sent it.
    let body = ok(&curl(&["-sS", &e.p.url("/openapi/v2")]));
    let doc = parse_json(&body);
    let defs = doc["definitions"].as_object().expect("definitions");
    let def = &defs["io.kubevirt.v1.VirtualMachine"];
    assert_eq!(
        def["x-kubernetes-group-version-kind"][0]["group"], "kubevirt.io",
        "{def}"
    );
    assert!(defs.contains_key("io.k8s.api.core.v1.Pod"));
    assert!(
        doc["paths"]
            .as_object()
            .expect("paths")
            .contains_key("/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}")
    );
    for leak in [
        "io.deckhouse.virtualization.internal",
        "\"group\":\"internal.virtualization",
    ] {
        assert!(!body.contains(leak), "{leak}");
    }
    // /openapi/v3: the index names the original group-versions, and the document a client
    // follows from it (its serverRelativeURL, hash included) is restored.
    let get = |url: &str| ok(&curl(&["-sS", "--fail", "--cacert", &e.ca, "-H", &e.admin, url]));
    let up_index = parse_json(&get(&format!("{direct}/openapi/v3")));
    assert!(
        up_index["paths"].get(format!("apis/{INTERNAL}/v1")).is_some(),
        "{up_index}"
    );
    let index = parse_json(&get(&e.p.url("/openapi/v3")));
    assert!(
        index["paths"].get(format!("apis/{INTERNAL}/v1")).is_none(),
        "{index}"
    );
    let url = index["paths"]["apis/kubevirt.io/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap_or_else(|| panic!("no apis/kubevirt.io/v1 in the v3 index: {index}"))
        .to_owned();
    assert!(url.starts_with("/openapi/v3/apis/kubevirt.io/v1"), "{url}");
    let text = get(&e.p.url(&url));
    // Schema names, group-version-kinds and paths are restored; operation ids, tags and
    // descriptions keep the server's words, as in /openapi/v2.
    for leak in [
        "io.deckhouse.virtualization.internal",
        "\"group\":\"internal.virtualization",
        "\"/apis/internal.virtualization",
        "\"kind\":\"InternalVirtualization",
    ] {
        assert!(!text.contains(leak), "{leak} in {url}");
    }
    let v3 = parse_json(&text);
    let def = &v3["components"]["schemas"]["io.kubevirt.v1.VirtualMachine"];
    assert_eq!(
        def["x-kubernetes-group-version-kind"][0]["group"], "kubevirt.io",
        "{def}"
    );
    assert_eq!(
        def["x-kubernetes-group-version-kind"][0]["kind"], "VirtualMachine",
        "{def}"
    );
    assert!(
        v3["paths"]
            .as_object()
            .expect("paths")
            .contains_key("/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}"),
        "{}",
        v3["paths"]
    );
}

// RULES_PATH as a ConfigMap mounts it: DIR/rules.yaml -> ..data/rules.yaml, ..data -> ..vN.
fn reload(e: &Env) {
    let cm = e.cp.dir.join("configmap");
    let kubevirt = std::fs::read_to_string(workspace().join("rules/kubevirt.yaml")).expect("rules");
    let swap = |n: u32, text: &str| {
        let v = cm.join(format!("..v{n}"));
        std::fs::create_dir_all(&v).expect("dir");
        std::fs::write(v.join("rules.yaml"), text).expect("write");
        let tmp = cm.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(format!("..v{n}"), &tmp).expect("symlink");
        std::fs::rename(&tmp, cm.join("..data")).expect("swap");
    };
    std::fs::create_dir_all(&cm).expect("dir");
    swap(1, &kubevirt);
    std::os::unix::fs::symlink("..data/rules.yaml", cm.join("rules.yaml")).expect("symlink");
    let rules_path = cm.join("rules.yaml");
    let q = ProxyProc::start(
        &e.cp.dir,
        &[
            ("KUBECONFIG", e.cp.kubeconfig()),
            ("RULES_PATH", rules_path.to_str().expect("utf-8")),
        ],
    );
    let code = |path: &str| http_status(&[&q.url(path)]);
    let readyz = |query: &str| ok(&curl(&["-s", &q.mon(&format!("/readyz{query}"))]));
    let etag = || {
        let h = ok(&curl(&[
            "-sS",
            "-o",
            "/dev/null",
            "-D",
            "-",
            &q.url("/openapi/v2"),
        ]));
        h.lines()
            .find(|l| l.to_ascii_lowercase().starts_with("etag:"))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no ETag:\n{h}"))
    };
    // kubevirt.io is served as internal.virtualization.deckhouse.io.
    assert_eq!(code("/apis/kubevirt.io/v1"), "200");
    let etag1 = etag();
    // A new mapping: kubevirt.io → x.example.io, which upstream does not serve.
    swap(
        2,
        &kubevirt.replace(
            "renamed: internal.virtualization.deckhouse.io",
            "renamed: x.example.io",
        ),
    );
    q.wait_until(Duration::from_secs(15), |_| code("/apis/kubevirt.io/v1") == "404");
    assert!(
        q.logs().contains("upstream=/apis/x.example.io/v1"),
        "{}",
        q.logs()
    );
    assert!(q.logs().contains("rules reloaded"), "{}", q.logs());
    // The OpenAPI ETag changes with the rules.
    assert_ne!(etag(), etag1);
    // An invalid file: the rules in force stay, the proxy stays ready and says why.
    swap(3, "rules: [this is not a rule file\n");
    q.wait_until(Duration::from_secs(15), |_| {
        readyz("?verbose").contains("the last reload failed")
    });
    assert_eq!(code("/apis/kubevirt.io/v1"), "404");
    assert_eq!(q.readyz(), "200");
    assert_eq!(readyz(""), "ok");
    let v = readyz("?verbose");
    assert!(v.contains("RULES_PATH"), "{v}");
    let metrics = ok(&curl(&["-s", &q.mon("/metrics")]));
    assert!(
        metrics.contains("kube_api_rewriter_rules_reload_failing 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("kube_api_rewriter_rules_reloads_total{result=\"error\"}"),
        "{metrics}"
    );
    assert!(q.logs().contains("rules reload failed"), "{}", q.logs());
    // Fixed again: the original mapping is back.
    swap(4, &kubevirt);
    q.wait_until(Duration::from_secs(15), |_| code("/apis/kubevirt.io/v1") == "200");
    assert!(!readyz("?verbose").contains("failed"));
}
