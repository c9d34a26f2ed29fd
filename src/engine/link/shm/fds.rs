//! The descriptors a shared-memory link lives on besides its segment: the bells (eventfds) a
//! sleeping end is rung on, the peer process's pidfd (readable when it dies, whatever killed
//! it), and passing descriptors over a Unix socket (SCM_RIGHTS).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// An eventfd one end sleeps on and the other rings.
#[derive(Debug)]
pub struct Bell(OwnedFd);

impl Bell {
    /// A new, silent bell (non-blocking, close-on-exec).
    pub fn new() -> io::Result<Bell> {
        // SAFETY: no pointers; a non-negative result is a new fd we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just created.
        Ok(Bell(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// A bell the peer handed over.
    pub fn from_fd(fd: OwnedFd) -> Bell {
        Bell(fd)
    }

    /// Wake whoever waits on it. A full counter (2^64 - 2 rings unheard) already wakes.
    pub fn ring(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: 8 readable bytes, as eventfd wants.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    /// Hear every ring so far (the next one wakes a poll again); whether there was one.
    pub fn drain(&self) -> bool {
        let mut n = [0u8; 8];
        // SAFETY: 8 writable bytes, as eventfd wants.
        let r = unsafe { libc::read(self.0.as_raw_fd(), n.as_mut_ptr().cast(), 8) };
        r == 8
    }

    /// The descriptor, for a poll set or to hand over.
    pub fn fd(&self) -> &OwnedFd {
        &self.0
    }
}

/// A pidfd of the process at the other end of `sock` (`SO_PEERCRED`): readable once that
/// process has exited. (The pid is the one the peer had when it connected or listened; the
/// peer is alive then, holding the socket, so the pid names it and no successor.)
pub fn peer_pidfd(sock: &UnixStream) -> io::Result<(OwnedFd, u32)> {
    // SAFETY: `cred` is plain data the call fills; `len` says its size.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: valid pointers to `cred` and `len`.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((pidfd_open(cred.pid)?, cred.pid as u32))
}

/// `pidfd_open(pid, 0)`.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: no pointers; a non-negative result is a new fd we own (pidfds are close-on-exec).
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just created.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Whether the process behind `pidfd` has exited (it is readable then).
pub fn exited(pidfd: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; no wait.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r > 0 && p.revents & libc::POLLIN != 0
}

/// The most descriptors one message carries.
pub const MAX_FDS: usize = 4;

/// Send `bytes` with `fds` attached, in one message.
pub fn send_fds(sock: &UnixStream, bytes: &[u8], fds: &[&OwnedFd]) -> io::Result<()> {
    assert!(fds.len() <= MAX_FDS);
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let payload = std::mem::size_of_val(raw.as_slice());
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe { libc::CMSG_SPACE(payload as u32) } as usize;
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: plain data, filled below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` points at `control`, which has room for one header and `payload` bytes.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(payload as u32) as _;
        std::ptr::copy_nonoverlapping(raw.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), payload);
    }
    // SAFETY: `msg` and what it points at are valid for the call.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != bytes.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short descriptor message",
        ));
    }
    Ok(())
}

/// Receive one message into `buf` with up to [`MAX_FDS`] descriptors: the bytes' count and
/// the descriptors (owned, close-on-exec). Descriptors of a message cut short are closed.
pub fn recv_fds(sock: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<RawFd>()) as u32) };
    let mut control = vec![0u8; space as usize];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: plain data, filled below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control.len() as _;
    // SAFETY: `msg` and what it points at are valid for the call.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `msg_controllen` bytes of `control` with well-formed headers;
    // each SCM_RIGHTS payload is an array of descriptors now ours.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "more descriptors than a link takes",
        ));
    }
    Ok((n as usize, fds))
}
