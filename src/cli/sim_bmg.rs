//! `weft sim bmg`: one run, or the sweep behind Figures 2–4 of Bosilca et al.

use super::checks;
use super::plot::{log_x_svg, Series};
use super::values::{AsyncPolicyArg, InitArg, SchedulerArg, TreeKindArg};
use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::PathBuf;
use weft::rng::SimRng;
use weft::sim::bmg::{run as run_sim, sweep_depths, BmgRun, BmgSimConfig, Init, Refresh};
use weft::sim::{AsyncPolicy, Scheduler};

/// Arguments of `weft sim bmg`.
#[derive(Args, Debug)]
pub struct BmgArgs {
    /// Launch tree shape.
    #[arg(long, value_enum, default_value = "binary")]
    tree: TreeKindArg,
    /// Depth of the launch tree (binary: 2^(D+1)-1 processes, binomial: 2^D).
    #[arg(long, default_value_t = 10)]
    depth: u32,
    /// Maximal number of children per process (random trees).
    #[arg(long, default_value_t = 4)]
    degree: u32,
    /// Synchronous phases or asynchronous steps.
    #[arg(long, value_enum, default_value = "sync")]
    scheduler: SchedulerArg,
    /// Asynchronous steps: what a process with both a due rule and a message does (default
    /// msg-first).
    #[arg(long, value_enum)]
    async_policy: Option<AsyncPolicyArg>,
    /// With --async-policy random: most extra steps a message waits (channels stay FIFO;
    /// default 4).
    #[arg(long)]
    max_delay: Option<u32>,
    /// Per-message latency, to project seconds from rounds.
    #[arg(long, default_value_t = 50.0)]
    latency_us: f64,
    /// Initial configuration: clean, or arbitrary (random state and garbage messages).
    #[arg(long, value_enum, default_value = "empty")]
    init: InitArg,
    /// Seed of every random choice (printed when chosen at random).
    #[arg(long)]
    seed: Option<u64>,
    /// Rounds between re-firings of a quiet process (0: never). Default: never from an empty
    /// start (as the paper), 8·log2(N) from a random one (self-stabilization needs it). At
    /// most --max-rounds; under the asynchronous scheduler at least 2·log2(N), or the
    /// refreshes flood the queues.
    #[arg(long)]
    refresh: Option<u64>,
    /// After convergence, run this many more rounds and count state changes (silence check).
    #[arg(long, default_value_t = 0)]
    silence_rounds: u64,
    /// Give up after this many rounds.
    #[arg(long, default_value_t = 1_000_000)]
    max_rounds: u64,
    /// Threads a synchronous phase is split across (default: every core from 2^15 processes
    /// on); the result is the same for every count.
    #[arg(long)]
    threads: Option<usize>,
    /// Refuse launch trees larger than this (default: what this machine's available memory
    /// holds, counting 1 KB per process).
    #[arg(long)]
    max_nodes: Option<u64>,
    /// Run every depth up to --max-depth (the figures' sweep).
    #[arg(long)]
    sweep: bool,
    /// Largest depth of a sweep (default 14).
    #[arg(long, requires = "sweep")]
    max_depth: Option<u32>,
    /// Runs per depth in a sweep (random trees: a new tree each time; default 1).
    #[arg(long, requires = "sweep")]
    runs: Option<u32>,
    /// Write the sweep as CSV.
    #[arg(long, requires = "sweep")]
    csv: Option<PathBuf>,
    /// Write the sweep as an SVG plot.
    #[arg(long, requires = "sweep")]
    plot: Option<PathBuf>,
    /// One JSON object per run on stdout.
    #[arg(long)]
    json: bool,
}

/// Bytes of memory to count per simulated process. Peaks measured 2026-11-27 (maximum
/// resident set): binary depth 18 (524 287 processes) 520 B synchronous, 640 B from an
/// arbitrary start, 690 B asynchronous; binomial 2^24 570 B synchronous (9.5 GB). A third
/// more than the largest leaves room for a list's growth.
const BYTES_PER_PROCESS: u64 = 1024;

/// The largest tree this machine's available memory holds (`MemAvailable`), or 2^24 where
/// the kernel does not say.
fn memory_max_nodes() -> u64 {
    weft::bench::available_memory().map_or(1 << 24, |bytes| bytes / BYTES_PER_PROCESS)
}

impl BmgArgs {
    /// The asynchronous policy; a policy or a delay that the run would ignore is an error.
    fn policy(&self) -> anyhow::Result<AsyncPolicy> {
        let scheduler: Scheduler = self.scheduler.into();
        anyhow::ensure!(
            scheduler == Scheduler::Async || self.async_policy.is_none(),
            "--async-policy chooses between a rule and a message in an asynchronous step: it \
             needs --scheduler async"
        );
        let policy = self.async_policy.unwrap_or(AsyncPolicyArg::MsgFirst);
        anyhow::ensure!(
            policy == AsyncPolicyArg::Random || self.max_delay.is_none(),
            "--max-delay delays messages under --async-policy random only"
        );
        Ok(policy.policy(self.max_delay.unwrap_or(4)))
    }

    fn config(&self, seed: u64) -> anyhow::Result<BmgSimConfig> {
        let latency = checks::positive_duration("--latency-us", self.latency_us, 1e-6)?;
        let init: Init = self.init.into();
        let refresh = match (self.refresh, init) {
            (Some(0), _) => Refresh::Never,
            (Some(r), _) => Refresh::Every(r),
            (None, Init::Empty) => Refresh::Never,
            (None, Init::Random) => Refresh::Auto,
        };
        Ok(BmgSimConfig {
            tree: self.tree.into(),
            depth: self.depth,
            degree: self.degree,
            scheduler: self.scheduler.into(),
            policy: self.policy()?,
            latency,
            init,
            seed,
            refresh,
            max_rounds: self.max_rounds,
            max_nodes: self.max_nodes.unwrap_or_else(memory_max_nodes),
            silence_rounds: self.silence_rounds,
            threads: self.threads.unwrap_or(0),
            ..BmgSimConfig::default()
        })
    }
}

/// A round count, or what a run that never got there says.
fn rounds(r: Option<u64>) -> String {
    r.map_or("-".to_string(), |r| r.to_string())
}

const CSV_HEADER: &str = "nodes,tree,depth,degree,scheduler,policy,init,ring_phases,bmg_phases,total_phases,projected_s,max_msgs_per_proc,total_msgs,converged,seed,wall_s";

fn csv_row(r: &BmgRun) -> String {
    format!(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.6}",
        r.nodes,
        r.tree,
        r.depth,
        r.degree,
        r.scheduler,
        r.policy.as_deref().unwrap_or(""),
        r.init,
        // An empty field where the run did not get there.
        r.ring_phases.map_or(String::new(), |p| p.to_string()),
        r.bmg_phases.map_or(String::new(), |p| p.to_string()),
        r.total_phases.map_or(String::new(), |p| p.to_string()),
        r.projected_s.map_or(String::new(), |p| format!("{p:.9}")),
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
        "weft sim bmg: {} tree, depth {}, {} processes, {} scheduler{}, {} init, seed {}",
        r.tree,
        r.depth,
        r.nodes,
        r.scheduler,
        r.policy
            .as_ref()
            .map_or(String::new(), |p| format!(" ({p})")),
        r.init,
        r.seed
    );
    if !r.converged {
        say!(
            "  NOT CONVERGED after    {:>10} {u} (ring {})",
            r.rounds_run,
            if r.ring_phases.is_some() {
                "correct at the end"
            } else {
                "still wrong"
            }
        );
    } else {
        say!("  ring correct after     {:>10} {u}", rounds(r.ring_phases));
        say!(
            "  BMG correct after      {:>10} more {u} ({} total)",
            rounds(r.bmg_phases),
            rounds(r.total_phases)
        );
        say!(
            "  projected time         {:>10.3} ms  ({latency_us} µs per message)",
            r.projected_s.unwrap_or(f64::NAN) * 1e3
        );
    }
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
    // Checked before any run: the settings, and the outputs' paths.
    args.config(seed)?;
    if let Some(t) = args.threads {
        checks::within("--threads", t, 1..=256)?;
    }
    for (flag, path) in [("--csv", &args.csv), ("--plot", &args.plot)] {
        if let Some(p) = path {
            checks::writable(flag, p)?;
        }
    }
    let scheduler: Scheduler = args.scheduler.into();
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
    let (max_depth, runs_per) = (args.max_depth.unwrap_or(14), args.runs.unwrap_or(1));
    anyhow::ensure!(runs_per >= 1, "--runs must be at least 1");
    let depths = sweep_depths(args.tree.into(), max_depth);
    // The largest tree of the sweep must fit before the first one runs.
    weft::sim::bmg::build_tree(&BmgSimConfig {
        depth: *depths.end(),
        ..args.config(seed)?
    })?;
    let total = (depths.end() - depths.start() + 1) as u64 * runs_per as u64;
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
        for _ in 0..runs_per {
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
        let u = unit(scheduler);
        let tree: weft::sim::tree::TreeKind = args.tree.into();
        let init: Init = args.init.into();
        let policy = match scheduler {
            Scheduler::Sync => String::new(),
            Scheduler::Async => format!(" ({})", args.policy()?),
        };
        say!("weft sim bmg --sweep: {tree} trees, {scheduler} scheduler{policy}, {init} init, seed {seed}");
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
                "{:>9} {:>5} {:>9} {:>9} {:>9} {:>12} {:>9} {:>12} {:>5} {:>8.3}",
                r.nodes,
                r.depth,
                rounds(r.ring_phases),
                rounds(r.bmg_phases),
                rounds(r.total_phases),
                r.projected_s
                    .map_or("-".to_string(), |p| format!("{:.3}", p * 1e3)),
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
        // Runs that did not converge have no phases to draw.
        let pts = |f: &dyn Fn(&BmgRun) -> Option<f64>| {
            runs.iter()
                .filter_map(|r| f(r).map(|y| (r.nodes as f64, y)))
                .collect()
        };
        let (y_label, series) = match scheduler {
            Scheduler::Sync => (
                "synchronous phases",
                vec![
                    Series {
                        label: "tree -> ring".into(),
                        points: pts(&|r| r.ring_phases.map(|p| p as f64)),
                        error: Vec::new(),
                    },
                    Series {
                        label: "ring -> BMG".into(),
                        points: pts(&|r| r.bmg_phases.map(|p| p as f64)),
                        error: Vec::new(),
                    },
                    Series {
                        label: "total".into(),
                        points: pts(&|r| r.total_phases.map(|p| p as f64)),
                        error: Vec::new(),
                    },
                ],
            ),
            Scheduler::Async => (
                "projected time (ms)",
                vec![
                    Series {
                        label: "ring".into(),
                        points: pts(&|r| r.ring_phases.map(|p| p as f64 * args.latency_us * 1e-3)),
                        error: Vec::new(),
                    },
                    Series {
                        label: "ring + BMG".into(),
                        points: pts(&|r| r.projected_s.map(|p| p * 1e3)),
                        error: Vec::new(),
                    },
                ],
            ),
        };
        let tree: weft::sim::tree::TreeKind = args.tree.into();
        let title = format!("BMG construction, {tree} trees, {scheduler} scheduler");
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
