//! Does the kernel's copy into a receive buffer depend on where in a page the buffer starts?
//!
//! A std ping-pong over loopback (`common/alternating.rs`) whose client receives each echo at
//! a page offset that changes every 20 round trips, round robin. Prints the one-way quartiles
//! per offset. The sender's buffer starts on a page. On AMD Zen, offsets 8..24 come out
//! slower by a third to a half of the round trip (4K aliasing in `rep movsb`; see
//! `bluegene_notes/engine-latency.md#receive-buffers-start-on-a-page` and `wire::decoder`); on the Intel host of 2026-11-23
//! no offset is slower.
//!
//! `cargo run --release --example copy_alias -- [size] [offset ...]`

#[path = "common/alternating.rs"]
mod alternating;

use weft::bench::ping::{page_buffer, spin_read as receive, spin_write as send};

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
    let mut buf = page_buffer(size, 0);
    let echo = move |_: usize, s: &mut std::net::TcpStream| {
        receive(s, &mut buf)?;
        send(s, &buf)
    };
    let msg = page_buffer(size, 0x5a);
    let mut back = page_buffer(size + 4096, 0);
    let client = |v: usize, s: &mut std::net::TcpStream| {
        let off = offsets[v] % 4096;
        send(s, &msg)?;
        receive(s, &mut back[off..off + size])
    };
    let mut rtts = alternating::run(offsets.len(), 60, echo, client)?;
    let labels: Vec<String> = offsets.iter().map(|o| o.to_string()).collect();
    alternating::print_quartiles(
        &format!("size {size} B, one-way µs by receive-buffer page offset:"),
        &labels,
        &mut rtts,
    );
    Ok(())
}
