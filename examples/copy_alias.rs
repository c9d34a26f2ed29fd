//! Does the kernel's copy into a receive buffer depend on where in a page the buffer starts?
//!
//! A std ping-pong over loopback, pinned to cores 0 and 1, whose client receives each echo
//! at a page offset that changes every 20 round trips, round robin, so that the host's slow
//! and fast spells fall on every offset alike. Prints the one-way median per offset.
//! The sender's buffer starts on a page. On AMD Zen, offsets 8..24 come out slower by a
//! third to a half of the round trip (4K aliasing in `rep movsb`; see
//! `bluegene_notes/engine-latency.md` and `wire::decoder`).
//!
//! `cargo run --release --example copy_alias -- [size] [offset ...]`

use std::net::{TcpListener, TcpStream};
use std::time::Instant;
use weft::transport::ping::{page_buffer, spin_read as receive, spin_write as send};

const PER_TURN: usize = 20;
const TURNS: usize = 60;

fn pin(core: usize) {
    core_affinity::set_for_current(core_affinity::CoreId { id: core });
}

fn main() -> std::io::Result<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("sizes and offsets are byte counts"))
        .collect();
    let size = args.first().copied().unwrap_or(1 << 16);
    let offsets = match args.get(1..) {
        Some(o) if !o.is_empty() => o.to_vec(),
        _ => vec![0, 8, 16, 24, 32, 64, 2048, 4080, 4088],
    };
    let rounds = TURNS * offsets.len() * PER_TURN;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        pin(1);
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
        let mut buf = page_buffer(size, 0);
        for _ in 0..rounds {
            receive(&mut s, &mut buf)?;
            send(&mut s, &buf)?;
        }
        Ok(())
    });
    pin(0);
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    let msg = page_buffer(size, 0x5a);
    let mut back = page_buffer(size + 4096, 0);
    let mut rtts: Vec<Vec<u64>> = vec![Vec::new(); offsets.len()];
    for turn in 0..TURNS {
        for (i, &off) in offsets.iter().enumerate() {
            let off = off % 4096;
            for _ in 0..PER_TURN {
                let t = Instant::now();
                send(&mut s, &msg)?;
                receive(&mut s, &mut back[off..off + size])?;
                // The first turns warm up the connection.
                if turn >= 3 {
                    rtts[i].push(t.elapsed().as_nanos() as u64);
                }
            }
        }
    }
    drop(s);
    echo.join().expect("echo thread")?;
    println!("size {size} B, one-way p50 by receive-buffer page offset:");
    for (off, v) in offsets.iter().zip(&mut rtts) {
        v.sort_unstable();
        println!("  {off:>5}: {:>9.2} µs", v[v.len() / 2] as f64 / 2000.0);
    }
    Ok(())
}
