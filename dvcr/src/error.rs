//! The one error type of the library: every failure as a one-line message that goes into the
//! termination message unchanged.

use std::path::{Path, PathBuf};

/// What went wrong while importing, uploading or deleting an image.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration cannot be used (a missing or malformed setting).
    #[error("{0}")]
    Config(String),
    /// A local file could not be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why (part of the message, so not a separate cause).
        error: std::io::Error,
    },
    /// An HTTP exchange failed (connection, timeout, unexpected status).
    #[error("{0}")]
    Http(String),
    /// The downloaded bytes do not have the expected checksum.
    #[error("checksum mismatch: {algorithm} of the downloaded file is {actual}, expected {expected}")]
    Checksum {
        /// `sha256` or `md5`.
        algorithm: &'static str,
        /// What the download hashed to (hex).
        actual: String,
        /// What was expected (hex).
        expected: String,
    },
    /// The file is not a disk image this importer stores.
    #[error("not a disk image: {0}")]
    NotDiskImage(String),
    /// qemu-img failed or answered something unexpected.
    #[error("qemu-img: {0}")]
    QemuImg(String),
    /// The image does not fit the destination disk.
    #[error("the image's virtual size {virtual_size} bytes is larger than the disk's {max} bytes")]
    TooLarge {
        /// The image's virtual size.
        virtual_size: u64,
        /// The disk's size.
        max: u64,
    },
    /// A registry refused the credentials.
    #[error("registry {host} refused the credentials (401 Unauthorized)")]
    Unauthorized {
        /// The registry's `host[:port]`.
        host: String,
    },
    /// A registry answered something this client does not understand or accept.
    #[error("registry {host}: {message}")]
    Registry {
        /// The registry's `host[:port]`.
        host: String,
        /// What happened.
        message: String,
    },
    /// TLS could not be set up (a CA file, the serving certificate).
    #[error("{0}")]
    Tls(String),
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_owned(),
            error: source,
        }
    }

    pub(crate) fn registry(host: &str, message: impl Into<String>) -> Self {
        Error::Registry {
            host: host.to_owned(),
            message: message.into(),
        }
    }
}

impl From<kube_api_rewriter_tls::Error> for Error {
    fn from(e: kube_api_rewriter_tls::Error) -> Self {
        Error::Tls(e.to_string())
    }
}
