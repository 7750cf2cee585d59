//! gzip for response bodies: push-style decoding of what upstream sent, and encoding for a
//! client that accepts it.

use std::io::Write;

use flate2::Compression;
use flate2::write::{GzEncoder, MultiGzDecoder};

/// Compressed input decoded at a time: deflate inflates at most about 1032:1, so one slice
/// never makes more than about 8 MiB of output before the limits are checked.
pub(crate) const GZ_SLICE: usize = 8 << 10;

/// Compresses a whole body.
pub(crate) fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::with_capacity(b.len() / 4 + 64), Compression::fast());
    // Writing to a Vec cannot fail.
    let _ = e.write_all(b);
    e.finish().unwrap_or_default()
}

/// Push-style gzip decoding.
pub(crate) struct Gunzip {
    dec: MultiGzDecoder<Vec<u8>>,
}

impl Gunzip {
    pub(crate) fn new() -> Self {
        Self {
            dec: MultiGzDecoder::new(Vec::new()),
        }
    }

    pub(crate) fn push(&mut self, data: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
        self.dec.write_all(data)?;
        out.append(self.dec.get_mut());
        Ok(())
    }

    /// Pushes `data`, but leaves `out` as it is and returns false when what it decodes to would
    /// take `out` past `limit`: a gzip bomb never makes `out` grow (and reallocate, which may
    /// copy) beyond the limit.
    pub(crate) fn push_within(
        &mut self,
        data: &[u8],
        out: &mut Vec<u8>,
        limit: usize,
    ) -> std::io::Result<bool> {
        self.dec.write_all(data)?;
        let got = self.dec.get_mut();
        if out.len() + got.len() > limit {
            got.clear();
            return Ok(false);
        }
        out.append(got);
        Ok(true)
    }

    /// Pushes `data` a slice at a time, failing once `out` is over `limit`.
    pub(crate) fn push_sliced(
        &mut self,
        data: &[u8],
        out: &mut Vec<u8>,
        limit: usize,
    ) -> std::io::Result<()> {
        for piece in data.chunks(GZ_SLICE) {
            self.push(piece, out)?;
            if out.len() > limit {
                return Err(std::io::Error::other("inflated past the limit"));
            }
        }
        Ok(())
    }

    pub(crate) fn finish(self, out: &mut Vec<u8>) -> std::io::Result<()> {
        let mut rest = self.dec.finish()?;
        out.append(&mut rest);
        Ok(())
    }
}
