//! Where an image goes: pushed to a registry as a containerDisk image, or written as a raw
//! `disk.img` into a directory (a PVC); and deleting a pushed image.

use std::path::{Path, PathBuf};

use tokio::sync::mpsc;

use crate::client::ChannelBody;
use crate::format::{Format, Info, QemuImg};
use crate::layer::{self, Layer};
use crate::registry::Registry;
use crate::{Credentials, Error, ImageReference, Result, TerminationMessage};

/// Where the image is stored.
#[derive(Debug, Clone)]
pub enum Destination {
    /// Pushed to a registry under a tag.
    Registry {
        /// The image (`host[:port]/path:tag`).
        image: ImageReference,
        /// A `.dockerconfigjson` file with the registry's credentials.
        auth_file: Option<PathBuf>,
        /// A PEM bundle trusted for the registry (beside the OS roots).
        ca_file: Option<PathBuf>,
    },
    /// Written as `disk.img` (raw, or an iso as is) into a directory.
    Dir {
        /// The directory.
        dir: PathBuf,
        /// The disk's size: a larger virtual size is refused.
        max_size: Option<u64>,
    },
}

/// A destination made ready before the image is fetched (so that refused credentials fail
/// before a long download).
pub(crate) enum Ready {
    Registry { registry: Box<Registry>, tag: String },
    Dir { dir: PathBuf, max_size: Option<u64> },
}

impl Destination {
    pub(crate) async fn prepare(&self) -> Result<Ready> {
        match self {
            Destination::Registry {
                image,
                auth_file,
                ca_file,
            } => {
                if image.is_digest() {
                    return Err(Error::Config(format!(
                        "DESTINATION_IMAGE {image}: the destination needs a tag, not a digest"
                    )));
                }
                let creds = match auth_file {
                    Some(f) => Credentials::from_docker_config(f, &image.host)?,
                    None => None,
                };
                let registry = Registry::connect(image, creds, ca_file.as_deref(), true).await?;
                Ok(Ready::Registry {
                    registry: Box::new(registry),
                    tag: image.reference.clone(),
                })
            }
            Destination::Dir { dir, max_size } => {
                let meta = std::fs::metadata(dir).map_err(|e| Error::io(dir, e))?;
                if !meta.is_dir() {
                    return Err(Error::Config(format!(
                        "DESTINATION_DIR {} is not a directory",
                        dir.display()
                    )));
                }
                Ok(Ready::Dir {
                    dir: dir.clone(),
                    max_size: *max_size,
                })
            }
        }
    }
}

/// A file to store, detected.
pub(crate) struct Input<'a> {
    pub(crate) path: &'a Path,
    /// In the scratch directory: may be moved.
    pub(crate) owned: bool,
    pub(crate) info: Info,
}

impl Ready {
    /// Stores `input`; the message's `averageSpeed` is left to the caller.
    pub(crate) async fn store(
        &self,
        input: Input<'_>,
        scratch: &Path,
        qemu: &QemuImg,
    ) -> Result<TerminationMessage> {
        match self {
            Ready::Registry { registry, tag } => push(registry, tag, input, scratch, qemu).await,
            Ready::Dir { dir, max_size } => write_dir(dir, *max_size, input, qemu).await,
        }
    }
}

async fn push(
    reg: &Registry,
    tag: &str,
    input: Input<'_>,
    scratch: &Path,
    qemu: &QemuImg,
) -> Result<TerminationMessage> {
    let info = &input.info;
    let (file, stored) = match info.format {
        Format::Qcow2 => (input.path.to_owned(), "qcow2"),
        Format::Iso => (input.path.to_owned(), "iso"),
        // A raw disk is mostly holes that a tar would fill with zeros.
        Format::Raw | Format::Other(_) => {
            let dst = scratch.join("disk.qcow2");
            qemu.convert(input.path, info.format, &dst, "qcow2").await?;
            (dst, "qcow2")
        }
    };
    let layer = Layer::new(&file, stored)?;
    let len = layer.len();
    let layer = std::sync::Arc::new(layer);
    let l = std::sync::Arc::clone(&layer);
    let layer_hex = tokio::task::spawn_blocking(move || l.digest())
        .await
        .map_err(|e| Error::Http(format!("hashing the layer: {e}")))??;
    let layer_digest = format!("sha256:{layer_hex}");
    let file_sha256 = if reg.has_blob(&layer_digest).await? {
        tracing::info!(digest = layer_digest, "the registry has the layer already");
        let f = file.clone();
        tokio::task::spawn_blocking(move || file_sha256(&f))
            .await
            .map_err(|e| Error::Http(format!("hashing the disk: {e}")))??
            .1
    } else {
        tracing::info!(digest = layer_digest, bytes = len, "pushing the layer");
        let (tx, rx) = mpsc::channel(8);
        let l = std::sync::Arc::clone(&layer);
        let producer = tokio::task::spawn_blocking(move || l.stream(&tx));
        let (body, sent) = ChannelBody::body(rx, len);
        let uploaded = reg.upload_blob(&layer_digest, len, body, Some(&sent)).await;
        let streamed = producer
            .await
            .map_err(|e| Error::Http(format!("streaming the layer: {e}")))?;
        uploaded?;
        streamed?
    };
    let config = layer::config(&layer_hex);
    let config_digest = layer::sha256_hex(&config);
    let config_len = config.len() as u64;
    reg.put_small_blob(&format!("sha256:{config_digest}"), config)
        .await?;
    let manifest = layer::manifest((&config_digest, config_len), (&layer_hex, len));
    let digest = reg.put_manifest(tag, layer::MANIFEST_TYPE, manifest).await?;
    tracing::info!(digest, tag, "pushed");
    Ok(TerminationMessage {
        format: Some(stored.into()),
        source_format: Some(info.format.name().into()),
        stored_size: Some(len),
        unpacked_size: Some(info.virtual_size),
        sha256: Some(file_sha256),
        digest: Some(digest),
        ..Default::default()
    })
}

async fn write_dir(
    dir: &Path,
    max_size: Option<u64>,
    input: Input<'_>,
    qemu: &QemuImg,
) -> Result<TerminationMessage> {
    let info = &input.info;
    if let Some(max) = max_size.filter(|m| info.virtual_size > *m) {
        return Err(Error::TooLarge {
            virtual_size: info.virtual_size,
            max,
        });
    }
    let tmp = dir.join(".disk.img.tmp");
    let dst = dir.join("disk.img");
    let _ = std::fs::remove_file(&tmp);
    let written = write_tmp(&input, &tmp, qemu).await;
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, &dst).map_err(|e| Error::io(&dst, e))?;
    let stored = if info.format == Format::Iso { "iso" } else { "raw" };
    let d = dst.clone();
    let (size, sha256) = tokio::task::spawn_blocking(move || file_sha256(&d))
        .await
        .map_err(|e| Error::Io {
            path: dst.clone(),
            error: std::io::Error::other(e.to_string()),
        })??;
    tracing::info!(file = %dst.display(), bytes = size, "written");
    Ok(TerminationMessage {
        format: Some(stored.into()),
        source_format: Some(info.format.name().into()),
        stored_size: Some(size),
        unpacked_size: Some(info.virtual_size),
        sha256: Some(sha256),
        ..Default::default()
    })
}

/// The disk as raw (an iso as is) at `tmp`: moved when it is the scratch copy, else converted
/// or copied.
async fn write_tmp(input: &Input<'_>, tmp: &Path, qemu: &QemuImg) -> Result<()> {
    let info = &input.info;
    let moved = matches!(info.format, Format::Raw | Format::Iso)
        && input.owned
        && std::fs::rename(input.path, tmp).is_ok();
    if !moved {
        match info.format {
            Format::Iso => {
                let (src, t) = (input.path.to_owned(), tmp.to_owned());
                tokio::task::spawn_blocking(move || std::fs::copy(&src, &t))
                    .await
                    .map_err(|e| Error::Io {
                        path: tmp.to_owned(),
                        error: std::io::Error::other(e.to_string()),
                    })?
                    .map_err(|e| Error::io(tmp, e))?;
            }
            // raw to raw too: the copy keeps holes.
            f => qemu.convert(input.path, f, tmp, "raw").await?,
        }
    }
    Ok(())
}

/// Size and SHA-256 (hex) of a file (blocking).
pub(crate) fn file_sha256(path: &Path) -> Result<(u64, String)> {
    use std::io::Read as _;
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        size += n as u64;
        ctx.update(&buf[..n]);
    }
    Ok((size, crate::client::hex(ctx.finish().as_ref())))
}

/// Deletes the image `image` (by tag or digest) from its registry: HEADs the manifest for its
/// digest and deletes it. An image that is not there is fine. The registry's garbage
/// collection frees the blobs later.
///
/// ```no_run
/// # async fn demo() -> virtualization_dvcr::Result<()> {
/// use virtualization_dvcr::{Credentials, delete_image};
///
/// let image = "127.0.0.1:5000/vi/ns/name:uid".parse()?;
/// let creds = Credentials { username: "admin".into(), password: "secret".into() };
/// delete_image(&image, Some(creds), Some("/etc/dvcr/ca.crt".as_ref())).await?;
/// # Ok(()) }
/// ```
pub async fn delete_image(
    image: &ImageReference,
    credentials: Option<Credentials>,
    ca_file: Option<&Path>,
) -> Result<()> {
    let reg = Registry::connect(image, credentials, ca_file, true).await?;
    match reg.manifest_digest(&image.reference).await? {
        None => Ok(()),
        Some(digest) => reg.delete_manifest(&digest).await,
    }
}

/// [`delete_image`] with the `.dockerconfigjson` and CA certificates (PEM) given as bytes, as
/// a controller reads them from a Secret.
pub async fn delete_image_with_secret(
    image: &ImageReference,
    docker_config_json: Option<&[u8]>,
    ca_pem: Option<&[u8]>,
) -> Result<()> {
    let creds = match docker_config_json {
        Some(json) => Credentials::from_docker_config_json(json, &image.host)?,
        None => None,
    };
    let http = crate::client::Http::with_pem(ca_pem, "the registry's CA")?;
    let reg = Registry::connect_with(http, image, creds, true).await?;
    match reg.manifest_digest(&image.reference).await? {
        None => Ok(()),
        Some(digest) => reg.delete_manifest(&digest).await,
    }
}

/// [`delete_image`] with the credentials of a `.dockerconfigjson` file.
pub async fn delete_image_with_auth_file(
    image: &ImageReference,
    auth_file: Option<&Path>,
    ca_file: Option<&Path>,
) -> Result<()> {
    let creds = match auth_file {
        Some(f) => Credentials::from_docker_config(f, &image.host)?,
        None => None,
    };
    delete_image(image, creds, ca_file).await
}
