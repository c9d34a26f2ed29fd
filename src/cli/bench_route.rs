//! `weft bench route`: messages and a broadcast routed over the BMG on in-process nodes around
//! killed ones, and a hop's cost beside the engine's one-way latency in the same run.

use super::EngineArgs;
use clap::Args;
use std::time::Duration;
use weft::bench::route::{run as run_bench, RouteBenchConfig};
use weft::proto::route::RouteConfig;

/// `weft bench route` arguments.
#[derive(Args, Debug)]
pub struct BenchRouteArgs {
    /// In-process nodes.
    #[arg(long, default_value_t = 256)]
    nodes: usize,
    /// Nodes killed before any message (no one is told: refused dials tell them). Default:
    /// an eighth of --nodes.
    #[arg(long)]
    fail: Option<usize>,
    /// Messages each live node sends at once, to random live ranks.
    #[arg(long, default_value_t = 4)]
    per_node: u32,
    /// Messages sent one after another on warm connections, for the per-hop latency.
    #[arg(long, default_value_t = 200)]
    probes: u32,
    /// Payload bytes of every message.
    #[arg(long, default_value_t = 32)]
    size: usize,
    /// A message without an answer for this many ms is sent again (then after twice as long).
    #[arg(long, default_value_t = 250)]
    retry_ms: u64,
    /// Seed of the victims and destinations (default: fresh, printed).
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    engine: EngineArgs,
    /// One JSON object.
    #[arg(long)]
    json: bool,
}

/// Run `weft bench route`.
pub fn run(a: BenchRouteArgs) -> anyhow::Result<()> {
    a.engine.one_transport()?;
    super::checks::within("--nodes", a.nodes, 2..=4096)?;
    let fail = match a.fail {
        Some(f) => {
            anyhow::ensure!(
                f + 2 <= a.nodes,
                "--fail {f}: at most --nodes - 2 ({}), so that two nodes are left to talk",
                a.nodes - 2
            );
            f
        }
        None => (a.nodes / 8).min(a.nodes - 2),
    };
    anyhow::ensure!(
        a.size <= 1 << 20,
        "--size {}: at most 1 MiB (1048576)",
        a.size
    );
    super::checks::within("--per-node", a.per_node, 1..=1000)?;
    super::checks::within("--probes", a.probes, 1..=1_000_000)?;
    super::checks::within("--retry-ms", a.retry_ms, 1..=60_000)?;
    let seed = a.seed.unwrap_or_else(weft::rng::SimRng::fresh_seed);
    let cfg = RouteBenchConfig {
        nodes: a.nodes,
        fail,
        per_node: a.per_node,
        probes: a.probes,
        size: a.size,
        seed,
        opts: a.engine.job_options(),
        route: RouteConfig {
            retry: Duration::from_millis(a.retry_ms),
            ..RouteConfig::default()
        },
        timeout: Duration::from_secs(120),
    };
    let r = run_bench(&cfg)?;
    if a.json {
        say!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    say!(
        "{} nodes, {} killed, seed {seed}, backend {}",
        r.nodes,
        r.dead,
        r.backend
    );
    say!(
        "burst: {}/{} delivered, {} failed in {:.1} ms; hops mean {:.2}, max {} (ceil(log2 N) = {}); {} resent",
        r.delivered,
        r.sent,
        r.failed,
        r.burst_ms,
        r.mean_hops,
        r.max_hops,
        r.bound,
        r.resent
    );
    say!(
        "broadcast: {}/{} live nodes in {:.2} ms",
        r.broadcast_reached,
        r.live,
        r.broadcast_ms
    );
    say!(
        "per hop: {:.1} us (probe rtt {:.1} us over {:.2} hops); direct to a finger {:.1} us; ratio {:.2}",
        r.hop_us,
        r.probe_rtt_us,
        r.probe_hops,
        r.direct_us,
        r.hop_over_direct
    );
    say!(
        "engine ping-pong, two nodes on two cores: {:.1} us one-way",
        r.l_us
    );
    Ok(())
}
