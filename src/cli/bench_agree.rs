//! `weft bench agree`: the endpoint's uniform agreement on in-process nodes, with nodes
//! killed during the call, beside the membership's Ts in the same trials.

use super::EngineArgs;
use clap::{Args, ValueEnum};
use std::time::Duration;
use weft::bench::agree::{run as run_bench, AgreeConfig, Victims};

/// Which nodes die during the call.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum VictimsArg {
    /// The root (the agreement's coordinator) and the next in line.
    Root,
    /// Members other than the root, drawn from the seed.
    Members,
}

/// `weft bench agree` arguments.
#[derive(Args, Debug)]
pub struct BenchAgreeArgs {
    /// In-process nodes; several sizes with commas (a row each).
    #[arg(long, value_delimiter = ',', default_value = "16")]
    nodes: Vec<u32>,
    /// Nodes killed during each timed call.
    #[arg(long, default_value_t = 0)]
    fail_during: u32,
    /// Which nodes are killed.
    #[arg(long, value_enum, default_value = "root")]
    victims: VictimsArg,
    /// Trials per size (a fresh job each).
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Seed of the victims (default: fresh, printed).
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    engine: EngineArgs,
    /// One JSON object per size.
    #[arg(long)]
    json: bool,
}

/// Run `weft bench agree`.
pub fn run(a: BenchAgreeArgs) -> anyhow::Result<()> {
    a.engine.one_transport()?;
    for &n in &a.nodes {
        super::checks::within("--nodes", n, 2..=4096)?;
        anyhow::ensure!(
            a.fail_during < n,
            "--fail-during {}: must be below --nodes ({n})",
            a.fail_during
        );
    }
    super::checks::within("--repeat", a.repeat, 1..=1000)?;
    let seed = a.seed.unwrap_or_else(weft::rng::SimRng::fresh_seed);
    if !a.json {
        say!(
            "uniform agreement (OR, and the failed set), {} killed during the call ({:?}), seed {seed}",
            a.fail_during,
            a.victims
        );
        say!(
            "{:>6} {:>7} {:>12} {:>12} {:>12} {:>12} {:>7}",
            "nodes",
            "agreed",
            "agree p50",
            "agree p99",
            "Ts p50",
            "Ts p99",
            "named"
        );
    }
    for &nodes in &a.nodes {
        let cfg = AgreeConfig {
            nodes,
            fail_during: a.fail_during,
            victims: match a.victims {
                VictimsArg::Root => Victims::Root,
                VictimsArg::Members => Victims::Members,
            },
            repeat: a.repeat,
            seed,
            opts: a.engine.job_options(),
            timeout: Duration::from_secs(60),
        };
        let row = run_bench(&cfg)?;
        if a.json {
            say!("{}", serde_json::to_string(&row)?);
            continue;
        }
        let us = |v: f64| format!("{v:.0} µs");
        say!(
            "{:>6} {:>7} {:>12} {:>12} {:>12} {:>12} {:>7}",
            nodes,
            row.agreed,
            us(row.agree.p50_us),
            us(row.agree.p99_us),
            row.ts.as_ref().map_or("-".into(), |t| us(t.p50_us)),
            row.ts.as_ref().map_or("-".into(), |t| us(t.p99_us)),
            format!("{}/{}", row.failed_named, row.trials)
        );
    }
    Ok(())
}
