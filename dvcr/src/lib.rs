//! Disk images into and out of DVCR, the registry of the virtualization module: the
//! `virtualization-dvcr` binary's library.
//!
//! `virtualization-dvcr import` fetches a disk image (http, a registry, a file), detects its
//! format with qemu-img, converts it where needed and stores it: pushed to a registry as a
//! containerDisk image (one uncompressed tar layer holding `disk/disk.qcow2`, `disk.img` or
//! `disk.iso`, owned by qemu), or written as a raw `disk.img` to a directory (a PVC).
//! `virtualization-dvcr upload` does the same with a disk a user sends by HTTPS. Both leave a
//! [`TerminationMessage`]. [`delete_image`] removes a pushed image again.

mod auth;
mod client;
mod error;
mod format;
mod layer;
mod message;
mod progress;
mod reference;

pub use auth::Credentials;
pub use error::{Error, Result};
pub use message::TerminationMessage;
pub use reference::ImageReference;
mod destination;
mod import;
mod registry;
mod source;
pub mod upload;

pub use destination::{Destination, delete_image, delete_image_with_auth_file, delete_image_with_secret};
pub use import::{Import, import};
pub use source::Source;

#[cfg(feature = "internals")]
pub mod fuzzing;
