//! Rewrite coverage against the real local kube-apiserver (scripts/control-plane.sh): paths
//! with encoded slashes are routed as kube-apiserver splits them, and excludes hold in watches
//! as objects become hidden and visible again, in metadata-only lists and watches and in Tables.
//!
//! One control plane and one proxy for the whole file (`kube_api_rewriter_testkit::Suite`).
//! Each case is a test of its own, run one at a time in the order below; any one runs alone by
//! name, e.g. `cargo test -p kube-api-rewriter-proxy --test coverage -- watch_excludes`.

use kube_api_rewriter_testkit::*;
use serde_json::Value;

const INTERNAL: &str = "internal.virtualization.deckhouse.io";

/// `(HTTP code, body)` of a GET.
fn get(url: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec!["-sS", "-w", "\n%{http_code}"];
    args.extend_from_slice(extra);
    args.push(url);
    let out = ok(&curl(&args));
    let (body, code) = out.rsplit_once('\n').expect("code line");
    (code.to_owned(), body.to_owned())
}

fn vm_yaml(name: &str) -> String {
    format!(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  running: false\n  template:\n    spec:\n      domain:\n        devices: {{}}\n        resources: {{requests: {{memory: 64Mi}}}}\n"
    )
}

/// The (type, resourceVersion) of each event of a watch that the server ends after a second.
fn events(body: &str) -> Vec<(String, String)> {
    body.lines()
        .map(|l| {
            let v = parse_json(l);
            (
                v["type"].as_str().unwrap_or("").to_owned(),
                v["object"]["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect()
}

fn main() -> std::process::ExitCode {
    Suite::new(setup)
        .case("encoded_paths", encoded_paths)
        .case("watch_excludes", watch_excludes)
        .case("metadata_and_tables", metadata_and_tables)
        .on_failure(|e: &Env| eprintln!("proxy log:\n{}", e.p.logs()))
        .run()
}

/// What every case of this file shares.
struct Env {
    /// The proxy; declared first so it stops before the control plane.
    p: ProxyProc,
    cp: ControlPlane,
    /// kube-apiserver's URL, its CA file and the admin's `Authorization` header.
    direct: String,
    ca: String,
    admin: String,
}

impl Env {
    /// curl's arguments for kube-apiserver directly, as the admin.
    fn auth(&self) -> [&str; 4] {
        ["--cacert", self.ca.as_str(), "-H", self.admin.as_str()]
    }
}

/// A control plane and a proxy in front of it, with the built-in rules plus an exclude of
/// labelled ConfigMaps.
fn setup() -> Env {
    let cp = ControlPlane::up();
    let dir = cp.dir.clone();
    // The built-in rules plus an exclude of labelled ConfigMaps.
    let rules = std::fs::read_to_string(workspace().join("rules/kubevirt.yaml")).expect("rules");
    assert!(rules.contains("\nexcludes: []\n"));
    let rules = rules.replace(
        "\nexcludes: []\n",
        "\nexcludes:\n  - kinds: [ConfigMap]\n    matchLabels: {hide: \"yes\"}\n",
    );
    let rules_path = dir.join("rules-with-excludes.yaml");
    std::fs::write(&rules_path, rules).expect("write rules");
    let p = ProxyProc::start(
        &dir,
        &[
            ("KUBECONFIG", cp.kubeconfig()),
            ("RULES_PATH", rules_path.to_str().expect("utf-8")),
        ],
    );
    let direct = cp.get("KUBE_APISERVER_URL").to_owned();
    let ca = cp.get("KUBE_CA_FILE").to_owned();
    let admin = format!("Authorization: Bearer {}", cp.get("ADMIN_TOKEN"));
    Env {
        p,
        cp,
        direct,
        ca,
        admin,
    }
}

fn encoded_paths(e: &Env) {
    let direct = &e.direct;
    let auth = e.auth();
    e.p.apply_vm_crd();
    let crd = "virtualmachines.kubevirt.io";
    assert_eq!(wait_crd_established(&e.p, crd), None);
    e.p.wait_until(std::time::Duration::from_secs(20), |p| {
        p.kubectl(&["get", "vm"]).status.success()
    });
    let o = kubectl_in(
        e.p.kubeconfig.to_str().expect("utf-8"),
        &["apply", "-f", "-"],
        &vm_yaml("enc"),
    );
    ok(&o);
    let vms = "internalvirtualizationvirtualmachines";
    // (position, through the proxy with original names, straight to kube-apiserver)
    let cases = [
        (
            "group",
            "/apis/kubevirt.io%2Fv1/namespaces/default/virtualmachines",
            format!("/apis/{INTERNAL}%2Fv1/namespaces/default/{vms}"),
        ),
        (
            "version",
            "/apis/kubevirt.io/v1%2Fnamespaces/default/virtualmachines/enc",
            format!("/apis/{INTERNAL}/v1%2Fnamespaces/default/{vms}/enc"),
        ),
        (
            "namespace",
            "/apis/kubevirt.io/v1/namespaces/default%2Fvirtualmachines/enc",
            format!("/apis/{INTERNAL}/v1/namespaces/default%2F{vms}/enc"),
        ),
        (
            "resource",
            "/apis/kubevirt.io/v1/namespaces/default/virtualmachines%2Fenc",
            format!("/apis/{INTERNAL}/v1/namespaces/default/{vms}%2Fenc"),
        ),
        (
            "name",
            "/apis/kubevirt.io/v1/namespaces/default/virtualmachines/enc%2Fstatus",
            format!("/apis/{INTERNAL}/v1/namespaces/default/{vms}/enc%2Fstatus"),
        ),
    ];
    for (what, through, straight) in cases {
        let (code, body) = get(&e.p.url(through), &[]);
        let (dcode, dbody) = get(&format!("{direct}{straight}"), &auth);
        assert_eq!(code, dcode, "{what}: {body}\ndirect: {dbody}");
        assert_eq!(code, "200", "{what}: {body}");
        let v = parse_json(&body);
        let kind = v["kind"].as_str().unwrap_or("");
        assert!(
            kind == "VirtualMachine" || kind == "VirtualMachineList",
            "{what}: {body}"
        );
        assert!(!body.contains(INTERNAL), "{what}: {body}");
        assert!(body.contains("\"enc\""), "{what}: {body}");
    }
}

fn watch_excludes(e: &Env) {
    let direct = &e.direct;
    let auth = e.auth();
    ok(&e.p.kubectl(&["create", "configmap", "wx", "--from-literal=a=b"]));
    let list = parse_json(&get(&e.p.url("/api/v1/namespaces/default/configmaps"), &[]).1);
    let rv0 = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_owned();
    // Hidden, changed while hidden, visible again, deleted.
    ok(&e.cp.kubectl(&["label", "configmap", "wx", "hide=yes"]));
    ok(&e.cp.kubectl(&["label", "configmap", "wx", "more=1"]));
    ok(&e.cp.kubectl(&["label", "configmap", "wx", "hide-"]));
    ok(&e.cp.kubectl(&["delete", "configmap", "wx"]));
    let q = format!(
        "/api/v1/namespaces/default/configmaps?watch=1&fieldSelector=metadata.name%3Dwx&resourceVersion={rv0}&timeoutSeconds=1"
    );
    let upstream = events(&get(&format!("{direct}{q}"), &auth).1);
    let types: Vec<&str> = upstream.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        types,
        ["MODIFIED", "MODIFIED", "MODIFIED", "DELETED"],
        "{upstream:?}"
    );
    let (code, body) = get(&e.p.url(&q), &[]);
    assert_eq!(code, "200", "{body}");
    let seen = events(&body);
    let want = vec![
        ("DELETED".to_owned(), upstream[0].1.clone()),
        ("ADDED".to_owned(), upstream[2].1.clone()),
        ("DELETED".to_owned(), upstream[3].1.clone()),
    ];
    assert_eq!(seen, want, "{body}");
    // The DELETED for the hidden object carries it, as it was at that event.
    let first: Value = parse_json(body.lines().next().expect("event"));
    assert_eq!(first["object"]["metadata"]["labels"]["hide"], "yes", "{body}");
}

fn metadata_and_tables(e: &Env) {
    let direct = &e.direct;
    let auth = e.auth();
    ok(&e.cp.kubectl(&["create", "configmap", "m-shown"]));
    ok(&e.cp.kubectl(&["create", "configmap", "m-hidden"]));
    ok(&e.cp.kubectl(&["label", "configmap", "m-hidden", "hide=yes"]));
    let cms = "/api/v1/namespaces/default/configmaps";
    let meta = "Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let table = "Accept: application/json;as=Table;g=meta.k8s.io;v=v1";
    let names = |v: &Value, at: &str, pointer: &str| -> Vec<String> {
        v[at]
            .as_array()
            .unwrap_or_else(|| panic!("{v}"))
            .iter()
            .filter_map(|i| i.pointer(pointer).and_then(Value::as_str).map(str::to_owned))
            .filter(|n| n.starts_with("m-"))
            .collect()
    };
    // What kube-apiserver holds: both, in both views.
    let up = parse_json(&get(&format!("{direct}{cms}"), &[&auth[..], &["-H", meta]].concat()).1);
    assert_eq!(up["kind"], "PartialObjectMetadataList");
    assert_eq!(names(&up, "items", "/metadata/name"), ["m-hidden", "m-shown"]);
    let (code, body) = get(&e.p.url(cms), &["-H", meta]);
    assert_eq!(code, "200", "{body}");
    let v = parse_json(&body);
    assert_eq!(v["kind"], "PartialObjectMetadataList", "{body}");
    assert_eq!(names(&v, "items", "/metadata/name"), ["m-shown"], "{body}");
    let (code, body) = get(&e.p.url(cms), &["-H", table]);
    assert_eq!(code, "200", "{body}");
    let v = parse_json(&body);
    assert_eq!(v["kind"], "Table", "{body}");
    assert_eq!(names(&v, "rows", "/object/metadata/name"), ["m-shown"], "{body}");
    let up = parse_json(&get(&format!("{direct}{cms}"), &[&auth[..], &["-H", table]].concat()).1);
    assert_eq!(
        names(&up, "rows", "/object/metadata/name"),
        ["m-hidden", "m-shown"]
    );
    // Without objects (includeObject=None) the rows still follow the excludes, and their
    // objects are null, as kube-apiserver sends them.
    let none = format!("{cms}?includeObject=None");
    let cells = |v: &Value| -> Vec<String> {
        let rows = v["rows"].as_array().unwrap_or_else(|| panic!("{v}"));
        assert!(rows.iter().all(|r| r["object"].is_null()), "{v}");
        rows.iter()
            .filter_map(|r| r["cells"][0].as_str().map(str::to_owned))
            .filter(|n| n.starts_with("m-"))
            .collect()
    };
    let up = parse_json(&get(&format!("{direct}{none}"), &[&auth[..], &["-H", table]].concat()).1);
    assert_eq!(cells(&up), ["m-hidden", "m-shown"]);
    let (code, body) = get(&e.p.url(&none), &["-H", table]);
    assert_eq!(code, "200", "{body}");
    assert_eq!(cells(&parse_json(&body)), ["m-shown"], "{body}");
    // A metadata-only watch: the shown one becomes hidden.
    let rv = v["metadata"]["resourceVersion"].as_str().expect("rv").to_owned();
    ok(&e.cp.kubectl(&["label", "configmap", "m-shown", "hide=yes"]));
    let q =
        format!("{cms}?watch=1&fieldSelector=metadata.name%3Dm-shown&resourceVersion={rv}&timeoutSeconds=1");
    let watch_meta = "Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let (code, body) = get(&e.p.url(&q), &["-H", watch_meta]);
    assert_eq!(code, "200", "{body}");
    let seen: Vec<String> = events(&body).into_iter().map(|(t, _)| t).collect();
    assert_eq!(seen, ["DELETED"], "{body}");
    assert!(body.contains("PartialObjectMetadata"), "{body}");
}
