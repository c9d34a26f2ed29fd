//! `weft ping`: one-way latency and bandwidth between two nodes on loopback, beside the std
//! busy-poll ping-pong in the same run (`--compare`).

use super::checks;
use super::values::{BackendArg, TransportArg, WaitArg};
use clap::Args;
use weft::bench::ping::{compare, compare_api, endpoint, engine, Peer, PingRow};
use weft::engine::Backend;
use weft::transport::NodeOptions;

/// Most round trips per size: past it a run takes days, and the counts stay far from
/// overflowing.
const MAX_ITERS: u64 = 1_000_000_000;

/// `weft ping --peer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum PeerArg {
    /// The std-library ping-pong over TCP, busy-polled.
    Std,
    /// Open MPI's ping-pong through its shared-memory BTL (vader), built with mpicc.
    Vader,
}

/// `weft ping --api`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ApiArg {
    /// A sans-IO ping-pong protocol, answering on the reactor.
    Protocol,
    /// `weft::Endpoint`'s routed, acknowledged sends, answered by the application's thread.
    Endpoint,
}

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
    /// Timed round trips per size (at most 10^9).
    #[arg(long, default_value_t = 10_000)]
    iters: u64,
    /// I/O backend (default: automatic, or WEFT_BACKEND).
    #[arg(long, value_enum)]
    backend: Option<BackendArg>,
    /// How the two nodes reach each other (default: automatic, or WEFT_TRANSPORT: in-process,
    /// as two nodes of one process are).
    #[arg(long, value_enum)]
    transport: Option<TransportArg>,
    /// Reactor threads for the two nodes: 2 (one per core, the default) or 1 (both nodes on
    /// one reactor: in-process, a message never leaves the thread).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    reactors: u8,
    /// How reactors wait. Adaptive by default: busy-like latency while messages flow, and a
    /// reactor that blocks once they stop (busy is the mode the std peer runs in).
    #[arg(long, value_enum, default_value = "adaptive")]
    wait: WaitArg,
    /// io_uring sends of at least this many bytes are zero-copy (SENDMSG_ZC; io_uring only,
    /// off by default).
    #[arg(long)]
    zerocopy_min: Option<usize>,
    /// Also run a peer's ping-pong with the same sizes, taking turns, and print ratios: the
    /// std-library busy-poll loop over TCP, or for a co-located transport (in-process, shared
    /// memory) Open MPI's vader where mpicc and mpirun are found (--peer).
    #[arg(long)]
    compare: bool,
    /// With --compare: the peer (default: vader for a co-located transport when Open MPI is
    /// installed, else std).
    #[arg(long, value_enum, requires = "compare")]
    peer: Option<PeerArg>,
    /// With --compare: weft and the peer take turns in this many rounds of iters/rounds round
    /// trips each, so that the host's slow and fast spells fall on both; each round gives a
    /// ratio, and their median comes with a 95% interval (6 rounds or more).
    #[arg(long)]
    rounds: Option<u64>,
    /// TCP congestion control of weft's connections ("system": the machine's default).
    #[arg(long, default_value = weft::engine::congestion::PREFERRED)]
    congestion: String,
    /// Authenticate every ping-pong frame (AES-256-GMAC, 128-bit tag, per-connection keys),
    /// as control frames always are: the cost of bulk integrity.
    #[arg(long)]
    bulk_mac: bool,
    /// With --compare: the peer's congestion control (default: the same as weft's, so that
    /// the engines are compared; "system": what a plain program gets).
    #[arg(long)]
    peer_congestion: Option<String>,
    /// What carries the round trips: a hand-written protocol, or the endpoint a runtime
    /// embeds.
    #[arg(
        long,
        value_enum,
        default_value = "protocol",
        conflicts_with = "compare_api"
    )]
    api: ApiArg,
    /// Run the protocol's and the endpoint's ping-pong taking turns (--rounds), and print the
    /// endpoint's per-round ratios over the protocol's.
    #[arg(long, conflicts_with = "compare")]
    compare_api: bool,
    /// One JSON object per size.
    #[arg(long)]
    json: bool,
}

/// Run `weft ping`.
pub fn run(a: PingArgs) -> anyhow::Result<()> {
    anyhow::ensure!(!a.sizes.is_empty(), "--sizes: need at least one size");
    checks::distinct("--sizes", &a.sizes)?;
    anyhow::ensure!(
        a.sizes.iter().all(|&s| s <= 8 << 20),
        "--sizes: sizes above 8 MiB are not supported"
    );
    anyhow::ensure!(
        (1..=MAX_ITERS).contains(&a.iters),
        "--iters {}: must be 1 to {MAX_ITERS}",
        a.iters
    );
    // 10 rounds, or one per iteration when there are fewer: a default never refuses.
    let rounds = a.rounds.unwrap_or(10.min(a.iters));
    anyhow::ensure!(
        (1..=a.iters).contains(&rounds),
        "--rounds {rounds}: must be 1 to --iters ({})",
        a.iters
    );
    let backend: Option<Backend> = a.backend.map(Into::into);
    if a.zerocopy_min.is_some() {
        let chosen = weft::engine::forced_backend(backend)?;
        anyhow::ensure!(
            chosen != Some(Backend::Poll),
            "--zerocopy-min: zero-copy sends exist only on the io_uring backend"
        );
    }
    let opts = NodeOptions {
        backend,
        transport: a.transport.map(Into::into),
        reactors: Some(a.reactors.into()),
        bulk_mac: a.bulk_mac,
        reactor: weft::engine::ReactorOptions {
            wait: a.wait.into(),
            zerocopy_min: a.zerocopy_min.unwrap_or(weft::transport::ZEROCOPY_MIN),
            congestion: super::congestion_arg(&a.congestion),
            ..Default::default()
        },
        ..NodeOptions::default()
    };
    anyhow::ensure!(
        a.rounds.is_none() || a.compare || a.compare_api,
        "--rounds goes with --compare or --compare-api"
    );
    anyhow::ensure!(
        !(a.compare && a.api == ApiArg::Endpoint),
        "--compare runs the protocol's ping-pong beside a peer; the endpoint's is compared \
         with the protocol's (--compare-api)"
    );
    let (ours, peer) = if a.compare_api {
        compare_api(&a.sizes, a.iters, rounds, opts)?
    } else if a.api == ApiArg::Endpoint {
        (endpoint(&a.sizes, a.iters, opts)?, Vec::new())
    } else if a.compare {
        let peer_cc = super::congestion_arg(a.peer_congestion.as_deref().unwrap_or(&a.congestion));
        let in_process = weft::transport::Transport::chosen(opts.transport)
            .map_err(anyhow::Error::msg)?
            != weft::transport::Transport::Tcp;
        let peer = match a.peer {
            Some(PeerArg::Std) => Peer::StdBusy,
            Some(PeerArg::Vader) => Peer::Vader,
            None if in_process && Peer::vader_available() => Peer::Vader,
            None => Peer::StdBusy,
        };
        compare(&a.sizes, a.iters, rounds, opts, peer, peer_cc.as_deref())?
    } else {
        (engine(&a.sizes, a.iters, opts)?, Vec::new())
    };
    if a.json {
        for r in ours.iter().chain(&peer) {
            say!("{}", serde_json::to_string(r)?);
        }
        return Ok(());
    }
    let transport = ours.first().map_or(String::new(), |r| r.transport.clone());
    match (transport.as_str(), a.reactors) {
        ("inproc", 1) => {
            say!("weft ping: 2 nodes in-process on one reactor, core 0, one-way latency = RTT/2")
        }
        ("inproc", _) => say!(
            "weft ping: 2 nodes in-process, reactors on cores 0 and 1, one-way latency = RTT/2"
        ),
        ("shm", 1) => say!(
            "weft ping: 2 nodes through a shared-memory link, on one reactor, core 0, one-way \
             latency = RTT/2"
        ),
        ("shm", _) => say!(
            "weft ping: 2 nodes through a shared-memory link, reactors on cores 0 and 1, \
             one-way latency = RTT/2"
        ),
        _ => say!("weft ping: 2 nodes on 127.0.0.1, cores 0 and 1, one-way latency = RTT/2"),
    }
    if transport == "inproc" {
        say!("in-process: a payload moves by reference, so MB/s counts no copy");
    }
    say!("steal = CPU time the hypervisor took from this machine during that backend's run");
    let cc = |rows: &[PingRow]| rows.first().map_or(String::new(), |r| r.congestion.clone());
    match peer.is_empty() {
        _ if transport == "inproc" || transport == "shm" => {}
        true => say!("TCP congestion control: {}", cc(&ours)),
        false => say!(
            "TCP congestion control: weft {}, {} {}",
            cc(&ours),
            peer[0].backend,
            cc(&peer)
        ),
    }
    say!(
        "{:>8} {:>8} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>10} {:>8} {:>7}",
        "size",
        "api",
        "transport",
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
            "{:>8} {:>8} {:>9} {:>9} {:>8} {:>9.2} {:>9.2} {:>9.2} {:>10.1} {:>8} {:>7}",
            r.size,
            r.api,
            r.transport,
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
        let (who, them) = if a.compare_api {
            ("endpoint", "protocol".to_string())
        } else {
            ("weft", peer[0].backend.clone())
        };
        say!("\n{who} / {them}: the median of the per-round ratios [its 95% interval]");
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
        let rated = if a.compare_api { &peer } else { &ours };
        for o in rated {
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
