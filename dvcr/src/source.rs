//! Where an image comes from: an http(s) URL, a registry image, or a local file; fetched into
//! the scratch directory (a local file is used where it is).

use std::path::{Path, PathBuf};
use std::time::Instant;

use hyper::header::{CONTENT_LENGTH, LOCATION};
use hyper::{Request, StatusCode};
use md5::Digest as _;
use ring::digest::{Context, SHA256};
use serde::Deserialize;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::mpsc;

use crate::client::{ChannelReader, Http, empty, hex, next_chunk, redact};
use crate::layer::extract_disk;
use crate::progress::{Progress, average};
use crate::registry::{Registry, resolve};
use crate::{Credentials, Error, ImageReference, Result};

/// Redirects an http source may take.
const MAX_REDIRECTS: usize = 10;

/// Where the image comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// An http or https URL.
    Http {
        /// The URL.
        url: String,
        /// The expected SHA-256 of the file (hex).
        sha256: Option<String>,
        /// The expected MD5 of the file (hex).
        md5: Option<String>,
        /// A PEM bundle trusted for https (beside the OS roots).
        ca_file: Option<PathBuf>,
    },
    /// An image in a registry whose layers hold the disk under `disk/` (a containerDisk).
    Registry {
        /// The image.
        image: ImageReference,
        /// A `.dockerconfigjson` file with the registry's credentials.
        auth_file: Option<PathBuf>,
        /// A PEM bundle trusted for the registry (beside the OS roots).
        ca_file: Option<PathBuf>,
    },
    /// A disk file, or a directory holding `disk.img`.
    File {
        /// The file or directory.
        path: PathBuf,
    },
}

/// A fetched file.
pub(crate) struct Fetched {
    pub(crate) path: PathBuf,
    /// In the scratch directory: may be moved or removed.
    pub(crate) owned: bool,
    /// Bytes per second of the fetch.
    pub(crate) speed: u64,
}

impl Source {
    /// Fetches the image into `scratch` (a local file stays where it is).
    pub(crate) async fn fetch(&self, scratch: &Path) -> Result<Fetched> {
        match self {
            Source::Http {
                url,
                sha256,
                md5,
                ca_file,
            } => {
                let dst = scratch.join("source");
                let speed =
                    fetch_http(url, sha256.as_deref(), md5.as_deref(), ca_file.as_deref(), &dst).await?;
                Ok(Fetched {
                    path: dst,
                    owned: true,
                    speed,
                })
            }
            Source::Registry {
                image,
                auth_file,
                ca_file,
            } => {
                let dst = scratch.join("source");
                let creds = match auth_file {
                    Some(f) => Credentials::from_docker_config(f, &image.host)?,
                    None => None,
                };
                let speed = pull(image, creds, ca_file.as_deref(), &dst).await?;
                Ok(Fetched {
                    path: dst,
                    owned: true,
                    speed,
                })
            }
            Source::File { path } => {
                let start = Instant::now();
                let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
                let file = if meta.is_dir() {
                    path.join("disk.img")
                } else {
                    path.clone()
                };
                let size = std::fs::metadata(&file).map_err(|e| Error::io(&file, e))?.len();
                Ok(Fetched {
                    path: file,
                    owned: false,
                    speed: average(size, start.elapsed()),
                })
            }
        }
    }
}

/// Downloads `url` to `dst`, checking the checksums given; bytes per second.
async fn fetch_http(
    url: &str,
    sha256: Option<&str>,
    md5: Option<&str>,
    ca_file: Option<&Path>,
    dst: &Path,
) -> Result<u64> {
    let http = Http::new(ca_file)?;
    let mut current = url.to_owned();
    let mut redirects = 0;
    let resp = loop {
        let req = Request::get(&current)
            .body(empty())
            .map_err(|e| Error::Config(format!("SOURCE_URL {}: {e}", redact(url))))?;
        let resp = http.send(req).await?;
        let status = resp.status();
        if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
            redirects += 1;
            if redirects > MAX_REDIRECTS {
                return Err(Error::Http(format!(
                    "GET {}: more than {MAX_REDIRECTS} redirects",
                    redact(url)
                )));
            }
            let loc = resp
                .headers()
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| Error::Http(format!("GET {}: {status} without Location", redact(&current))))?;
            current = resolve(&origin(&current), loc);
            continue;
        }
        if !status.is_success() {
            return Err(Error::Http(format!("GET {} answered {status}", redact(&current))));
        }
        break resp;
    };
    let total = resp
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut body = resp.into_body();
    let mut out = tokio::fs::File::create(dst)
        .await
        .map_err(|e| Error::io(dst, e))?;
    let mut sha = sha256.map(|_| Context::new(&SHA256));
    let mut md = md5.map(|_| md5::Md5::new());
    let mut progress = Progress::new("download", total);
    let what = format!("GET {}", redact(&current));
    while let Some(chunk) = next_chunk(&mut body, &what).await? {
        if let Some(s) = &mut sha {
            s.update(&chunk);
        }
        if let Some(m) = &mut md {
            m.update(&chunk);
        }
        out.write_all(&chunk).await.map_err(|e| Error::io(dst, e))?;
        progress.add(chunk.len());
    }
    out.flush().await.map_err(|e| Error::io(dst, e))?;
    progress.finish();
    if let Some(t) = total.filter(|t| *t != progress.bytes()) {
        return Err(Error::Http(format!(
            "{what}: the body has {} bytes of the {t} announced",
            progress.bytes()
        )));
    }
    if let (Some(s), Some(expected)) = (sha, sha256) {
        check("sha256", &hex(s.finish().as_ref()), expected)?;
    }
    if let (Some(m), Some(expected)) = (md, md5) {
        check("md5", &hex(&m.finalize()), expected)?;
    }
    Ok(progress.average())
}

fn check(algorithm: &'static str, actual: &str, expected: &str) -> Result<()> {
    let expected = expected.trim().to_ascii_lowercase();
    if actual == expected {
        return Ok(());
    }
    Err(Error::Checksum {
        algorithm,
        actual: actual.to_owned(),
        expected,
    })
}

/// `scheme://authority` of a URL.
fn origin(url: &str) -> String {
    let after = url.find("://").map_or(0, |i| i + 3);
    match url[after..].find('/') {
        Some(i) => url[..after + i].to_owned(),
        None => url.to_owned(),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Manifest {
    media_type: Option<String>,
    #[serde(default)]
    layers: Vec<Descriptor>,
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    digest: String,
    #[serde(default)]
    size: u64,
    platform: Option<Platform>,
}

#[derive(Deserialize)]
struct Platform {
    architecture: String,
    os: String,
}

/// Pulls `image` and writes the first file under `disk/` of its layers to `dst`.
async fn pull(
    image: &ImageReference,
    creds: Option<Credentials>,
    ca_file: Option<&Path>,
    dst: &Path,
) -> Result<u64> {
    let reg = Registry::connect(image, creds, ca_file, false).await?;
    let host = reg.host().to_owned();
    let (bytes, content_type) = reg.manifest(&image.reference).await?;
    let malformed =
        |e: serde_json::Error| Error::registry(&host, format!("malformed manifest of {image} ({e})"));
    let mut manifest: Manifest = serde_json::from_slice(&bytes).map_err(malformed)?;
    let media = manifest.media_type.clone().unwrap_or(content_type);
    if media.contains("index") || media.contains("manifest.list") || !manifest.manifests.is_empty() {
        let pick = manifest
            .manifests
            .iter()
            .find(|m| {
                m.platform
                    .as_ref()
                    .is_some_and(|p| p.os == "linux" && p.architecture == "amd64")
            })
            .or_else(|| manifest.manifests.iter().find(|m| m.platform.is_none()))
            .ok_or_else(|| Error::registry(&host, format!("{image} has no linux/amd64 image")))?;
        let (bytes, _) = reg.manifest(&pick.digest).await?;
        manifest = serde_json::from_slice(&bytes).map_err(malformed)?;
    }
    if manifest.layers.is_empty() {
        return Err(Error::registry(&host, format!("{image} has no layers")));
    }
    let total = manifest.layers.iter().map(|l| l.size).sum();
    let mut progress = Progress::new("pull", Some(total));
    for layer in &manifest.layers {
        let resp = reg.blob(&layer.digest).await?;
        let mut body = resp.into_body();
        let (tx, rx) = mpsc::channel(16);
        let out = dst.to_owned();
        let extract = tokio::task::spawn_blocking(move || extract_disk(ChannelReader::new(rx), &out));
        let what = format!("GET blob {}", layer.digest);
        let mut failed = None;
        loop {
            match next_chunk(&mut body, &what).await {
                Ok(Some(c)) => {
                    progress.add(c.len());
                    if tx.send(Ok(c)).await.is_err() {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                    failed = Some(e);
                    break;
                }
            }
        }
        drop(tx);
        let result = extract
            .await
            .map_err(|e| Error::Http(format!("reading the layer: {e}")))?;
        if let Some(e) = failed {
            return Err(e);
        }
        let (found, digest) = result?;
        let want = layer.digest.strip_prefix("sha256:").unwrap_or(&layer.digest);
        if digest != want {
            return Err(Error::registry(
                &host,
                format!("blob {} has sha256 {digest}", layer.digest),
            ));
        }
        if found {
            progress.finish();
            return Ok(progress.average());
        }
    }
    Err(Error::registry(
        &host,
        format!("{image} has no file under disk/ (not a containerDisk image)"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_and_origins() {
        assert!(check("sha256", "ab", " AB ").is_ok());
        let e = check("sha256", "ab", "cd").unwrap_err();
        assert_eq!(
            e.to_string(),
            "checksum mismatch: sha256 of the downloaded file is ab, expected cd"
        );
        assert_eq!(origin("https://h:1/a/b?c"), "https://h:1");
        assert_eq!(origin("http://h"), "http://h");
    }
}
