//! `weft bench stabilize`: the main job. Real membership nodes on loopback, a node killed for
//! real, Ts measured from detection to the root's stabilization, over repeated trials.

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::Duration;
use weft::plot::{log_x_svg, Series};
use weft::sim::rng::SimRng;
use weft::sim::stabilize::Fail;
use weft::transport::bare_wave::WaveReport;
use weft::transport::stabilize::{floor, run as run_bench, BenchConfig, BenchReport, Placement};

/// Arguments of `weft bench stabilize`.
#[derive(Args, Debug)]
pub struct BenchStabilizeArgs {
    /// Nodes (in-process: hosted by one reactor thread per core).
    #[arg(long, default_value_t = 64)]
    nodes: u32,
    /// Several sizes in one run (overrides --nodes), e.g. 16,64,256.
    #[arg(long, value_delimiter = ',')]
    nodes_list: Vec<u32>,
    #[command(flatten)]
    tree: super::TreeArgs,
    /// leaf, inner, root, multi:K or root+K.
    #[arg(long, default_value = "inner")]
    fail: Fail,
    /// Time a new process joining the job instead of a failure (--fail is not used): Ts from
    /// the root's admission to its stabilization; "detect" is the joiner's start to the
    /// admission.
    #[arg(long, conflicts_with = "procs")]
    join: bool,
    /// Trials (each a fresh job).
    #[arg(long, default_value_t = 40)]
    repeat: u32,
    /// How in-process nodes are spread over the reactors (one per core).
    #[arg(long, value_enum, default_value = "subtree", conflicts_with = "procs")]
    placement: Placement,
    #[command(flatten)]
    engine: super::EngineArgs,
    /// Seed of the victims' choice (printed when chosen at random).
    #[arg(long)]
    seed: Option<u64>,
    /// The root collects failure reports this many µs before starting an epoch (0: at once).
    #[arg(long, default_value_t = 0.0)]
    batch_us: f64,
    /// Longest wait for one phase of a trial, seconds.
    #[arg(long, default_value_t = 30.0)]
    timeout_s: f64,
    /// One OS process per node (`weft node` children of this executable, killed with
    /// SIGKILL) instead of in-process nodes. Every process is a reactor thread and a reporting
    /// thread, so keep N to what the cores can carry.
    #[arg(long)]
    procs: bool,
    /// Also time each size's floor in the same run: one stabilization wave over plain TCP
    /// sockets (same tree, placement, threads and wait mode; no protocol, framing or engine),
    /// and print weft's Ts as a ratio to it.
    #[arg(long, conflicts_with_all = ["procs", "join"])]
    compare: bool,
    /// Write Ts against N to this SVG: mean with its 99% confidence interval, median and 99th
    /// percentile (log2 N axis, as the paper's figures).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// One JSON object per size.
    #[arg(long)]
    json: bool,
}

/// Run `weft bench stabilize`.
pub fn run(a: BenchStabilizeArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.timeout_s.is_finite() && a.timeout_s > 0.0,
        "--timeout-s must be a positive number"
    );
    anyhow::ensure!(
        a.batch_us.is_finite() && a.batch_us >= 0.0,
        "--batch-us must be a non-negative number"
    );
    let seed = a.seed.unwrap_or_else(SimRng::fresh_seed);
    let sizes = if a.nodes_list.is_empty() {
        vec![a.nodes]
    } else {
        a.nodes_list.clone()
    };
    if !a.json {
        say!(
            "weft bench stabilize: {} on 127.0.0.1, radix {}, {:?} tree, {}, {} trials, seed {seed}",
            if a.procs {
                "one process per node".to_string()
            } else {
                let how = a.placement.to_possible_value().expect("no variant is skipped");
                format!("in-process nodes placed by {}", how.get_name())
            },
            a.tree.radix, a.tree.mode,
            if a.join { "a new process joins".to_string() } else { format!("fail {}", a.fail) },
            a.repeat
        );
        if a.join {
            say!("Ts = the root admits the joiner -> the root has every ack of the new view");
            say!("detect = the joiner starts -> the root admits it (dial, handshake, NewNode)");
        } else {
            say!("Ts = first detection of the failure -> the root has every ack of the new view");
        }
        say!("steal = CPU time the hypervisor took from this machine during the run");
        say!(
            "{:>6} {:>3} {:>7} {:>6} {:>9} {:>9} {:>9} {:>9} {:>16} {:>10} {:>7} {:>6}",
            "nodes",
            "H",
            "backend",
            "wait",
            "p50 µs",
            "p90 µs",
            "p99 µs",
            "max µs",
            "mean ± 99% CI",
            "detect µs",
            "steal %",
            "agree"
        );
    }
    let mut reports: Vec<BenchReport> = Vec::new();
    let mut floors: Vec<WaveReport> = Vec::new();
    for n in sizes {
        let cfg = BenchConfig {
            timeout: Duration::from_secs_f64(a.timeout_s),
            procs: if a.procs {
                Some(std::env::current_exe()?)
            } else {
                None
            },
            batch: Duration::from_secs_f64(a.batch_us * 1e-6),
            join: a.join,
            placement: a.placement,
            ..a.tree.bench(n, a.fail, seed, &a.engine)
        };
        let bar = ProgressBar::new(a.repeat as u64).with_style(
            ProgressStyle::with_template("{prefix} {bar:30} {pos}/{len} trials {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_prefix(format!("{n} nodes"));
        let r = run_bench(&cfg, a.repeat, |_, _| bar.inc(1))?;
        bar.finish_and_clear();
        if a.json {
            say!("{}", serde_json::to_string(&r)?);
        } else {
            say!(
                "{:>6} {:>3} {:>7} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} ± {:<5.1} {:>10.1} {:>7} {:>6}",
                r.nodes,
                r.height,
                r.backend,
                r.wait,
                r.ts_p50_us,
                r.ts_p90_us,
                r.ts_p99_us,
                r.ts_max_us,
                r.ts_mean_us,
                r.ci99_us,
                r.detect_p50_us,
                r.steal_pct.map_or("-".to_string(), |p| format!("{p:.1}")),
                r.views_agree
            );
        }
        anyhow::ensure!(
            r.views_agree,
            "{n} nodes: survivors did not agree on one view"
        );
        if a.compare {
            let f = floor(&cfg, a.repeat)?;
            if a.json {
                say!("{}", serde_json::to_string(&f)?);
            } else {
                say!(
                    "{:>6} {:>3} {:>7} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} ± {:<5.1} {:>10} {:>7} {:>6}",
                    f.nodes,
                    f.height,
                    f.backend,
                    f.wait,
                    f.ts_p50_us,
                    f.ts_p90_us,
                    f.ts_p99_us,
                    f.ts_max_us,
                    f.ts_mean_us,
                    f.ci99_us,
                    "-",
                    f.steal_pct.map_or("-".to_string(), |p| format!("{p:.1}")),
                    "-"
                );
            }
            floors.push(f);
        }
        reports.push(r);
    }
    if !a.json && !floors.is_empty() {
        say!("");
        say!("weft / bare-tcp (the floor: one wave over plain TCP sockets; lower is better)");
        for (r, f) in reports.iter().zip(&floors) {
            say!(
                "{:>6} nodes  Ts p50 {:.2}x   mean {:.2}x   CPU {:.2}x",
                r.nodes,
                r.ts_p50_us / f.ts_p50_us.max(1e-9),
                r.ts_mean_us / f.ts_mean_us.max(1e-9),
                r.cpu_mean_us / f.cpu_mean_us.max(1e-9)
            );
        }
    }
    if let Some(path) = &a.plot {
        let n = |r: &BenchReport| r.nodes as f64;
        let mut series = vec![
            Series::of("mean (99% CI)", &reports, n, |r| r.ts_mean_us)
                .with_error(&reports, |r| r.ci99_us),
            Series::of("median", &reports, n, |r| r.ts_p50_us),
            Series::of("99th percentile", &reports, n, |r| r.ts_p99_us),
        ];
        if !floors.is_empty() {
            series.push(Series::of(
                "floor: bare TCP wave, median",
                &floors,
                |f| f.nodes as f64,
                |f| f.ts_p50_us,
            ));
        }
        let what = if a.join {
            "a join".to_string()
        } else {
            format!("failure ({})", a.fail)
        };
        let title = format!(
            "Ts after {what}, radix {}, loopback TCP ({}, {} trials)",
            a.tree.radix,
            reports.first().map_or("", |r| r.backend.as_str()),
            a.repeat
        );
        log_x_svg(path, &title, "nodes", "Ts (µs)", &series)?;
        if !a.json {
            say!("plot: {}", path.display());
        }
    }
    Ok(())
}
