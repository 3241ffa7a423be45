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

/// From this size on, buffers are mapped straight from the kernel
/// (anonymous mmap): its zero pages are touched only when first used. The
/// allocator's aligned `alloc_zeroed` would write every byte, which made a
/// 4 GB shared_buffers cost 11 s at every start.
pub const LAZY_ZERO_MIN_BYTES: usize = 2 << 20;

impl AlignedBuf {
    /// Allocates `len` zeroed bytes; `len` must be a positive multiple of
    /// [`IO_ALIGN_BYTES`]. Aborts if memory runs out, as `Vec` does: for
    /// the small buffers of the I/O paths. Large, user-sized allocations
    /// use [`AlignedBuf::try_new`].
    pub fn new(len: usize) -> Self {
        Self::try_new(len).unwrap_or_else(|_| std::alloc::handle_alloc_error(Self::layout(len)))
    }

    /// Allocates `len` zeroed bytes, or says that the memory is not there.
    /// `len` must be a positive multiple of [`IO_ALIGN_BYTES`].
    pub fn try_new(len: usize) -> std::io::Result<Self> {
        assert!(
            len > 0 && len.is_multiple_of(IO_ALIGN_BYTES),
            "aligned buffer length {len} is not a positive multiple of {IO_ALIGN_BYTES}"
        );
        if len >= LAZY_ZERO_MIN_BYTES {
            // SAFETY: an anonymous private mapping of len bytes at an
            // address the kernel chooses: no file, no existing memory
            // affected. Without MAP_NORESERVE, so that a size the machine
            // cannot back fails here (ENOMEM) instead of later at a fault;
            // under the default overcommit heuristic only a size beyond
            // memory and swap is refused, a smaller one may still fail
            // when its pages are first touched.
            let raw = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if raw == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            // Page-aligned, and pages are 4096 bytes or a multiple.
            debug_assert_eq!(raw as usize % IO_ALIGN_BYTES, 0);
            let ptr = NonNull::new(raw.cast::<u8>())
                .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
            return Ok(AlignedBuf { ptr, len });
        }
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr =
            NonNull::new(raw).ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(AlignedBuf { ptr, len })
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
        if self.len >= LAZY_ZERO_MIN_BYTES {
            // SAFETY: mapped in try_new() with exactly this length, and
            // no reference into it outlives self.
            let rc = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
            debug_assert_eq!(rc, 0, "munmap of an AlignedBuf failed");
        } else {
            // SAFETY: allocated in try_new() with exactly this layout.
            unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
        }
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

    /// Resident memory of this process, from /proc/self/statm.
    fn resident_bytes() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        pages * 4096
    }

    #[test]
    fn large_buffers_are_zero_pages_touched_only_when_used() {
        const LEN: usize = 1 << 30;
        let before = resident_bytes();
        let mut buf = AlignedBuf::try_new(LEN).unwrap();
        let after = resident_bytes();
        // Other tests allocate in this process too: a generous bound, far
        // below the 1 GiB that writing every byte would make resident.
        assert!(
            after.saturating_sub(before) < (LEN as u64) / 4,
            "{before} -> {after}"
        );
        assert_eq!(buf.as_ptr() as usize % IO_ALIGN_BYTES, 0);
        assert!(buf[..BLOCK_PROBE].iter().all(|&b| b == 0) && buf[LEN - 1] == 0);
        buf[LEN - 1] = 7;
        assert_eq!(buf[LEN - 1], 7);
    }

    #[test]
    fn a_size_the_machine_cannot_give_is_an_error_not_an_abort() {
        // Under vm.overcommit_memory=1 the kernel grants any size and
        // there is nothing to check.
        if std::fs::read_to_string("/proc/sys/vm/overcommit_memory").is_ok_and(|m| m.trim() == "1")
        {
            return;
        }
        let err = AlignedBuf::try_new(1 << 46)
            .err()
            .expect("64 TiB is refused");
        assert_eq!(err.raw_os_error(), Some(libc::ENOMEM), "{err}");
    }

    /// Bytes checked at the start of the large buffer.
    const BLOCK_PROBE: usize = 8192;

    #[test]
    fn buffers_are_aligned_and_zeroed() {
        let buf = AlignedBuf::new(3 * IO_ALIGN_BYTES);
        assert!(is_io_aligned(buf.as_ptr() as usize));
        assert!(buf.iter().all(|&b| b == 0));
    }
}
