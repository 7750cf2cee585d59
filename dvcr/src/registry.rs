//! A client of the OCI distribution API, as much of it as pulling and pushing a disk image
//! needs: the `/v2/` probe and its Basic or Bearer token challenge, manifests, blobs (streamed
//! both ways), chunked uploads and deletes.
//!
//! Written by hand rather than with `oci-client`, because that crate buffers whole blobs in
//! memory (a 1 GB layer would be a 1 GB allocation); here layers stream from and to files.

use std::path::Path;
use std::sync::atomic::AtomicU64;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, LOCATION, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;

use crate::auth::{Challenge, Credentials};
use crate::client::{Body, Http, empty, full, read_body, redact};
use crate::{Error, ImageReference, Result};

/// What a registry may answer for a manifest, single images and indexes, OCI and Docker.
pub(crate) const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
application/vnd.docker.distribution.manifest.v2+json, \
application/vnd.oci.image.index.v1+json, \
application/vnd.docker.distribution.manifest.list.v2+json";

/// Redirects a blob download follows.
const MAX_REDIRECTS: usize = 10;
/// Manifests, tokens and error bodies are small.
const SMALL: usize = 4 << 20;

/// A registry session for one repository.
pub(crate) struct Registry {
    http: Http,
    host: String,
    base: String,
    repository: String,
    auth: Option<String>,
}

impl Registry {
    /// Probes `GET /v2/` of the image's registry and authenticates as it asks: no
    /// credentials, Basic, or a Bearer token for the repository (`pull`, and `push` if asked).
    pub(crate) async fn connect(
        image: &ImageReference,
        creds: Option<Credentials>,
        ca_file: Option<&Path>,
        push: bool,
    ) -> Result<Self> {
        Self::connect_with(Http::new(ca_file)?, image, creds, push).await
    }

    /// [`Registry::connect`] through `http`.
    pub(crate) async fn connect_with(
        http: Http,
        image: &ImageReference,
        creds: Option<Credentials>,
        push: bool,
    ) -> Result<Self> {
        let mut r = Registry {
            http,
            host: image.host.clone(),
            base: format!("https://{}", image.host),
            repository: image.repository.clone(),
            auth: None,
        };
        let url = format!("{}/v2/", r.base);
        let resp = r.send(Method::GET, &url, &[], empty()).await?;
        let status = resp.status();
        if status.is_success() {
            return Ok(r);
        }
        if status != StatusCode::UNAUTHORIZED {
            return Err(r.status_error("GET /v2/", resp).await);
        }
        let challenge = resp
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .and_then(Challenge::parse);
        match challenge {
            Some(Challenge::Basic) | None => {
                let Some(c) = creds else {
                    return Err(Error::registry(
                        &r.host,
                        "asks for credentials (401 Unauthorized) and none were given",
                    ));
                };
                r.auth = Some(c.basic());
            }
            Some(Challenge::Bearer { realm, service }) => {
                let token = r.token(&realm, service.as_deref(), creds.as_ref(), push).await?;
                r.auth = Some(format!("Bearer {token}"));
            }
        }
        let resp = r.send(Method::GET, &url, &[], empty()).await?;
        if !resp.status().is_success() {
            return Err(r.status_error("GET /v2/", resp).await);
        }
        Ok(r)
    }

    async fn token(
        &self,
        realm: &str,
        service: Option<&str>,
        creds: Option<&Credentials>,
        push: bool,
    ) -> Result<String> {
        let actions = if push { "pull,push" } else { "pull" };
        let mut url = format!("{realm}?scope=repository:{}:{actions}", self.repository);
        if let Some(s) = service {
            url.push_str("&service=");
            url.push_str(&form_escape(s));
        }
        let mut req = Request::get(&url);
        if let Some(c) = creds {
            req = req.header(AUTHORIZATION, c.basic());
        }
        let req = req
            .body(empty())
            .map_err(|e| Error::registry(&self.host, format!("token request: {e}")))?;
        let resp = self.http.send(req).await?;
        if resp.status() == StatusCode::UNAUTHORIZED {
            return Err(Error::Unauthorized {
                host: self.host.clone(),
            });
        }
        if !resp.status().is_success() {
            return Err(Error::registry(
                &self.host,
                format!("the token service {} answered {}", redact(realm), resp.status()),
            ));
        }
        #[derive(Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let body = read_body(resp.into_body(), SMALL, "token").await?;
        let t: Token = serde_json::from_slice(&body)
            .map_err(|e| Error::registry(&self.host, format!("malformed token answer ({e})")))?;
        t.token
            .or(t.access_token)
            .ok_or_else(|| Error::registry(&self.host, "the token answer has no token"))
    }

    /// Sends a request with the session's credentials; a 401 means they were refused.
    async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(hyper::header::HeaderName, String)],
        body: Body,
    ) -> Result<Response<Incoming>> {
        self.send_with(method, url, headers, body, None).await
    }

    /// [`Registry::send`], watched for progress of `sent` instead of an overall deadline.
    async fn send_with(
        &self,
        method: Method,
        url: &str,
        headers: &[(hyper::header::HeaderName, String)],
        body: Body,
        sent: Option<&AtomicU64>,
    ) -> Result<Response<Incoming>> {
        let mut req = Request::builder().method(method).uri(url);
        if let Some(a) = &self.auth {
            req = req.header(AUTHORIZATION, a);
        }
        for (k, v) in headers {
            req = req.header(k, v);
        }
        let req = req
            .body(body)
            .map_err(|e| Error::registry(&self.host, format!("{}: {e}", redact(url))))?;
        let resp = match sent {
            Some(sent) => self.http.send_watched(req, sent).await?,
            None => self.http.send(req).await?,
        };
        if resp.status() == StatusCode::UNAUTHORIZED && self.auth.is_some() {
            return Err(Error::Unauthorized {
                host: self.host.clone(),
            });
        }
        Ok(resp)
    }

    /// An error naming `what`, the status and the registry's own message.
    async fn status_error(&self, what: &str, resp: Response<Incoming>) -> Error {
        let status = resp.status();
        if status == StatusCode::UNAUTHORIZED {
            return Error::Unauthorized {
                host: self.host.clone(),
            };
        }
        #[derive(Deserialize)]
        struct Errors {
            errors: Vec<Detail>,
        }
        #[derive(Deserialize)]
        struct Detail {
            code: Option<String>,
            message: Option<String>,
        }
        let body = read_body(resp.into_body(), SMALL, what).await.unwrap_or_default();
        let detail = serde_json::from_slice::<Errors>(&body)
            .ok()
            .and_then(|e| e.errors.into_iter().next())
            .map(|d| {
                let code = d.code.unwrap_or_default();
                let msg = d.message.unwrap_or_default();
                format!(" ({code}: {msg})")
            })
            .unwrap_or_default();
        Error::registry(&self.host, format!("{what} answered {status}{detail}"))
    }

    fn url(&self, tail: &str) -> String {
        format!("{}/v2/{}/{tail}", self.base, self.repository)
    }

    /// The manifest `reference` (a tag or digest): its bytes and media type.
    pub(crate) async fn manifest(&self, reference: &str) -> Result<(Vec<u8>, String)> {
        let what = format!("GET manifest {}:{reference}", self.repository);
        let url = self.url(&format!("manifests/{reference}"));
        let resp = self
            .send(
                Method::GET,
                &url,
                &[(ACCEPT, MANIFEST_ACCEPT.to_owned())],
                empty(),
            )
            .await?;
        if !resp.status().is_success() {
            return Err(self.status_error(&what, resp).await);
        }
        let ct = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        Ok((read_body(resp.into_body(), SMALL, &what).await?, ct))
    }

    /// The digest of manifest `reference`, `None` if it does not exist.
    pub(crate) async fn manifest_digest(&self, reference: &str) -> Result<Option<String>> {
        let what = format!("HEAD manifest {}:{reference}", self.repository);
        let url = self.url(&format!("manifests/{reference}"));
        let resp = self
            .send(
                Method::HEAD,
                &url,
                &[(ACCEPT, MANIFEST_ACCEPT.to_owned())],
                empty(),
            )
            .await?;
        if resp.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !resp.status().is_success() {
            return Err(self.status_error(&what, resp).await);
        }
        let digest = resp
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match digest {
            Some(d) => Ok(Some(d)),
            None if reference.starts_with("sha256:") => Ok(Some(reference.to_owned())),
            None => Err(Error::registry(
                &self.host,
                format!("{what}: no Docker-Content-Digest header"),
            )),
        }
    }

    /// Deletes manifest `digest`; one already gone is fine.
    pub(crate) async fn delete_manifest(&self, digest: &str) -> Result<()> {
        let what = format!("DELETE manifest {}@{digest}", self.repository);
        let url = self.url(&format!("manifests/{digest}"));
        let resp = self.send(Method::DELETE, &url, &[], empty()).await?;
        if resp.status().is_success() || resp.status() == StatusCode::NOT_FOUND {
            return Ok(());
        }
        Err(self.status_error(&what, resp).await)
    }

    /// A blob's response (its body unread), following redirects; credentials go only to the
    /// registry itself.
    pub(crate) async fn blob(&self, digest: &str) -> Result<Response<Incoming>> {
        let what = format!("GET blob {digest}");
        let mut url = self.url(&format!("blobs/{digest}"));
        for _ in 0..=MAX_REDIRECTS {
            let resp = if url.starts_with(&format!("{}/", self.base)) {
                self.send(Method::GET, &url, &[], empty()).await?
            } else {
                let req = Request::get(&url)
                    .body(empty())
                    .map_err(|e| Error::registry(&self.host, format!("{what}: {e}")))?;
                self.http.send(req).await?
            };
            if resp.status().is_redirection() {
                url = self.location(&resp, &what)?;
                continue;
            }
            if !resp.status().is_success() {
                return Err(self.status_error(&what, resp).await);
            }
            return Ok(resp);
        }
        Err(Error::registry(
            &self.host,
            format!("{what}: more than {MAX_REDIRECTS} redirects"),
        ))
    }

    /// Whether the repository has blob `digest` already.
    pub(crate) async fn has_blob(&self, digest: &str) -> Result<bool> {
        let url = self.url(&format!("blobs/{digest}"));
        let resp = self.send(Method::HEAD, &url, &[], empty()).await?;
        match resp.status() {
            s if s.is_success() => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(self.status_error(&format!("HEAD blob {digest}"), resp).await),
        }
    }

    /// Uploads blob `digest` of `len` bytes: POST an upload, PATCH the body, PUT the digest.
    /// With `sent` (the count of bytes taken from a streamed body) the PATCH has no deadline
    /// but must make progress.
    pub(crate) async fn upload_blob(
        &self,
        digest: &str,
        len: u64,
        body: Body,
        sent: Option<&AtomicU64>,
    ) -> Result<()> {
        let what = "POST blob upload";
        let resp = self
            .send(
                Method::POST,
                &self.url("blobs/uploads/"),
                &[(CONTENT_LENGTH, "0".into())],
                empty(),
            )
            .await?;
        if resp.status() != StatusCode::ACCEPTED {
            return Err(self.status_error(what, resp).await);
        }
        let location = self.location(&resp, what)?;
        let headers = [
            (CONTENT_TYPE, "application/octet-stream".to_owned()),
            (CONTENT_LENGTH, len.to_string()),
        ];
        let resp = self
            .send_with(Method::PATCH, &location, &headers, body, sent)
            .await?;
        if resp.status() != StatusCode::ACCEPTED {
            return Err(self.status_error("PATCH blob upload", resp).await);
        }
        let location = self.location(&resp, "PATCH blob upload")?;
        let sep = if location.contains('?') { '&' } else { '?' };
        let url = format!("{location}{sep}digest={digest}");
        let resp = self
            .send(Method::PUT, &url, &[(CONTENT_LENGTH, "0".into())], empty())
            .await?;
        if resp.status() != StatusCode::CREATED {
            return Err(self.status_error(&format!("PUT blob {digest}"), resp).await);
        }
        Ok(())
    }

    /// Uploads a small blob unless the repository has it.
    pub(crate) async fn put_small_blob(&self, digest: &str, bytes: Vec<u8>) -> Result<()> {
        if self.has_blob(digest).await? {
            return Ok(());
        }
        let len = bytes.len() as u64;
        self.upload_blob(digest, len, full(Bytes::from(bytes)), None)
            .await
    }

    /// Puts manifest `bytes` (of `media_type`) under `tag`; its digest `sha256:...`.
    pub(crate) async fn put_manifest(&self, tag: &str, media_type: &str, bytes: Vec<u8>) -> Result<String> {
        let what = format!("PUT manifest {}:{tag}", self.repository);
        let digest = format!("sha256:{}", crate::layer::sha256_hex(&bytes));
        let headers = [
            (CONTENT_TYPE, media_type.to_owned()),
            (CONTENT_LENGTH, bytes.len().to_string()),
        ];
        let resp = self
            .send(
                Method::PUT,
                &self.url(&format!("manifests/{tag}")),
                &headers,
                full(bytes),
            )
            .await?;
        if resp.status() != StatusCode::CREATED {
            return Err(self.status_error(&what, resp).await);
        }
        Ok(digest)
    }

    /// The absolute URL of a response's `Location`.
    fn location(&self, resp: &Response<Incoming>, what: &str) -> Result<String> {
        let loc = resp
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| Error::registry(&self.host, format!("{what}: no Location header")))?;
        Ok(resolve(&self.base, loc))
    }

    /// The registry's `host[:port]`.
    pub(crate) fn host(&self) -> &str {
        &self.host
    }
}

/// `loc` against `base` (`scheme://host`): absolute as is, `/path` on the same host.
pub(crate) fn resolve(base: &str, loc: &str) -> String {
    if loc.starts_with("https://") || loc.starts_with("http://") {
        loc.to_owned()
    } else if loc.starts_with('/') {
        format!("{base}{loc}")
    } else {
        format!("{base}/{loc}")
    }
}

/// Escapes a query value (service names are host names; be safe with the rest).
fn form_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_resolve_against_the_registry() {
        let b = "https://r:5000";
        assert_eq!(
            resolve(b, "/v2/a/blobs/uploads/x?s=1"),
            "https://r:5000/v2/a/blobs/uploads/x?s=1"
        );
        assert_eq!(resolve(b, "https://s3/x"), "https://s3/x");
        assert_eq!(form_escape("a b/c"), "a%20b%2Fc");
    }
}
