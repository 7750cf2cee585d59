//! What the current-release cases share: HTTP through a proxy and straight to kube-apiserver,
//! the aggregated API's discovery double, a kube-rs client, CBOR decoding.

use std::process::Output;

use kube_api_rewriter_testkit::*;
use serde_json::{Value, json};

use super::AGGREGATED;
use super::tls_double::tls_double;

pub fn kubectl_p(p: &ProxyProc, args: &[&str]) -> Output {
    p.kubectl(args)
}

/// curl through `p` (the proxy adds its credentials): (status, content type, body).
pub fn get(p: &ProxyProc, path: &str, accept: &str) -> (String, String, Vec<u8>) {
    fetch(&p.url(path), accept, &[])
}

/// The same GET straight to kube-apiserver as admin.
pub fn get_direct(cp: &ControlPlane, path: &str, accept: &str) -> (String, String, Vec<u8>) {
    let auth = format!("Authorization: Bearer {}", cp.get("ADMIN_TOKEN"));
    let url = format!("{}{path}", cp.get("KUBE_APISERVER_URL"));
    fetch(&url, accept, &["--cacert", cp.get("KUBE_CA_FILE"), "-H", &auth])
}

/// A GET of `url` with curl (`extra` arguments first): (status, content type, body).
fn fetch(url: &str, accept: &str, extra: &[&str]) -> (String, String, Vec<u8>) {
    let dir = temp_dir("get");
    let body = dir.join("body");
    let accept = format!("Accept: {accept}");
    let mut args = vec!["-sS"];
    args.extend_from_slice(extra);
    let out = [
        "-o",
        body.to_str().expect("utf-8"),
        "-w",
        "%{http_code} %{content_type}",
    ];
    args.extend_from_slice(&out);
    args.extend_from_slice(&["-H", &accept, url]);
    let o = curl(&args);
    let meta = String::from_utf8_lossy(&o.stdout).into_owned();
    let (code, ct) = meta.split_once(' ').unwrap_or((&meta, ""));
    let bytes = std::fs::read(&body).unwrap_or_default();
    let _ = std::fs::remove_dir_all(dir);
    (code.to_owned(), ct.to_owned(), bytes)
}

// ---------------------------------------------------------------- the aggregated API

/// An APIService for `v1alpha2.subresources.virtualization.deckhouse.io`, served by a TLS double
/// that answers discovery, reached as kube-apiserver reaches virtualization-api: an ExternalName
/// Service on loopback. Waits until the APIService is Available. Returns the double's port.
pub fn aggregated_api(cp: &ControlPlane) -> u16 {
    let dir = cp.dir.join("aggregated");
    std::fs::create_dir_all(&dir).expect("dir");
    let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    self_signed_cert(&crt, &key, "virtualization-api");
    let port = discovery_double(&crt, &key);
    let objects = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: d8-virtualization}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: virtualization-api, namespace: d8-virtualization}}\nspec:\n  type: ExternalName\n  externalName: 127.0.0.1\n  ports: [{{name: https, port: {port}, protocol: TCP, targetPort: {port}}}]\n---\napiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {{name: v1alpha2.{AGGREGATED}}}\nspec:\n  group: {AGGREGATED}\n  version: v1alpha2\n  groupPriorityMinimum: 999\n  versionPriority: 15\n  insecureSkipTLSVerify: true\n  service: {{name: virtualization-api, namespace: d8-virtualization, port: {port}}}\n"
    );
    ok(&kubectl_in(cp.kubeconfig(), &["apply", "-f", "-"], &objects));
    ok(&cp.kubectl(&[
        "wait",
        "--for=condition=Available",
        "--timeout=60s",
        &format!("apiservice/v1alpha2.{AGGREGATED}"),
    ]));
    port
}

/// The discovery of the aggregated group, as virtualization-api serves it.
pub fn discovery_double(crt: &std::path::Path, key: &std::path::Path) -> u16 {
    use bytes::Bytes;
    use http_body_util::Full;
    tls_double(
        crt,
        key,
        |req: hyper::Request<hyper::body::Incoming>| async move {
            let path = req.uri().path().to_owned();
            let (status, body) = match path.as_str() {
                "/apis" => (
                    200,
                    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [{"name": AGGREGATED, "versions": [{"groupVersion": format!("{AGGREGATED}/v1alpha2"), "version": "v1alpha2"}], "preferredVersion": {"groupVersion": format!("{AGGREGATED}/v1alpha2"), "version": "v1alpha2"}}]}),
                ),
                p if p == format!("/apis/{AGGREGATED}/v1alpha2") => (
                    200,
                    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{AGGREGATED}/v1alpha2"), "resources": [
                        {"name": "virtualmachines", "singularName": "", "namespaced": true, "kind": "VirtualMachine", "verbs": ["get", "list"]},
                        {"name": "virtualmachines/console", "singularName": "", "namespaced": true, "kind": "VirtualMachineConsole", "verbs": ["get"]},
                    ]}),
                ),
                _ => (
                    404,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
                ),
            };
            let mut r = hyper::Response::new(Full::new(Bytes::from(body.to_string())));
            *r.status_mut() = hyper::StatusCode::from_u16(status).expect("status");
            r.headers_mut()
                .insert("content-type", "application/json".parse().expect("hv"));
            Ok::<_, std::convert::Infallible>(r)
        },
    )
}

pub async fn client_for(kubeconfig: &str) -> Result<kube::Client, String> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| e.to_string())?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| e.to_string())?;
    kube::Client::try_from(cfg).map_err(|e| e.to_string())
}

/// A CBOR document as JSON, for comparison: map keys (kube-apiserver writes them as byte
/// strings) become strings, tags are dropped, bytes become text.
pub fn decode_cbor(bytes: &[u8]) -> Result<Value, String> {
    fn json(v: ciborium::Value) -> Value {
        use ciborium::Value as C;
        let text = |v: C| match v {
            C::Text(t) => t,
            C::Bytes(b) => String::from_utf8_lossy(&b).into_owned(),
            other => format!("{other:?}"),
        };
        match v {
            C::Null => Value::Null,
            C::Bool(b) => Value::Bool(b),
            C::Integer(i) => json!(i128::from(i)),
            C::Float(f) => json!(f),
            C::Text(_) | C::Bytes(_) => Value::String(text(v)),
            C::Array(a) => Value::Array(a.into_iter().map(json).collect()),
            C::Map(m) => Value::Object(m.into_iter().map(|(k, v)| (text(k), json(v))).collect()),
            C::Tag(_, inner) => json(*inner),
            other => Value::String(format!("{other:?}")),
        }
    }
    let v: ciborium::Value = ciborium::from_reader(bytes).map_err(|e| format!("not CBOR: {e}"))?;
    Ok(json(v))
}
