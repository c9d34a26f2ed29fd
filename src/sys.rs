//! Socket system calls without glibc's wrappers.
//!
//! glibc's `recv`, `send` and `writev` (or `sendmsg`) are cancellation points: each switches
//! asynchronous thread cancellation on and off around the system call, about 40 of the ~60
//! instructions a wrapper costs. weft never cancels a thread, and a spinning reactor receives
//! on every turn and sends on every message, so it calls the kernel through `syscall(2)`
//! instead. Results are the system calls' own: the count, or -1 with `errno` set, which
//! [`result`] turns into an `io::Result`.

use std::os::fd::RawFd;

/// A system call's count as an `io::Result`: -1 is the error `errno` names.
#[inline]
pub(crate) fn result(n: isize) -> std::io::Result<usize> {
    usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
}

/// `recv(fd, buf, len, 0)`.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes.
pub(crate) unsafe fn recv(fd: RawFd, buf: *mut u8, len: usize) -> isize {
    // SAFETY: per the caller; null address arguments make `recvfrom` a plain `recv`.
    unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            fd,
            buf,
            len,
            0,
            std::ptr::null_mut::<libc::sockaddr>(),
            std::ptr::null_mut::<libc::socklen_t>(),
        ) as isize
    }
}

/// `send(fd, bytes, MSG_NOSIGNAL)`: a peer that has gone away is an error (`EPIPE`), not a
/// `SIGPIPE` that kills the process.
pub(crate) fn send(fd: RawFd, bytes: &[u8]) -> isize {
    // SAFETY: `bytes` is valid for reads of its length; null address arguments make `sendto`
    // a plain `send`.
    unsafe {
        libc::syscall(
            libc::SYS_sendto,
            fd,
            bytes.as_ptr(),
            bytes.len(),
            libc::MSG_NOSIGNAL,
            std::ptr::null::<libc::sockaddr>(),
            0 as libc::socklen_t,
        ) as isize
    }
}

/// `sendmsg` of `chunks`, in order (a gather write), with `MSG_NOSIGNAL` as [`send`].
pub(crate) fn send_gather(fd: RawFd, chunks: &[std::io::IoSlice<'_>]) -> isize {
    // SAFETY: msghdr is plain integers and pointers; all-zero bytes are valid (no address, no
    // control data).
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    // `IoSlice` is guaranteed ABI-compatible with `iovec` on Unix; the kernel only reads them.
    hdr.msg_iov = chunks.as_ptr() as *mut libc::iovec;
    hdr.msg_iovlen = chunks.len() as _;
    // SAFETY: `hdr` names `chunks.len()` valid iovecs of readable memory, alive for the call.
    unsafe {
        libc::syscall(
            libc::SYS_sendmsg,
            fd,
            &hdr as *const libc::msghdr,
            libc::MSG_NOSIGNAL,
        ) as isize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{IoSlice, Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn send_and_recv_move_bytes_and_report_errors() {
        let (mut a, b) = UnixStream::pair().unwrap();
        assert_eq!(send(b.as_raw_fd(), b"weft"), 4);
        let mut got = [0u8; 4];
        a.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"weft");
        a.write_all(b"back").unwrap();
        let mut buf = [0u8; 16];
        // SAFETY: `buf` is valid for 16 bytes of writes.
        let n = unsafe { recv(b.as_raw_fd(), buf.as_mut_ptr(), buf.len()) };
        assert_eq!(&buf[..n as usize], b"back");
        let parts = [
            IoSlice::new(b"ga"),
            IoSlice::new(b""),
            IoSlice::new(b"ther"),
        ];
        assert_eq!(send_gather(b.as_raw_fd(), &parts), 6);
        let mut got = [0u8; 6];
        a.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"gather", "in order, the empty chunk skipped");
        b.set_nonblocking(true).unwrap();
        // SAFETY: as above.
        let n = unsafe { recv(b.as_raw_fd(), buf.as_mut_ptr(), buf.len()) };
        assert_eq!(n, -1);
        assert_eq!(
            std::io::Error::last_os_error().kind(),
            std::io::ErrorKind::WouldBlock
        );
        assert_eq!(
            result(n).unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock,
            "result reads errno"
        );
        assert_eq!(result(6).unwrap(), 6);
        drop(a);
        // A closed peer is an error. (`MSG_NOSIGNAL` also spares a `SIGPIPE`, which Rust's
        // runtime ignores but a C program embedding weft may not.)
        assert_eq!(send(b.as_raw_fd(), b"gone"), -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EPIPE)
        );
        assert_eq!(send_gather(b.as_raw_fd(), &parts), -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EPIPE)
        );
    }
}
