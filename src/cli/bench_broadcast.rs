//! `weft bench broadcast`: the Process Order paper's section 2 experiment (C, H1, H2) on
//! in-process nodes, with its grid application running meanwhile, and a failure in the middle
//! of the stream if asked.

use super::plot::{log_x_svg, Series};
use super::EngineArgs;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;
use weft::bench::broadcast::{
    run as run_bench, BroadcastBenchConfig, BroadcastBenchRow, Scheme, Victim,
};

/// A scheme, as typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SchemeArg {
    /// The central coordinator, a new connection per message.
    #[value(name = "C")]
    C,
    /// The binary hierarchy, a new connection per message.
    #[value(name = "H1")]
    H1,
    /// The binary hierarchy on kept connections.
    #[value(name = "H2")]
    H2,
}

impl From<SchemeArg> for Scheme {
    fn from(s: SchemeArg) -> Self {
        match s {
            SchemeArg::C => Scheme::C,
            SchemeArg::H1 => Scheme::H1,
            SchemeArg::H2 => Scheme::H2,
        }
    }
}

/// A victim, as typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum VictimArg {
    /// POID 0.
    Root,
    /// The first process below the root that coordinates others (H1, H2 only).
    Coordinator,
    /// A process that coordinates nobody, not the origin.
    Leaf,
}

impl From<VictimArg> for Victim {
    fn from(v: VictimArg) -> Self {
        match v {
            VictimArg::Root => Victim::Root,
            VictimArg::Coordinator => Victim::Coordinator,
            VictimArg::Leaf => Victim::Leaf,
        }
    }
}

/// `weft bench broadcast` arguments.
#[derive(Args, Debug)]
pub struct BenchBroadcastArgs {
    /// Process counts (the paper's: 15, 16 and 63).
    #[arg(long, value_delimiter = ',', default_value = "15,16,63")]
    nodes_list: Vec<usize>,
    /// Schemes to run, in order.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "C,H1,H2")]
    protocols: Vec<SchemeArg>,
    /// Broadcasts per run, each confirmed before the next (the first is left out of the time).
    #[arg(long, default_value_t = 100)]
    broadcasts: u32,
    /// Bytes of each broadcast.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Doubles each grid process sends each neighbour per round.
    #[arg(long, default_value_t = 64)]
    grid_doubles: usize,
    /// Leave the grid application out: the broadcasts alone.
    #[arg(long)]
    no_background: bool,
    /// Fail this process when half of the broadcasts are confirmed.
    #[arg(long, value_enum)]
    fail: Option<VictimArg>,
    /// Longest wait for one run, in seconds.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
    /// Write an SVG of the time per broadcast against the process count.
    #[arg(long)]
    plot: Option<PathBuf>,
    #[command(flatten)]
    engine: EngineArgs,
    /// Also print the paper's Figure 1 table beside the simulator's projection of it (the
    /// network's costs read off its 15-PE column, 16 and 63 projected; JSON rows with
    /// `"projection": true`).
    #[arg(long)]
    paper: bool,
    /// One JSON object per run.
    #[arg(long)]
    json: bool,
}

/// Run `weft bench broadcast`.
pub fn run(a: BenchBroadcastArgs) -> anyhow::Result<()> {
    a.engine.one_transport()?;
    super::checks::distinct("--nodes-list", &a.nodes_list)?;
    let least = if a.fail.is_some() { 3 } else { 2 };
    for &n in &a.nodes_list {
        anyhow::ensure!(
            (least..=1024).contains(&n),
            "--nodes-list {n}: each must be {least} to 1024"
        );
    }
    anyhow::ensure!(!a.protocols.is_empty(), "--protocols: name at least one");
    super::checks::within("--broadcasts", a.broadcasts, 2..=1_000_000)?;
    anyhow::ensure!(
        a.size <= 1 << 20,
        "--size {}: at most 1 MiB (1048576)",
        a.size
    );
    super::checks::within("--grid-doubles", a.grid_doubles, 1..=1 << 16)?;
    super::checks::within("--timeout-s", a.timeout_s, 1..=86_400)?;
    if let Some(v) = a.fail {
        for &s in &a.protocols {
            for &n in &a.nodes_list {
                Victim::from(v).pick(s.into(), n)?;
            }
        }
    }
    if let Some(p) = &a.plot {
        super::checks::writable("--plot", p)?;
    }
    let opts = a.engine.job_options();
    let mut rows: Vec<BroadcastBenchRow> = Vec::new();
    if !a.json {
        say!(
            "{} broadcasts each, {} B, {}{}",
            a.broadcasts,
            a.size,
            if a.no_background {
                "no background"
            } else {
                "grid application running"
            },
            a.fail.map_or(String::new(), |v| format!(
                ", {} failed halfway",
                Victim::from(v).name()
            ))
        );
        say!(
            "{:>5} {:>4} {:>11} {:>10} {:>10} {:>10} {:>9} {:>6} {:>11}",
            "nodes",
            "prot",
            "100 bc (ms)",
            "per bc us",
            "p50 us",
            "p99 us",
            "pause ms",
            "order",
            "connections"
        );
    }
    for &n in &a.nodes_list {
        for &s in &a.protocols {
            let cfg = BroadcastBenchConfig {
                nodes: n,
                scheme: s.into(),
                broadcasts: a.broadcasts,
                size: a.size,
                background: (!a.no_background).then_some(a.grid_doubles),
                fail: a.fail.map(Into::into),
                opts: opts.clone(),
                timeout: Duration::from_secs(a.timeout_s),
            };
            let r = run_bench(&cfg)?;
            if a.json {
                say!("{}", serde_json::to_string(&r)?);
            } else {
                say!(
                    "{:>5} {:>4} {:>11.2} {:>10.1} {:>10.1} {:>10.1} {:>9.2} {:>6} {:>11}",
                    r.nodes,
                    r.protocol,
                    r.per_broadcast_us * 100.0 / 1e3,
                    r.per_broadcast_us,
                    r.p50_us,
                    r.p99_us,
                    r.pause_ms,
                    if r.order_ok { "ok" } else { "BROKEN" },
                    r.connections
                );
                if let Some(e) = &r.order_error {
                    say!("      {e}");
                }
            }
            rows.push(r);
        }
    }
    if let Some(path) = &a.plot {
        let series: Vec<Series> = a
            .protocols
            .iter()
            .map(|&s| {
                let name = Scheme::from(s).name();
                let mine: Vec<&BroadcastBenchRow> =
                    rows.iter().filter(|r| r.protocol == name).collect();
                Series::of(name, &mine, |r| r.nodes as f64, |r| r.per_broadcast_us)
            })
            .collect();
        let title = format!(
            "Process Order broadcast, {} each, {} ({})",
            a.broadcasts,
            if a.no_background {
                "no background"
            } else {
                "grid running"
            },
            rows.first().map_or("", |r| r.backend.as_str())
        );
        log_x_svg(
            path,
            &title,
            "processes",
            "time per broadcast (µs)",
            &series,
        )?;
        if !a.json {
            say!("plot: {}", path.display());
        }
    }
    if a.paper {
        paper(a.json)?;
    }
    let broken = rows.iter().filter(|r| !r.order_ok).count();
    anyhow::ensure!(
        broken == 0,
        "{broken} runs broke the total order (see above)"
    );
    Ok(())
}

/// The paper's table beside the simulator's projection.
fn paper(json: bool) -> anyhow::Result<()> {
    let rows = weft::bench::broadcast::projection()?;
    if json {
        for r in &rows {
            say!("{}", serde_json::to_string(r)?);
        }
        return Ok(());
    }
    if let Some(r) = rows.first() {
        say!(
            "Gendelman et al. Figure 1 (100 broadcasts, s) and the simulator's projection: \
             latency {:.0} us, a new connection {:.0} us (C's coordinator) and {:.0} us (H1), \
             read off the {}-PE column",
            r.latency_us,
            rows.iter()
                .find(|r| r.protocol == "C")
                .map_or(0.0, |r| r.connect_us),
            rows.iter()
                .find(|r| r.protocol == "H1")
                .map_or(0.0, |r| r.connect_us),
            r.calibrated_at
        );
    }
    say!(
        "{:>5} {:>4} {:>9} {:>9} {:>9} {:>12} {:>12}",
        "PEs",
        "prot",
        "paper s",
        "sim s",
        "sim/paper",
        "paper / H2",
        "sim / H2"
    );
    for r in &rows {
        say!(
            "{:>5} {:>4} {:>9.1} {:>9.1} {:>9.2} {:>12.1} {:>12.1}",
            r.nodes,
            r.protocol,
            r.paper_s,
            r.sim_s,
            r.sim_over_paper,
            r.paper_ratio_to_h2,
            r.sim_ratio_to_h2
        );
    }
    Ok(())
}
