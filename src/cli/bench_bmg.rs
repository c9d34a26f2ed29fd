//! `weft bench bmg`: the BMG built on real in-process nodes from a launch tree, every finger
//! checked, beside the timed simulator's projection with the costs measured in the same run.

use super::plot::{log_x_svg, Series};
use super::values::TreeKindArg;
use super::EngineArgs;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use weft::bench::bmg::{run as run_bench, tree_of, BmgBenchConfig};

/// `weft bench bmg` arguments.
#[derive(Args, Debug)]
pub struct BenchBmgArgs {
    /// Launch tree shape: binomial (N a power of two), binary (N = 2^k - 1) or random (any N).
    #[arg(long, value_enum, default_value = "binomial")]
    tree: TreeKindArg,
    /// A random tree's largest number of children per process.
    #[arg(long, default_value_t = 4)]
    degree: u32,
    /// Seed of a random tree (default: fresh, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Write real and projected times against N as an SVG plot.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Job sizes.
    #[arg(long, value_delimiter = ',', default_value = "16,64,256")]
    nodes_list: Vec<u32>,
    /// Firing period of the spontaneous rules, µs.
    #[arg(long, default_value_t = 1000)]
    period_us: u64,
    /// Times the period may double while a process waits for an answer (0: a fixed period,
    /// as in the paper's simulator; the real and projected runs both use it).
    #[arg(long, default_value_t = weft::proto::spontaneous::DEFAULT_BACKOFF)]
    backoff: u8,
    /// Real runs of each size: the row gives the middle one and the range.
    #[arg(long, default_value_t = 5)]
    repeat: u32,
    /// One JSON object per size.
    #[arg(long)]
    json: bool,
    /// One OS process per node (`weft bench bmg-node`), not in-process nodes: every node a
    /// separate address space, as the ranks of a launched job (in-process jobs past the
    /// descriptor limit give each reactor a descriptor table of its own instead). The costs
    /// the projection uses are still measured on in-process nodes.
    #[arg(long)]
    procs: bool,
    /// Which projections to print and plot: `model`, the one that is the model (the turns
    /// projection to the BMG built, beside the real BMG built), or `all`, every step that led
    /// to it. The JSON always holds them all; its `ratio` is the model's.
    #[arg(long, value_enum, default_value = "model")]
    projections: Projections,
    #[command(flatten)]
    engine: EngineArgs,
}

/// `--projections`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Projections {
    /// The model alone.
    Model,
    /// Every projection.
    All,
}

/// Run `weft bench bmg`.
pub fn run(a: BenchBmgArgs) -> anyhow::Result<()> {
    a.engine.one_transport()?;
    super::checks::within("--period-us", a.period_us, 10..=1_000_000)?;
    super::checks::within(
        "--backoff",
        a.backoff,
        0..=weft::proto::spontaneous::MAX_BACKOFF,
    )?;
    super::checks::distinct("--nodes-list", &a.nodes_list)?;
    super::checks::within("--repeat", a.repeat, 1..=1000)?;
    super::checks::within("--degree", a.degree, 1..=1024)?;
    if let Some(p) = &a.plot {
        super::checks::writable("--plot", p)?;
    }
    let seed = a.seed.unwrap_or_else(weft::rng::SimRng::fresh_seed);
    let cfg = BmgBenchConfig {
        tree: a.tree.into(),
        degree: a.degree,
        seed,
        period: Duration::from_micros(a.period_us),
        backoff: a.backoff,
        settle: Duration::from_micros(a.period_us * 50).max(Duration::from_millis(50)),
        opts: a.engine.job_options(),
        timeout: Duration::from_secs(120),
        repeat: a.repeat,
        procs: if a.procs {
            Some(std::env::current_exe()?)
        } else {
            None
        },
    };
    for &n in &a.nodes_list {
        anyhow::ensure!(
            (2..=4096).contains(&n),
            "--nodes-list: {n} nodes, must be 2 to 4096"
        );
        tree_of(cfg.tree, n, cfg.degree, cfg.seed)
            .map_err(|e| anyhow::anyhow!("--nodes-list: {e}"))?;
        if a.procs {
            weft::bench::bmg_procs::fits_memory(n)
                .map_err(|e| anyhow::anyhow!("--nodes-list: {e}"))?;
        } else {
            weft::bench::route::plan_descriptors(n as usize, &cfg.opts)
                .map(drop)
                .map_err(|e| anyhow::anyhow!("--nodes-list: {e} (or --procs)"))?;
        }
    }
    if a.seed.is_none() && cfg.tree == weft::sim::tree::TreeKind::Random && !a.json {
        eprintln!("seed {seed}");
    }
    if !a.json && a.projections == Projections::Model {
        say!(
            "{:>6} {:>9} {:>10} {:>15} {:>10} {:>6} {:>13} {:>9} {:>9} {:>7} {:>7} {:>9} {:>9}",
            "nodes",
            "tree",
            "built ms",
            "(range)",
            "model ms",
            "ratio",
            "(range)",
            "msgs",
            "sim msgs",
            "L us",
            "c us",
            "storm us",
            "converged"
        );
    } else if !a.json {
        say!(
            "{:>6} {:>9} {:>10} {:>15} {:>10} {:>10} {:>6} {:>9} {:>6} {:>10} {:>6} {:>10} {:>6} {:>10} {:>6} {:>10} {:>6} {:>9} {:>9} {:>6} {:>6} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9}",
            "nodes",
            "tree",
            "quiet ms",
            "(range)",
            "built ms",
            "sim built",
            "ratio",
            "sim ms",
            "ratio",
            "+conn ms",
            "ratio",
            "split ms",
            "ratio",
            "storm ms",
            "ratio",
            "turns ms",
            "ratio",
            "msgs",
            "sim msgs",
            "fires",
            "(turns)",
            "L us",
            "c us",
            "conn us",
            "cpu us",
            "storm us",
            "converged"
        );
    }
    let mut rows = Vec::new();
    for &n in &a.nodes_list {
        let r = run_bench(n, &cfg)?;
        if a.json {
            say!("{}", serde_json::to_string(&r)?);
        } else if a.projections == Projections::Model {
            say!(
                "{:>6} {:>9} {:>10.2} {:>15} {:>10.2} {:>6.2} {:>13} {:>9} {:>9} {:>7.1} {:>7.2} {:>9.0} {:>9}",
                r.nodes,
                r.tree,
                r.built_ms,
                format!("{:.1}-{:.1}", r.built_ms_min, r.built_ms_max),
                r.sim_turns_built_ms,
                r.ratio,
                format!("{:.2}-{:.2}", r.ratio_built_min, r.ratio_built_max),
                r.msgs,
                r.sim_msgs,
                r.l_us,
                r.c_us,
                r.storm_connect_us,
                r.converged
            );
        } else {
            say!(
                "{:>6} {:>9} {:>10.2} {:>15} {:>10.2} {:>10.2} {:>6.2} {:>9.2} {:>6.2} {:>10.2} {:>6.2} {:>10.2} {:>6.2} {:>10.2} {:>6.2} {:>10.2} {:>6.2} {:>9} {:>9} {:>6.1} {:>6.1} {:>7.1} {:>7.2} {:>9.0} {:>9.0} {:>9.0} {:>9}",
                r.nodes,
                r.tree,
                r.real_ms,
                format!("{:.1}-{:.1}", r.real_ms_min, r.real_ms_max),
                r.built_ms,
                r.sim_turns_built_ms,
                r.ratio_built,
                r.sim_ms,
                r.ratio_free,
                r.sim_connect_ms,
                r.ratio_connect,
                r.sim_split_ms,
                r.ratio_split,
                r.sim_storm_ms,
                r.ratio_storm,
                r.sim_turns_ms,
                r.ratio_turns,
                r.msgs,
                r.sim_msgs,
                r.leaf_fires,
                r.sim_turns_leaf_fires,
                r.l_us,
                r.c_us,
                r.connect_us,
                r.connect_cpu_us,
                r.storm_connect_us,
                r.converged
            );
        }
        anyhow::ensure!(
            r.converged,
            "{n} nodes: {} processes ended with wrong neighbors",
            r.wrong
        );
        rows.push(r);
    }
    if let Some(path) = &a.plot {
        let x = |r: &weft::bench::bmg::BmgBenchRow| f64::from(r.nodes);
        let mut series = vec![
            Series::of("real nodes, BMG built", &rows, x, |r| r.built_ms),
            Series::of("model: turns projection, BMG built", &rows, x, |r| {
                r.sim_turns_built_ms
            }),
        ];
        if a.projections == Projections::All {
            series.extend([
                Series::of(
                    "simulator, turns + crossing dials: BMG built",
                    &rows,
                    x,
                    |r| r.sim_crossing_built_ms,
                ),
                Series::of("real nodes, last quiet", &rows, x, |r| r.real_ms),
                Series::of("simulator, connections free", &rows, x, |r| r.sim_ms),
                Series::of("simulator, connections as CPU", &rows, x, |r| {
                    r.sim_connect_ms
                }),
                Series::of("simulator, connection CPU + wait", &rows, x, |r| {
                    r.sim_split_ms
                }),
                Series::of("simulator, connection CPU + storm wait", &rows, x, |r| {
                    r.sim_storm_ms
                }),
                Series::of(
                    "simulator, connection CPU + queued handshake",
                    &rows,
                    x,
                    |r| r.sim_queued_ms,
                ),
                Series::of("simulator, storm wait + reactor turns", &rows, x, |r| {
                    r.sim_turns_ms
                }),
            ]);
        }
        log_x_svg(
            path,
            &format!("BMG construction, {} launch tree", cfg.tree),
            "processes",
            "time from the start (ms)",
            &series,
        )?;
    }
    Ok(())
}
