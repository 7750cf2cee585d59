//! TEST DOUBLE of virt-handler's own HTTPS API: what virt-api hands to the node agent of a
//! VMI's Node. virt-api finds the `kubevirt.io=virt-handler` Pod of that Node
//! (`scripts/kubevirt.sh` makes one per Node, at 127.0.0.1) and calls
//! `PUT https://IP:PORT/v1/namespaces/NS/virtualmachineinstances/NAME/freeze` (and `unfreeze`)
//! with KubeVirt's client certificate. The double requires a client certificate of KubeVirt's
//! CA, records each call, answers 200 (or 500 for a freeze it was told to refuse) and reports
//! the guest's filesystems in the VMI's `status.fsFreezeStatus` as virt-handler does.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, StatusCode};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use virtualization_controller::kubevirt::vmi_resource;

/// One call virt-api made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// `freeze` or `unfreeze`.
    pub action: String,
    pub namespace: String,
    pub name: String,
    /// The request body (virt-api passes `{"unfreezeTimeout": ...}` through for a freeze).
    pub body: String,
    /// When it came.
    pub at: std::time::Instant,
}

/// What the double was asked and what it refuses; shared with the cases.
#[derive(Default)]
pub struct Handler {
    calls: Mutex<Vec<Call>>,
    refuse_freeze: Mutex<HashSet<(String, String)>>,
    hold_hotplug: Mutex<HashSet<(String, String)>>,
}

impl Handler {
    /// The calls so far for VMI `ns/name`, oldest first.
    pub fn calls(&self, ns: &str, name: &str) -> Vec<Call> {
        lock(&self.calls)
            .iter()
            .filter(|c| c.namespace == ns && c.name == name)
            .cloned()
            .collect()
    }

    /// Makes freezes of VMI `ns/name` fail, as a guest agent that cannot freeze does.
    pub fn refuse_freeze(&self, ns: &str, name: &str) {
        lock(&self.refuse_freeze).insert((ns.to_owned(), name.to_owned()));
    }

    /// Holds (`true`) or lets go (`false`) the plugging of hot-plugged volumes into VMI
    /// `ns/name`: while held they stay `AttachedToNode`, as on a slow Node.
    pub fn hold_hotplug(&self, ns: &str, name: &str, hold: bool) {
        let key = (ns.to_owned(), name.to_owned());
        let mut held = lock(&self.hold_hotplug);
        if hold {
            held.insert(key);
        } else {
            held.remove(&key);
        }
    }

    /// Whether plugging into VMI `ns/name` is held.
    pub fn hotplug_held(&self, ns: &str, name: &str) -> bool {
        lock(&self.hold_hotplug).contains(&(ns.to_owned(), name.to_owned()))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Binds virt-handler's port on 127.0.0.1 now, before anything else can take it
/// (`scripts/kubevirt.sh` chose it, free, for virt-api to call).
pub fn bind(port: u16) -> std::net::TcpListener {
    let l = std::net::TcpListener::bind(("127.0.0.1", port)).expect("the virt-handler port is free");
    l.set_nonblocking(true).expect("non-blocking");
    l
}

/// Serves on `listener` (see [`bind`]) with `cert`/`key`, requiring client certificates of
/// `ca`; updates VMIs through `client` (kubevirt-handler's sidecar).
pub async fn serve(
    listener: std::net::TcpListener,
    cert: &Path,
    key: &Path,
    ca: &Path,
    client: Client,
    handler: Arc<Handler>,
) {
    let tls = tls_config(cert, key, ca);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let (acceptor, client, handler) = (acceptor.clone(), client.clone(), handler.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let svc = hyper::service::service_fn(move |req| {
                let (client, handler) = (client.clone(), handler.clone());
                async move { Ok::<_, std::convert::Infallible>(answer(req, &client, &handler).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                .await;
        });
    }
}

fn tls_config(cert: &Path, key: &Path, ca: &Path) -> rustls::ServerConfig {
    use kube_api_rewriter_tls::{load_certs, load_key, provider, root_store};
    let roots = root_store(load_certs(ca).expect("KubeVirt's CA"), "KubeVirt CA").expect("roots");
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .expect("client verifier");
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            load_certs(cert).expect("handler certificate"),
            load_key(key).expect("handler key"),
        )
        .expect("handler certificate and key");
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg
}

async fn answer(
    req: Request<hyper::body::Incoming>,
    client: &Client,
    handler: &Handler,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
        .unwrap_or_default();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (ns, name, action) = match parts.as_slice() {
        [
            "v1",
            "namespaces",
            ns,
            "virtualmachineinstances",
            name,
            action @ ("freeze" | "unfreeze"),
        ] if method == hyper::Method::PUT => (*ns, *name, *action),
        _ => {
            return reply(
                StatusCode::NOT_FOUND,
                &format!("{method} {path}: not served by the double"),
            );
        }
    };
    lock(&handler.calls).push(Call {
        action: action.to_owned(),
        namespace: ns.to_owned(),
        name: name.to_owned(),
        body,
        at: std::time::Instant::now(),
    });
    eprintln!("virt-handler double: {action} {ns}/{name}");
    let refused = lock(&handler.refuse_freeze).contains(&(ns.to_owned(), name.to_owned()));
    if action == "freeze" && refused {
        return reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "failed to freeze VMI: guest agent command failed",
        );
    }
    // virt-handler reports what the guest agent says: frozen after a freeze, nothing after a
    // thaw.
    let frozen = if action == "freeze" {
        json!("frozen")
    } else {
        Value::Null
    };
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &vmi_resource());
    // KubeVirt's VMI has no status subresource: virt-handler writes the object.
    if let Err(e) = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"fsFreezeStatus": frozen}})),
        )
        .await
    {
        eprintln!("virt-handler double: {action} {ns}/{name}: status: {e}");
    }
    reply(StatusCode::OK, "")
}

fn reply(code: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(text.to_owned())));
    *r.status_mut() = code;
    r
}
