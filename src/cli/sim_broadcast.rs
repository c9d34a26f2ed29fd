//! `weft sim broadcast`: random schedules of the Process Order broadcast, each checked.

use clap::Args;
use weft::sim::broadcast::{run, run_one, ScheduleConfig};

/// Arguments of `weft sim broadcast`.
#[derive(Args, Debug)]
pub struct SimBroadcastArgs {
    /// Schedules to run (each its own system, workload, failures, joins and jitter).
    #[arg(long, default_value_t = 1000)]
    schedules: u32,
    /// The first schedule's seed; schedule i runs seed + i (a violation names its seed).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Most processes at a schedule's start.
    #[arg(long, default_value_t = 20)]
    max_nodes: u32,
    /// Print the schedule of --seed, event by event, and its check (one schedule).
    #[arg(long)]
    trace: bool,
    /// The summary as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Run `weft sim broadcast`; fails when a schedule broke the guarantee.
pub fn run_cmd(a: SimBroadcastArgs) -> anyhow::Result<()> {
    if a.max_nodes < 2 {
        anyhow::bail!("--max-nodes must be at least 2, got {}", a.max_nodes);
    }
    if a.trace {
        let out = run_one(a.seed, a.max_nodes, true);
        for line in &out.trace {
            say!("{line}");
        }
        for v in &out.violations {
            say!("violation: {v}");
        }
        return Ok(());
    }
    let started = std::time::Instant::now();
    let s = run(&ScheduleConfig {
        schedules: a.schedules,
        seed: a.seed,
        max_nodes: a.max_nodes,
    });
    let wall_ms = started.elapsed().as_secs_f64() * 1e3;
    if a.json {
        let mut v = serde_json::to_value(&s)?;
        v["wall_ms"] = serde_json::json!(wall_ms);
        say!("{v}");
    } else {
        say!(
            "{} schedules, {} broadcasts delivered in total order ({} deliveries), {} kills \
             ({} of the root), {} joins, {} recoveries ({} replayed), {} leaves, {} hangs, \
             {} lost-tail deliveries; {:.0} ms simulated in {wall_ms:.0} ms",
            s.schedules,
            s.broadcasts,
            s.deliveries,
            s.kills,
            s.root_kills,
            s.joins,
            s.recoveries,
            s.replayed,
            s.leaves,
            s.hangs,
            s.lost_tail,
            s.sim_ms
        );
        say!("violations: {}", s.violations);
    }
    for v in &s.first_violations {
        eprintln!("violation: {v}");
    }
    if s.violations > 0 {
        anyhow::bail!(
            "{} of {} schedules broke the guarantee",
            s.violations,
            s.schedules
        );
    }
    Ok(())
}
