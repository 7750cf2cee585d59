//! The containerDisk layer (an uncompressed tar of `disk/` and one disk file, owned by qemu,
//! reproducible), the OCI config and manifest around it, and the way back: the disk file out of
//! a pulled layer.

use std::io::{self, BufRead as _, Read, Write as _};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use ring::digest::{Context, SHA256};
use serde_json::json;
use tokio::sync::mpsc;

use crate::client::hex;
use crate::progress::Progress;
use crate::{Error, Result};

/// Media types of what is pushed.
pub(crate) const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
pub(crate) const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";

/// The qemu user and group of KubeVirt's launcher, who reads the disk.
const QEMU_ID: u64 = 107;
/// Pieces sent to the uploader.
const CHUNK: usize = 1 << 20;
const BLOCK: u64 = 512;

/// One disk file as the layer `disk/NAME`.
pub(crate) struct Layer {
    file: PathBuf,
    name: String,
    size: u64,
}

impl Layer {
    /// `file` as `disk/disk.EXT`.
    pub(crate) fn new(file: &Path, ext: &str) -> Result<Self> {
        let size = std::fs::metadata(file).map_err(|e| Error::io(file, e))?.len();
        Ok(Layer {
            file: file.to_owned(),
            name: format!("disk/disk.{ext}"),
            size,
        })
    }

    /// The tar's length in bytes.
    pub(crate) fn len(&self) -> u64 {
        2 * BLOCK + self.size.div_ceil(BLOCK) * BLOCK + 2 * BLOCK
    }

    /// The directory and file headers.
    fn headers(&self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(1024);
        let mut dir = header(tar::EntryType::Directory, 0o555, 0);
        dir.set_path("disk/").map_err(|e| Error::Config(e.to_string()))?;
        dir.set_cksum();
        out.extend_from_slice(dir.as_bytes());
        let mut file = header(tar::EntryType::Regular, 0o440, self.size);
        file.set_path(&self.name)
            .map_err(|e| Error::Config(e.to_string()))?;
        file.set_cksum();
        out.extend_from_slice(file.as_bytes());
        Ok(out)
    }

    /// Zero padding of the file's last block and the two end blocks.
    fn trailer(&self) -> Vec<u8> {
        let pad = (BLOCK - self.size % BLOCK) % BLOCK;
        vec![0; (pad + 2 * BLOCK) as usize]
    }

    /// Reads the file through for the layer's digest (hex, blocking). The file's own digest
    /// is taken while the layer is streamed, so the file is hashed once per pass.
    pub(crate) fn digest(&self) -> Result<String> {
        let mut layer = Context::new(&SHA256);
        layer.update(&self.headers()?);
        self.each_chunk(|c| {
            layer.update(&c);
            Ok(())
        })?;
        layer.update(&self.trailer());
        Ok(hex(layer.finish().as_ref()))
    }

    /// Sends the tar in pieces to `tx` (blocking); the sha256 of the disk file (hex). The
    /// registry checks the layer's digest. A closed channel (the upload failed) ends it early
    /// with an error.
    pub(crate) fn stream(&self, tx: &mpsc::Sender<io::Result<Bytes>>) -> Result<String> {
        let mut file = Context::new(&SHA256);
        let send = |b: Bytes| {
            tx.blocking_send(Ok(b))
                .map_err(|_| Error::Http("the layer upload ended early".into()))
        };
        send(Bytes::from(self.headers()?))?;
        let mut progress = Progress::new("push", Some(self.size));
        self.each_chunk(|c| {
            file.update(&c);
            progress.add(c.len());
            send(c)
        })?;
        send(Bytes::from(self.trailer()))?;
        progress.finish();
        Ok(hex(file.finish().as_ref()))
    }

    /// The file in pieces of [`CHUNK`] bytes (each a buffer of its own, sent without a copy).
    fn each_chunk(&self, mut f: impl FnMut(Bytes) -> Result<()>) -> Result<()> {
        let err = |e| Error::io(&self.file, e);
        let mut src = std::fs::File::open(&self.file).map_err(err)?;
        let mut total = 0u64;
        loop {
            let mut buf = vec![0u8; CHUNK];
            let mut n = 0;
            while n < CHUNK {
                match src.read(&mut buf[n..]).map_err(err)? {
                    0 => break,
                    k => n += k,
                }
            }
            if n == 0 {
                break;
            }
            total += n as u64;
            buf.truncate(n);
            f(Bytes::from(buf))?;
        }
        if total != self.size {
            return Err(Error::Io {
                path: self.file.clone(),
                error: io::Error::other("the file changed while it was stored"),
            });
        }
        Ok(())
    }
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(QEMU_ID);
    h.set_gid(QEMU_ID);
    h.set_mtime(0);
    h.set_size(size);
    h
}

/// The image config of a one-layer image.
pub(crate) fn config(layer_digest: &str) -> Vec<u8> {
    let c = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_digest}")]},
    });
    serde_json::to_vec(&c).unwrap_or_default()
}

/// The image manifest naming `config` and `layer` (digest hex, size).
pub(crate) fn manifest(config: (&str, u64), layer: (&str, u64)) -> Vec<u8> {
    let m = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": format!("sha256:{}", config.0), "size": config.1},
        "layers": [{"mediaType": LAYER_TYPE, "digest": format!("sha256:{}", layer.0), "size": layer.1}],
    });
    serde_json::to_vec(&m).unwrap_or_default()
}

/// SHA-256 of `bytes`, hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(ring::digest::digest(&SHA256, bytes).as_ref())
}

/// A reader hashing what passes through it.
pub(crate) struct Hashing<R> {
    inner: R,
    ctx: Context,
}

impl<R: Read> Hashing<R> {
    pub(crate) fn new(inner: R) -> Self {
        Hashing {
            inner,
            ctx: Context::new(&SHA256),
        }
    }

    /// Reads the rest and returns the sha256 of everything (hex).
    pub(crate) fn finish(mut self) -> io::Result<String> {
        io::copy(&mut self, &mut io::sink())?;
        Ok(hex(self.ctx.finish().as_ref()))
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.ctx.update(&buf[..n]);
        Ok(n)
    }
}

/// Writes the first regular file under `disk/` of the (maybe gzip-compressed) tar `src` to
/// `dst`; whether there was one, and the sha256 of the whole blob (hex). Entry names are never
/// used as paths.
pub(crate) fn extract_disk<R: Read>(src: R, dst: &Path) -> Result<(bool, String)> {
    let broken = |e: io::Error| Error::Http(format!("reading the layer: {e}"));
    let mut src = io::BufReader::with_capacity(CHUNK, Hashing::new(src));
    let gzip = src.fill_buf().map_err(broken)?.starts_with(&[0x1f, 0x8b]);
    let (found, rest) = if gzip {
        let mut archive = tar::Archive::new(flate2::bufread::GzDecoder::new(src));
        let found = find_disk(&mut archive, dst)?;
        let mut gz = archive.into_inner();
        // The gzip trailer, and whatever follows.
        io::copy(&mut gz, &mut io::sink()).map_err(broken)?;
        (found, gz.into_inner())
    } else {
        let mut archive = tar::Archive::new(src);
        let found = find_disk(&mut archive, dst)?;
        (found, archive.into_inner())
    };
    let digest = rest.into_inner().finish().map_err(broken)?;
    Ok((found, digest))
}

fn find_disk<R: Read>(archive: &mut tar::Archive<R>, dst: &Path) -> Result<bool> {
    let broken = |e: io::Error| Error::Http(format!("reading the layer: {e}"));
    for entry in archive.entries().map_err(broken)? {
        let mut entry = entry.map_err(broken)?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let path = entry.path_bytes();
        let path = path.strip_prefix(b"./").unwrap_or(&path);
        let path = path.strip_prefix(b"/").unwrap_or(path);
        if !path.starts_with(b"disk/") || path.len() == 5 {
            continue;
        }
        let mut out = std::fs::File::create(dst).map_err(|e| Error::io(dst, e))?;
        io::copy(&mut entry, &mut out).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof | io::ErrorKind::InvalidData | io::ErrorKind::Other => broken(e),
            _ => Error::io(dst, e),
        })?;
        out.flush().map_err(|e| Error::io(dst, e))?;
        return Ok(true);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("dvcr-layer-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn tar_of(layer: &Layer) -> Vec<u8> {
        let (tx, mut rx) = mpsc::channel(4);
        let (file_digest, bytes) = std::thread::scope(|s| {
            let producer = s.spawn(move || layer.stream(&tx));
            let mut out = Vec::new();
            while let Some(Ok(b)) = rx.blocking_recv() {
                out.extend_from_slice(&b);
            }
            (producer.join().unwrap().unwrap(), out)
        });
        assert_eq!(layer.digest().unwrap(), sha256_hex(&bytes));
        let hdr = 1024;
        assert_eq!(file_digest, sha256_hex(&bytes[hdr..hdr + layer.size as usize]));
        bytes
    }

    #[test]
    fn layer_is_a_reproducible_tar_owned_by_qemu() {
        let d = temp("tar");
        let f = d.join("x");
        let data: Vec<u8> = (0..1500u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&f, &data).unwrap();
        let layer = Layer::new(&f, "qcow2").unwrap();
        let bytes = tar_of(&layer);
        assert_eq!(bytes.len() as u64, layer.len());
        assert_eq!(bytes, tar_of(&layer));
        let layer_digest = layer.digest().unwrap();
        assert_eq!(layer_digest, sha256_hex(&bytes));
        assert_eq!(&bytes[1024..1024 + data.len()], &data[..]);

        let mut a = tar::Archive::new(&bytes[..]);
        let entries: Vec<_> = a
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().display().to_string(),
                    h.mode().unwrap(),
                    h.uid().unwrap(),
                    h.gid().unwrap(),
                    h.mtime().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            entries,
            vec![
                ("disk/".into(), 0o555, 107, 107, 0),
                ("disk/disk.qcow2".into(), 0o440, 107, 107, 0)
            ]
        );

        let out = d.join("out");
        let (found, digest) = extract_disk(&bytes[..], &out).unwrap();
        assert!(found);
        assert_eq!(digest, layer_digest);
        assert_eq!(std::fs::read(&out).unwrap(), data);

        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&bytes).unwrap();
        let gz = gz.finish().unwrap();
        let (found, digest) = extract_disk(&gz[..], &out).unwrap();
        assert!(found);
        assert_eq!(digest, sha256_hex(&gz));
        assert_eq!(std::fs::read(&out).unwrap(), data);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn sizes_beyond_8_gib_fit_the_header() {
        let h = header(tar::EntryType::Regular, 0o440, 20 << 30);
        assert_eq!(h.size().unwrap(), 20 << 30);
    }

    #[test]
    fn broken_layers_are_errors() {
        let d = temp("broken");
        let out = d.join("out");
        assert!(extract_disk(&[1u8; 100][..], &out).is_err());
        let (found, _) = extract_disk(&[0u8; 1024][..], &out).unwrap();
        assert!(!found);
        let _ = std::fs::remove_dir_all(&d);
    }
}
