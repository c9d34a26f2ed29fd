//! `weft model validate`: the models of ICS'06 against real runs on this machine.

use super::checks;
use super::plot::{log_x_svg, Series};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use weft::bench::scenario::Fail;
use weft::bench::validate::{validate, ValidateRow};
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
    /// The distance model's torus, XxYxZ (default: the smallest BG/L partition holding each
    /// size: 8x8x8 up to 512, 8x8x16 for 1024, …).
    #[arg(long)]
    torus: Option<Torus>,
    /// Seed of the victims' choice.
    #[arg(long)]
    seed: Option<u64>,
    /// Write measured points (99% CI bars) and the model curves to this SVG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// One JSON object per size.
    #[arg(long)]
    json: bool,
}

/// Run `weft model validate`.
pub fn run(a: ValidateArgs) -> anyhow::Result<()> {
    // Everything is checked before the first measurement.
    a.tree.check()?;
    anyhow::ensure!(a.repeat >= 1, "--repeat must be at least 1");
    anyhow::ensure!(
        !a.nodes_list.is_empty(),
        "--nodes-list: need at least one size"
    );
    checks::distinct("--nodes-list", &a.nodes_list)?;
    if let (Some(t), Some(&n)) = (a.torus, a.nodes_list.iter().max()) {
        anyhow::ensure!(
            t.holds(n as u64),
            "--torus {t}: {n} nodes do not fit on its {} nodes",
            t.size()
        );
    }
    let seed = a.seed.unwrap_or_else(SimRng::fresh_seed);
    for &n in &a.nodes_list {
        let cfg = a.tree.bench(n, a.fail.clone(), seed, &a.engine);
        weft::bench::stabilize::check(&cfg).map_err(|e| anyhow::anyhow!("{n} nodes: {e}"))?;
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
    if !a.json {
        say!(
            "weft model validate: radix {}, {:?} tree, fail {}, {} trials per size, seed {seed}",
            a.tree.radix,
            a.tree.mode(),
            a.fail,
            a.repeat
        );
        say!("L = engine one-way latency (32 B ping), Ocp = local recalculation, c = CPU per message under load (relay ring),");
        say!(
            "M = messages (simulator), c stab = CPU the stabilization used / M (block mode only),"
        );
        say!("steal = CPU time the hypervisor took from this machine during the sweep point");
        say!(
            "{:>6} {:>2} {:>17} {:>7} {:>7} {:>6} {:>6} {:>7} {:>14} {:>14} {:>16} {:>7}",
            "nodes",
            "H",
            "Ts mean ± 99% CI",
            "L µs",
            "Ocp µs",
            "c µs",
            "M",
            "c stab",
            "base (err)",
            "distance (err)",
            "contention (err)",
            "steal %"
        );
    }
    let mut rows: Vec<ValidateRow> = Vec::new();
    let bar = ProgressBar::new(a.nodes_list.len() as u64).with_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} sizes {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    for &n in &a.nodes_list {
        let cfg = a.tree.bench(n, a.fail.clone(), seed, &a.engine);
        let r = validate(&cfg, a.repeat, a.torus)?;
        bar.inc(1);
        if a.json {
            bar.suspend(|| say!("{}", serde_json::to_string(&r).unwrap_or_default()));
        } else {
            let pct = |e: f64| format!("{:.0}%", e * 100.0);
            let opt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
            bar.suspend(|| {
                say!(
                    "{:>6} {:>2} {:>9.1} ± {:<5} {:>7.1} {:>7.2} {:>6.2} {:>6.0} {:>7} {:>8.0} {:>5} {:>8.0} {:>5} {:>9.0} {:>6} {:>7}",
                    r.nodes,
                    r.height,
                    r.ts_mean_us,
                    opt(r.ci99_us, 1),
                    r.l_us,
                    r.ocp_us,
                    r.c_us,
                    r.messages,
                    opt(r.c_stab_us, 2),
                    r.base_us,
                    pct(r.base_err),
                    r.distance_us,
                    pct(r.distance_err),
                    r.contention_us,
                    pct(r.contention_err),
                    r.steal_pct.map_or("-".to_string(), |p| format!("{p:.1}"))
                )
            });
        }
        anyhow::ensure!(r.views_agree, "{n} nodes: survivors disagreed");
        rows.push(r);
    }
    bar.finish_and_clear();
    if let Some(path) = &a.plot {
        let n = |r: &ValidateRow| r.nodes as f64;
        let series = [
            Series::of("measured (mean, 99% CI)", &rows, n, |r| r.ts_mean_us)
                .with_error(&rows, |r| r.ci99_us.unwrap_or(0.0)),
            Series::of("base model", &rows, n, |r| r.base_us),
            Series::of(
                &format!(
                    "distance model ({} torus)",
                    a.torus
                        .map_or("BG/L partition".to_string(), |t| t.to_string())
                ),
                &rows,
                n,
                |r| r.distance_us,
            ),
            Series::of("contention model", &rows, n, |r| r.contention_us),
        ];
        let title = format!(
            "Ts after a {} failure, radix {}, loopback TCP ({})",
            a.fail,
            a.tree.radix,
            rows.first().map_or("", |r| r.backend.as_str())
        );
        log_x_svg(path, &title, "nodes", "Ts (µs)", &series)?;
        if !a.json {
            say!("plot: {}", path.display());
        }
    }
    Ok(())
}
