//! `weft model validate`: the models of ICS'06 against real runs on this machine, on
//! namespace hosts of it (`--hosts`), or as the ranks of a launched job (`--bootstrap`).

use super::checks;
use super::plot::{log_x_svg, Series};
use super::values::BootstrapArg;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use weft::bench::scenario::Fail;
use weft::bench::validate::{validate, validate_launched, ValidateRow};
use weft::rng::SimRng;
use weft::topology::torus::Torus;

/// Arguments of `weft model validate`.
#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// Job sizes of the sweep.
    #[arg(long, value_delimiter = ',', default_value = "4,16,64,256")]
    nodes_list: Vec<u32>,
    #[command(flatten)]
    tree: super::TreeArgs,
    /// leaf, inner, root, multi:K or root+K.
    #[arg(long, default_value = "leaf")]
    fail: Fail,
    /// Trials per size.
    #[arg(long, default_value_t = 20)]
    repeat: u32,
    #[command(flatten)]
    engine: super::EngineArgs,
    /// The distance model's torus, XxYxZ, where the ranks do not run on one (default: the
    /// smallest BG/L partition holding each size: 8x8x8 up to 512, 8x8x16 for 1024, …).
    #[arg(long, conflicts_with = "torus")]
    model_torus: Option<Torus>,
    /// Run every size on an emulated X×Y×Z torus made on this machine (network namespaces
    /// linked to their six neighbours, routed x then y then z; root needed), rank r on host
    /// r mod X·Y·Z (XYZ order, as BG/L maps ranks), and feed the distance model that torus:
    /// `L` is measured at one hop, and `L(h)` at every hop count h up to the farthest rank.
    #[arg(long, conflicts_with_all = ["hosts", "bootstrap"])]
    torus: Option<Torus>,
    /// Seed of the victims' choice.
    #[arg(long)]
    seed: Option<u64>,
    /// Longest wait for one phase of a trial, seconds.
    #[arg(long, default_value_t = 30.0)]
    timeout_s: f64,
    /// Write measured points (99% CI bars) and the model curves to this SVG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// One JSON object per size.
    #[arg(long)]
    json: bool,
    /// Run as one rank of a launched job (`srun`, `mpirun`, `mpiexec.hydra`): the job's size
    /// is the one N; `L` and `L(N)` are measured on its ranks, rank 0 prints the row.
    #[arg(long, value_enum, conflicts_with_all = ["nodes_list", "plot", "hosts"])]
    bootstrap: Option<BootstrapArg>,
    /// Run every size as ranks on K hosts made on this machine (network namespaces on a
    /// bridge, root needed), in blocks, rank 0 on host 0: `L`, `L(N)` and Ts across them.
    #[arg(long)]
    hosts: Option<u32>,
    /// With --hosts: shape every host's link to this rate both ways (`tc … tbf`), e.g. 1gbit,
    /// the Gigabit Ethernet of the paper's Figures 6–8.
    #[arg(long)]
    shape: Option<String>,
}

/// Run `weft model validate`.
pub fn run(a: ValidateArgs) -> anyhow::Result<()> {
    a.engine.one_transport()?;
    // Everything is checked before the first measurement.
    let timeout = checks::positive_duration("--timeout-s", a.timeout_s, 1.0)?;
    a.tree.check()?;
    anyhow::ensure!(a.repeat >= 1, "--repeat must be at least 1");
    anyhow::ensure!(
        !a.nodes_list.is_empty(),
        "--nodes-list: need at least one size"
    );
    checks::distinct("--nodes-list", &a.nodes_list)?;
    if let (Some(t), Some(&n)) = (a.torus.or(a.model_torus), a.nodes_list.iter().max()) {
        anyhow::ensure!(
            t.holds(n as u64),
            "--torus {t}: {n} nodes do not fit on its {} nodes",
            t.size()
        );
    }
    let seed = a.seed.unwrap_or_else(SimRng::fresh_seed);
    let config = |n: u32| weft::bench::stabilize::BenchConfig {
        timeout,
        ..a.tree.bench(n, a.fail.clone(), seed, &a.engine)
    };
    if let Some(b) = a.bootstrap {
        let want = b.want().ok_or_else(|| {
            anyhow::anyhow!("--bootstrap peers is for weft node; here a launcher")
        })?;
        // The size is the job's: checked by the launched run once the launcher says it.
        let Some(r) = validate_launched(&config(2), want, a.repeat, a.model_torus)? else {
            return Ok(());
        };
        let mut table = Table::new(&a, seed);
        table.row(&r);
        anyhow::ensure!(r.views_agree, "{} nodes: survivors disagreed", r.nodes);
        return Ok(());
    }
    for &n in &a.nodes_list {
        weft::bench::stabilize::check(&config(n)).map_err(|e| anyhow::anyhow!("{n} nodes: {e}"))?;
        // A survivors' tree of one process has no wave: its Ts is the detection's own
        // handling, which no model of a wave describes.
        anyhow::ensure!(
            n as usize - a.fail.killed() >= 2,
            "--nodes-list {n}: --fail {} leaves one process, with no stabilization wave to \
             time; use 3 or more",
            a.fail
        );
    }
    if let Some(p) = &a.plot {
        checks::writable("--plot", p)?;
    }
    anyhow::ensure!(
        a.shape.is_none() || a.hosts.is_some() || a.torus.is_some(),
        "--shape shapes the links of --hosts or --torus: give one of them"
    );
    let cluster = match (a.hosts, a.torus) {
        (Some(k), _) => {
            for &n in &a.nodes_list {
                weft::bench::hosts::check(n, k)?;
            }
            Some(weft::bench::hosts::Cluster::new(k, a.shape.as_deref())?)
        }
        (None, Some(t)) => Some(weft::bench::hosts::Cluster::torus(t, a.shape.as_deref())?),
        (None, None) => None,
    };
    let mut table = Table::new(&a, seed);
    let mut rows: Vec<ValidateRow> = Vec::new();
    let bar = ProgressBar::new(a.nodes_list.len() as u64).with_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} sizes {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    for &n in &a.nodes_list {
        let r = match &cluster {
            Some(c) => on_hosts(c, a.shape.as_deref(), n, seed)?,
            None => validate(&config(n), a.repeat, a.model_torus)?,
        };
        bar.inc(1);
        bar.suspend(|| table.row(&r));
        anyhow::ensure!(r.views_agree, "{n} nodes: survivors disagreed");
        rows.push(r);
    }
    bar.finish_and_clear();
    if let Some(path) = &a.plot {
        plot(&a, path, &rows)?;
        if !a.json {
            say!("plot: {}", path.display());
        }
    }
    Ok(())
}

/// One size on the namespace hosts: this command's flags (and the seed it chose) run as
/// `n` ranks with `--bootstrap env`; rank 0's row.
fn on_hosts(
    cluster: &weft::bench::hosts::Cluster,
    shape: Option<&str>,
    n: u32,
    seed: u64,
) -> anyhow::Result<ValidateRow> {
    let exe = std::env::current_exe()?;
    let mut args = super::forwarded(
        std::env::args_os(),
        "validate",
        &["--plot", "--seed", "--torus"],
    );
    args.extend(["--seed".into(), seed.to_string().into()]);
    let lines = weft::bench::hosts::launch(&exe, cluster, n, &["model", "validate"], &args)?;
    let line = lines.last().map(String::as_str).unwrap_or_default();
    let mut r: ValidateRow = serde_json::from_str(line)
        .map_err(|e| anyhow::anyhow!("--hosts: rank 0 printed {line:?}: {e}"))?;
    r.hosts = Some(cluster.hosts());
    r.shape = shape.map(str::to_owned);
    r.testbed_torus = cluster.torus_shape().map(|t| t.to_string());
    Ok(r)
}

/// The table (or JSON lines) as rows come.
struct Table {
    json: bool,
}

impl Table {
    /// Print the header (not for JSON).
    fn new(a: &ValidateArgs, seed: u64) -> Self {
        if !a.json {
            let on = match (a.hosts, a.bootstrap) {
                (None, None) if a.torus.is_some() => format!(
                    "an emulated {} torus of netns hosts{}",
                    a.torus.map(|t| t.to_string()).unwrap_or_default(),
                    a.shape
                        .as_ref()
                        .map_or(String::new(), |s| format!(", links shaped to {s}"))
                ),
                (Some(k), _) => format!(
                    "{k} netns hosts{}",
                    a.shape
                        .as_ref()
                        .map_or(String::new(), |s| format!(" shaped to {s}"))
                ),
                (None, Some(_)) => "a launched job".into(),
                (None, None) => "in-process nodes on loopback".into(),
            };
            say!(
                "weft model validate: {on}, radix {}, {:?} tree, fail {}, {} trials per size, seed {seed}",
                a.tree.radix,
                a.tree.mode(),
                a.fail,
                a.repeat
            );
            say!("L = one-way latency (32 B ping; across hosts: rank 0 and the last rank), Ocp = local recalculation,");
            say!("L(N) = one-way latency while every process pings in a group of a parent and radix children (ICS'06 Fig. 7),");
            say!("contention = base with L(N) for L (the paper's), cpu sharing = base + the stabilization's CPU over the cores,");
            say!("steal = CPU time the hypervisor took from this machine during the sweep point;");
            say!("cold = the same models fed L and L(N) of pings that find their receiver idle (2 ms after the last), as a failure's first message does");
            if a.torus.is_some() {
                say!("on the torus: L is one hop's; L(h) is measured at every hop count h, L_hop is what a hop adds,");
                say!("hop latency = the distance model with each level charged L(h) at its hop count, not h·L (weft's own)");
            }
            say!(
                "{:>6} {:>2} {:>17} {:>7} {:>7} {:>7} {:>14} {:>14} {:>16} {:>16} {:>7}",
                "nodes",
                "H",
                "Ts mean ± 99% CI",
                "L µs",
                "L(N) µs",
                "Ocp µs",
                "base (err)",
                "distance (err)",
                "contention (err)",
                "cpu share (err)",
                "steal %"
            );
        }
        Table { json: a.json }
    }

    fn row(&mut self, r: &ValidateRow) {
        if self.json {
            say!("{}", serde_json::to_string(r).unwrap_or_default());
            return;
        }
        let pct = |e: f64| format!("{:.0}%", e * 100.0);
        let opt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
        say!(
            "{:>6} {:>2} {:>9.1} ± {:<5} {:>7.1} {:>7.1} {:>7.2} {:>8.0} {:>5} {:>8.0} {:>5} {:>10.0} {:>5} {:>10.0} {:>5} {:>7}",
            r.nodes,
            r.height,
            r.ts_mean_us,
            opt(r.ci99_us, 1),
            r.l_us,
            r.l_n_us,
            r.ocp_us,
            r.base_us,
            pct(r.base_err),
            r.distance_us,
            pct(r.distance_err),
            r.contention_us,
            pct(r.contention_err),
            r.cpu_sharing_us,
            pct(r.cpu_sharing_err),
            r.steal_pct.map_or("-".to_string(), |p| format!("{p:.1}"))
        );
        if let Some(k) = &r.cold {
            say!(
                "{:>6} {:>2} {:>17} {:>7.1} {:>7.1} {:>7} {:>8.0} {:>5} {:>8.0} {:>5} {:>10.0} {:>5} {:>10.0} {:>5}",
                "cold",
                "",
                "",
                k.l_cold_us,
                k.l_n_cold_us,
                "",
                k.base_us,
                pct(k.base_err),
                k.distance_us,
                pct(k.distance_err),
                k.contention_us,
                pct(k.contention_err),
                k.cpu_sharing_us,
                pct(k.cpu_sharing_err),
            );
        }
        if let (Some(at), Some(hop), Some(m), Some(e)) = (
            &r.l_at_hops_us,
            r.l_hop_us,
            r.hop_latency_us,
            r.hop_latency_err,
        ) {
            let at: Vec<String> = at.iter().map(|l| format!("{l:.1}")).collect();
            say!(
                "{:>6}    L(h) µs for h = 1.. [{}], L_hop {hop:.2} µs, hop latency {m:.0} ({})",
                "",
                at.join(", "),
                pct(e)
            );
        }
    }
}

/// The measured points and every model's curve against N.
fn plot(a: &ValidateArgs, path: &std::path::Path, rows: &[ValidateRow]) -> anyhow::Result<()> {
    let n = |r: &ValidateRow| r.nodes as f64;
    let mut series = vec![
        Series::of("measured (mean, 99% CI)", rows, n, |r| r.ts_mean_us)
            .with_error(rows, |r| r.ci99_us.unwrap_or(0.0)),
        Series::of("base model", rows, n, |r| r.base_us),
        Series::of(
            &format!(
                "distance model ({} torus)",
                a.torus
                    .or(a.model_torus)
                    .map_or("BG/L partition".to_string(), |t| t.to_string())
            ),
            rows,
            n,
            |r| r.distance_us,
        ),
        Series::of("contention model (L(N))", rows, n, |r| r.contention_us),
        Series::of("CPU-sharing model", rows, n, |r| r.cpu_sharing_us),
    ];
    if rows.iter().all(|r| r.hop_latency_us.is_some()) {
        series.push(Series::of(
            "hop-latency model (L(h); weft's)",
            rows,
            n,
            |r| r.hop_latency_us.unwrap_or_default(),
        ));
    }
    let on = match (a.hosts, a.torus) {
        (Some(k), _) => format!(
            "{k} netns hosts{}",
            a.shape.as_ref().map_or(String::new(), |s| format!(", {s}"))
        ),
        (None, Some(t)) => format!(
            "an emulated {t} torus{}",
            a.shape.as_ref().map_or(String::new(), |s| format!(", {s}"))
        ),
        (None, None) => "loopback TCP".into(),
    };
    let title = format!(
        "Ts after a {} failure, radix {}, {on} ({})",
        a.fail,
        a.tree.radix,
        rows.first().map_or("", |r| r.backend.as_str())
    );
    Ok(log_x_svg(path, &title, "nodes", "Ts (µs)", &series)?)
}
