//! The validating webhook of `VirtualMachine`s, served directly over HTTPS as Deckhouse does
//! (its own group is not renamed, so no rewriter sits in front of it): AdmissionReview v1 on
//! [`PATH`]. It denies names over 63 characters, label and annotation keys naming the
//! `kubevirt.io` group (the rewriter renames those, so a user could reach KubeVirt's own
//! labels through them), duplicate `blockDeviceRefs`, and core counts below 1 or not allowed by
//! the VM's class. [`IMAGE_PATH`] and [`DISK_PATH`] validate `VirtualImage`s and `VirtualDisk`s:
//! their data source ([`check_image`], [`check_disk`]). [`MUTATE_PATH`] is the mutating webhook
//! of VMs: a VM with no class gets the default one ([`default_class`]).
//!
//! The listener has limits: a TLS handshake must finish within [`HANDSHAKE_TIMEOUT`], request
//! headers arrive within [`HEADER_TIMEOUT`], a body is at most [`MAX_BODY`] bytes, a connection
//! lives at most [`CONNECTION_TIMEOUT`], and at most [`MAX_CONNECTIONS`] are served at once.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use kube::Api;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

mod data;
mod mutate;

pub use data::{DISK_PATH, IMAGE_PATH, check_disk, check_image};
pub use mutate::{DEFAULT_CLASS_ANNOTATION, MUTATE_PATH, class_patch, default_class};

use crate::kubevirt;
use crate::resources::{VirtualMachine, VirtualMachineClass};

/// The path kube-apiserver posts VirtualMachine reviews to (controller-runtime's convention).
pub const PATH: &str = "/validate-virtualization-deckhouse-io-v1alpha2-virtualmachine";
/// The longest name a VM may have (it becomes a label value and a pod name part).
pub const MAX_NAME: usize = 63;
/// The message for a key naming the `kubevirt.io` group.
pub const KUBEVIRT_KEY_MESSAGE: &str =
    "using the kubevirt.io group's name in a label or annotation is prohibited";
/// The longest a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest request headers may take to arrive.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a connection is kept.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(120);
/// The largest request body.
pub const MAX_BODY: usize = 4 << 20;
/// The most connections served at once.
pub const MAX_CONNECTIONS: usize = 128;

/// Checks what needs no other object: the name, label and annotation keys, duplicate block
/// devices and the core count. The error is the message kubectl shows.
pub fn check(vm: &VirtualMachine) -> Result<(), String> {
    let name = vm.metadata.name.as_deref().unwrap_or_default();
    if name.len() > MAX_NAME {
        return Err(format!(
            "the VirtualMachine name {name:?} is {} characters long, longer than {MAX_NAME}",
            name.len()
        ));
    }
    for (what, keys) in [
        ("label", &vm.metadata.labels),
        ("annotation", &vm.metadata.annotations),
    ] {
        if let Some(key) = keys
            .iter()
            .flat_map(|m| m.keys())
            .find(|k| k.contains("kubevirt.io"))
        {
            return Err(format!("{KUBEVIRT_KEY_MESSAGE}: {what} {key:?}"));
        }
    }
    kubevirt::validate_block_devices(&vm.spec)?;
    if vm.spec.cpu.cores < 1 {
        return Err(format!(
            "spec.cpu.cores must be at least 1, not {}",
            vm.spec.cpu.cores
        ));
    }
    Ok(())
}

/// The AdmissionReview v1 response to request `uid`: allowed, or denied with 403 and `message`.
pub fn response(uid: &str, verdict: Result<(), String>) -> Value {
    let response = match verdict {
        Ok(()) => json!({"uid": uid, "allowed": true}),
        Err(message) => json!({
            "uid": uid,
            "allowed": false,
            "status": {"code": 403, "reason": "Forbidden", "message": message},
        }),
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// The `request` of an AdmissionReview body, and its `uid`.
fn request(body: &[u8]) -> Result<(String, Value), String> {
    let mut review: Value =
        serde_json::from_slice(body).map_err(|e| format!("not an AdmissionReview: {e}"))?;
    let request = review.get_mut("request").map(Value::take).unwrap_or_default();
    let uid = request["uid"]
        .as_str()
        .ok_or("an AdmissionReview without request.uid")?
        .to_owned();
    Ok((uid, request))
}

/// Reviews one AdmissionReview body: the checks of [`check`], then the class's (an absent class
/// is allowed: the VM waits for it, Pending).
pub async fn review(body: &[u8], client: &kube::Client) -> Result<Value, String> {
    let (uid, request) = request(body)?;
    let uid = uid.as_str();
    let object = &request["object"];
    if object.is_null() {
        return Ok(response(uid, Ok(())));
    }
    let vm: VirtualMachine = match serde_json::from_value(object.clone()) {
        Ok(vm) => vm,
        Err(e) => return Ok(response(uid, Err(format!("not a VirtualMachine: {e}")))),
    };
    let mut verdict = check(&vm);
    if verdict.is_ok()
        && let Some(class_name) = &vm.spec.virtual_machine_class_name
    {
        let classes: Api<VirtualMachineClass> = Api::all(client.clone());
        verdict = match classes.get_opt(class_name).await {
            Ok(Some(class)) => kubevirt::validate_class(&vm.spec, class_name, &class.spec),
            Ok(None) => Ok(()),
            Err(e) => Err(format!("VirtualMachineClass {class_name} could not be read: {e}")),
        };
    }
    if let Err(message) = &verdict {
        tracing::info!(
            namespace = vm.metadata.namespace.as_deref().unwrap_or_default(),
            name = vm.metadata.name.as_deref().unwrap_or_default(),
            %message,
            "VirtualMachine denied"
        );
    }
    Ok(response(uid, verdict))
}

async fn handle(
    req: Request<hyper::body::Incoming>,
    client: kube::Client,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        r
    };
    let path = req.uri().path().to_owned();
    if ![PATH, IMAGE_PATH, DISK_PATH, MUTATE_PATH].contains(&path.as_str()) {
        return Ok(reply(StatusCode::NOT_FOUND, r#"{"error":"not found"}"#.into()));
    }
    if req.method() != hyper::Method::POST {
        return Ok(reply(
            StatusCode::METHOD_NOT_ALLOWED,
            r#"{"error":"POST only"}"#.into(),
        ));
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return Ok(reply(
                StatusCode::PAYLOAD_TOO_LARGE,
                json!({"error": e.to_string()}).to_string(),
            ));
        }
    };
    let answer = match path.as_str() {
        IMAGE_PATH => data::review_image(&body),
        DISK_PATH => data::review_disk(&body),
        MUTATE_PATH => mutate::review(&body, &client).await,
        _ => review(&body, &client).await,
    };
    Ok(match answer {
        Ok(v) => reply(StatusCode::OK, v.to_string()),
        Err(e) => reply(StatusCode::BAD_REQUEST, json!({"error": e}).to_string()),
    })
}

/// Serves the webhook on `listener` with `tls` until the task is dropped.
pub async fn serve(listener: TcpListener, tls: Arc<rustls::ServerConfig>, client: kube::Client) {
    let acceptor = TlsAcceptor::from(tls);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "webhook accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let client = client.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "webhook TLS handshake");
                    return;
                }
                Err(_) => return,
            };
            let service = hyper::service::service_fn(move |req| handle(req, client.clone()));
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(tls), service);
            if let Ok(Err(e)) = tokio::time::timeout(CONNECTION_TIMEOUT, conn).await {
                tracing::debug!(%peer, error = %e, "webhook connection");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{BlockDeviceKind, BlockDeviceRef, CpuSpec, MemorySpec, VirtualMachineSpec};

    fn vm(name: &str) -> VirtualMachine {
        VirtualMachine::new(
            name,
            VirtualMachineSpec {
                run_policy: Default::default(),
                cpu: CpuSpec {
                    cores: 1,
                    core_fraction: None,
                },
                memory: MemorySpec { size: "1Gi".into() },
                provisioning: None,
                node_selector: None,
                tolerations: None,
                virtual_machine_class_name: None,
                block_device_refs: Vec::new(),
            },
        )
    }

    #[test]
    fn checks_deny_with_a_clear_message() {
        assert_eq!(check(&vm("web")), Ok(()));
        assert_eq!(check(&vm(&"a".repeat(63))), Ok(()));
        let e = check(&vm(&"a".repeat(64))).unwrap_err();
        assert!(e.contains("longer than 63"), "{e}");

        let mut v = vm("web");
        v.metadata.labels = Some([("vm.kubevirt.io/name".to_owned(), "x".to_owned())].into());
        let e = check(&v).unwrap_err();
        assert!(e.starts_with(KUBEVIRT_KEY_MESSAGE) && e.contains("label"), "{e}");
        let mut v = vm("web");
        v.metadata.annotations = Some(
            [(
                "kubevirt.io/latest-observed-api-version".to_owned(),
                "v1".to_owned(),
            )]
            .into(),
        );
        assert!(check(&v).unwrap_err().contains("annotation"));
        // Other groups are fine.
        v.metadata.annotations = Some([("example.com/kubevirt".to_owned(), "v1".to_owned())].into());
        assert_eq!(check(&v), Ok(()));

        let mut v = vm("web");
        let r = BlockDeviceRef {
            kind: BlockDeviceKind::VirtualDisk,
            name: "root".into(),
        };
        v.spec.block_device_refs = vec![r.clone(), r];
        assert!(check(&v).unwrap_err().contains("more than once"));

        let mut v = vm("web");
        v.spec.cpu.cores = 0;
        assert!(
            check(&v)
                .unwrap_err()
                .contains("spec.cpu.cores must be at least 1")
        );
    }

    #[test]
    fn responses_are_admission_reviews() {
        let ok = response("u1", Ok(()));
        assert_eq!(ok["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(ok["response"], json!({"uid": "u1", "allowed": true}));
        let denied = response("u2", Err("no".into()));
        assert_eq!(denied["response"]["allowed"], false);
        assert_eq!(denied["response"]["status"]["code"], 403);
        assert_eq!(denied["response"]["status"]["message"], "no");
    }

    #[tokio::test]
    async fn reviews_read_the_request() {
        let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().expect("url")))
            .expect("client");
        let mut obj = serde_json::to_value(vm(&"b".repeat(70))).expect("json");
        obj["metadata"]["namespace"] = json!("ns");
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "r1", "operation": "CREATE", "object": obj}});
        let out = review(body.to_string().as_bytes(), &client)
            .await
            .expect("a review");
        assert_eq!(out["response"]["uid"], "r1");
        assert_eq!(out["response"]["allowed"], false);
        let body = json!({"request": {"uid": "r2", "operation": "DELETE", "object": null}});
        let out = review(body.to_string().as_bytes(), &client)
            .await
            .expect("a review");
        assert_eq!(out["response"]["allowed"], true);
        assert!(review(b"{}", &client).await.is_err());
    }
}
