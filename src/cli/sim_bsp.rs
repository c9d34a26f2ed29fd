//! `weft sim bsp`: Robust-BSP with failures in the simulator; the result checked against a
//! fault-free run, the counts beside the paper's bounds.

use clap::Args;
use weft::bsp::app::by_name;
use weft::sim::bsp::{run, BspSim};

/// Arguments of `weft sim bsp`.
#[derive(Args, Debug)]
pub struct SimBspArgs {
    /// The program: prefix-sum or jacobi.
    #[arg(long, default_value = "jacobi")]
    app: String,
    /// Real processors.
    #[arg(long, default_value_t = 1000)]
    real: usize,
    /// Virtual processors.
    #[arg(long, default_value_t = 10_000)]
    r#virtual: u64,
    /// Program supersteps.
    #[arg(long, default_value_t = 40)]
    supersteps: u32,
    /// Probability that a live real processor dies in a superstep.
    #[arg(long, default_value_t = 0.005)]
    fail_rate: f64,
    /// At most this fraction of the real processors dies (the paper's α).
    #[arg(long, default_value_t = 0.25)]
    alpha: f64,
    /// Supersteps per epoch (K_0).
    #[arg(long, default_value_t = 10)]
    epoch: u32,
    /// Runs, seeds seed..seed+runs.
    #[arg(long, default_value_t = 1)]
    runs: u64,
    /// The first run's seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// One JSON object per run.
    #[arg(long)]
    json: bool,
}

/// Run `weft sim bsp`; fails when a run's result differs from the fault-free one.
pub fn run_cmd(a: SimBspArgs) -> anyhow::Result<()> {
    let p = by_name(&a.app)
        .ok_or_else(|| anyhow::anyhow!("--app {:?}: prefix-sum or jacobi", a.app))?;
    anyhow::ensure!(
        (2..=1_000_000).contains(&a.real),
        "--real {}: must be 2 to 10^6",
        a.real
    );
    anyhow::ensure!(
        (1..=10_000_000).contains(&a.r#virtual),
        "--virtual {}: must be 1 to 10^7",
        a.r#virtual
    );
    anyhow::ensure!(
        (0.0..=1.0).contains(&a.fail_rate),
        "--fail-rate {}: must be 0 to 1",
        a.fail_rate
    );
    anyhow::ensure!(
        (0.0..1.0).contains(&a.alpha),
        "--alpha {}: must be 0 to below 1",
        a.alpha
    );
    anyhow::ensure!(a.epoch >= 1, "--epoch must be at least 1");
    let mut bad = 0;
    for s in a.seed..a.seed.saturating_add(a.runs) {
        let r = run(
            p,
            &BspSim {
                real: a.real,
                virt: a.r#virtual,
                supersteps: a.supersteps,
                fail_rate: a.fail_rate,
                alpha: a.alpha,
                epoch: a.epoch,
                c1: 1.0,
                g: 2.0,
                seed: s,
            },
        );
        bad += usize::from(!r.result_ok);
        if a.json {
            say!("{}", serde_json::to_string(&r)?);
        } else {
            say!(
                "seed {s}: {} on {} virtual / {} real, {} died; result_ok {}; {} supersteps run \
                 for {}, {} backtracks, at most {} secondary jobs (log log n = {:.2}), largest \
                 queue {:.2}x V/A, work {:.3}x, N_u {}, {} SafeStates",
                r.app,
                r.virt,
                r.real,
                r.deaths,
                r.result_ok,
                r.supersteps_run,
                r.supersteps,
                r.backtracks,
                r.max_secondary_jobs,
                r.log_log_n,
                r.max_load_ratio,
                r.work_ratio,
                r.n_u,
                r.safe_states
            );
        }
    }
    anyhow::ensure!(
        bad == 0,
        "{bad} runs ended with a result other than the fault-free one"
    );
    Ok(())
}
