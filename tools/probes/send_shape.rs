//! What does weft's gathered send cost against one contiguous send of the same bytes?
//!
//! A std ping-pong over loopback (`common/alternating.rs`) of `size + 64` bytes a message
//! (weft's framing of a spliced payload: a 16-byte header, the payload, a 48-byte tail), both
//! ends sending each message one of three ways, alternated every 20 round trips:
//! - `send` of the whole buffer, as `weft ping`'s std peer does (`TcpStream::write`);
//! - `sendmsg` of one slice, the whole buffer;
//! - `sendmsg` of weft's three slices: the header, the payload (the buffer's bytes 16..,
//!   as when weft echoes a frame from its receive buffer) and the tail, as the reactors'
//!   gathered write does (`sys::send_gather`).
//!
//! Every way sends the same bytes from the same memory, so what differs is the system call
//! and the kernel's iteration over its source (a single user buffer, or an iovec array).
//! Prints the one-way p25/p50/p75 per way. Results:
//! `bluegene_notes/engine-latency.md#where-a-one-way-goes`.
//!
//! `WEFT_PROBE_CC=cubic cargo run --release --example send_shape -- [size]`

#[path = "common/alternating.rs"]
mod alternating;

use std::io::{self, ErrorKind, IoSlice};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use weft::bench::ping::spin_write;

/// One `sendmsg(2)` of `parts`, as the reactors' gathered write (`sys::send_gather`) makes.
fn sendmsg_once(s: &TcpStream, parts: &[IoSlice<'_>]) -> isize {
    // SAFETY: all-zero is a valid msghdr (no address, no control data).
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = parts.as_ptr() as *mut libc::iovec;
    hdr.msg_iovlen = parts.len() as _;
    // SAFETY: `hdr` names `parts.len()` readable iovecs, alive for the call.
    unsafe { libc::sendmsg(s.as_raw_fd(), &hdr, libc::MSG_NOSIGNAL) }
}

/// Send all of `parts` with `sendmsg`, spinning on a full send buffer.
fn spin_sendmsg(s: &TcpStream, parts: &[&[u8]]) -> io::Result<()> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut done = 0;
    while done < total {
        // The slices past what is sent, on the stack.
        let mut iov = [IoSlice::new(&[]); 4];
        let (mut n, mut skip) = (0, done);
        for p in parts {
            if skip >= p.len() {
                skip -= p.len();
                continue;
            }
            iov[n] = IoSlice::new(&p[skip..]);
            n += 1;
            skip = 0;
        }
        let sent = sendmsg_once(s, &iov[..n]);
        if sent >= 0 {
            done += sent as usize;
            continue;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::Interrupted => std::hint::spin_loop(),
            _ => return Err(e),
        }
    }
    Ok(())
}

/// Send `b` (the whole message) the way variant `v` does.
fn way(v: usize, s: &mut TcpStream, b: &[u8], head: &[u8], tail: &[u8]) -> io::Result<()> {
    match v {
        // The peer's own send: std's `write` is `send(2)` with `MSG_NOSIGNAL`.
        0 => spin_write(s, b),
        1 => spin_sendmsg(s, &[b]),
        _ => spin_sendmsg(s, &[head, &b[16..b.len() - 48], tail]),
    }
}

fn main() -> io::Result<()> {
    let size: usize = std::env::args()
        .nth(1)
        .map_or(1 << 20, |a| a.parse().expect("a size in bytes"));
    let (head, tail) = ([1u8; 16], [2u8; 48]);
    let send = move |v: usize, s: &mut TcpStream, b: &[u8]| way(v, s, b, &head, &tail);
    let mut rtts = alternating::run_sending(3, 250, size + 64, send)?;
    alternating::print_quartiles(
        &format!("size {size} B (+64 framing), one-way µs by way of sending:"),
        &[
            "send".into(),
            "sendmsg, 1 slice".into(),
            "sendmsg, 3 slices".into(),
        ],
        &mut rtts,
    );
    Ok(())
}
