//! `weft bench bmg-node`: one node of `weft bench bmg --procs`, started by that launcher (its
//! stdin and stdout are the launcher's pipes; see `weft::bench::bmg_procs`).

use super::values::TreeKindArg;
use super::EngineArgs;
use clap::Args;
use std::time::Duration;
use weft::bench::bmg_procs::{node, BmgNode};
use weft::wire::handshake::JobKey;

/// `weft bench bmg-node` arguments: the launcher's, so every process builds the same tree.
#[derive(Args, Debug)]
pub struct BenchBmgNodeArgs {
    /// This process in the launch tree.
    #[arg(long)]
    id: u32,
    /// Processes in the job.
    #[arg(long)]
    nodes: u32,
    /// Launch tree shape.
    #[arg(long, value_enum)]
    tree: TreeKindArg,
    /// A random tree's largest number of children per process.
    #[arg(long)]
    degree: u32,
    /// Seed of a random tree.
    #[arg(long)]
    seed: u64,
    /// Firing period of the spontaneous rules, µs.
    #[arg(long)]
    period_us: u64,
    /// Times the period may double while the process waits for an answer.
    #[arg(long, default_value_t = weft::proto::spontaneous::DEFAULT_BACKOFF)]
    backoff: u8,
    #[command(flatten)]
    engine: EngineArgs,
}

/// Run `weft bench bmg-node`.
pub fn run(a: BenchBmgNodeArgs) -> anyhow::Result<()> {
    super::checks::within("--period-us", a.period_us, 10..=1_000_000)?;
    super::checks::within(
        "--backoff",
        a.backoff,
        0..=weft::proto::spontaneous::MAX_BACKOFF,
    )?;
    let key = JobKey::from_env()?
        .ok_or_else(|| anyhow::anyhow!("a BMG node process needs WEFT_JOB_KEY"))?;
    weft::transport::process::die_with_parent()?;
    let cfg = BmgNode {
        id: a.id,
        nodes: a.nodes,
        tree: (a.tree.into(), a.degree, a.seed),
        period: Duration::from_micros(a.period_us),
        backoff: a.backoff,
        opts: weft::transport::NodeOptions {
            backend: a.engine.backend.map(Into::into),
            reactor: weft::engine::ReactorOptions {
                wait: a.engine.wait.into(),
                ..Default::default()
            },
            ..Default::default()
        },
    };
    let input = std::io::BufReader::new(std::io::stdin());
    node(&cfg, key, input, &mut std::io::stdout().lock())?;
    Ok(())
}
