//! An import end to end: the destination made ready, the source fetched into a scratch
//! directory, its format detected, the image stored, the scratch directory removed.

use std::path::{Path, PathBuf};

use crate::destination::Input;
use crate::format::QemuImg;
use crate::{Destination, Error, Result, Source, TerminationMessage};

/// What [`import`] does.
#[derive(Debug, Clone)]
pub struct Import {
    /// Where the image comes from.
    pub source: Source,
    /// Where it goes.
    pub destination: Destination,
    /// Where downloads and conversions are written (default: the system's temp directory).
    pub scratch_dir: Option<PathBuf>,
    /// The qemu-img binary (default `qemu-img` on `PATH`).
    pub qemu_img: Option<PathBuf>,
}

/// Runs an import: what was stored.
pub async fn import(opts: &Import) -> Result<TerminationMessage> {
    let ready = opts.destination.prepare().await?;
    let scratch = Scratch::new(opts.scratch_dir.as_deref())?;
    let qemu = QemuImg::new(opts.qemu_img.clone());
    let fetched = opts.source.fetch(scratch.path()).await?;
    let info = qemu.detect(&fetched.path).await?;
    tracing::info!(
        format = info.format.name(),
        virtual_size = info.virtual_size,
        file_size = info.file_size,
        "detected"
    );
    let input = Input {
        path: &fetched.path,
        owned: fetched.owned,
        info,
    };
    let mut message = ready.store(input, scratch.path(), &qemu).await?;
    message.average_speed = Some(fetched.speed);
    Ok(message)
}

/// A directory of its own under the scratch directory, removed when dropped.
pub(crate) struct Scratch {
    path: PathBuf,
}

impl Scratch {
    pub(crate) fn new(base: Option<&Path>) -> Result<Self> {
        let base = base.map_or_else(std::env::temp_dir, Path::to_owned);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = base.join(format!("dvcr-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).map_err(|e| Error::io(&path, e))?;
        Ok(Scratch { path })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(dir = %self.path.display(), error = %e, "cannot remove the scratch directory");
        }
    }
}
