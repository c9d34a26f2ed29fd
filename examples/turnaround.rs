//! How much does a ping-pong's large-message time depend on the turnaround, the moment
//! between receiving a message and starting to send the next one?
//!
//! A std ping-pong over loopback, pinned to cores 0 and 1 like `weft ping`'s peer. Both ends
//! wait `delay` nanoseconds (spinning on the clock) after a message is complete before they
//! send; the delay changes every 20 round trips, round robin, so that the host's slow and
//! fast spells fall on every delay alike. Prints the one-way p25/p50/p75 per delay.
//!
//! Why: at 1 MiB weft's turnaround is 2-3 µs (its user-space state is cold after the kernel
//! copied a megabyte through the cache) where the std peer's is 0.2-0.6 µs, and this probe
//! shows a turnaround of 0.25-3 µs moving the peer itself by 5-25% at 1 MiB, in either
//! direction depending on the sitting. See `bluegene_notes/engine-latency.md`.
//!
//! `cargo run --release --example turnaround -- [size] [delay_ns ...]`

use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};
use weft::transport::ping::{page_buffer, spin_read as receive, spin_write as send};

const PER_TURN: usize = 20;
const TURNS: usize = 40;

fn pin(core: usize) {
    core_affinity::set_for_current(core_affinity::CoreId { id: core });
}

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
    let rounds = TURNS * delays.len() * PER_TURN;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let echo_delays = delays.clone();
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        pin(1);
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
        let mut buf = page_buffer(size, 0);
        for i in 0..rounds {
            receive(&mut s, &mut buf)?;
            wait(echo_delays[i / PER_TURN % echo_delays.len()]);
            send(&mut s, &buf)?;
        }
        Ok(())
    });
    pin(0);
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    let msg = page_buffer(size, 0x5a);
    let mut back = page_buffer(size, 0);
    let mut oneway: Vec<Vec<u64>> = vec![Vec::new(); delays.len()];
    for turn in 0..TURNS {
        for (i, &delay) in delays.iter().enumerate() {
            for _ in 0..PER_TURN {
                let t = Instant::now();
                send(&mut s, &msg)?;
                receive(&mut s, &mut back)?;
                wait(delay);
                // The first turns warm up the connection.
                if turn >= 3 {
                    oneway[i].push(t.elapsed().as_nanos() as u64 / 2);
                }
            }
        }
    }
    drop(s);
    echo.join().expect("echo thread")?;
    println!("size {size} B, one-way µs by turnaround delay (each end, before it sends):");
    for (delay, v) in delays.iter().zip(&mut oneway) {
        v.sort_unstable();
        let q = |f: usize| v[v.len() * f / 4] as f64 / 1000.0;
        println!(
            "  {delay:>6} ns: p25 {:>8.2}  p50 {:>8.2}  p75 {:>8.2}",
            q(1),
            q(2),
            q(3)
        );
    }
    Ok(())
}
