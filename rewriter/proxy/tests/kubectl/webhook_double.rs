//! `webhook_double`: the validating webhook server the proxy's webhook listener forwards to,
//! and the certificates it and the listener serve.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::{Value, json};

use crate::tls_double::tls_double;

/// The message of the double's denial.
pub const DENIAL: &str = "webhook_double says no to deny-me";

/// A validating webhook on 127.0.0.1 (HTTPS): records every AdmissionReview it receives with
/// its path, allows everything except objects named `deny-me`.
pub struct WebhookDouble {
    pub port: u16,
    reviews: Arc<Mutex<Vec<(String, Value)>>>,
}

impl WebhookDouble {
    pub fn reviews(&self) -> Vec<(String, Value)> {
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
pub fn webhook_double(cert: &Path, key: &Path) -> WebhookDouble {
    let reviews = Arc::new(Mutex::new(Vec::new()));
    let r2 = Arc::clone(&reviews);
    let port = tls_double(cert, key, move |req| webhook_serve(Arc::clone(&r2), req));
    WebhookDouble { port, reviews }
}

/// A CA and a serving certificate for 127.0.0.1 signed by it: (ca.crt, tls.crt, tls.key).
pub fn webhook_certs(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
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
