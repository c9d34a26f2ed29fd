//! `weft sim bmg`: one run, or the sweep behind Figures 2–4 of Bosilca et al.

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;
use weft::plot::{log_x_svg, Series};
use weft::sim::bmg::{run as run_sim, sweep_depths, BmgRun, BmgSimConfig, Init, Refresh};
use weft::sim::rng::SimRng;
use weft::sim::tree::TreeKind;
use weft::sim::Scheduler;

/// Arguments of `weft sim bmg`.
#[derive(Args, Debug)]
pub struct BmgArgs {
    /// Launch tree shape.
    #[arg(long, value_enum, default_value_t = TreeKind::Binary)]
    tree: TreeKind,
    /// Depth of the launch tree (binary: 2^(D+1)-1 processes, binomial: 2^D).
    #[arg(long, default_value_t = 10)]
    depth: u32,
    /// Maximal number of children per process (random trees).
    #[arg(long, default_value_t = 4)]
    degree: u32,
    /// Synchronous phases or asynchronous steps.
    #[arg(long, value_enum, default_value_t = Scheduler::Sync)]
    scheduler: Scheduler,
    /// Per-message latency, to project seconds from rounds.
    #[arg(long, default_value_t = 50.0)]
    latency_us: f64,
    /// Initial configuration: clean, or arbitrary (random state and garbage messages).
    #[arg(long, value_enum, default_value_t = Init::Empty)]
    init: Init,
    /// Seed of every random choice (printed when chosen at random).
    #[arg(long)]
    seed: Option<u64>,
    /// Rounds between re-firings of a quiet process (0: never). Default: never from an empty
    /// start (as the paper), 8·log2(N) from a random one (self-stabilization needs it).
    #[arg(long)]
    refresh: Option<u64>,
    /// After convergence, run this many more rounds and count state changes (silence check).
    #[arg(long, default_value_t = 0)]
    silence_rounds: u64,
    /// Give up after this many rounds.
    #[arg(long, default_value_t = 1_000_000)]
    max_rounds: u64,
    /// Refuse launch trees larger than this.
    #[arg(long, default_value_t = 1 << 24)]
    max_nodes: u64,
    /// Run every depth up to --max-depth (the figures' sweep).
    #[arg(long)]
    sweep: bool,
    /// Largest depth of a sweep.
    #[arg(long, default_value_t = 14)]
    max_depth: u32,
    /// Runs per depth in a sweep (random trees: a new tree each time).
    #[arg(long, default_value_t = 1)]
    runs: u32,
    /// Write the sweep as CSV.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write the sweep as an SVG plot.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// One JSON object per run on stdout.
    #[arg(long)]
    json: bool,
}

impl BmgArgs {
    fn config(&self, seed: u64) -> anyhow::Result<BmgSimConfig> {
        anyhow::ensure!(
            self.latency_us.is_finite() && self.latency_us > 0.0,
            "--latency-us must be a positive number"
        );
        let refresh = match (self.refresh, self.init) {
            (Some(0), _) => Refresh::Never,
            (Some(r), _) => Refresh::Every(r),
            (None, Init::Empty) => Refresh::Never,
            (None, Init::Random) => Refresh::Auto,
        };
        Ok(BmgSimConfig {
            tree: self.tree,
            depth: self.depth,
            degree: self.degree,
            scheduler: self.scheduler,
            latency: Duration::from_secs_f64(self.latency_us * 1e-6),
            init: self.init,
            seed,
            refresh,
            max_rounds: self.max_rounds,
            max_nodes: self.max_nodes,
            silence_rounds: self.silence_rounds,
            ..BmgSimConfig::default()
        })
    }
}

const CSV_HEADER: &str = "nodes,tree,depth,degree,scheduler,init,ring_phases,bmg_phases,total_phases,projected_s,max_msgs_per_proc,total_msgs,converged,seed,wall_s";

fn csv_row(r: &BmgRun) -> String {
    format!(
        "{},{},{},{},{},{},{},{},{},{:.9},{},{},{},{},{:.6}",
        r.nodes,
        r.tree,
        r.depth,
        r.degree,
        r.scheduler,
        r.init,
        r.ring_phases,
        r.bmg_phases,
        r.total_phases,
        r.projected_s,
        r.max_msgs_per_proc,
        r.total_msgs,
        r.converged,
        r.seed,
        r.wall_s
    )
}

fn unit(s: Scheduler) -> &'static str {
    match s {
        Scheduler::Sync => "phases",
        Scheduler::Async => "steps",
    }
}

fn print_run(r: &BmgRun, latency_us: f64) {
    let u = unit(r.scheduler);
    say!(
        "weft sim bmg: {} tree, depth {}, {} processes, {} scheduler, {} init, seed {}",
        r.tree,
        r.depth,
        r.nodes,
        r.scheduler,
        r.init,
        r.seed
    );
    say!("  ring correct after     {:>10} {u}", r.ring_phases);
    say!(
        "  BMG correct after      {:>10} more {u} ({} total)",
        r.bmg_phases,
        r.total_phases
    );
    say!(
        "  projected time         {:>10.3} ms  ({latency_us} µs per message)",
        r.projected_s * 1e3
    );
    say!("  max msgs per process   {:>10}", r.max_msgs_per_proc);
    say!("  total messages         {:>10}", r.total_msgs);
    say!(
        "  quiet processes        {:>10} of {}",
        r.quiet_nodes,
        r.nodes
    );
    if r.silence_rounds > 0 {
        say!(
            "  changes afterwards     {:>10} in {} more {u}",
            r.changes_after,
            r.silence_rounds
        );
    }
    say!(
        "  converged              {:>10}",
        if r.converged { "yes" } else { "NO" }
    );
    say!("  wall time              {:>10.3} s", r.wall_s);
}

/// Run `weft sim bmg`.
pub fn run(args: BmgArgs) -> anyhow::Result<()> {
    let seed = args.seed.unwrap_or_else(SimRng::fresh_seed);
    if args.seed.is_none() && !args.json {
        eprintln!("seed {seed}");
    }
    if !args.sweep {
        let r = run_sim(&args.config(seed)?)?;
        if args.json {
            say!("{}", serde_json::to_string(&r)?);
        } else {
            print_run(&r, args.latency_us);
        }
        anyhow::ensure!(
            r.converged,
            "did not converge within {} rounds",
            args.max_rounds
        );
        return Ok(());
    }
    let depths = sweep_depths(args.tree, args.max_depth);
    let total = (depths.end() - depths.start() + 1) as u64 * args.runs as u64;
    let bar = ProgressBar::new(total).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} runs, depth {msg} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    if args.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let mut runs = Vec::new();
    let mut seeds = SimRng::new(seed);
    for depth in depths {
        for _ in 0..args.runs {
            bar.set_message(depth.to_string());
            let cfg = BmgSimConfig {
                depth,
                ..args.config(seeds.next_u64())?
            };
            let r = run_sim(&cfg)?;
            if args.json {
                say!("{}", serde_json::to_string(&r)?);
            }
            runs.push(r);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    if !args.json {
        let u = unit(args.scheduler);
        say!(
            "weft sim bmg --sweep: {} trees, {} scheduler, {} init, seed {seed}",
            args.tree,
            args.scheduler,
            args.init
        );
        say!(
            "{:>9} {:>5} {:>9} {:>9} {:>9} {:>12} {:>9} {:>12} {:>5} {:>8}",
            "nodes",
            "depth",
            format!("ring {u}"),
            "bmg",
            "total",
            "projected ms",
            "max msgs",
            "total msgs",
            "conv",
            "wall s"
        );
        for r in &runs {
            say!(
                "{:>9} {:>5} {:>9} {:>9} {:>9} {:>12.3} {:>9} {:>12} {:>5} {:>8.3}",
                r.nodes,
                r.depth,
                r.ring_phases,
                r.bmg_phases,
                r.total_phases,
                r.projected_s * 1e3,
                r.max_msgs_per_proc,
                r.total_msgs,
                if r.converged { "yes" } else { "NO" },
                r.wall_s
            );
        }
    }
    if let Some(path) = &args.csv {
        let mut f =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        writeln!(f, "{CSV_HEADER}")?;
        for r in &runs {
            writeln!(f, "{}", csv_row(r))?;
        }
    }
    if let Some(path) = &args.plot {
        let pts =
            |f: &dyn Fn(&BmgRun) -> f64| runs.iter().map(|r| (r.nodes as f64, f(r))).collect();
        let (y_label, series) = match args.scheduler {
            Scheduler::Sync => (
                "synchronous phases",
                vec![
                    Series {
                        label: "tree -> ring".into(),
                        points: pts(&|r| r.ring_phases as f64),
                        error: Vec::new(),
                    },
                    Series {
                        label: "ring -> BMG".into(),
                        points: pts(&|r| r.bmg_phases as f64),
                        error: Vec::new(),
                    },
                    Series {
                        label: "total".into(),
                        points: pts(&|r| r.total_phases as f64),
                        error: Vec::new(),
                    },
                ],
            ),
            Scheduler::Async => (
                "projected time (ms)",
                vec![
                    Series {
                        label: "ring".into(),
                        points: pts(&|r| r.ring_phases as f64 * args.latency_us * 1e-3),
                        error: Vec::new(),
                    },
                    Series {
                        label: "ring + BMG".into(),
                        points: pts(&|r| r.projected_s * 1e3),
                        error: Vec::new(),
                    },
                ],
            ),
        };
        let title = format!(
            "BMG construction, {} trees, {} scheduler",
            args.tree, args.scheduler
        );
        log_x_svg(path, &title, "processes (log scale)", y_label, &series)?;
    }
    let failed = runs.iter().filter(|r| !r.converged).count();
    anyhow::ensure!(
        failed == 0,
        "{failed} runs did not converge within {} rounds",
        args.max_rounds
    );
    Ok(())
}
