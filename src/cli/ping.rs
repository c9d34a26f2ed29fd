//! `weft ping`: one-way latency and bandwidth between two nodes on loopback, beside the std
//! busy-poll ping-pong in the same run (`--compare`).

use clap::Args;
use weft::engine::{Backend, WaitMode};
use weft::transport::ping::{compare, engine, PingRow};
use weft::transport::NodeOptions;

/// Arguments of `weft ping`.
#[derive(Args, Debug)]
pub struct PingArgs {
    /// Payload sizes in bytes.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "8,32,256,4096,65536,1048576"
    )]
    sizes: Vec<usize>,
    /// Timed round trips per size.
    #[arg(long, default_value_t = 10_000)]
    iters: u64,
    /// I/O backend (default: automatic, or WEFT_BACKEND).
    #[arg(long, value_enum)]
    backend: Option<Backend>,
    /// How reactors wait. Adaptive by default: busy-like latency while messages flow, and a
    /// reactor that blocks once they stop (busy is the mode the std peer runs in).
    #[arg(long, value_enum, default_value_t = WaitMode::Adaptive)]
    wait: WaitMode,
    /// io_uring sends of at least this many bytes are zero-copy (SENDMSG_ZC).
    #[arg(long, default_value_t = weft::transport::ZEROCOPY_MIN)]
    zerocopy_min: usize,
    /// Also run the std-library busy-poll ping-pong with the same sizes and print ratios.
    #[arg(long)]
    compare: bool,
    /// With --compare: weft and the peer take turns in this many rounds of iters/rounds round
    /// trips each, so that the host's slow and fast spells fall on both; each round gives a
    /// ratio, and their median comes with a 95% interval (6 rounds or more).
    #[arg(long, default_value_t = 10)]
    rounds: u64,
    /// TCP congestion control of weft's connections ("system": the machine's default).
    #[arg(long, default_value = weft::engine::congestion::PREFERRED)]
    congestion: String,
    /// With --compare: the peer's congestion control (default: the same as weft's, so that
    /// the engines are compared; "system": what a plain program gets).
    #[arg(long)]
    peer_congestion: Option<String>,
    /// One JSON object per size.
    #[arg(long)]
    json: bool,
}

/// Run `weft ping`.
pub fn run(a: PingArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !a.sizes.is_empty() && a.iters > 0,
        "need at least one size and one iteration"
    );
    anyhow::ensure!(
        a.sizes.iter().all(|&s| s <= 8 << 20),
        "sizes above 8 MiB are not supported"
    );
    let opts = NodeOptions {
        wait: a.wait,
        backend: a.backend,
        zerocopy_min: a.zerocopy_min,
        congestion: super::congestion_arg(&a.congestion),
        ..NodeOptions::default()
    };
    let (ours, peer) = if a.compare {
        let peer_cc = super::congestion_arg(a.peer_congestion.as_deref().unwrap_or(&a.congestion));
        compare(&a.sizes, a.iters, a.rounds, opts, peer_cc.as_deref())?
    } else {
        (engine(&a.sizes, a.iters, opts)?, Vec::new())
    };
    if a.json {
        for r in ours.iter().chain(&peer) {
            say!("{}", serde_json::to_string(r)?);
        }
        return Ok(());
    }
    say!("weft ping: 2 nodes on 127.0.0.1, cores 0 and 1, one-way latency = RTT/2");
    say!("steal = CPU time the hypervisor took from this machine during that backend's run");
    let cc = |rows: &[PingRow]| rows.first().map_or(String::new(), |r| r.congestion.clone());
    match peer.is_empty() {
        true => say!("TCP congestion control: {}", cc(&ours)),
        false => say!(
            "TCP congestion control: weft {}, std-busy {}",
            cc(&ours),
            cc(&peer)
        ),
    }
    say!(
        "{:>8} {:>9} {:>8} {:>9} {:>9} {:>9} {:>10} {:>8} {:>7}",
        "size",
        "backend",
        "wait",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "MB/s",
        "iters",
        "steal %"
    );
    let show = |r: &PingRow| {
        say!(
            "{:>8} {:>9} {:>8} {:>9.2} {:>9.2} {:>9.2} {:>10.1} {:>8} {:>7}",
            r.size,
            r.backend,
            r.wait,
            r.p50_us,
            r.p99_us,
            r.p999_us,
            r.mb_per_s,
            r.iters,
            r.steal_pct.map_or("-".to_string(), |p| format!("{p:.1}"))
        )
    };
    ours.iter().for_each(show);
    if !peer.is_empty() {
        peer.iter().for_each(show);
        say!("\nweft / std-busy: the median of the per-round ratios [its 95% interval]");
        say!("(p50 latency: lower is better; bandwidth: higher is better)");
        let interval = |m: &Option<weft::metrics::MedianInterval>| {
            m.map_or("-".to_string(), |m| {
                format!(
                    "{:.3}x [{:.3}, {:.3}] ({:.0}%)",
                    m.median,
                    m.lo,
                    m.hi,
                    m.confidence * 100.0
                )
            })
        };
        for o in &ours {
            say!(
                "{:>8} B  p50 {}   MB/s {}",
                o.size,
                interval(&o.p50_ratio),
                interval(&o.mb_ratio)
            );
        }
    }
    Ok(())
}
