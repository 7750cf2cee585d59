//! `Accept: application/yaml` through the proxy against the real local kube-apiserver
//! (scripts/control-plane.sh): single objects, lists, Tables and errors come back as YAML with
//! the original names, holding the same values as the JSON answer and as kube-apiserver's own
//! YAML for the same object; a watch gets kube-apiserver's own refusal.
//!
//! Before this, `application/yaml` went upstream as sent and kube-apiserver's YAML (not JSON,
//! so never rewritten) reached the client with the internal names.

use kube_api_rewriter_testkit::*;
use serde_json::Value;

const INTERNAL: &str = "internal.virtualization.deckhouse.io";
const YAML: &str = "Accept: application/yaml";

/// `(HTTP code, content type, body)` of a GET.
fn get(url: &str, extra: &[&str]) -> (String, String, String) {
    let mut args = vec!["-sS", "-w", "\n%{http_code} %{content_type}"];
    args.extend_from_slice(extra);
    args.push(url);
    let out = ok(&curl(&args));
    let (body, tail) = out.rsplit_once('\n').expect("status line");
    let (code, ct) = tail.split_once(' ').unwrap_or((tail, ""));
    (code.to_owned(), ct.to_owned(), body.to_owned())
}

fn yaml(s: &str) -> Value {
    serde_saphyr::from_str(s).unwrap_or_else(|e| panic!("not YAML ({e}):\n{s}"))
}

/// A VirtualMachine whose annotations and labels hold strings a careless YAML emitter would
/// turn into other types, and a multi-line one.
const VM: &str = r#"apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: y1
  namespace: default
  labels: {tier: "1.0", flag: "yes"}
  annotations:
    a/null: "null"
    a/hex: "0x1F"
    a/octal: "0777"
    a/dash: "- x"
    a/lead: "  lead"
    a/colon: "a: b # c"
    a/multi: "line one\nline two\n"
    a/unicode: "é😀"
    a/date: "2026-12-01"
spec:
  running: false
  template:
    spec:
      domain:
        devices: {}
        resources: {requests: {memory: 64Mi}}
"#;

#[test]
fn yaml_against_kube_apiserver() {
    let cp = ControlPlane::up();
    let p = ProxyProc::start(&cp.dir, &[("KUBECONFIG", cp.kubeconfig())]);
    let direct = cp.get("KUBE_APISERVER_URL").to_owned();
    let ca = cp.get("KUBE_CA_FILE").to_owned();
    let admin = format!("Authorization: Bearer {}", cp.get("ADMIN_TOKEN"));
    let straight = |path: &str, accept: &str| {
        get(
            &format!("{direct}{path}"),
            &["--cacert", ca.as_str(), "-H", admin.as_str(), "-H", accept],
        )
    };

    p.apply_vm_crd();
    assert_eq!(wait_crd_established(&p, "virtualmachines.kubevirt.io"), None);
    p.wait_until(std::time::Duration::from_secs(30), |p| {
        p.kubectl(&["get", "vm"]).status.success()
    });
    ok(&kubectl_in(
        p.kubeconfig.to_str().expect("utf-8"),
        &["apply", "-f", "-"],
        VM,
    ));
    let vm = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines/y1";
    let vms_internal =
        format!("/apis/{INTERNAL}/v1/namespaces/default/internalvirtualizationvirtualmachines");

    // One object: YAML, original names, the same value as the JSON answer.
    let (code, ct, body) = get(&p.url(vm), &["-H", YAML]);
    assert_eq!(
        (code.as_str(), ct.as_str()),
        ("200", "application/yaml"),
        "{body}"
    );
    assert!(
        !body.contains(INTERNAL) && !body.contains("InternalVirtualization"),
        "{body}"
    );
    let ours = yaml(&body);
    assert_eq!(ours["kind"], "VirtualMachine", "{body}");
    assert_eq!(ours["apiVersion"], "kubevirt.io/v1", "{body}");
    let (_, ct, json) = get(&p.url(vm), &[]);
    assert_eq!(ct, "application/json");
    assert_eq!(
        ours,
        parse_json(&json),
        "YAML and JSON answers differ:\n{body}\n{json}"
    );
    // kube-apiserver's own YAML of the same object: what is not renamed is the same value.
    let (code, ct, theirs) = straight(&format!("{vms_internal}/y1"), YAML);
    assert_eq!(
        (code.as_str(), ct.as_str()),
        ("200", "application/yaml"),
        "{theirs}"
    );
    let theirs = yaml(&theirs);
    assert_eq!(theirs["kind"], "InternalVirtualizationVirtualMachine");
    for key in ["spec", "status"] {
        assert_eq!(ours[key], theirs[key], "{key}");
    }
    for key in [
        "annotations",
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        assert_eq!(ours["metadata"][key], theirs["metadata"][key], "metadata.{key}");
    }
    assert_eq!(ours["metadata"]["annotations"]["a/multi"], "line one\nline two\n");
    assert_eq!(ours["metadata"]["labels"]["flag"], "yes");

    // A list (streamed by the rewriter) and a Table.
    let list = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines";
    let (code, ct, body) = get(&p.url(list), &["-H", YAML]);
    assert_eq!(
        (code.as_str(), ct.as_str()),
        ("200", "application/yaml"),
        "{body}"
    );
    assert!(!body.contains(INTERNAL), "{body}");
    let v = yaml(&body);
    assert_eq!(v["kind"], "VirtualMachineList", "{body}");
    assert_eq!(v["items"][0]["metadata"]["name"], "y1", "{body}");
    assert_eq!(v["items"][0]["kind"], "VirtualMachine", "{body}");
    // The same list as JSON; its own resourceVersion moves with any write to the cluster.
    let json = parse_json(&get(&p.url(list), &[]).2);
    for key in ["apiVersion", "kind", "items"] {
        assert_eq!(v[key], json[key], "{key}");
    }
    let table = "Accept: application/yaml;as=Table;v=v1;g=meta.k8s.io";
    let (code, ct, body) = get(&p.url(list), &["-H", table]);
    let (dcode, dct, _) = straight(&vms_internal, table);
    assert_eq!((&code, &ct), (&dcode, &dct), "{body}");
    assert_eq!(
        (code.as_str(), ct.as_str()),
        ("200", "application/yaml"),
        "{body}"
    );
    let v = yaml(&body);
    assert_eq!(v["kind"], "Table", "{body}");
    assert_eq!(v["rows"][0]["object"]["metadata"]["name"], "y1", "{body}");
    assert!(!body.contains(INTERNAL), "{body}");

    // An error is a Status in YAML, as kube-apiserver answers it, with the JSON answer's value.
    let missing = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines/nope";
    let (code, ct, body) = get(&p.url(missing), &["-H", YAML]);
    let (dcode, dct, _) = straight(&format!("{vms_internal}/nope"), YAML);
    assert_eq!((&code, &ct), (&dcode, &dct), "{body}");
    assert_eq!(code, "404", "{body}");
    assert_eq!(yaml(&body), parse_json(&get(&p.url(missing), &[]).2), "{body}");

    // A watch: kube-apiserver refuses YAML (406, a Status in YAML); so does the proxy.
    let watch = format!("{list}?watch=1&timeoutSeconds=1");
    let (code, ct, body) = get(&p.url(&watch), &["-H", YAML]);
    let (dcode, dct, dbody) = straight(&format!("{vms_internal}?watch=1&timeoutSeconds=1"), YAML);
    assert_eq!((&code, &ct), (&dcode, &dct), "{body}\ndirect: {dbody}");
    assert_eq!(code, "406", "{body}");

    // JSON first, YAML second: JSON, as kube-apiserver chooses.
    let both = "Accept: application/json, application/yaml";
    let (code, ct, body) = get(&p.url(vm), &["-H", both]);
    let (_, dct, _) = straight(&format!("{vms_internal}/y1"), both);
    assert_eq!((code.as_str(), ct.as_str()), ("200", dct.as_str()), "{body}");
    assert_eq!(ct, "application/json");
    assert_eq!(parse_json(&body)["kind"], "VirtualMachine");
    // YAML first: YAML.
    let (_, ct, _) = get(&p.url(vm), &["-H", "Accept: application/yaml, application/json"]);
    assert_eq!(ct, "application/yaml");
}
