//! Memory aligned for direct I/O.
//!
//! With O_DIRECT every buffer address, file offset and length must be a
//! multiple of the device's alignment. We use 4096 bytes everywhere, which
//! covers every Linux file system we know of, so that the same memory works
//! for buffered and direct files alike.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// Alignment of every I/O buffer, offset and length, in bytes.
pub const IO_ALIGN_BYTES: usize = 4096;

/// A zeroed, 4096-byte aligned, fixed-size byte buffer.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only allow reads, like &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zeroed bytes; `len` must be a positive multiple of
    /// [`IO_ALIGN_BYTES`].
    pub fn new(len: usize) -> Self {
        assert!(
            len > 0 && len.is_multiple_of(IO_ALIGN_BYTES),
            "aligned buffer length {len} is not a positive multiple of {IO_ALIGN_BYTES}"
        );
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, IO_ALIGN_BYTES).expect("aligned layout")
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised (zeroed) bytes for as long
        // as self lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with exactly this layout.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

/// True if `value` (an address, offset or length) is I/O aligned.
pub fn is_io_aligned(value: usize) -> bool {
    value.is_multiple_of(IO_ALIGN_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_zeroed() {
        let buf = AlignedBuf::new(3 * IO_ALIGN_BYTES);
        assert!(is_io_aligned(buf.as_ptr() as usize));
        assert!(buf.iter().all(|&b| b == 0));
    }
}
