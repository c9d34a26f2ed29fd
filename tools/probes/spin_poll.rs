//! Is it cheaper to spin on `poll(2)` than on `recv(2)`, waiting for a message?
//!
//! A std ping-pong over loopback (`common/alternating.rs`); both ends wait for each message
//! either by calling `recv` until it returns data (as `weft ping`'s peer and weft's spinning
//! reactors do) or by calling `poll` with a zero timeout until the socket is readable and
//! then `recv`, alternating every 20 round trips. Prints the one-way p25/p50/p75 per way.
//!
//! Why: a spinning `recv` takes the socket's lock every time (`lock_sock`), and the sender's
//! delivery into that socket waits for it (`__pv_queued_spin_lock_slowpath` is 5-8% of a
//! busy 32 B run's samples, inside the spinning receives); `tcp_poll` takes no lock, but the
//! message then costs one system call more. On the AMD host of 2026-11-23 `poll` came out
//! 1-3% slower at 32 B and 3-4% at 32 KiB: see `bluegene_notes/engine-latency.md#tried-not-kept`.
//!
//! `WEFT_PROBE_CC=cubic cargo run --release --example spin_poll -- [size]`

#[path = "common/alternating.rs"]
mod alternating;

use std::io::{self, ErrorKind, Read};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use weft::bench::ping::{page_buffer, spin_read, spin_write as send};

/// Read exactly `buf.len()` bytes, asking `poll` before each `recv`.
fn poll_read(s: &mut TcpStream, buf: &mut [u8]) -> io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        let mut p = libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, a zero timeout.
        while unsafe { libc::poll(&mut p, 1, 0) } != 1 {
            std::hint::spin_loop();
        }
        match s.read(&mut buf[at..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Variant 0 spins on `recv`, variant 1 on `poll`.
fn receive(v: usize, s: &mut TcpStream, buf: &mut [u8]) -> io::Result<()> {
    match v {
        0 => spin_read(s, buf),
        _ => poll_read(s, buf),
    }
}

fn main() -> io::Result<()> {
    let size: usize = std::env::args()
        .nth(1)
        .map_or(32, |a| a.parse().expect("a size in bytes"));
    let mut buf = page_buffer(size, 0);
    let echo = move |v: usize, s: &mut TcpStream| {
        receive(v, s, &mut buf)?;
        send(s, &buf)
    };
    let (msg, mut back) = (page_buffer(size, 0x5a), page_buffer(size, 0));
    let client = |v: usize, s: &mut TcpStream| {
        send(s, &msg)?;
        receive(v, s, &mut back)
    };
    let mut rtts = alternating::run(2, 100, echo, client)?;
    alternating::print_quartiles(
        &format!("size {size} B, one-way µs by way of waiting:"),
        &["spin on recv".into(), "spin on poll".into()],
        &mut rtts,
    );
    Ok(())
}
