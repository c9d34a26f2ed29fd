//! How much does a ping-pong's large-message time depend on the turnaround, the moment
//! between receiving a message and starting to send the next one?
//!
//! A std ping-pong over loopback (`common/alternating.rs`, pinned like `weft ping`'s peer).
//! Both ends wait `delay` nanoseconds (spinning on the clock) after a message is complete
//! before they send; the delay changes every 20 round trips, round robin, so that the host's
//! slow and fast spells fall on every delay alike. Prints the one-way p25/p50/p75 per delay.
//!
//! Why: at 1 MiB weft's turnaround is 2-3 µs (its user-space state is cold after the kernel
//! copied a megabyte through the cache) where the std peer's is 0.2-0.6 µs. Under BBR (this
//! probe's sockets take the machine's default congestion control) a turnaround of 0.25-3 µs
//! moved the peer itself by 5-25% at 1 MiB, in either direction depending on the sitting;
//! under CUBIC it adds only itself. See `bluegene_notes/engine-latency.md#cubic-not-bbr`.
//!
//! `[WEFT_PROBE_CC=cubic] cargo run --release --example turnaround -- [size] [delay_ns ...]`

#[path = "common/alternating.rs"]
mod alternating;

use std::net::TcpStream;
use std::time::{Duration, Instant};
use weft::bench::ping::{page_buffer, spin_read as receive, spin_write as send};

/// Spin for `ns` nanoseconds (0: not at all).
fn wait(ns: u64) {
    let until = Instant::now() + Duration::from_nanos(ns);
    while ns > 0 && Instant::now() < until {
        std::hint::spin_loop();
    }
}

fn main() -> std::io::Result<()> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a size and delays in nanoseconds"))
        .collect();
    let size = args.first().map_or(1 << 20, |&s| s as usize);
    let delays = match args.get(1..) {
        Some(d) if !d.is_empty() => d.to_vec(),
        _ => vec![0, 250, 1000, 3000],
    };
    let (echo_delays, mut buf) = (delays.clone(), page_buffer(size, 0));
    let echo = move |v: usize, s: &mut TcpStream| {
        receive(s, &mut buf)?;
        wait(echo_delays[v]);
        send(s, &buf)
    };
    let (msg, mut back) = (page_buffer(size, 0x5a), page_buffer(size, 0));
    let client = |v: usize, s: &mut TcpStream| {
        send(s, &msg)?;
        receive(s, &mut back)?;
        wait(delays[v]);
        Ok(())
    };
    let mut rtts = alternating::run(delays.len(), 40, echo, client)?;
    let labels: Vec<String> = delays.iter().map(|d| format!("{d} ns")).collect();
    alternating::print_quartiles(
        &format!("size {size} B, one-way µs by turnaround delay (each end, before it sends):"),
        &labels,
        &mut rtts,
    );
    Ok(())
}
