//! `weft sim stabilize`: radix-tree membership stabilization in the timed simulator.

use clap::Args;
use std::time::Duration;
use weft::sim::rng::SimRng;
use weft::sim::stabilize::{run as run_sim, Fail, NetKind, StabilizeConfig};

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
    /// leaf, inner, root, multi:K or root+K.
    #[arg(long, default_value = "inner")]
    fail: Fail,
    /// Latency model.
    #[arg(long, value_enum, default_value_t = NetKind::Constant)]
    net: NetKind,
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
    /// Seed (printed when chosen at random).
    #[arg(long)]
    seed: Option<u64>,
    /// One JSON object per run.
    #[arg(long)]
    json: bool,
}

/// Run `weft sim stabilize`.
pub fn run(a: StabilizeArgs) -> anyhow::Result<()> {
    let seed = a.seed.unwrap_or_else(SimRng::fresh_seed);
    if a.seed.is_none() && !a.json {
        eprintln!("seed {seed}");
    }
    for v in [
        a.latency_us,
        a.ocp_us,
        a.send_us,
        a.probe_us,
        a.probe_timeout_us,
        a.batch_us,
    ] {
        anyhow::ensure!(
            v.is_finite() && v >= 0.0,
            "times must be non-negative numbers"
        );
    }
    let sizes = if a.nodes_list.is_empty() {
        vec![a.nodes]
    } else {
        a.nodes_list.clone()
    };
    if !a.json {
        say!(
            "weft sim stabilize: radix {}, {:?} tree, fail {}, {:?} network, L = {} µs, Ocp = {} µs, seed {seed}",
            a.tree.radix, a.tree.mode, a.fail, a.net, a.latency_us, a.ocp_us
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
    for n in sizes {
        let r = run_sim(&StabilizeConfig {
            nodes: n,
            radix: a.tree.radix,
            mode: a.tree.mode,
            fail: a.fail,
            net: a.net,
            latency: Duration::from_secs_f64(a.latency_us * 1e-6),
            ocp: Duration::from_secs_f64(a.ocp_us * 1e-6),
            send: Duration::from_secs_f64(a.send_us * 1e-6),
            seed,
            probe: (a.probe_us > 0.0).then(|| {
                (
                    Duration::from_secs_f64(a.probe_us * 1e-6),
                    Duration::from_secs_f64(a.probe_timeout_us.max(0.0) * 1e-6),
                )
            }),
            batch: Duration::from_secs_f64(a.batch_us * 1e-6),
            orphan_hold: a.tree.orphan_hold(),
        })
        .map_err(anyhow::Error::msg)?;
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
            r.views_agree && r.stabilized,
            "survivors did not agree on one stabilized view"
        );
    }
    Ok(())
}
