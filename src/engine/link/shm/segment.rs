//! A shared-memory segment that cannot leave debris and cannot fault: an anonymous `memfd`
//! (no name in `/dev/shm`; the kernel frees it with the last descriptor or mapping, whatever
//! kills the job), sized once and sealed against growing and shrinking before it is shared.
//! Shrinking is how a dying or hostile peer makes a mapping raise SIGBUS (UCX's mm transport),
//! so the side that maps a segment it was handed checks the seals and the size first.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

/// The seals every segment carries before it is shared: no shrink, no grow, and no change to
/// the seals themselves.
const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// Why a segment handed over by a peer is not mapped.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    /// A system call failed.
    #[error("shared-memory segment: {0}")]
    Io(#[from] io::Error),
    /// The descriptor is not sealed against shrinking and growing: the peer could make our
    /// mapping fault.
    #[error("shared-memory segment not sealed (seals {0:#x}): refused")]
    NotSealed(libc::c_int),
    /// The descriptor's size is not the size the peer announced.
    #[error("shared-memory segment of {got} bytes where {expected} were announced: refused")]
    WrongSize {
        /// What was announced.
        expected: usize,
        /// What the descriptor holds.
        got: usize,
    },
}

/// A mapped segment: `len` bytes shared with one peer process.
#[derive(Debug)]
pub struct Segment {
    fd: OwnedFd,
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is process-wide memory; every access goes through raw pointers and
// atomics whose discipline the users (`pipe.rs`) state. Moving the owner between threads moves
// nothing but the pointer.
unsafe impl Send for Segment {}
// SAFETY: as above; `&Segment` hands out only raw pointers.
unsafe impl Sync for Segment {}

impl Segment {
    /// A new zeroed segment of `len` bytes (rounded up to a page), sealed and mapped.
    pub fn create(len: usize) -> io::Result<Segment> {
        let len = len.next_multiple_of(crate::buf::PAGE);
        // SAFETY: the name is a NUL-terminated literal; a non-negative result is a new fd.
        let fd = unsafe {
            libc::memfd_create(
                c"weft-shm".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let size = libc::off_t::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: plain calls on an fd we own.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Self::map(fd, len)
    }

    /// Map a segment a peer handed over, announced as `len` bytes: only if it is sealed and
    /// exactly that long, so no access within `len` can fault whatever the peer does next.
    pub fn open(fd: OwnedFd, len: usize) -> Result<Segment, SegmentError> {
        // SAFETY: plain call on an fd we own.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 {
            return Err(io::Error::last_os_error().into());
        }
        let need = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        if seals & need != need {
            return Err(SegmentError::NotSealed(seals));
        }
        // SAFETY: `st` is plain data the call fills.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is valid for writes.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error().into());
        }
        let got = usize::try_from(st.st_size).unwrap_or(0);
        if got != len || len == 0 {
            return Err(SegmentError::WrongSize { expected: len, got });
        }
        Ok(Self::map(fd, len)?)
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<Segment> {
        // SAFETY: a fresh shared mapping of `len` bytes of a file at least that long.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or(io::ErrorKind::Other)?;
        Ok(Segment { fd, base, len })
    }

    /// The descriptor, to hand to the peer.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never, once created or opened).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of byte `offset`, which must be below [`Self::len`].
    pub fn at(&self, offset: usize) -> *mut u8 {
        assert!(
            offset < self.len,
            "offset {offset} beyond a segment of {}",
            self.len
        );
        // SAFETY: within the mapping (checked above).
        unsafe { self.base.as_ptr().add(offset) }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once. Nothing borrowed from it outlives
        // the segment: users hold it by `Arc` for as long as they hold its pointers.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dup(fd: &OwnedFd) -> OwnedFd {
        fd.try_clone().expect("dup")
    }

    #[test]
    fn a_created_segment_is_sealed_zeroed_and_opens_elsewhere() {
        let a = Segment::create(10_000).expect("create");
        assert_eq!(a.len(), 12_288);
        // SAFETY: within the mapping.
        unsafe { a.at(100).write(7) };
        let b = Segment::open(dup(a.fd()), a.len()).expect("open");
        // SAFETY: within the mapping; both map the same pages.
        assert_eq!(unsafe { b.at(100).read() }, 7);
        // SAFETY: within the mapping.
        assert_eq!(unsafe { b.at(101).read() }, 0);
        // SAFETY: plain call; the seal refuses it.
        let shrunk = unsafe { libc::ftruncate(b.fd().as_raw_fd(), 4096) };
        assert_ne!(shrunk, 0, "a sealed segment must not shrink");
    }

    #[test]
    fn an_unsealed_or_resized_descriptor_is_refused_before_it_is_mapped() {
        // SAFETY: literal name; the result is checked.
        let raw = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0);
        // SAFETY: just created.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: plain call.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), 8192) }, 0);
        let e = Segment::open(fd, 8192).unwrap_err();
        assert!(matches!(e, SegmentError::NotSealed(_)), "{e}");
        let a = Segment::create(8192).expect("create");
        let e = Segment::open(dup(a.fd()), 16_384).unwrap_err();
        assert!(
            matches!(
                e,
                SegmentError::WrongSize {
                    expected: 16_384,
                    got: 8192
                }
            ),
            "{e}"
        );
    }
}
