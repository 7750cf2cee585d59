//! The hop to virt-api: mutual TLS with the proxy client certificate and the KubeVirt CA
//! bundle, this server's own service-account identity in `X-Remote-User`/`X-Remote-Group`,
//! and, for streams, the upgrade spliced byte for byte (WebSocket and SPDY alike).
//!
//! Or, in sidecar mode, plain HTTP on loopback to a kube-api-rewriter sidecar
//! (`rules/virtualization-api.yaml`): virt-api's path shapes under this server's own group and
//! version; the sidecar renames the group, holds the client certificate and sets the identity.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::error::{Error, Result};
use crate::flags::Endpoint;
use crate::status::{Body, empty};
use crate::subresources::{GROUP, Target, VERSION, VIRT_API_PREFIX};

/// The largest request body read (PUT options; virt-api bodies are small).
pub const MAX_BODY: usize = 1 << 20;
/// Time to connect and finish the TLS handshake.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time virt-api has to send response headers.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

/// Headers never copied between the hops (RFC 9110 §7.6.1, and `Host`, set anew).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// virt-api: where it is, how to reach it, and who we are to it.
pub struct VirtApi {
    endpoint: Endpoint,
    /// `None`: plain HTTP to the sidecar.
    tls: Option<(TlsConnector, ServerName<'static>)>,
    user: HeaderValue,
    group: HeaderValue,
}

impl std::fmt::Debug for VirtApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtApi")
            .field("endpoint", &self.endpoint)
            .field("sidecar", &self.tls.is_none())
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// Whether a request asks to upgrade (`Connection: upgrade` and an `Upgrade` header).
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// The headers sent to virt-api: the client's, minus hop-by-hop ones, credentials and any
/// identity; plus ours. For an upgrade, `Connection: Upgrade` and `Upgrade` are kept.
pub fn upstream_headers(
    incoming: &HeaderMap,
    upgrade: bool,
    host: &HeaderValue,
    user: &HeaderValue,
    group: &HeaderValue,
) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(incoming.len() + 4);
    for (k, v) in incoming {
        let n = k.as_str();
        if HOP_BY_HOP.contains(&n)
            || n.starts_with("x-remote-")
            || k == header::AUTHORIZATION
            || k == header::HOST
            || k == header::CONTENT_LENGTH
            || k == header::COOKIE
        {
            continue;
        }
        out.append(k.clone(), v.clone());
    }
    if upgrade {
        out.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        if let Some(u) = incoming.get(header::UPGRADE) {
            out.insert(header::UPGRADE, u.clone());
        }
    }
    out.insert(header::HOST, host.clone());
    out.insert(HeaderName::from_static("x-remote-user"), user.clone());
    out.insert(HeaderName::from_static("x-remote-group"), group.clone());
    out
}

impl VirtApi {
    /// virt-api at `endpoint`, reached with `tls` (`None`: the sidecar, plain HTTP), as
    /// service account `user`.
    pub fn new(endpoint: Endpoint, tls: Option<rustls::ClientConfig>, user: &str) -> Result<VirtApi> {
        let tls = match tls {
            Some(cfg) => {
                let name = ServerName::try_from(endpoint.host.clone()).map_err(|e| Error::Flag {
                    flag: "--kubevirt-endpoint",
                    message: format!("{:?}: {e}", endpoint.host),
                })?;
                Some((TlsConnector::from(Arc::new(cfg)), name))
            }
            None => None,
        };
        let user = HeaderValue::try_from(user).map_err(|e| Error::Flag {
            flag: "--service-account-name",
            message: e.to_string(),
        })?;
        Ok(VirtApi {
            endpoint,
            tls,
            user,
            group: HeaderValue::from_static("system:serviceaccounts"),
        })
    }

    fn host_header(&self) -> HeaderValue {
        let h = if self.endpoint.host.contains(':') {
            format!("[{}]:{}", self.endpoint.host, self.endpoint.port)
        } else {
            format!("{}:{}", self.endpoint.host, self.endpoint.port)
        };
        HeaderValue::try_from(h).unwrap_or_else(|_| HeaderValue::from_static("virt-api"))
    }

    /// The path sent for a virt-api path: itself, or in sidecar mode the same shape under
    /// this server's group and version (the sidecar's rules rename it back).
    pub fn path_for(&self, virt_api_path: &str) -> String {
        match (&self.tls, virt_api_path.strip_prefix(VIRT_API_PREFIX)) {
            (None, Some(rest)) => format!("/apis/{GROUP}/{VERSION}/namespaces{rest}"),
            _ => virt_api_path.to_owned(),
        }
    }

    async fn connect(&self) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
        let addr = format!("{}:{}", self.endpoint.host, self.endpoint.port);
        let dial = async {
            let tcp = TcpStream::connect((self.endpoint.host.as_str(), self.endpoint.port))
                .await
                .map_err(|e| Error::Unavailable(format!("dial tcp {addr}: {e}")))?;
            let _ = tcp.set_nodelay(true);
            let Some((tls, name)) = &self.tls else {
                return Ok(Conn::Plain(tcp));
            };
            tls.connect(name.clone(), tcp)
                .await
                .map(|t| Conn::Tls(Box::new(t)))
                .map_err(|e| Error::Unavailable(format!("TLS handshake with {addr}: {e}")))
        };
        let conn = tokio::time::timeout(CONNECT_TIMEOUT, dial)
            .await
            .map_err(|_| Error::Unavailable(format!("dial tcp {addr}: timed out")))??;
        match conn {
            Conn::Plain(tcp) => handshake(&addr, tcp).await,
            Conn::Tls(tls) => handshake(&addr, *tls).await,
        }
    }

    /// Sends `req` to `target` on virt-api and relays the answer. A stream request must be an
    /// upgrade (checked by the caller); its `101` is relayed and the two connections spliced.
    pub async fn forward(
        &self,
        mut req: Request<Incoming>,
        target: Target,
        stream: bool,
    ) -> Result<Response<Body>> {
        let upgrade = stream && is_upgrade(req.headers());
        let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
        // A declared length over the limit is refused before anything is read (a client that
        // sent `Expect: 100-continue` then sends nothing).
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > MAX_BODY as u64) {
            return Err(Error::PayloadTooLarge(MAX_BODY));
        }
        let (parts, body) = req.into_parts();
        // The whole body is read before answering: the aggregator reuses connections.
        let body = Limited::new(body, MAX_BODY)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    Error::PayloadTooLarge(MAX_BODY)
                } else {
                    Error::BadRequest(format!("reading the request body: {e}"))
                }
            })?
            .to_bytes();
        let body = match target.body {
            Some(b) => Bytes::from(b),
            None => body,
        };
        let path = self.path_for(&target.path);
        let path_and_query = match parts.uri.query() {
            Some(q) if !upgrade && !q.is_empty() => format!("{path}?{q}"),
            _ => path,
        };
        let uri: Uri = path_and_query
            .parse()
            .map_err(|e| Error::BadRequest(format!("virt-api path: {e}")))?;
        let mut headers = upstream_headers(
            &parts.headers,
            upgrade,
            &self.host_header(),
            &self.user,
            &self.group,
        );
        if !body.is_empty() || parts.method == http::Method::PUT {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        }
        let mut out = Request::new(Full::new(body));
        *out.method_mut() = parts.method.clone();
        *out.uri_mut() = uri;
        *out.headers_mut() = headers;

        let mut sender = self.connect().await?;
        let mut resp = tokio::time::timeout(RESPONSE_TIMEOUT, sender.send_request(out))
            .await
            .map_err(|_| Error::Unavailable("virt-api did not answer in time".into()))?
            .map_err(|e| Error::Unavailable(describe(&e)))?;

        if upgrade && resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            let server_upgrade = hyper::upgrade::on(&mut resp);
            let Some(client_upgrade) = client_upgrade else {
                return Err(Error::Internal("upgrade without a client connection".into()));
            };
            tokio::spawn(async move {
                match tokio::try_join!(client_upgrade, server_upgrade) {
                    Ok((c, s)) => {
                        let (mut c, mut s) = (TokioIo::new(c), TokioIo::new(s));
                        match tokio::io::copy_bidirectional(&mut c, &mut s).await {
                            Ok((up, down)) => tracing::debug!(up, down, "stream closed"),
                            Err(e) => tracing::debug!(error = %e, "stream ended with an error"),
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "upgrade failed"),
                }
            });
            let (parts, _) = resp.into_parts();
            return Ok(Response::from_parts(parts, empty()));
        }
        let (mut parts, body) = resp.into_parts();
        for h in HOP_BY_HOP {
            parts.headers.remove(h);
        }
        Ok(Response::from_parts(parts, body.boxed()))
    }
}

/// A connection to virt-api or to the sidecar.
enum Conn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// An HTTP/1.1 client connection over `io` (driven by its own task, upgrades allowed).
async fn handshake<T>(addr: &str, io: T) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::Builder::new()
        .handshake(TokioIo::new(io))
        .await
        .map_err(|e| Error::Unavailable(format!("{addr}: {e}")))?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "virt-api connection ended with an error");
        }
    });
    Ok(sender)
}

/// A hyper client error with its causes (TLS alerts show up here).
fn describe(e: &hyper::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hv(s: &'static str) -> HeaderValue {
        HeaderValue::from_static(s)
    }

    #[test]
    fn sidecar_paths_are_under_our_group() {
        let ep = |tls| Endpoint {
            host: "127.0.0.1".into(),
            port: 1,
            tls,
        };
        let vmi = "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachineinstances/v/console";
        let sidecar = VirtApi::new(ep(false), None, "u").unwrap();
        assert_eq!(
            sidecar.path_for(vmi),
            "/apis/subresources.virtualization.deckhouse.io/v1alpha2/namespaces/ns/virtualmachineinstances/v/console"
        );
        crate::tls::install_default_provider();
        let cfg = rustls::ClientConfig::builder()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let direct = VirtApi::new(ep(true), Some(cfg), "u").unwrap();
        assert_eq!(direct.path_for(vmi), vmi);
    }

    #[test]
    fn upgrade_detection() {
        let mut h = HeaderMap::new();
        assert!(!is_upgrade(&h));
        h.insert(header::UPGRADE, hv("websocket"));
        assert!(!is_upgrade(&h));
        h.insert(header::CONNECTION, hv("keep-alive, Upgrade"));
        assert!(is_upgrade(&h));
        h.remove(header::UPGRADE);
        assert!(!is_upgrade(&h));
    }

    #[test]
    fn identity_and_credentials_are_not_forwarded() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, hv("Bearer secret"));
        h.insert("x-remote-user", hv("alice"));
        h.append("x-remote-group", hv("system:masters"));
        h.insert("x-remote-extra-scopes", hv("x"));
        h.insert(header::HOST, hv("localhost:8443"));
        h.insert(header::CONNECTION, hv("Upgrade"));
        h.insert(header::UPGRADE, hv("websocket"));
        h.insert("sec-websocket-protocol", hv("plain.kubevirt.io"));
        h.insert(header::TRANSFER_ENCODING, hv("chunked"));
        let out = upstream_headers(
            &h,
            true,
            &hv("virt-api:443"),
            &hv("system:serviceaccount:d8-virtualization:virtualization-api"),
            &hv("system:serviceaccounts"),
        );
        assert_eq!(
            out["x-remote-user"],
            "system:serviceaccount:d8-virtualization:virtualization-api"
        );
        assert_eq!(out.get_all("x-remote-group").iter().count(), 1);
        assert_eq!(out["x-remote-group"], "system:serviceaccounts");
        assert!(!out.contains_key("x-remote-extra-scopes"));
        assert!(!out.contains_key(header::AUTHORIZATION));
        assert!(!out.contains_key(header::TRANSFER_ENCODING));
        assert_eq!(out[header::HOST], "virt-api:443");
        assert_eq!(out[header::UPGRADE], "websocket");
        assert_eq!(out["sec-websocket-protocol"], "plain.kubevirt.io");
        let plain = upstream_headers(&h, false, &hv("h"), &hv("u"), &hv("g"));
        assert!(!plain.contains_key(header::UPGRADE));
        assert!(!plain.contains_key(header::CONNECTION));
    }
}
