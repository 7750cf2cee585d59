//! Disk formats: what `qemu-img info` says, the ISO 9660 magic it misses, files that are not
//! disk images, and conversions with `qemu-img convert`.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{Error, Result};

/// A detected disk format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Qcow2,
    Raw,
    Iso,
    /// vmdk, vdi, vhdx, vpc: converted on the way.
    Other(&'static str),
}

impl Format {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Format::Qcow2 => "qcow2",
            Format::Raw => "raw",
            Format::Iso => "iso",
            Format::Other(n) => n,
        }
    }

    /// The qemu-img driver that reads it.
    pub(crate) fn driver(self) -> &'static str {
        match self {
            Format::Iso => "raw",
            f => f.name(),
        }
    }
}

/// What is known of a file after detection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Info {
    pub(crate) format: Format,
    pub(crate) virtual_size: u64,
    pub(crate) file_size: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct QemuInfo {
    format: String,
    virtual_size: u64,
    backing_filename: Option<String>,
    full_backing_filename: Option<String>,
}

/// Runs qemu-img (`QEMU_IMG` or `qemu-img`).
pub(crate) struct QemuImg {
    bin: PathBuf,
}

impl QemuImg {
    pub(crate) fn new(bin: Option<PathBuf>) -> Self {
        QemuImg {
            bin: bin.unwrap_or_else(|| PathBuf::from("qemu-img")),
        }
    }

    async fn run(&self, args: &[&std::ffi::OsStr]) -> Result<Vec<u8>> {
        let out = tokio::process::Command::new(&self.bin)
            .args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| Error::QemuImg(format!("cannot run {}: {e}", self.bin.display())))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let err = err.trim().lines().last().unwrap_or("").trim();
            let err = err.strip_prefix("qemu-img: ").unwrap_or(err);
            return Err(Error::QemuImg(if err.is_empty() {
                format!("exited with {}", out.status)
            } else {
                err.to_owned()
            }));
        }
        Ok(out.stdout)
    }

    /// Detects the format of `file`, refusing what is not a disk image.
    pub(crate) async fn detect(&self, file: &Path) -> Result<Info> {
        let file_size = std::fs::metadata(file).map_err(|e| Error::io(file, e))?.len();
        let out = self
            .run(&["info".as_ref(), "--output=json".as_ref(), file.as_os_str()])
            .await?;
        let info: QemuInfo = serde_json::from_slice(&out)
            .map_err(|e| Error::QemuImg(format!("unexpected info output ({e})")))?;
        if let Some(b) = info.full_backing_filename.or(info.backing_filename) {
            return Err(Error::NotDiskImage(format!(
                "the {} image has a backing file ({b}); only standalone images are accepted",
                info.format
            )));
        }
        let head = read_head(file)?;
        let format = match info.format.as_str() {
            "qcow2" => Format::Qcow2,
            "raw" if is_iso(file)? => Format::Iso,
            "raw" => {
                check_raw(&head, file_size)?;
                Format::Raw
            }
            "vmdk" => Format::Other("vmdk"),
            "vdi" => Format::Other("vdi"),
            "vhdx" => Format::Other("vhdx"),
            "vpc" => Format::Other("vpc"),
            other => {
                return Err(Error::NotDiskImage(format!(
                    "format {other} is not supported (qcow2, raw, iso, vmdk, vdi, vhdx, vpc are)"
                )));
            }
        };
        Ok(Info {
            format,
            virtual_size: info.virtual_size,
            file_size,
        })
    }

    /// Converts `src` (of `from`) to `to` (`qcow2` or `raw`) at `dst`.
    pub(crate) async fn convert(&self, src: &Path, from: Format, dst: &Path, to: &str) -> Result<()> {
        tracing::info!(from = from.name(), to, "converting");
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "convert".as_ref(),
            "-f".as_ref(),
            from.driver().as_ref(),
            "-O".as_ref(),
            to.as_ref(),
        ];
        // Out-of-order writes are faster, but they make the cluster layout of a qcow2 differ
        // from run to run, and a layer of the same disk should be the same blob.
        if to == "raw" {
            args.push("-W".as_ref());
        }
        args.extend([src.as_os_str(), dst.as_os_str()]);
        self.run(&args).await.map(drop)
    }
}

/// The first 4 KiB of `file`.
fn read_head(file: &Path) -> Result<Vec<u8>> {
    let mut f = std::fs::File::open(file).map_err(|e| Error::io(file, e))?;
    let mut head = Vec::with_capacity(4096);
    (&mut f)
        .take(4096)
        .read_to_end(&mut head)
        .map_err(|e| Error::io(file, e))?;
    Ok(head)
}

/// Whether `file` has the ISO 9660 volume descriptor magic `CD001` at 0x8001.
fn is_iso(file: &Path) -> Result<bool> {
    let mut f = std::fs::File::open(file).map_err(|e| Error::io(file, e))?;
    let mut magic = [0u8; 5];
    f.seek(SeekFrom::Start(0x8001)).map_err(|e| Error::io(file, e))?;
    match f.read_exact(&mut magic) {
        Ok(()) => Ok(&magic == b"CD001"),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(Error::io(file, e)),
    }
}

/// Refuses a "raw" file that is rather a text or HTML page, or of a size no disk has.
fn check_raw(head: &[u8], size: u64) -> Result<()> {
    if size == 0 {
        return Err(Error::NotDiskImage("the file is empty".into()));
    }
    let trimmed = head.trim_ascii_start();
    if trimmed.first() == Some(&b'<') {
        return Err(Error::NotDiskImage(
            "the file starts like an HTML or XML document".into(),
        ));
    }
    if looks_like_text(head) {
        return Err(Error::NotDiskImage("the file's first 4 KiB are text".into()));
    }
    if !size.is_multiple_of(512) {
        return Err(Error::NotDiskImage(format!(
            "raw image of {size} bytes, not a multiple of 512"
        )));
    }
    Ok(())
}

/// All printable UTF-8 (a cut multibyte character at the end is allowed).
fn looks_like_text(head: &[u8]) -> bool {
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(_) => return false,
    };
    !text.is_empty()
        && text
            .chars()
            .all(|c| !c.is_control() || matches!(c, '\n' | '\r' | '\t' | '\x0c'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_html_are_not_raw_disks() {
        assert!(check_raw(b"<!DOCTYPE html><html>", 4096).is_err());
        assert!(check_raw(b"  \n<html>", 4096).is_err());
        let e = check_raw("hello world\nпривет".as_bytes(), 4096).unwrap_err();
        assert_eq!(e.to_string(), "not a disk image: the file's first 4 KiB are text");
        let zeros = vec![0u8; 4096];
        assert!(check_raw(&zeros, 4096).is_ok());
        let e = check_raw(&zeros, 4097).unwrap_err();
        assert!(e.to_string().contains("not a multiple of 512"), "{e}");
        assert!(check_raw(&[], 0).is_err());
        let binary = [0x7fu8, b'E', b'L', b'F', 2, 1, 1, 0];
        assert!(check_raw(&binary, 512).is_ok());
    }

    #[test]
    fn iso_magic() {
        let dir = std::env::temp_dir().join(format!("dvcr-iso-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a.iso");
        let mut data = vec![0u8; 0x8800];
        data[0x8001..0x8006].copy_from_slice(b"CD001");
        std::fs::write(&f, &data).unwrap();
        assert!(is_iso(&f).unwrap());
        std::fs::write(&f, [0u8; 100]).unwrap();
        assert!(!is_iso(&f).unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
