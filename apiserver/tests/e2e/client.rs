//! How the cases talk to the servers: curl straight to a server (as the aggregator would, or
//! as anyone else), kubectl through kube-apiserver as the admin or as `user1`, and WebSockets
//! through kube-apiserver.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use kube_api_rewriter_testkit as tk;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

use crate::env::{Env, GROUP_PATH, NS, Server};

/// The path of subresource `sub` of VM `name` in our group.
pub fn vm_path(name: &str, sub: &str) -> String {
    format!("{GROUP_PATH}/namespaces/{NS}/virtualmachines/{name}/{sub}")
}

/// curl straight to a virtualization-api: `-w` code after the body.
pub fn direct(
    s: &Server,
    env: &Env,
    cert: Option<(&str, &str)>,
    headers: &[&str],
    args: &[&str],
    path: &str,
) -> (u16, String) {
    let mut a: Vec<String> = vec![
        "-sS".into(),
        "--max-time".into(),
        "20".into(),
        "--cacert".into(),
        env.module_ca.to_str().unwrap().into(),
        "-w".into(),
        "\n%{http_code}".into(),
    ];
    if let Some((c, k)) = cert {
        a.extend(["--cert".into(), c.into(), "--key".into(), k.into()]);
    }
    for h in headers {
        a.extend(["-H".into(), (*h).into()]);
    }
    a.extend(args.iter().map(|x| (*x).to_owned()));
    a.push(s.url(path));
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    let out = tk::curl(&refs);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.parse().unwrap_or(0), body.to_owned())
}

impl Env {
    fn front_proxy(&self) -> (&str, &str) {
        (
            self.cp.get("FRONT_PROXY_CLIENT_CERT"),
            self.cp.get("FRONT_PROXY_CLIENT_KEY"),
        )
    }

    /// A request as the aggregator would send it for `user` (in `groups`).
    pub fn as_user(
        &self,
        s: &Server,
        user: &str,
        groups: &[&str],
        args: &[&str],
        path: &str,
    ) -> (u16, String) {
        let mut h = vec![format!("X-Remote-User: {user}")];
        h.extend(groups.iter().map(|g| format!("X-Remote-Group: {g}")));
        let h: Vec<&str> = h.iter().map(String::as_str).collect();
        direct(s, self, Some(self.front_proxy()), &h, args, path)
    }

    pub fn admin(&self, s: &Server, args: &[&str], path: &str) -> (u16, String) {
        self.as_user(s, "admin", &["system:masters"], args, path)
    }

    pub fn kubectl(&self, args: &[&str]) -> std::process::Output {
        self.cp.kubectl(args)
    }

    pub fn user1(&self, args: &[&str]) -> std::process::Output {
        tk::kubectl(self.cp.get("USER1_KUBECONFIG"), args)
    }

    /// `kubectl replace --raw PATH` with `body` (a PUT through kube-apiserver).
    pub fn put(&self, path: &str, body: &str) -> std::process::Output {
        let f = self.dir.join("body.json");
        std::fs::write(&f, body).unwrap();
        self.kubectl(&["replace", "--raw", path, "-f", f.to_str().unwrap()])
    }

    /// Opens a WebSocket through kube-apiserver (bearer `token`) to `path`.
    pub async fn ws(
        &self,
        path: &str,
        token: &str,
    ) -> Result<
        (
            tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
            http::Response<Option<Vec<u8>>>,
        ),
        tokio_tungstenite::tungstenite::Error,
    > {
        let port: u16 = self.cp.get("APISERVER_PORT").parse().unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(self.cp.get("KUBE_CA_FILE")).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let mut cfg =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
            .await
            .unwrap();
        let mut req = format!("wss://127.0.0.1:{port}{path}")
            .into_client_request()
            .unwrap();
        req.headers_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        req.headers_mut()
            .insert("sec-websocket-protocol", "plain.kubevirt.io".parse().unwrap());
        tokio_tungstenite::client_async(req, tls).await
    }
}

/// Reads the next binary message (skipping pings), with a deadline.
pub async fn next_binary<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>) -> Vec<u8>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let read = async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => return b.to_vec(),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                other => panic!("expected a binary message, got {other:?}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("a message within 20 s")
}
