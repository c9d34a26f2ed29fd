//! Can a large payload leave without the sender's copy on loopback? `vmsplice(2)` then
//! `splice(2)` into the socket, against `send(2)`.
//!
//! A std ping-pong over loopback (`common/alternating.rs`); both ends send each message
//! either with `send` (the kernel copies the bytes into its own pages) or by splicing their
//! buffer's pages into the socket through a pipe (the socket's buffers reference the user
//! pages; the receiver copies straight out of them), alternating every 20 round trips.
//! Prints the one-way p25/p50/p75 per way of sending.
//!
//! Why: `MSG_ZEROCOPY` (io_uring `SENDMSG_ZC`) copies anyway on loopback, at delivery, and
//! pays its notifications on top (`weft ping --zerocopy-min`); splicing is the one way left
//! that skips the sender's copy there. It would also need the receiver to say when it has
//! read the bytes (nothing tells the sender when the pages may change again); this probe only
//! gets away without that because each side answers after reading everything. On the AMD
//! host of 2026-11-23 splicing was 1.05-1.18× slower at 64 KiB and 1 MiB in the host's usual
//! state, and 0.80-0.88× in its slow spells (when `send` itself took 2.5× as long): see
//! `bluegene_notes/engine-latency.md#zero-copy-sends-off-by-default`.
//!
//! `WEFT_PROBE_CC=cubic cargo run --release --example splice_send -- [size]`

#[path = "common/alternating.rs"]
mod alternating;

use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use weft::bench::ping::{page_buffer, spin_read as receive, spin_write as send};

/// A pipe that holds a whole message (capacity at most `/proc/sys/fs/pipe-max-size`, 1 MiB by
/// default, unless root; a larger message goes through it in pieces).
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    fn new(size: usize) -> io::Result<Self> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both are open descriptors that nothing else owns.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let room = size.clamp(4096, 1 << 20) as libc::c_int;
        // SAFETY: F_SETPIPE_SZ on a pipe we own, with an int argument.
        if unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, room) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { read, write })
    }

    /// Send `buf` by reference: its pages into the pipe, the pipe into the socket.
    fn send(&self, s: &TcpStream, buf: &[u8]) -> io::Result<()> {
        let mut at = 0;
        while at < buf.len() {
            let iov = libc::iovec {
                iov_base: buf[at..].as_ptr() as *mut libc::c_void,
                iov_len: buf.len() - at,
            };
            // SAFETY: the iovec describes live memory of `buf`, which outlives the message
            // (the other side answers only after reading all of it).
            let n = unsafe { libc::vmsplice(self.write.as_raw_fd(), &iov, 1, 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            at += n as usize;
            let mut left = n as usize;
            while left > 0 {
                // SAFETY: plain descriptors; null offsets (a pipe and a socket have none).
                let m = unsafe {
                    libc::splice(
                        self.read.as_raw_fd(),
                        std::ptr::null_mut(),
                        s.as_raw_fd(),
                        std::ptr::null_mut(),
                        left,
                        libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
                    )
                };
                if m < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::WouldBlock {
                        return Err(e);
                    }
                    std::hint::spin_loop();
                } else {
                    left -= m as usize;
                }
            }
        }
        Ok(())
    }
}

/// Variant 0 sends with `send`, variant 1 splices.
fn out(v: usize, pipe: &Pipe, s: &mut TcpStream, buf: &[u8]) -> io::Result<()> {
    match v {
        0 => send(s, buf),
        _ => pipe.send(s, buf),
    }
}

fn main() -> io::Result<()> {
    let size: usize = std::env::args()
        .nth(1)
        .map_or(1 << 20, |a| a.parse().expect("a size in bytes"));
    let (echo_pipe, mut buf) = (Pipe::new(size)?, page_buffer(size, 0));
    let echo = move |v: usize, s: &mut TcpStream| {
        receive(s, &mut buf)?;
        out(v, &echo_pipe, s, &buf)
    };
    let (pipe, msg, mut back) = (
        Pipe::new(size)?,
        page_buffer(size, 0x5a),
        page_buffer(size, 0),
    );
    let client = |v: usize, s: &mut TcpStream| {
        out(v, &pipe, s, &msg)?;
        receive(s, &mut back)
    };
    let mut rtts = alternating::run(2, 40, echo, client)?;
    alternating::print_quartiles(
        &format!("size {size} B, one-way µs by way of sending:"),
        &["send".into(), "vmsplice+splice".into()],
        &mut rtts,
    );
    Ok(())
}
