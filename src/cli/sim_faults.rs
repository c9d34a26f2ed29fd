//! `weft sim faults`: random fault schedules for a protocol, each checked once its faults are
//! over; failing schedules shrunk and printed as JSON for `--replay`.

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use weft::sim::faults::{execute, run, FaultProtocol, FaultsConfig, Schedule};

/// Arguments of `weft sim faults`.
#[derive(Args, Debug)]
pub struct SimFaultsArgs {
    /// The protocol: membership, or bmg (tree -> ring -> BMG).
    #[arg(long, default_value = "membership")]
    protocol: FaultProtocol,
    /// Schedules to run.
    #[arg(long, default_value_t = 1000)]
    schedules: u32,
    /// The first schedule's seed; schedule i runs seed + i (a failure names its seed).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Most processes at a schedule's start (at least 3).
    #[arg(long, default_value_t = 16)]
    max_nodes: u32,
    /// Shrink at most this many failing schedules (each costs up to 400 runs).
    #[arg(long, default_value_t = 1)]
    shrink: u32,
    /// Run one schedule from its JSON (a file, as printed for a failure) and print its check.
    #[arg(long, value_name = "FILE")]
    replay: Option<std::path::PathBuf>,
    /// With --replay: print every message and event of the run (membership).
    #[arg(long)]
    trace: bool,
    /// The summary as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Run `weft sim faults`; fails when a schedule failed its check.
pub fn run_cmd(a: SimFaultsArgs) -> anyhow::Result<()> {
    if let Some(path) = &a.replay {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        let s: Schedule = serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{} is not a schedule: {e}", path.display()))?;
        s.check()
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let out = if a.trace && s.protocol == FaultProtocol::Membership {
            let lines = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
            let out = weft::sim::faults::membership::execute_traced(&s, Some(lines.clone()));
            for l in lines.borrow().iter() {
                say!("{l}");
            }
            out
        } else {
            execute(&s)
        };
        say!(
            "{} events, {} messages, network {:?}, applied {:?}",
            out.events,
            out.messages,
            out.net,
            out.applied
        );
        for v in &out.violations {
            say!("violation: {v}");
        }
        if !out.violations.is_empty() {
            anyhow::bail!("the schedule fails its check");
        }
        say!("the schedule passes its check");
        return Ok(());
    }
    if a.max_nodes < 3 {
        anyhow::bail!("--max-nodes must be at least 3, got {}", a.max_nodes);
    }
    let bar = ProgressBar::new(a.schedules as u64).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} schedules [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    if a.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let started = std::time::Instant::now();
    let s = run(
        &FaultsConfig {
            protocol: a.protocol,
            schedules: a.schedules,
            seed: a.seed,
            max_nodes: a.max_nodes,
            shrink: a.shrink,
        },
        |i| bar.set_position(i as u64),
    );
    bar.finish_and_clear();
    let wall_ms = started.elapsed().as_secs_f64() * 1e3;
    if a.json {
        let mut v = serde_json::to_value(&s)?;
        v["wall_ms"] = serde_json::json!(wall_ms);
        say!("{v}");
    } else {
        let (n, f) = (&s.net, &s.applied);
        say!(
            "{} schedules of {:?} from seed {}: {} events, {} messages; network: {} lost, {} \
             duplicated, {} reordered, {} held up, {} cut; {} crashes ({} of the root), {} \
             recoveries, {} joins, {} hangs, {} partitions; slowest convergence {:.1} ms after \
             the last fault; {:.0} ms simulated in {wall_ms:.0} ms",
            s.schedules,
            a.protocol,
            s.seed,
            s.events,
            s.messages,
            n.lost,
            n.duplicated,
            n.reordered,
            n.delayed,
            n.cut,
            f.crashes,
            f.root_crashes,
            f.recoveries,
            f.joins,
            f.hangs,
            f.partitions,
            s.max_converge_ms,
            s.sim_ms
        );
        say!("violations: {}", s.violations);
        for f in &s.failures {
            eprintln!("seed {}: {}", f.seed, f.violations.join("; "));
            if let Some(shrunk) = &f.shrunk {
                eprintln!(
                    "  shrunk to {} faults ({}); replay with --replay FILE holding:\n  {}",
                    shrunk.faults.len(),
                    f.shrunk_violations.join("; "),
                    serde_json::to_string(shrunk)?
                );
            }
        }
    }
    if s.violations > 0 {
        anyhow::bail!(
            "{} of {} schedules failed their check",
            s.violations,
            s.schedules
        );
    }
    Ok(())
}
