//! `weft bench heartbeat`: ring heartbeats against hung processes, with both cores busy.

use super::EngineArgs;
use clap::Args;
use std::time::Duration;
use weft::bench::heartbeat::{run as run_bench, run_procs, HeartbeatBenchConfig};
use weft::proto::heartbeat::HeartbeatConfig;

/// `weft bench heartbeat` arguments.
#[derive(Args, Debug)]
pub struct BenchHeartbeatArgs {
    /// In-process nodes.
    #[arg(long, default_value_t = 16)]
    nodes: usize,
    /// Time between two heartbeats, µs.
    #[arg(long, default_value_t = 100_000)]
    heartbeat_us: u64,
    /// Silence, in periods, after which the watched process is suspected.
    #[arg(long, default_value_t = weft::proto::heartbeat::SUSPECT_AFTER)]
    suspect_after: f64,
    /// Processes hung, one after another (default: 8, or --nodes - 2 if fewer).
    #[arg(long)]
    trials: Option<usize>,
    /// Periods with nothing hung first, where every suspicion is a false one.
    #[arg(long, default_value_t = 100)]
    quiet_periods: u32,
    /// Doubles each grid process sends each neighbour per round.
    #[arg(long, default_value_t = 64)]
    grid_doubles: usize,
    /// Leave the cores idle: no grid application beside.
    #[arg(long)]
    no_background: bool,
    /// One `weft node` process per node (the radix membership with its ring heartbeats),
    /// hung with a real SIGSTOP, instead of in-process nodes of the Process Order broadcast
    /// hung in place.
    #[arg(long)]
    procs: bool,
    #[command(flatten)]
    engine: EngineArgs,
    /// One JSON object.
    #[arg(long)]
    json: bool,
}

/// Run `weft bench heartbeat`.
pub fn run(a: BenchHeartbeatArgs) -> anyhow::Result<()> {
    a.engine.one_transport()?;
    super::checks::within("--nodes", a.nodes, 3..=1024)?;
    let trials = a.trials.unwrap_or(8.min(a.nodes - 2));
    anyhow::ensure!(
        (1..=a.nodes - 2).contains(&trials),
        "--trials {trials}: must be 1 to --nodes - 2 ({}), two processes are left to watch each \
         other",
        a.nodes - 2
    );
    super::checks::within("--heartbeat-us", a.heartbeat_us, 10..=60_000_000)?;
    anyhow::ensure!(
        a.quiet_periods <= 10_000_000,
        "--quiet-periods {}: at most 10000000",
        a.quiet_periods
    );
    super::checks::within("--grid-doubles", a.grid_doubles, 1..=1 << 16)?;
    let heartbeat = HeartbeatConfig {
        period: Duration::from_micros(a.heartbeat_us),
        suspect_after: a.suspect_after,
    };
    heartbeat
        .check()
        .map_err(|e| anyhow::anyhow!("--suspect-after / --heartbeat-us: {e}"))?;
    let cfg = HeartbeatBenchConfig {
        nodes: a.nodes,
        heartbeat,
        trials,
        quiet_periods: a.quiet_periods,
        background: (!a.no_background).then_some(a.grid_doubles),
        opts: a.engine.job_options(),
    };
    let r = if a.procs {
        run_procs(&cfg, &std::env::current_exe()?)?
    } else {
        run_bench(&cfg)?
    };
    if a.json {
        say!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    say!(
        "{} nodes ({}), heartbeat every {} us, suspect after {} periods, {}, backend {}",
        r.nodes,
        if r.procs {
            "weft node processes, membership, SIGSTOP"
        } else {
            "in-process, Process Order broadcast"
        },
        r.heartbeat_us,
        r.suspect_after,
        if r.background {
            "grid application running"
        } else {
            "idle cores"
        },
        r.backend
    );
    say!(
        "{} hung processes: detected in {:.0} us median, {:.0} us at most ({:.2} periods)",
        r.trials,
        r.detect_us_p50,
        r.detect_us_max,
        r.detect_periods_max
    );
    say!(
        "false suspicions: {} over {} process-periods",
        r.false_suspicions,
        r.periods
    );
    Ok(())
}
