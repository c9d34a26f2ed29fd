//! `weft bsp run`: a BSP program on in-process engine nodes with kills; the result checked
//! against a fault-free run, the time beside a run without kills.

use super::EngineArgs;
use clap::Args;
use std::time::Duration;
use weft::bench::bsp::{run as run_bsp, BspRunConfig};
use weft::bsp::app::by_name;

/// `weft bsp run` arguments.
#[derive(Args, Debug)]
pub struct BspRunArgs {
    /// The program: prefix-sum or jacobi.
    #[arg(long, default_value = "jacobi")]
    app: String,
    /// Real processors (in-process nodes).
    #[arg(long, default_value_t = 32)]
    nodes: usize,
    /// Virtual processors (default: 8 per node).
    #[arg(long)]
    r#virtual: Option<u64>,
    /// Program supersteps.
    #[arg(long, default_value_t = 20)]
    supersteps: u32,
    /// Nodes killed while the program runs, each at a seeded moment.
    #[arg(long, default_value_t = 2)]
    fail: usize,
    /// Kill every victim at one moment, a whole neighborhood first: only a BACKTRACK to a
    /// SafeState survives that.
    #[arg(long)]
    burst: bool,
    /// `K_0`: a SafeState (GLOBALSTORAGE) every this many supersteps.
    #[arg(long, default_value_t = 4)]
    safe_every: u32,
    /// `α`: the fraction of the nodes the SafeStates survive losing (their replicas
    /// `Λ = ⌈2αn / (N_u + 2)⌉`).
    #[arg(long, default_value_t = 0.25)]
    alpha: f64,
    /// Seed of the victims, their moments and the neighborhoods (default: fresh, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Longest wait for each run, seconds.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
    #[command(flatten)]
    engine: EngineArgs,
    /// One JSON object.
    #[arg(long)]
    json: bool,
}

/// Run `weft bsp run`; fails when the result is wrong or missing.
pub fn run(a: BspRunArgs) -> anyhow::Result<()> {
    a.engine.one_transport()?;
    let app = by_name(&a.app)
        .ok_or_else(|| anyhow::anyhow!("--app {:?}: prefix-sum or jacobi", a.app))?;
    super::checks::within("--nodes", a.nodes, 2..=1024)?;
    anyhow::ensure!(
        a.fail < a.nodes,
        "--fail {}: must be below --nodes ({})",
        a.fail,
        a.nodes
    );
    let virt = a.r#virtual.unwrap_or(8 * a.nodes as u64);
    anyhow::ensure!(
        (1..=1_000_000).contains(&virt),
        "--virtual {virt}: must be 1 to 10^6"
    );
    anyhow::ensure!(
        (1..=100_000).contains(&a.supersteps),
        "--supersteps {}: must be 1 to 10^5",
        a.supersteps
    );
    super::checks::within("--timeout-s", a.timeout_s, 1..=86_400)?;
    super::checks::within("--safe-every", a.safe_every, 1..=100_000)?;
    anyhow::ensure!(
        (0.0..1.0).contains(&a.alpha),
        "--alpha {}: a fraction, from 0 to below 1",
        a.alpha
    );
    let seed = a.seed.unwrap_or_else(weft::rng::SimRng::fresh_seed);
    let cfg = BspRunConfig {
        app,
        nodes: a.nodes,
        virt,
        supersteps: a.supersteps,
        fail: a.fail,
        seed,
        safe_every: a.safe_every,
        alpha: a.alpha,
        burst: a.burst,
        opts: a.engine.job_options(),
        timeout: Duration::from_secs(a.timeout_s),
    };
    let r = run_bsp(&cfg)?;
    if a.json {
        say!("{}", serde_json::to_string(&r)?);
    } else {
        say!(
            "{} on {} nodes ({} virtual), {} supersteps, {} killed, seed {seed}, {}",
            r.app,
            r.nodes,
            r.virt,
            r.supersteps,
            r.fail,
            r.backend
        );
        for k in &r.kills {
            say!(
                "  killed node {} {} µs into superstep {}",
                k.node,
                k.after_us,
                k.step
            );
        }
        say!(
            "result {}: {:.1} ms ({:.2} ms per superstep), {:.1} ms without kills: {:.2}×",
            if r.result_ok { "ok" } else { "WRONG" },
            r.total_ms,
            r.per_superstep_ms,
            r.baseline_ms,
            r.overhead
        );
        say!(
            "{} rollbacks ({} BACKTRACKs to a SafeState), {} supersteps rerun, {} states rebuilt from neighbors' pieces",
            r.rollbacks,
            r.backtracks,
            r.rerun_supersteps,
            r.rebuilt_states
        );
        if let Some(e) = &r.error {
            say!("error: {e}");
        }
    }
    if let Some(e) = &r.error {
        anyhow::bail!("no result: {e}");
    }
    anyhow::ensure!(r.result_ok, "the result differs from a fault-free run");
    Ok(())
}
