//! `weft bsp run`: a BSP program on in-process engine nodes (one [`BspNode`] each, its
//! checkpoints in neighborhood storage), `fail` of them killed while it runs, the result
//! compared with a fault-free run of the program and the time with the time of a run without
//! kills, same nodes and seed, in the same invocation.
//!
//! Kills come at awkward moments on purpose: victim `i` is killed a seeded `0..2 ms` after the
//! first node starts superstep `s_i` (seeded in `0..S`), whatever it is doing then (a
//! checkpoint being dispersed, the exchange, the survivors' agreement after an earlier kill,
//! a rebuild, or the end of the run).

use crate::bsp::event::BspEvent;
use crate::bsp::node::{gather, BspConfig, BspNode};
use crate::bsp::{app, Program};
use crate::engine::reactor::NodeEvent;
use crate::engine::EngineError;
use crate::rng::SimRng;
use crate::storage::{Placement, Scheme, StorageConfig};
use crate::transport::{Cluster, NodeOptions};
use crate::NodeId;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Clone)]
pub struct BspRunConfig {
    /// The program.
    pub app: &'static dyn Program,
    /// Real processors (in-process nodes).
    pub nodes: usize,
    /// Virtual processors.
    pub virt: u64,
    /// Supersteps.
    pub supersteps: u32,
    /// Nodes killed during the run.
    pub fail: usize,
    /// Seeds the victims, their moments and the neighborhoods.
    pub seed: u64,
    /// `K_0`: a SafeState every this many supersteps.
    pub safe_every: u32,
    /// `α`: the fraction of the nodes the job survives losing (the SafeStates' replicas).
    pub alpha: f64,
    /// Kill every victim at one moment, as many as can be from one neighborhood: a corrupted
    /// neighborhood, which only a BACKTRACK to a SafeState survives.
    pub burst: bool,
    /// How nodes run.
    pub opts: NodeOptions,
    /// Longest wait for the run to end.
    pub timeout: Duration,
}

/// One kill.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Kill {
    /// The node.
    pub node: u64,
    /// Killed this long after the first node started this superstep.
    pub step: u32,
    /// The delay, µs.
    pub after_us: u64,
}

/// What a run did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BspRunReport {
    /// The program.
    pub app: &'static str,
    /// Real processors.
    pub nodes: usize,
    /// Virtual processors.
    pub virt: u64,
    /// Supersteps.
    pub supersteps: u32,
    /// Nodes killed.
    pub fail: usize,
    /// The kills, in the order they came.
    pub kills: Vec<Kill>,
    /// The survivors' final states equal the fault-free run's, every virtual processor
    /// reported once.
    pub result_ok: bool,
    /// Why the run has no result (a state lost beyond what its neighborhood tolerates, a
    /// timeout); `None` when it has one.
    pub error: Option<String>,
    /// Start of the nodes' work to the last survivor's result, ms.
    pub total_ms: f64,
    /// `total_ms / supersteps`.
    pub per_superstep_ms: f64,
    /// The same run without kills, ms.
    pub baseline_ms: f64,
    /// `total_ms / baseline_ms`.
    pub overhead: f64,
    /// Rollbacks the survivors agreed on (epochs).
    pub rollbacks: u32,
    /// BACKTRACKs to a SafeState among them (a neighborhood corrupted).
    pub backtracks: u32,
    /// `K_0`: supersteps per SafeState.
    pub safe_every: u32,
    /// `α`: the fraction of the nodes the SafeStates' replicas are sized for.
    pub alpha: f64,
    /// The victims died at one moment, a neighborhood first.
    pub burst: bool,
    /// Supersteps rerun after rollbacks: for each, the newest superstep any node had started
    /// less the one resumed from, plus one, summed.
    pub rerun_supersteps: u32,
    /// States rebuilt from neighbors' pieces (adopted virtual processors), over all nodes.
    pub rebuilt_states: usize,
    /// The seed.
    pub seed: u64,
    /// The engine backend.
    pub backend: String,
}

/// One run's outcome.
struct Outcome {
    kills: Vec<Kill>,
    states: Result<Vec<u64>, String>,
    total: Duration,
    rollbacks: u32,
    backtracks: u32,
    rerun: u32,
    rebuilt: usize,
    backend: String,
}

/// Run the program without kills, then with `fail` kills, and compare.
pub fn run(cfg: &BspRunConfig) -> Result<BspRunReport, EngineError> {
    if cfg.nodes < 2 || cfg.fail >= cfg.nodes || cfg.virt == 0 || cfg.supersteps == 0 {
        return Err(EngineError::Config(format!(
            "need 2 or more nodes, fewer kills than nodes, a virtual processor and a superstep: \
             got {} nodes, {} kills, {} virtual, {} supersteps",
            cfg.nodes, cfg.fail, cfg.virt, cfg.supersteps
        )));
    }
    let reference = app::reference(cfg.app, cfg.virt, cfg.supersteps);
    let baseline = once(cfg, &[])?;
    match &baseline.states {
        Ok(s) if *s == reference => {}
        Ok(_) => {
            return Err(EngineError::Config(
                "the run without kills gave a wrong result".into(),
            ))
        }
        Err(e) => return Err(EngineError::Config(format!("the run without kills: {e}"))),
    }
    let plan = plan(cfg);
    let o = once(cfg, &plan)?;
    let total_ms = o.total.as_secs_f64() * 1e3;
    let baseline_ms = baseline.total.as_secs_f64() * 1e3;
    Ok(BspRunReport {
        app: cfg.app.name(),
        nodes: cfg.nodes,
        virt: cfg.virt,
        supersteps: cfg.supersteps,
        fail: cfg.fail,
        kills: o.kills,
        result_ok: o.states.as_ref() == Ok(&reference),
        error: o.states.err(),
        total_ms,
        per_superstep_ms: total_ms / f64::from(cfg.supersteps),
        baseline_ms,
        overhead: total_ms / baseline_ms.max(1e-9),
        rollbacks: o.rollbacks,
        backtracks: o.backtracks,
        safe_every: cfg.safe_every,
        alpha: cfg.alpha,
        burst: cfg.burst,
        rerun_supersteps: o.rerun,
        rebuilt_states: o.rebuilt,
        seed: cfg.seed,
        backend: o.backend,
    })
}

/// The victims, each with its superstep and delay.
fn plan(cfg: &BspRunConfig) -> Vec<Kill> {
    let mut rng = SimRng::new(cfg.seed ^ 0xb5b);
    let mut victims = super::checkpoint::draw_victims(cfg.nodes, cfg.fail, cfg.seed);
    if cfg.burst && !victims.is_empty() {
        // The first victim's whole neighborhood (of the first checkpoints) goes first.
        let ids: Vec<NodeId> = (0..cfg.nodes as u64).map(NodeId).collect();
        let p = Placement::new(Scheme::Ida, &ids, cfg.seed, 0);
        let mut burst: Vec<NodeId> = p
            .groups()
            .iter()
            .find(|g| g.contains(&victims[0]))
            .cloned()
            .unwrap_or_default();
        burst.extend(
            victims
                .iter()
                .filter(|v| !burst.contains(v))
                .collect::<Vec<_>>(),
        );
        burst.truncate(cfg.fail);
        victims = burst;
    }
    let (step, after_us) = (rng.below(u64::from(cfg.supersteps)) as u32, rng.below(2000));
    let mut plan: Vec<Kill> = victims
        .into_iter()
        .map(|v| match cfg.burst {
            true => Kill {
                node: v.0,
                step,
                after_us,
            },
            false => Kill {
                node: v.0,
                step: rng.below(u64::from(cfg.supersteps)) as u32,
                after_us: rng.below(2000),
            },
        })
        .collect();
    plan.sort_by_key(|k| (k.step, k.after_us));
    plan
}

fn once(cfg: &BspRunConfig, plan: &[Kill]) -> Result<Outcome, EngineError> {
    let bsp = BspConfig {
        virt: cfg.virt,
        supersteps: cfg.supersteps,
        safe_every: cfg.safe_every,
        alpha: cfg.alpha,
        storage: StorageConfig {
            stripe: 64 << 10,
            seed: cfg.seed,
            ..StorageConfig::default()
        },
    };
    let app = cfg.app;
    let t0 = Instant::now();
    let mut cluster = Cluster::start(cfg.nodes, cfg.opts.clone(), move |i, ids| {
        BspNode::new(ids[i], ids, app, bsp.clone())
    })?;
    let backend = cluster.backend_name();
    let deadline = t0 + cfg.timeout;
    let mut armed: Vec<(Instant, usize)> = Vec::new();
    let mut next = 0;
    let mut kills = Vec::new();
    let mut finished: BTreeMap<u64, (u32, Vec<(u64, u64)>)> = BTreeMap::new();
    let mut failed: Vec<String> = Vec::new();
    let (mut rollbacks, mut rerun, mut rebuilt) = (0u32, 0u32, 0usize);
    let mut backtracks = 0u32;
    let mut newest_step = 0u32;
    let mut end = t0;
    let mut timed_out = false;
    loop {
        let killed: Vec<u64> = kills.iter().map(|k: &Kill| k.node).collect();
        let epoch = killed.len() as u32 + backtracks;
        let done = next == plan.len()
            && armed.is_empty()
            && (0..cfg.nodes as u64)
                .filter(|i| !killed.contains(i))
                .all(|i| finished.get(&i).is_some_and(|f| f.0 == epoch));
        if done || !failed.is_empty() {
            break;
        }
        let now = Instant::now();
        if let Some(pos) = armed.iter().position(|a| a.0 <= now) {
            let (_, k) = armed.remove(pos);
            cluster.nodes[plan[k].node as usize].kill();
            kills.push(plan[k].clone());
            continue;
        }
        if now >= deadline {
            timed_out = true;
            break;
        }
        let wake = armed
            .iter()
            .map(|a| a.0)
            .min()
            .unwrap_or(deadline)
            .min(deadline);
        let Ok((id, ev)) = cluster
            .events
            .recv_timeout(wake.saturating_duration_since(now))
        else {
            continue;
        };
        let NodeEvent::Protocol(e) = ev else {
            continue;
        };
        match e {
            BspEvent::Superstep { step, .. } => {
                newest_step = newest_step.max(step);
                while next < plan.len() && plan[next].step <= step {
                    let at = Instant::now() + Duration::from_micros(plan[next].after_us);
                    armed.push((at, next));
                    next += 1;
                }
            }
            BspEvent::Rollback {
                epoch,
                to,
                adopted,
                backtracks: b,
                ..
            } => {
                backtracks = backtracks.max(b);
                if id == first_live(cfg.nodes, &kills) {
                    rollbacks = rollbacks.max(epoch);
                    rerun += newest_step.saturating_sub(to.unwrap_or(0)) + 1;
                }
                rebuilt += adopted;
            }
            BspEvent::Finished { epoch, states } => {
                end = Instant::now();
                finished.insert(id.0, (epoch, states));
            }
            BspEvent::Failed { why } => failed.push(format!("node {}: {why}", id.0)),
            BspEvent::Excluded => failed.push(format!("node {} was held dead", id.0)),
        }
    }
    let total = end.saturating_duration_since(t0);
    if timed_out {
        // What each node waited for: the diagnosis of a run that does not end. (Nodes stop
        // reactor by reactor, so the last ones may also hold the first ones dead.)
        let waiting: Vec<String> = cluster
            .stop_all()?
            .iter()
            .map(BspNode::status)
            .filter(|s| !s.ends_with("finished"))
            .collect();
        failed.push(format!(
            "no result within {:?}: {}",
            cfg.timeout,
            waiting.join("; ")
        ));
    } else {
        cluster.shutdown()?;
    }
    let epoch = kills.len() as u32 + backtracks;
    let states = if failed.is_empty() {
        let survivors = finished
            .into_iter()
            .filter(|(i, f)| kills.iter().all(|k| k.node != *i) && f.0 == epoch);
        gather(cfg.virt, survivors.map(|(_, f)| f.1))
    } else {
        Err(failed.join("; "))
    };
    Ok(Outcome {
        kills,
        states,
        total,
        rollbacks,
        backtracks,
        rerun,
        rebuilt,
        backend,
    })
}

/// The lowest node not killed.
fn first_live(nodes: usize, kills: &[Kill]) -> NodeId {
    NodeId(
        (0..nodes as u64)
            .find(|i| kills.iter().all(|k| k.node != *i))
            .unwrap_or(0),
    )
}
