//! Output buffers that come back when the client connection has written them.
//!
//! A streamed LIST leaves in batches of up to 256 KiB. Handing each batch over as a fresh `Vec`
//! made the allocator map new pages for every batch (glibc serves allocations this size with
//! `mmap`, or trims them off the heap top when they are freed): page faults took about a tenth
//! of the proxy's CPU on a 43 MB LIST. The [`Bytes`] handed over here own a [`Recycled`]
//! buffer whose drop puts it back in its stream's [`Recycler`], so a stream cycles through a
//! few buffers whose pages stay mapped.

use std::sync::{Arc, Mutex};

use bytes::Bytes;

/// Buffers kept for reuse: those in flight (the channel's depth and one being written) and one
/// being filled.
const KEEP: usize = 6;

/// A stream's spare buffers.
#[derive(Clone, Default)]
pub(crate) struct Recycler(Arc<Mutex<Vec<Vec<u8>>>>);

impl Recycler {
    /// An empty buffer of at least `cap` bytes: a returned one if there is one.
    pub(crate) fn take(&self, cap: usize) -> Vec<u8> {
        let spare = self.0.lock().ok().and_then(|mut s| s.pop());
        match spare {
            Some(mut b) => {
                b.reserve(cap);
                b
            }
            None => Vec::with_capacity(cap),
        }
    }

    /// Hands `data`'s contents over as [`Bytes`] that return the buffer here when dropped, and
    /// leaves `data` an empty buffer of the same capacity.
    pub(crate) fn hand_over(&self, data: &mut Vec<u8>) -> Bytes {
        let next = self.take(data.capacity());
        Bytes::from_owner(Recycled {
            buf: std::mem::replace(data, next),
            home: self.clone(),
        })
    }

    fn put(&self, mut buf: Vec<u8>) {
        buf.clear();
        if let Ok(mut spare) = self.0.lock()
            && spare.len() < KEEP
        {
            spare.push(buf);
        }
    }
}

/// A buffer on its way to the client; back to its [`Recycler`] when dropped.
struct Recycled {
    buf: Vec<u8>,
    home: Recycler,
}

impl AsRef<[u8]> for Recycled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Recycled {
    fn drop(&mut self) {
        self.home.put(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handed_over_buffers_come_back_with_their_capacity() {
        let r = Recycler::default();
        let mut data = r.take(1 << 16);
        data.extend_from_slice(b"first batch");
        let first = data.as_ptr();
        let sent = r.hand_over(&mut data);
        assert_eq!(&sent[..], b"first batch");
        assert!(data.is_empty() && data.capacity() >= 1 << 16);
        // Written and dropped by the client connection: the next batch reuses its buffer.
        drop(sent);
        data.extend_from_slice(b"second");
        let again = r.hand_over(&mut data);
        assert_eq!(data.as_ptr(), first, "the first buffer came back");
        assert_eq!(&again[..], b"second");
    }

    #[test]
    fn keeps_a_bounded_number_of_spares() {
        let r = Recycler::default();
        let mut data = Vec::new();
        let sent: Vec<Bytes> = (0..20)
            .map(|i| {
                data.push(i);
                r.hand_over(&mut data)
            })
            .collect();
        drop(sent);
        assert_eq!(r.0.lock().expect("lock").len(), KEEP);
    }
}
