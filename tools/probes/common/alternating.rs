//! The std ping-pong the probes share: variants of one round trip alternated in one process,
//! so that the host's slow and fast spells fall on every variant alike.
//!
//! A client pinned to core 0 and an echo pinned to core 1, over loopback, non-blocking and
//! busy-polled like `weft ping`'s peer. Variant `v` runs `PER_TURN` round trips, then the
//! next variant, round robin, `turns` times; the first three turns warm the connection up and
//! are not kept. Both sockets take the machine's default TCP congestion control, or the one
//! `WEFT_PROBE_CC` names (e.g. `WEFT_PROBE_CC=cubic`, against this host's default BBR).

use std::net::{TcpListener, TcpStream};
use std::time::Instant;

/// Round trips of one variant before the next takes over.
pub const PER_TURN: usize = 20;

/// Give `s` the congestion control `WEFT_PROBE_CC` names, if it names one.
fn congestion(s: &TcpStream) {
    if let Ok(name) = std::env::var("WEFT_PROBE_CC") {
        let got = weft::engine::congestion::apply(s, Some(&name));
        assert_eq!(got.as_deref(), Some(name.as_str()), "WEFT_PROBE_CC={name}");
    }
}

fn pin(core: usize) {
    core_affinity::set_for_current(core_affinity::CoreId { id: core });
}

/// Run `variants` variants for `turns` turns: `echo(v, stream)` answers one message of variant
/// `v`, `client(v, stream)` makes one round trip of it. Returns each variant's round-trip
/// times in nanoseconds.
pub fn run<E, C>(
    variants: usize,
    turns: usize,
    mut echo: E,
    mut client: C,
) -> std::io::Result<Vec<Vec<u64>>>
where
    E: FnMut(usize, &mut TcpStream) -> std::io::Result<()> + Send + 'static,
    C: FnMut(usize, &mut TcpStream) -> std::io::Result<()>,
{
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let rounds = turns * variants * PER_TURN;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        pin(1);
        let (mut s, _) = listener.accept()?;
        congestion(&s);
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
        for i in 0..rounds {
            echo(i / PER_TURN % variants, &mut s)?;
        }
        Ok(())
    });
    pin(0);
    let mut s = TcpStream::connect(addr)?;
    congestion(&s);
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    let mut rtts = vec![Vec::new(); variants];
    for turn in 0..turns {
        for (v, times) in rtts.iter_mut().enumerate() {
            for _ in 0..PER_TURN {
                let t = Instant::now();
                client(v, &mut s)?;
                if turn >= 3 {
                    times.push(t.elapsed().as_nanos() as u64);
                }
            }
        }
    }
    drop(s);
    echo.join().expect("echo thread")?;
    Ok(rtts)
}

/// [`run`] for probes that differ only in how a message is sent: a `len`-byte message from a
/// page-aligned buffer, which the echo reads whole into its own and sends back the same way.
/// `send(v, stream, message)` sends it as variant `v` does.
#[allow(dead_code)] // not every probe that includes this file sends this way
pub fn run_sending<S>(
    variants: usize,
    turns: usize,
    len: usize,
    send: S,
) -> std::io::Result<Vec<Vec<u64>>>
where
    S: Fn(usize, &mut TcpStream, &[u8]) -> std::io::Result<()> + Clone + Send + 'static,
{
    use weft::bench::ping::{page_buffer, spin_read};
    let (echo_send, mut buf) = (send.clone(), page_buffer(len, 0));
    let echo = move |v: usize, s: &mut TcpStream| {
        spin_read(s, &mut buf)?;
        echo_send(v, s, &buf)
    };
    let (msg, mut back) = (page_buffer(len, 0x5a), page_buffer(len, 0));
    let client = move |v: usize, s: &mut TcpStream| {
        send(v, s, &msg)?;
        spin_read(s, &mut back)
    };
    run(variants, turns, echo, client)
}

/// Print `title`, then each variant's one-way p25, p50 and p75 in microseconds (half its
/// round trips), labelled.
pub fn print_quartiles(title: &str, labels: &[String], rtts: &mut [Vec<u64>]) {
    println!("{title}");
    let width = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    for (label, v) in labels.iter().zip(rtts) {
        v.sort_unstable();
        let [p25, p50, p75] = [1, 2, 3].map(|q| v[v.len() * q / 4] as f64 / 2000.0);
        println!("  {label:>width$}: p25 {p25:>8.2}  p50 {p50:>8.2}  p75 {p75:>8.2}");
    }
}
