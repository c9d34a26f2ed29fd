//! `weft sim stabilize`: radix-tree membership stabilization in the timed simulator.

use super::checks;
use super::values::NetArg;
use clap::Args;
use weft::bench::scenario;
use weft::proto::membership::IdTree;
use weft::rng::SimRng;
use weft::sim::stabilize::{run as run_sim, StabilizeConfig};
use weft::topology::torus::Torus;
use weft::NodeId;

/// Arguments of `weft sim stabilize`.
#[derive(Args, Debug)]
pub struct StabilizeArgs {
    /// Processes.
    #[arg(long, default_value_t = 64)]
    nodes: u32,
    /// Several sizes in one run (overrides --nodes), e.g. 16,64,256,1024.
    #[arg(long, value_delimiter = ',')]
    nodes_list: Vec<u32>,
    #[command(flatten)]
    tree: super::TreeArgs,
    #[command(flatten)]
    fail: super::FailArgs,
    /// Kill the victims one after another, this many µs apart (0: all at t = 0). A root
    /// killed in the middle of sending its epoch down leaves some survivors in that epoch.
    #[arg(long, default_value_t = 0.0)]
    kill_gap_us: f64,
    /// Latency model.
    #[arg(long, value_enum, default_value = "constant")]
    net: NetArg,
    /// The torus of `--net torus`, XxYxZ (default: the smallest BG/L partition holding the
    /// processes: 8x8x8 up to 512, 8x8x16 for 1024, …).
    #[arg(long)]
    torus: Option<Torus>,
    /// L, per message (per hop on the torus). Default: BG/L's 4.6 µs.
    #[arg(long, default_value_t = 4.6)]
    latency_us: f64,
    /// Ocp: CPU per handled message. Default: the paper's 2 µs.
    #[arg(long, default_value_t = 2.0)]
    ocp_us: f64,
    /// CPU per message sent (the contention model).
    #[arg(long, default_value_t = 1.0)]
    send_us: f64,
    /// Detect by HowAreYou probes every this many µs (0: a neighbor notices at once).
    #[arg(long, default_value_t = 0.0)]
    probe_us: f64,
    /// Probe timeout in µs.
    #[arg(long, default_value_t = 100.0)]
    probe_timeout_us: f64,
    /// The root collects failure reports this many µs before starting an epoch (0: at once).
    #[arg(long, default_value_t = 0.0)]
    batch_us: f64,
    /// Seed of the victims' choice (printed when chosen at random).
    #[arg(long)]
    seed: Option<u64>,
    /// One JSON object per run.
    #[arg(long)]
    json: bool,
}

/// Run `weft sim stabilize`.
pub fn run(a: StabilizeArgs) -> anyhow::Result<()> {
    a.tree.check()?;
    let us = |flag: &str, v: f64| checks::duration(flag, v, 1e-6);
    let latency = us("--latency-us", a.latency_us)?;
    let ocp = us("--ocp-us", a.ocp_us)?;
    let send = us("--send-us", a.send_us)?;
    let probe = us("--probe-us", a.probe_us)?;
    let probe_timeout = us("--probe-timeout-us", a.probe_timeout_us)?;
    let batch = us("--batch-us", a.batch_us)?;
    let kill_gap = us("--kill-gap-us", a.kill_gap_us)?;
    let fail = a.fail.fail()?;
    if a.torus.is_some() && !matches!(a.net, NetArg::Torus) {
        anyhow::bail!("--torus shapes the distance model: it needs --net torus");
    }
    let sizes = if a.nodes_list.is_empty() {
        vec![a.nodes]
    } else {
        a.nodes_list.clone()
    };
    checks::distinct("--nodes-list", &sizes)?;
    let seed = a.seed.unwrap_or_else(SimRng::fresh_seed);
    if a.seed.is_none() && !a.json {
        eprintln!("seed {seed}");
    }
    // Every size's victims are drawn (and so checked) before the first run.
    let mut runs = Vec::new();
    for &n in &sizes {
        anyhow::ensure!(n >= 2, "--nodes {n}: need at least 2 processes");
        let ids: Vec<NodeId> = (0..n as u64).map(NodeId).collect();
        let tree = IdTree::radix(&ids, a.tree.radix);
        let victims = scenario::victims(&tree, n, &fail, &mut SimRng::new(seed))
            .map_err(|e| anyhow::anyhow!("{n} processes: {e}"))?;
        runs.push(StabilizeConfig {
            nodes: n,
            radix: a.tree.radix,
            mode: a.tree.mode(),
            victims,
            kill_gap,
            label: fail.to_string(),
            net: a.net.into(),
            torus: a.torus,
            latency,
            ocp,
            send,
            seed,
            probe: (!probe.is_zero()).then_some((probe, probe_timeout)),
            batch,
            orphan_hold: a.tree.orphan_hold(),
            collect: a.tree.collect,
        });
    }
    if !a.json {
        say!(
            "weft sim stabilize: radix {}, {:?} tree, fail {fail}, {:?} network{}, L = {} µs, Ocp = {} µs, seed {seed}",
            a.tree.radix,
            a.tree.mode(),
            a.net,
            a.torus.map(|t| format!(" ({t})")).unwrap_or_default(),
            a.latency_us,
            a.ocp_us
        );
        say!(
            "{:>7} {:>3} {:>10} {:>12} {:>7} {:>7} {:>11} {:>10}",
            "nodes",
            "H",
            "Ts µs",
            "base model",
            "msgs",
            "epochs",
            "views agree",
            "stabilized"
        );
    }
    for cfg in runs {
        let r = run_sim(&cfg).map_err(anyhow::Error::msg)?;
        if a.json {
            say!("{}", serde_json::to_string(&r)?);
        } else {
            say!(
                "{:>7} {:>3} {:>10.1} {:>12.1} {:>7} {:>7} {:>11} {:>10}",
                r.nodes,
                r.height,
                r.ts_us,
                r.base_model_us,
                r.msgs,
                r.epochs,
                r.views_agree,
                r.stabilized
            );
        }
        anyhow::ensure!(
            r.views_named_once,
            "two processes held one epoch with different views"
        );
        anyhow::ensure!(
            r.views_agree && r.stabilized,
            "survivors did not agree on one stabilized view"
        );
    }
    Ok(())
}
