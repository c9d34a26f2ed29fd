//! `weft bench checkpoint`: in-memory checkpoints across in-process nodes, kills, rebuilds;
//! weft's IDA neighborhoods beside partner copy and SCR-style XOR sets, in the same run.

use super::EngineArgs;
use clap::Args;
use std::time::Duration;
use weft::bench::checkpoint::{run as run_bench, CheckpointConfig};
use weft::storage::Scheme;

/// `weft bench checkpoint` arguments.
#[derive(Args, Debug)]
pub struct BenchCheckpointArgs {
    /// In-process nodes, each protecting one state.
    #[arg(long, default_value_t = 16)]
    nodes: usize,
    /// MiB of state per node (fractions allowed: 0.25).
    #[arg(long, default_value_t = 16.0)]
    state_mib: f64,
    /// Nodes killed after the checkpoint.
    #[arg(long, default_value_t = 2)]
    fail: usize,
    /// Schemes to run, each in every trial: ida, partner, xor.
    #[arg(long, value_delimiter = ',', default_value = "ida,partner,xor")]
    schemes: Vec<String>,
    /// Processes per XOR set (SCR's default: 8).
    #[arg(long, default_value_t = 8)]
    xor_set: usize,
    /// Trials (medians are reported).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Seed of the states and the victims (default: fresh, printed).
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    engine: EngineArgs,
    /// One JSON object per scheme.
    #[arg(long)]
    json: bool,
}

/// Run `weft bench checkpoint`.
pub fn run(a: BenchCheckpointArgs) -> anyhow::Result<()> {
    a.engine.one_transport()?;
    super::checks::within("--nodes", a.nodes, 2..=4096)?;
    anyhow::ensure!(
        a.fail < a.nodes,
        "--fail {}: must be below --nodes ({})",
        a.fail,
        a.nodes
    );
    anyhow::ensure!(
        a.state_mib.is_finite() && a.state_mib >= 0.0 && a.state_mib <= 1024.0,
        "--state-mib {}: must be 0 to 1024",
        a.state_mib
    );
    super::checks::within("--repeat", a.repeat, 1..=1000)?;
    super::checks::within("--xor-set", a.xor_set, 2..=255)?;
    let schemes = a
        .schemes
        .iter()
        .map(|s| match s.as_str() {
            "ida" => Ok(Scheme::Ida),
            "partner" => Ok(Scheme::Partner),
            "xor" => Ok(Scheme::Xor { set: a.xor_set }),
            other => Err(anyhow::anyhow!(
                "--schemes: unknown scheme {other:?} (ida, partner, xor)"
            )),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    super::checks::distinct("--schemes", &a.schemes)?;
    let seed = a.seed.unwrap_or_else(weft::rng::SimRng::fresh_seed);
    let cfg = CheckpointConfig {
        nodes: a.nodes,
        state_bytes: (a.state_mib * (1 << 20) as f64) as usize,
        fail: a.fail,
        schemes,
        repeat: a.repeat,
        seed,
        opts: a.engine.job_options(),
        timeout: Duration::from_secs(120),
    };
    let rows = run_bench(&cfg)?;
    if a.json {
        for r in &rows {
            say!("{}", serde_json::to_string(r)?);
        }
        return Ok(());
    }
    say!(
        "{} nodes, {} MiB each, {} killed, seed {seed}, medians of {} trials",
        a.nodes,
        a.state_mib,
        a.fail,
        a.repeat
    );
    say!(
        "{:8} {:>10} {:>12} {:>11} {:>10} {:>9} {:>6} {:>6}",
        "scheme",
        "tolerates",
        "encode GB/s",
        "checkpoint",
        "recover",
        "tolerated",
        "exact",
        "wrong"
    );
    for r in &rows {
        say!(
            "{:8} {:>10} {:>12} {:>8.1} ms {:>10} {:>9} {:>6} {:>6}",
            r.scheme,
            format!("{}/group", r.tolerates_per_group),
            r.encode_gb_s.map_or("-".into(), |g| format!("{g:.2}")),
            r.checkpoint_ms,
            r.recover_ms.map_or("-".into(), |m| format!("{m:.1} ms")),
            format!("{}/{}", r.tolerated_trials, r.trials),
            format!("{}/{}", r.exact_trials, r.trials),
            r.wrong
        );
    }
    if let (Some(ida), Some(xor)) = (
        rows.iter().find(|r| r.scheme == "ida"),
        rows.iter().find(|r| r.scheme == "xor"),
    ) {
        say!(
            "ida/xor checkpoint time: {:.2}x",
            ida.checkpoint_ms / xor.checkpoint_ms.max(1e-9)
        );
    }
    Ok(())
}
