//! `weft bench stabilize`: the main job. Real membership nodes on loopback, a node killed for
//! real, Ts measured from detection to the root's stabilization, over repeated trials.

use super::checks;
use super::plot::{log_x_svg, Series};
use super::values::{BootstrapArg, PlacementArg};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use weft::bench::bare_wave::WaveReport;
use weft::bench::scenario::Fail;
use weft::bench::stabilize::{floor, run as run_bench, BenchConfig, BenchReport};
use weft::rng::SimRng;

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
    #[command(flatten)]
    fail: super::FailArgs,
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
    placement: PlacementArg,
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
    /// Run as one rank of a launched job (`srun`, `mpirun`, `mpiexec.hydra`): one node per
    /// rank, the job's size as --nodes, rank 0 driving the trials and printing the results.
    /// Each trial is a fresh job on the same ranks; a victim's node crashes, its process
    /// stays for the next trial.
    #[arg(long, value_enum, conflicts_with_all = ["procs", "compare", "join", "nodes_list", "plot"])]
    bootstrap: Option<BootstrapArg>,
    /// Spread the nodes over K hosts made on this machine (network namespaces on a bridge,
    /// root needed): one `--bootstrap env` process per node, in blocks, rank 0 on host 0
    /// driving. Makes --fail host, host-down and link possible. Several --nodes-list sizes
    /// run one job each.
    #[arg(long, conflicts_with_all = ["procs", "compare", "join", "plot", "bootstrap"])]
    hosts: Option<u32>,
    /// Spread the nodes over the hosts of an emulated X×Y×Z torus made on this machine
    /// (network namespaces, each linked to its six neighbours with wrap-around, routed x then
    /// y then z as BG/L; root needed): host i at the torus coordinate of i in XYZ order, the
    /// ranks in blocks over them, so with one rank per host rank r sits where BG/L puts it.
    #[arg(long, conflicts_with_all = ["procs", "compare", "join", "plot", "bootstrap", "hosts"])]
    torus: Option<weft::topology::torus::Torus>,
    /// With --hosts: shape every host's link to this rate both ways (`tc … tbf`), e.g. 1gbit;
    /// with --torus, every torus link on its way out.
    #[arg(long)]
    shape: Option<String>,
    /// Suspect a silent peer (no reset, no answer: a host that vanished) after this long, ms.
    /// Only --fail host-down and link wait for it.
    #[arg(long)]
    dead_after_ms: Option<u64>,
}

/// Run `weft bench stabilize`.
pub fn run(a: BenchStabilizeArgs) -> anyhow::Result<()> {
    let timeout = checks::positive_duration("--timeout-s", a.timeout_s, 1.0)?;
    let batch = checks::duration("--batch-us", a.batch_us, 1e-6)?;
    a.tree.check()?;
    anyhow::ensure!(a.repeat >= 1, "--repeat must be at least 1");
    let fail = a.fail.fail()?;
    let sizes = if a.nodes_list.is_empty() {
        vec![a.nodes]
    } else {
        a.nodes_list.clone()
    };
    checks::distinct("--nodes-list", &sizes)?;
    let seed = a.seed.unwrap_or_else(SimRng::fresh_seed);
    let procs = if a.procs {
        Some(std::env::current_exe()?)
    } else {
        None
    };
    // Every size is checked (and its first trial planned) before the first one runs.
    let transports = a.engine.transports();
    anyhow::ensure!(
        transports.len() == 1 || (a.hosts.is_none() && a.bootstrap.is_none()),
        "--transport: one transport with --hosts or --bootstrap (each rank is one node's process)"
    );
    let mut configs = Vec::new();
    for (&n, &transport) in sizes
        .iter()
        .flat_map(|n| transports.iter().map(move |t| (n, t)))
    {
        let mut cfg = BenchConfig {
            timeout,
            procs: procs.clone(),
            batch,
            join: a.join,
            placement: a.placement.into(),
            ..a.tree.bench(n, fail.clone(), seed, &a.engine)
        };
        cfg.opts.transport = transport;
        if let Some(ms) = a.dead_after_ms {
            let d = checks::positive_duration("--dead-after-ms", ms as f64, 1e-3)?;
            cfg.opts.reactor.dead_after = Some(d);
        }
        weft::bench::stabilize::check(&cfg).map_err(|e| anyhow::anyhow!("{n} nodes: {e}"))?;
        configs.push(cfg);
    }
    if let Some(p) = &a.plot {
        checks::writable("--plot", p)?;
        anyhow::ensure!(
            transports.len() == 1,
            "--plot draws one transport's Ts: give one --transport"
        );
    }
    if matches!(fail, Fail::Host(_))
        && a.hosts.is_none()
        && a.torus.is_none()
        && a.bootstrap.is_none()
    {
        anyhow::bail!(
            "--fail {fail}: needs processes on several hosts (--hosts K, --torus or --bootstrap)"
        );
    }
    anyhow::ensure!(
        a.shape.is_none() || a.hosts.is_some() || a.torus.is_some(),
        "--shape shapes the links of --hosts or --torus: give one of them"
    );
    let hosts = a.hosts.or(a.torus.map(|t| t.size() as u32));
    if let Some(k) = hosts {
        // On a bridge every host gets ranks; a torus may hold fewer ranks than hosts (rank r on
        // host r), as a job smaller than its partition does.
        if a.torus.is_none() {
            for &n in &sizes {
                weft::bench::hosts::check(n, k)?;
            }
        }
        if matches!(fail, Fail::Host(_)) && k < 2 {
            anyhow::bail!(
                "--fail {fail} fails a host other than rank 0's: needs --hosts 2 or more"
            );
        }
        use weft::bench::scenario::HostFailure;
        match (a.torus, &fail) {
            (Some(t), Fail::Host(HostFailure::Link)) => anyhow::bail!(
                "--fail {fail} cuts one link of a bridge; on the torus {t} a host has six"
            ),
            // Static dimension-ordered routes do not go round a silent host, as BG/L's do
            // not: every route through it would be cut too, rank 0's control channel among them.
            (Some(t), Fail::Host(HostFailure::Down)) => anyhow::bail!(
                "--fail {fail} on the torus {t} would cut every route through that host; \
                 --fail host crashes its processes and leaves it forwarding"
            ),
            _ => {}
        }
        let cluster = match a.torus {
            Some(t) => weft::bench::hosts::Cluster::torus(t, a.shape.as_deref())?,
            None => weft::bench::hosts::Cluster::new(k, a.shape.as_deref())?,
        };
        let exe = std::env::current_exe()?;
        let args = super::forwarded(std::env::args_os(), "stabilize", &["--torus"]);
        for &n in &sizes {
            for r in weft::bench::hosts::run(&exe, &cluster, a.shape.as_deref(), n, &args)? {
                print_launched(&a, &r)?;
            }
        }
        return Ok(());
    }
    if let Some(b) = a.bootstrap {
        let want = b.want().ok_or_else(|| {
            anyhow::anyhow!("--bootstrap peers is for weft node; here a launcher")
        })?;
        return launched(&a, configs.remove(0), want);
    }
    if !a.json {
        say!(
            "weft bench stabilize: {} on 127.0.0.1, radix {}, {:?} tree, {}, {} trials, seed {seed}",
            if a.procs {
                "one process per node".to_string()
            } else {
                let how = a.placement.to_possible_value().expect("no variant is skipped");
                format!("in-process nodes placed by {}", how.get_name())
            },
            a.tree.radix, a.tree.mode(),
            if a.join { "a new process joins".to_string() } else { format!("fail {fail}") },
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
            "{:>6} {:>3} {:>9} {:>7} {:>6} {:>9} {:>9} {:>9} {:>9} {:>16} {:>10} {:>7} {:>6}",
            "nodes",
            "H",
            "transport",
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
    let mut floors: Vec<Option<WaveReport>> = Vec::new();
    let ci = |c: Option<f64>| c.map_or("-".to_string(), |c| format!("{c:.1}"));
    // Rows of the current size still waiting for its floor.
    let mut pending_floor = 0;
    let mut configs_left = configs.into_iter().peekable();
    while let Some(cfg) = configs_left.next() {
        let n = cfg.nodes;
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
                "{:>6} {:>3} {:>9} {:>7} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} ± {:<5} {:>10.1} {:>7} {:>6}",
                r.nodes,
                r.height,
                r.transport,
                r.backend,
                r.wait,
                r.ts_p50_us,
                r.ts_p90_us,
                r.ts_p99_us,
                r.ts_max_us,
                r.ts_mean_us,
                ci(r.ci99_us),
                r.detect_p50_us,
                r.steal_pct.map_or("-".to_string(), |p| format!("{p:.1}")),
                r.views_agree
            );
        }
        anyhow::ensure!(
            r.views_agree,
            "{n} nodes: survivors did not agree on one view"
        );
        // The floor once per size, after its last transport's row; every row is put beside it.
        let last_of_size = configs_left.peek().is_none_or(|c| c.nodes != n);
        if a.compare && !last_of_size {
            pending_floor += 1;
        }
        if a.compare && last_of_size {
            let Some(f) = floor(&cfg, a.repeat)? else {
                for _ in 0..=pending_floor {
                    floors.push(None);
                }
                pending_floor = 0;
                reports.push(r);
                continue;
            };
            if a.json {
                say!("{}", serde_json::to_string(&f)?);
            } else {
                say!(
                    "{:>6} {:>3} {:>9} {:>7} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} ± {:<5} {:>10} {:>7} {:>6}",
                    f.nodes,
                    f.height,
                    "-",
                    f.backend,
                    f.wait,
                    f.ts_p50_us,
                    f.ts_p90_us,
                    f.ts_p99_us,
                    f.ts_max_us,
                    f.ts_mean_us,
                    ci(f.ci99_us),
                    "-",
                    f.steal_pct.map_or("-".to_string(), |p| format!("{p:.1}")),
                    "-"
                );
            }
            for _ in 0..=pending_floor {
                floors.push(Some(f.clone()));
            }
            pending_floor = 0;
        }
        reports.push(r);
    }
    if !a.json && !floors.is_empty() {
        say!("");
        say!("weft / bare-tcp (the floor: one wave over plain TCP sockets; lower is better)");
        let ratio = |a: Option<f64>, b: f64| {
            a.filter(|_| b > 0.0)
                .map_or("n/a".to_string(), |a| format!("{:.2}x", a / b))
        };
        for (r, f) in reports.iter().zip(&floors) {
            match f {
                Some(f) => say!(
                    "{:>6} nodes {:>7}  Ts p50 {}   mean {}   CPU {}",
                    r.nodes,
                    r.transport,
                    ratio(Some(r.ts_p50_us), f.ts_p50_us),
                    ratio(Some(r.ts_mean_us), f.ts_mean_us),
                    ratio(r.cpu_mean_us, f.cpu_mean_us)
                ),
                None => say!(
                    "{:>6} nodes  n/a: the survivors' tree has one process, there is no wave",
                    r.nodes
                ),
            }
        }
    }
    if let Some(path) = &a.plot {
        let n = |r: &BenchReport| r.nodes as f64;
        let mut series = vec![
            Series::of("mean (99% CI)", &reports, n, |r| r.ts_mean_us)
                .with_error(&reports, |r| r.ci99_us.unwrap_or(0.0)),
            Series::of("median", &reports, n, |r| r.ts_p50_us),
            Series::of("99th percentile", &reports, n, |r| r.ts_p99_us),
        ];
        let floors: Vec<&WaveReport> = floors.iter().flatten().collect();
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
            format!("failure ({fail})")
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

/// `--bootstrap`: this process is one rank; rank 0 prints.
fn launched(
    a: &BenchStabilizeArgs,
    cfg: BenchConfig,
    want: weft::bootstrap::Want,
) -> anyhow::Result<()> {
    let Some(r) = weft::bench::launched::run(&cfg, want, a.repeat, |_, _| {})? else {
        return Ok(());
    };
    print_launched(a, &r)?;
    // The trials done are printed; a run that ended early still fails.
    match &r.error {
        Some(why) => anyhow::bail!("stopped after {} trial(s): {why}", r.repeat),
        None => Ok(()),
    }
}

/// Rank 0's report of a launched job (or of one on `--hosts`).
fn print_launched(a: &BenchStabilizeArgs, r: &BenchReport) -> anyhow::Result<()> {
    if a.json {
        say!("{}", serde_json::to_string(&r)?);
    } else {
        let on = match r.hosts {
            Some(k) => format!(
                "on {k} netns hosts{}{}",
                r.torus
                    .as_ref()
                    .map_or(String::new(), |t| format!(" linked as a {t} torus")),
                r.shape
                    .as_ref()
                    .map_or(String::new(), |s| format!(" shaped to {s}"))
            ),
            None => format!("under {}", r.launcher.as_deref().unwrap_or("?")),
        };
        say!(
            "weft bench stabilize: {} ranks {on}, radix {}, fail {}, {} trials (fresh jobs), seed {}",
            r.ranks.unwrap_or(r.nodes),
            r.radix,
            r.fail,
            r.repeat,
            r.seed
        );
        say!(
            "Ts p50 {:.1} µs  p90 {:.1}  p99 {:.1}  max {:.1}  mean {:.1} ± {}  detect {:.1} µs  clock error ≤ {} µs  agree {}",
            r.ts_p50_us,
            r.ts_p90_us,
            r.ts_p99_us,
            r.ts_max_us,
            r.ts_mean_us,
            r.ci99_us.map_or("-".to_string(), |c| format!("{c:.1}")),
            r.detect_p50_us,
            r.clock_err_us.map_or("-".to_string(), |c| format!("{c:.1}")),
            r.views_agree
        );
    }
    anyhow::ensure!(r.views_agree, "survivors did not agree on one view");
    Ok(())
}
