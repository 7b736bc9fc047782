//! Heap buffers aligned for `O_DIRECT`: [`AlignedBuf`], the memory every batch's arena is made
//! of, zero-initialised and a whole number of [`ALIGN_BYTES`] long.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use super::ALIGN_BYTES;

/// The alignment unit as a type, so that an empty buffer can point at a dangling but aligned
/// address without any allocation.
#[repr(C, align(4096))]
struct AlignUnit([u8; ALIGN_BYTES]);

/// A heap buffer aligned to [`ALIGN_BYTES`], zero-initialised, whose length is a multiple of
/// [`ALIGN_BYTES`].
///
/// An empty buffer allocates nothing. Dereferences to `[u8]`.
pub struct AlignedBuf {
    /// Start of the allocation (dangling but aligned when `len == 0`).
    ptr: NonNull<u8>,
    /// Length in bytes, a multiple of `ALIGN_BYTES`.
    len: usize,
}

// SAFETY: an AlignedBuf uniquely owns its allocation, exactly like a `Box<[u8]>`; shared access
// only hands out `&[u8]`, and mutation needs `&mut self`.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above; `&AlignedBuf` permits only reads of plain bytes.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zero-filled buffer of at least `len_bytes` bytes: the length is rounded up to a multiple
    /// of [`ALIGN_BYTES`].
    ///
    /// Panics when the size overflows `isize` (like `Vec` capacity overflow) and aborts when the
    /// allocator fails (like `Vec`); use [`AlignedBuf::try_zeroed`] to get `None` instead.
    pub fn zeroed(len_bytes: usize) -> AlignedBuf {
        let Some(len) = round_up(len_bytes) else {
            panic!("AlignedBuf of {len_bytes} bytes overflows");
        };
        let Ok(layout) = std::alloc::Layout::from_size_align(len, ALIGN_BYTES) else {
            panic!("AlignedBuf of {len_bytes} bytes overflows");
        };
        match AlignedBuf::try_zeroed(len) {
            Some(buf) => buf,
            None => std::alloc::handle_alloc_error(layout),
        }
    }

    /// Like [`AlignedBuf::zeroed`], but returns `None` when the size overflows or the allocator
    /// fails.
    pub fn try_zeroed(len_bytes: usize) -> Option<AlignedBuf> {
        let len = round_up(len_bytes)?;
        if len == 0 {
            return Some(AlignedBuf {
                ptr: NonNull::<AlignUnit>::dangling().cast::<u8>(),
                len: 0,
            });
        }
        let layout = std::alloc::Layout::from_size_align(len, ALIGN_BYTES).ok()?;
        // SAFETY: `layout` has a non-zero size (checked above) and a valid power-of-two alignment.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        Some(AlignedBuf {
            ptr: NonNull::new(ptr)?,
            len,
        })
    }

    /// Length in bytes (a multiple of [`ALIGN_BYTES`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Raw pointer to the start, for handing regions to the kernel. No reference to the contents
    /// is created.
    pub(super) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

/// `len` rounded up to a multiple of [`ALIGN_BYTES`], `None` on overflow.
pub(super) fn round_up(len: usize) -> Option<usize> {
    len.checked_next_multiple_of(ALIGN_BYTES)
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        // SAFETY: the same size and alignment were accepted by `Layout::from_size_align` when the
        // buffer was allocated.
        let layout =
            unsafe { std::alloc::Layout::from_size_align_unchecked(self.len, ALIGN_BYTES) };
        // SAFETY: `ptr` was returned by `alloc_zeroed` with exactly this layout and is freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is non-null, aligned, and valid for `len` initialised (zeroed or written)
        // bytes that this buffer owns; for `len == 0` a dangling aligned pointer is allowed.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::ReadBatch;

    #[test]
    fn aligned_buf_is_aligned_and_zeroed() {
        for len in [
            1,
            100,
            ALIGN_BYTES,
            ALIGN_BYTES + 1,
            3 * ALIGN_BYTES,
            1 << 20,
        ] {
            let mut buf = AlignedBuf::zeroed(len);
            assert_eq!(buf.len() % ALIGN_BYTES, 0);
            assert!(buf.len() >= len && buf.len() < len + ALIGN_BYTES);
            assert_eq!(buf.as_ptr() as usize % ALIGN_BYTES, 0);
            assert!(buf.iter().all(|&b| b == 0));
            assert!(!buf.is_empty());
            buf[len - 1] = 7;
            assert_eq!(buf[len - 1], 7);
        }
        let empty = AlignedBuf::zeroed(0);
        assert_eq!(empty.len(), 0);
        assert!(empty.is_empty());
        assert_eq!(&*empty, &[] as &[u8]);
        assert_eq!(empty.as_ptr() as usize % ALIGN_BYTES, 0);
        assert!(AlignedBuf::try_zeroed(usize::MAX).is_none());
        assert!(AlignedBuf::try_zeroed(isize::MAX as usize).is_none());
        fn send_sync<T: Send + Sync>() {}
        send_sync::<AlignedBuf>();
        send_sync::<ReadBatch>();
    }
}
