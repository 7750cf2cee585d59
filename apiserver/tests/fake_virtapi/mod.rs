//! TEST DOUBLE: a fake KubeVirt virt-api (no KubeVirt runs here).
//!
//! TLS that requires a client certificate of the given CA; every request must carry
//! `X-Remote-User` = the expected service account and exactly `X-Remote-Group:
//! system:serviceaccounts` (else 403). `console` echoes WebSocket messages, `vnc` sends an RFB
//! greeting and then echoes, `portforward/{port}/tcp` bridges to 127.0.0.1:{port}; `/readyz`
//! answers `ok`; PUT paths and bodies are recorded. A PUT on the instance of `vm-stopped`
//! (which has none) gets a 404 `Status` of virt-api's group.

use std::convert::Infallible;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::{SinkExt as _, StreamExt as _};
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

/// What a request to the fake carried.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: String,
    pub user: String,
    pub groups: Vec<String>,
    /// Any `X-Remote-Extra-*` header came.
    pub extra: bool,
}

/// The running double.
pub struct FakeVirtApi {
    pub port: u16,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl FakeVirtApi {
    /// PUT requests seen so far.
    pub fn puts(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.method == "PUT")
            .cloned()
            .collect()
    }

    /// Every request seen so far.
    pub fn all(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Starts the double: serving `cert`/`key`, trusting client certificates of `client_ca`,
/// expecting `user` in `X-Remote-User`.
pub fn start(cert: &Path, key: &Path, client_ca: &Path, user: &str) -> FakeVirtApi {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(client_ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .unwrap();
    let certs: Vec<_> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, PrivateKeyDer::from_pem_file(key).unwrap())
        .unwrap();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let user: Arc<str> = user.into();
    let s2 = Arc::clone(&seen);
    let port = kube_api_rewriter_testkit::spawn_double(move |tcp| {
        let acceptor = acceptor.clone();
        let seen = Arc::clone(&s2);
        let user = Arc::clone(&user);
        async move {
            let _ = tcp.set_nodelay(true);
            // A client without an acceptable certificate fails here.
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let svc = service_fn(move |req| {
                let seen = Arc::clone(&seen);
                let user = Arc::clone(&user);
                async move { Ok::<_, Infallible>(handle(req, &seen, &user).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), svc)
                .with_upgrades()
                .await;
        }
    });
    FakeVirtApi { port, seen }
}

fn reply(code: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_owned())));
    *r.status_mut() = code;
    r
}

async fn handle(
    mut req: Request<Incoming>,
    seen: &Mutex<Vec<Seen>>,
    want_user: &str,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    if path == "/readyz" {
        return reply(StatusCode::OK, "ok");
    }
    let user = req
        .headers()
        .get("x-remote-user")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let groups: Vec<String> = req
        .headers()
        .get_all("x-remote-group")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect();
    let upgrade = hyper::upgrade::on(&mut req);
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        path: path.clone(),
        query: parts.uri.query().unwrap_or("").to_owned(),
        body: String::from_utf8_lossy(&body).into_owned(),
        user: user.clone(),
        groups: groups.clone(),
        extra: parts
            .headers
            .keys()
            .any(|k| k.as_str().starts_with("x-remote-extra-")),
    });
    if user != want_user || groups != ["system:serviceaccounts"] {
        return reply(
            StatusCode::FORBIDDEN,
            &format!("fake virt-api: unexpected identity {user:?} {groups:?}"),
        );
    }
    let Some(rest) = path.strip_prefix("/apis/subresources.kubevirt.io/v1/namespaces/") else {
        return reply(StatusCode::NOT_FOUND, "fake virt-api: unknown path");
    };
    if parts.method == http::Method::PUT {
        if rest.contains("/virtualmachineinstances/vm-stopped/") {
            let mut r = reply(
                StatusCode::NOT_FOUND,
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"virtualmachineinstances.subresources.kubevirt.io \"vm-stopped\" not found","reason":"NotFound","details":{"name":"vm-stopped","group":"subresources.kubevirt.io","kind":"virtualmachineinstances"},"code":404}"#,
            );
            r.headers_mut()
                .insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
            return r;
        }
        return reply(StatusCode::OK, "");
    }
    let segs: Vec<&str> = rest.split('/').collect();
    let stream = match segs[..] {
        [_, "virtualmachineinstances", _, "console"] => Stream::Echo,
        [_, "virtualmachineinstances", _, "vnc"] => Stream::Vnc,
        [_, "virtualmachineinstances", _, "portforward", port, "tcp"] => match port.parse() {
            Ok(p) => Stream::Forward(p),
            Err(_) => return reply(StatusCode::BAD_REQUEST, "fake virt-api: bad port"),
        },
        _ => return reply(StatusCode::NOT_FOUND, "fake virt-api: unknown path"),
    };
    let Some(key) = parts.headers.get("sec-websocket-key") else {
        return reply(StatusCode::BAD_REQUEST, "fake virt-api: not a WebSocket request");
    };
    let mut resp = reply(StatusCode::SWITCHING_PROTOCOLS, "");
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, "Upgrade".parse().unwrap());
    h.insert(header::UPGRADE, "websocket".parse().unwrap());
    h.insert(
        "sec-websocket-accept",
        derive_accept_key(key.as_bytes()).parse().unwrap(),
    );
    let offered = parts
        .headers
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if offered.split(',').any(|p| p.trim() == "plain.kubevirt.io") {
        h.insert("sec-websocket-protocol", "plain.kubevirt.io".parse().unwrap());
    }
    tokio::spawn(async move {
        let Ok(up) = upgrade.await else { return };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(up), Role::Server, None).await;
        stream.run(ws).await;
    });
    resp
}

enum Stream {
    Echo,
    Vnc,
    Forward(u16),
}

impl Stream {
    async fn run<S>(self, mut ws: WebSocketStream<S>)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        match self {
            Stream::Echo | Stream::Vnc => {
                if matches!(self, Stream::Vnc)
                    && ws
                        .send(Message::Binary(Bytes::from_static(b"RFB 003.008\n")))
                        .await
                        .is_err()
                {
                    return;
                }
                while let Some(Ok(m)) = ws.next().await {
                    if m.is_close() {
                        return;
                    }
                    if (m.is_binary() || m.is_text()) && ws.send(m).await.is_err() {
                        return;
                    }
                }
            }
            Stream::Forward(port) => {
                let Ok(tcp) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
                    let _ = ws.close(None).await;
                    return;
                };
                let _ = tcp.set_nodelay(true);
                // Both directions at once: a peer that writes back while we write (an echo
                // port) must not wait for us to finish writing.
                let (mut rd, mut wr) = tcp.into_split();
                let (mut sink, mut stream) = ws.split();
                let up = async {
                    while let Some(Ok(m)) = stream.next().await {
                        match m {
                            Message::Binary(b) if wr.write_all(&b).await.is_err() => break,
                            Message::Close(_) => break,
                            _ => {}
                        }
                    }
                    let _ = wr.shutdown().await;
                };
                let down = async {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        match rd.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                let m = Message::Binary(Bytes::copy_from_slice(&buf[..n]));
                                if sink.send(m).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = sink.close().await;
                };
                tokio::join!(up, down);
            }
        }
    }
}

/// A TCP echo server on a free loopback port (the port-forward target).
pub fn echo_server() -> u16 {
    kube_api_rewriter_testkit::spawn_double(|mut s| async move {
        let _ = s.set_nodelay(true);
        let (mut r, mut w) = s.split();
        let _ = tokio::io::copy(&mut r, &mut w).await;
    })
}
