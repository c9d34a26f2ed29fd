//! Does one large write pay for the acknowledgments it meets on the way?
//!
//! Within one `sendmsg`, Linux's TCP takes in the ACKs that arrived while the write held the
//! socket (its backlog) before it builds every 17th segment buffer (`tcp_sendmsg_locked`:
//! `process_backlog >= 16`). On loopback a buffer is one 65 483-byte segment, so a 1 MiB
//! message (17 buffers) stops before its last segment to free the 15 the receiver has already
//! acknowledged, and the receiver waits. Written in two parts, the last at most 16 buffers,
//! those ACKs are taken in after the last segment has gone.
//!
//! A std ping-pong over loopback (`common/alternating.rs`) of `size + 64` bytes a message
//! (weft's framing of a payload), both ends writing each message one of four ways, alternated
//! every 20 round trips:
//! - one `send` of the whole message, as `weft ping`'s std peer does;
//! - all but the last 16 × 65 483 bytes, then those;
//! - all but the last 15 × 64 KiB, then those (the engine's rule when a socket cannot tell
//!   its MSS);
//! - writes of 16 segments, counted from the end.
//!
//! Prints the one-way p25/p50/p75 per way. Results:
//! `bluegene_notes/engine-latency.md#the-last-write-is-16-buffers`.
//!
//! `WEFT_PROBE_CC=cubic cargo run --release --example ack_flush -- [size]`

#[path = "common/alternating.rs"]
mod alternating;

use std::io;
use std::net::TcpStream;
use weft::bench::ping::spin_write;

/// Sixteen loopback segments (MTU 65 536 less 52 bytes of IPv4 and TCP headers with
/// timestamps), the most one `send` builds before it stops for ACKs.
const SIXTEEN: usize = 16 * 65_483;

/// Write `b` in parts ending at each of `cuts` (ascending), then the rest.
fn writes(s: &mut TcpStream, b: &[u8], cuts: &[usize]) -> io::Result<()> {
    let mut at = 0;
    for &c in cuts.iter().chain(std::iter::once(&b.len())) {
        if c > at && c <= b.len() {
            spin_write(s, &b[at..c])?;
            at = c;
        }
    }
    Ok(())
}

/// Send `b` (the whole message) the way variant `v` does.
fn way(v: usize, s: &mut TcpStream, b: &[u8]) -> io::Result<()> {
    let n = b.len();
    match v {
        0 => spin_write(s, b),
        1 => writes(s, b, &[n.saturating_sub(SIXTEEN)]),
        2 => writes(s, b, &[n.saturating_sub(15 << 16)]),
        _ => {
            let cuts: Vec<usize> = (1..=n / SIXTEEN).rev().map(|k| n - k * SIXTEEN).collect();
            writes(s, b, &cuts)
        }
    }
}

fn main() -> io::Result<()> {
    let size: usize = std::env::args()
        .nth(1)
        .map_or(1 << 20, |a| a.parse().expect("a size in bytes"));
    let mut rtts = alternating::run_sending(4, 250, size + 64, way)?;
    alternating::print_quartiles(
        &format!("size {size} B (+64 framing), one-way µs by way of writing:"),
        &[
            "one write".into(),
            "the last 16 segments apart".into(),
            "the last 15 x 64 KiB apart".into(),
            "16 segments a write, from the end".into(),
        ],
        &mut rtts,
    );
    Ok(())
}
