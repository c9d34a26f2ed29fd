//! The BMG construction experiment of Bosilca et al. section 4: build a launch tree, run
//! Algorithms 1 and 2 on every process under a scheduler, and count rounds and messages until the
//! ring and then the BMG are correct.
//!
//! Correctness is judged by an oracle that never looks at protocol code: the ring must be the
//! tree's preorder ([`Tree::preorder`]) and the finger tables must equal
//! [`crate::topology::bmg`]'s formulas over ring positions.

use super::tree::{Tree, TreeError, TreeKind};
use super::world::{AsyncPolicy, Scheduler, World};
use crate::proto::bmg::BmgMsg;
use crate::proto::overlay::{Overlay, OverlayMsg};
use crate::proto::ring::{Ring, RingMsg};
use crate::proto::spontaneous::SpontaneousConfig;
use crate::rng::SimRng;
use crate::topology::bmg as formula;
use crate::{NodeId, Rank};
use serde::Serialize;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// The initial configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Init {
    /// Every `Succ`, `Pred`, `CW`, `CCW` is `⊥` and channels are empty (the paper's runs).
    Empty,
    /// Arbitrary: random values everywhere and garbage messages in the channels.
    Random,
}

impl fmt::Display for Init {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Init::Empty => "empty",
            Init::Random => "random",
        })
    }
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BmgError {
    /// The launch tree cannot be built.
    #[error(transparent)]
    Tree(#[from] TreeError),
    /// A refresh period this run cannot work with.
    #[error("{0}")]
    Refresh(String),
}

/// How often a quiet process re-fires its spontaneous rules (see [`crate::proto::spontaneous`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refresh {
    /// Never: the paper's simulator. Enough from a clean start, not from an arbitrary one.
    Never,
    /// Every this many rounds.
    Every(u64),
    /// `8 · max(log2 N, 4)` rounds. Each refresh makes about `2 log2 N` messages arrive at every
    /// process, and under the asynchronous scheduler a process consumes one per step, so a
    /// faster refresh would grow the queues without bound.
    Auto,
}

impl Refresh {
    /// The period in rounds for `n` processes, `None` for never.
    pub fn rounds(self, n: u32) -> Option<u64> {
        match self {
            Refresh::Never => None,
            Refresh::Every(r) => Some(r.max(1)),
            Refresh::Auto => Some(8 * formula::levels(n).max(4) as u64),
        }
    }

    /// The fastest refresh the asynchronous scheduler can carry for `n` processes: each
    /// refresh brings about `2 log2 N` messages to every process, which consumes one per
    /// step, so a refresh every step or two grows every queue without bound (and never
    /// converges: binomial 2^8 with `--refresh 1` held 3.3 GB). `log2 N` steps is the least
    /// that converged on every tree the tests run.
    pub fn async_min(n: u32) -> u64 {
        formula::levels(n).max(1) as u64
    }

    /// Check the period against a run of `n` processes under `scheduler` lasting at most
    /// `max_rounds`.
    pub fn check(self, n: u32, scheduler: Scheduler, max_rounds: u64) -> Result<(), BmgError> {
        let Refresh::Every(r) = self else {
            return Ok(());
        };
        if r > max_rounds {
            return Err(BmgError::Refresh(format!(
                "--refresh {r}: longer than the run (--max-rounds {max_rounds}); use 0 for never"
            )));
        }
        if r > u32::MAX as u64 {
            return Err(BmgError::Refresh(format!(
                "--refresh {r}: at most {}",
                u32::MAX
            )));
        }
        let min = Self::async_min(n);
        if scheduler == Scheduler::Async && r < min {
            return Err(BmgError::Refresh(format!(
                "--refresh {r}: under the asynchronous scheduler {n} processes need at least \
                 {min} steps (log2 N) between refreshes (each brings ~2 log2 N messages to \
                 every process, which takes one per step); a faster one floods the queues"
            )));
        }
        Ok(())
    }
}

/// Parameters of one run.
#[derive(Clone, Debug)]
pub struct BmgSimConfig {
    /// Launch tree shape.
    pub tree: TreeKind,
    /// Depth of the launch tree.
    pub depth: u32,
    /// Maximal degree (random trees).
    pub degree: u32,
    /// Phases or steps.
    pub scheduler: Scheduler,
    /// Under the asynchronous scheduler: a rule or a message first (seeded by `seed`).
    pub policy: AsyncPolicy,
    /// Per-message latency used to project seconds from rounds (50 µs in the paper).
    pub latency: Duration,
    /// Initial configuration.
    pub init: Init,
    /// Seed of every random choice.
    pub seed: u64,
    /// How often a quiet process re-fires its spontaneous rules.
    pub refresh: Refresh,
    /// Give up after this many rounds.
    pub max_rounds: u64,
    /// Garbage messages per process for `Init::Random`.
    pub garbage_per_node: u32,
    /// Refuse trees larger than this.
    pub max_nodes: u64,
    /// After convergence, run this many more rounds and count state changes (a silent
    /// algorithm makes none).
    pub silence_rounds: u64,
    /// Threads a synchronous phase is split across (0: every core from 2^15 processes on).
    /// The outcome is the same for every count.
    pub threads: usize,
}

impl Default for BmgSimConfig {
    fn default() -> Self {
        Self {
            tree: TreeKind::Binary,
            depth: 10,
            degree: 4,
            scheduler: Scheduler::Sync,
            policy: AsyncPolicy::MsgFirst,
            latency: Duration::from_micros(50),
            init: Init::Empty,
            seed: 1,
            refresh: Refresh::Never,
            max_rounds: 1_000_000,
            garbage_per_node: 2,
            max_nodes: 1 << 24,
            silence_rounds: 0,
            threads: 0,
        }
    }
}

/// The measures of one run (the JSON object `weft sim bmg --json` prints).
#[derive(Clone, Debug, Serialize)]
pub struct BmgRun {
    /// Processes.
    pub nodes: u64,
    /// Launch tree shape.
    pub tree: TreeKind,
    /// Launch tree depth.
    pub depth: u32,
    /// Maximal degree (random trees).
    pub degree: u32,
    /// Scheduler.
    pub scheduler: Scheduler,
    /// The asynchronous scheduler's policy (`None` under the synchronous one).
    pub policy: Option<String>,
    /// Initial configuration.
    pub init: Init,
    /// Rounds (phases or steps) since which the ring has been correct (`None`: it was not
    /// correct when the run ended).
    pub ring_phases: Option<u64>,
    /// Further rounds until the BMG was correct (`None`: the run did not converge).
    pub bmg_phases: Option<u64>,
    /// Rounds until both were correct (`None`: the run did not converge).
    pub total_phases: Option<u64>,
    /// `total_phases × latency`, in seconds (`None`: the run did not converge).
    pub projected_s: Option<f64>,
    /// Rounds the run went through (all of `max_rounds` when it did not converge).
    pub rounds_run: u64,
    /// Most messages received by one process until convergence.
    pub max_msgs_per_proc: u32,
    /// Messages sent until convergence.
    pub total_msgs: u64,
    /// Whether both structures became correct before `max_rounds`.
    pub converged: bool,
    /// Processes quiet at the end.
    pub quiet_nodes: u64,
    /// Rounds run after convergence to check silence.
    pub silence_rounds: u64,
    /// State changes seen during those rounds (0 for a silent algorithm).
    pub changes_after: u64,
    /// The seed.
    pub seed: u64,
    /// Wall-clock seconds the simulation took.
    pub wall_s: f64,
}

/// The oracle: where each process must sit on the ring.
struct Oracle {
    order: Vec<u32>,
    pos: Vec<u32>,
    /// Each process's successor and predecessor on the ring, by process: read where the
    /// process's own state is, not at a random place in `order` (the ring is judged on every
    /// state change).
    succ: Vec<u32>,
    pred: Vec<u32>,
}

impl Oracle {
    fn new(tree: &Tree) -> Self {
        let order = tree.preorder();
        let n = order.len();
        let mut pos = vec![0u32; n];
        let (mut succ, mut pred) = (vec![0u32; n], vec![0u32; n]);
        for (i, &p) in order.iter().enumerate() {
            pos[p as usize] = i as u32;
            succ[p as usize] = order[(i + 1) % n];
            pred[p as usize] = order[(i + n - 1) % n];
        }
        Self {
            order,
            pos,
            succ,
            pred,
        }
    }

    fn at(&self, r: Rank) -> Option<NodeId> {
        Some(NodeId(self.order[r.0 as usize] as u64))
    }

    fn ring_ok(&self, p: u32, o: &impl Neighbors) -> bool {
        let id = |q: u32| Some(NodeId(q as u64));
        o.succ() == id(self.succ[p as usize]) && o.pred() == id(self.pred[p as usize])
    }

    fn bmg_ok(&self, p: u32, o: &impl Neighbors) -> bool {
        let n = self.order.len() as u32;
        let a = Rank(self.pos[p as usize]);
        // Highest level first: it is the last to be built, so an unfinished table fails fast.
        // Look up the expected value only for a finger that is set (an unset one is wrong).
        (0..formula::levels(n)).rev().all(|k| {
            o.cw(k as usize)
                .is_some_and(|v| Some(v) == self.at(formula::cw(a, k, n)))
                && o.ccw(k as usize)
                    .is_some_and(|v| Some(v) == self.at(formula::ccw(a, k, n)))
        })
    }
}

/// Process `p` of `tree` (process `i` is `NodeId(i)`), before any rule fired: its place in the
/// launch tree, and a job of `tree.len()` processes.
pub fn overlay_of(tree: &Tree, p: u32, spont: SpontaneousConfig) -> Overlay {
    let ring = Ring::new(
        NodeId(p as u64),
        tree.parent(p).map(|q| NodeId(q as u64)),
        tree.children(p).iter().map(|&c| NodeId(c as u64)).collect(),
    );
    Overlay::new(ring, tree.len() as u32, spont)
}

/// A process's ring and BMG neighbors, as the oracle judges them: a running [`Overlay`]'s, or
/// the [`Fingers`] a node process reported.
pub trait Neighbors {
    /// Its ring successor.
    fn succ(&self) -> Option<NodeId>;
    /// Its ring predecessor.
    fn pred(&self) -> Option<NodeId>;
    /// Its clockwise finger at level `k` (distance 2^k).
    fn cw(&self, k: usize) -> Option<NodeId>;
    /// Its counter-clockwise finger at level `k`.
    fn ccw(&self, k: usize) -> Option<NodeId>;
}

impl Neighbors for Overlay {
    fn succ(&self) -> Option<NodeId> {
        self.ring.succ()
    }
    fn pred(&self) -> Option<NodeId> {
        self.ring.pred()
    }
    fn cw(&self, k: usize) -> Option<NodeId> {
        self.bmg.cw(k)
    }
    fn ccw(&self, k: usize) -> Option<NodeId> {
        self.bmg.ccw(k)
    }
}

/// One process's final neighbors as plain data: what a BMG node running in its own process
/// reports to its launcher, for the launcher to check.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Fingers {
    /// Ring successor.
    pub succ: Option<u64>,
    /// Ring predecessor.
    pub pred: Option<u64>,
    /// Clockwise fingers, level 0 up.
    pub cw: Vec<Option<u64>>,
    /// Counter-clockwise fingers, level 0 up.
    pub ccw: Vec<Option<u64>>,
}

impl Fingers {
    /// What `o` holds now.
    pub fn of(o: &Overlay) -> Self {
        let id = |v: Option<NodeId>| v.map(|v| v.0);
        let levels = o.bmg.levels();
        Self {
            succ: id(o.ring.succ()),
            pred: id(o.ring.pred()),
            cw: (0..levels).map(|k| id(o.bmg.cw(k))).collect(),
            ccw: (0..levels).map(|k| id(o.bmg.ccw(k))).collect(),
        }
    }
}

impl Neighbors for Fingers {
    fn succ(&self) -> Option<NodeId> {
        self.succ.map(NodeId)
    }
    fn pred(&self) -> Option<NodeId> {
        self.pred.map(NodeId)
    }
    fn cw(&self, k: usize) -> Option<NodeId> {
        self.cw.get(k).copied().flatten().map(NodeId)
    }
    fn ccw(&self, k: usize) -> Option<NodeId> {
        self.ccw.get(k).copied().flatten().map(NodeId)
    }
}

/// Processes of `tree` whose final state `finals[p]` is not the oracle's: successor,
/// predecessor or a finger off the formulas over the tree's preorder.
pub fn wrong_fingers(tree: &Tree, finals: &[impl Neighbors]) -> u32 {
    let oracle = Oracle::new(tree);
    finals
        .iter()
        .enumerate()
        .filter(|&(p, o)| !(oracle.ring_ok(p as u32, o) && oracle.bmg_ok(p as u32, o)))
        .count() as u32
}

/// Build the tree a configuration asks for.
pub fn build_tree(cfg: &BmgSimConfig) -> Result<Tree, TreeError> {
    let mut rng = SimRng::new(cfg.seed);
    match cfg.tree {
        TreeKind::Binary => Tree::binary(cfg.depth, cfg.max_nodes),
        TreeKind::Binomial => Tree::binomial(cfg.depth, cfg.max_nodes),
        TreeKind::Random => Tree::random(cfg.depth, cfg.degree, &mut rng, cfg.max_nodes),
    }
}

/// The overlay processes of a tree, in a world ready to run.
pub fn build_world(tree: &Tree, cfg: &BmgSimConfig) -> World<Overlay> {
    let n = tree.len() as u32;
    let spont = SpontaneousConfig {
        period: cfg.latency,
        // `Refresh::check` keeps the period within a u32 of rounds.
        refresh: cfg
            .refresh
            .rounds(n)
            .map(|r| cfg.latency * u32::try_from(r).unwrap_or(u32::MAX)),
        backoff: 0,
    };
    let nodes = (0..n).map(|p| overlay_of(tree, p, spont)).collect();
    // Its own stream: the tree and the corruption of a seed stay the same under every policy.
    let world = World::new(nodes, cfg.scheduler, cfg.latency)
        .with_policy(cfg.policy, cfg.seed ^ 0x5c4e_d01e);
    match cfg.threads {
        0 => world,
        t => world.with_threads(t),
    }
}

/// Replace every process's state by random values and fill channels with garbage.
pub fn corrupt(world: &mut World<Overlay>, rng: &mut SimRng, garbage_per_node: u32) {
    let n = world.nodes().len() as u64;
    let levels = formula::levels(n as u32) as u64;
    let any = |rng: &mut SimRng| (!rng.chance(0.1)).then(|| NodeId(rng.below(n)));
    for node in world.nodes_mut() {
        let (s, p, heard, quiet) = (any(rng), any(rng), rng.chance(0.5), rng.chance(0.5));
        node.ring.corrupt(s, p, heard);
        node.bmg.corrupt(|| any(rng));
        node.set_quiet(quiet);
    }
    for _ in 0..garbage_per_node as u64 * n {
        let (from, to) = (rng.below(n) as u32, rng.below(n) as u32);
        let who = NodeId(rng.below(n));
        let hop = rng.below(levels + 2) as u8;
        let msg = match rng.below(6) {
            0 => OverlayMsg::Ring(RingMsg::FConnect(who)),
            1 => OverlayMsg::Ring(RingMsg::Info(who)),
            2 => OverlayMsg::Ring(RingMsg::AskConnect(who)),
            3 => OverlayMsg::Ring(RingMsg::BConnect(who)),
            4 => OverlayMsg::Bmg(BmgMsg::Up { ident: who, hop }),
            _ => OverlayMsg::Bmg(BmgMsg::Dn { ident: who, hop }),
        };
        world.inject(from, to, msg);
    }
}

/// Tracks which processes the oracle currently judges wrong. Shared by the threads of a
/// phase: each process's flags are touched only by the thread that runs it, and the counts
/// move only when a process's verdict flips (a few times per process per run).
struct Judge {
    oracle: Oracle,
    ring_ok: Vec<AtomicBool>,
    bmg_ok: Vec<AtomicBool>,
    ring_bad: AtomicUsize,
    bmg_bad: AtomicUsize,
}

impl Judge {
    fn new(oracle: Oracle, nodes: &[Overlay]) -> Self {
        let ring_ok: Vec<AtomicBool> = (0..nodes.len())
            .map(|p| AtomicBool::new(oracle.ring_ok(p as u32, &nodes[p])))
            .collect();
        let bmg_ok: Vec<AtomicBool> = (0..nodes.len())
            .map(|p| AtomicBool::new(oracle.bmg_ok(p as u32, &nodes[p])))
            .collect();
        let bad = |v: &[AtomicBool]| v.iter().filter(|ok| !ok.load(Relaxed)).count();
        Self {
            ring_bad: AtomicUsize::new(bad(&ring_ok)),
            bmg_bad: AtomicUsize::new(bad(&bmg_ok)),
            oracle,
            ring_ok,
            bmg_ok,
        }
    }

    fn update(&self, p: u32, node: &Overlay) {
        let i = p as usize;
        let r = self.oracle.ring_ok(p, node);
        // Only a correct ring can carry a correct BMG; skip the costlier check until then.
        let b = r && self.oracle.bmg_ok(p, node);
        for (ok, flags, bad) in [
            (r, &self.ring_ok, &self.ring_bad),
            (b, &self.bmg_ok, &self.bmg_bad),
        ] {
            // A load and a store, not a swap: only this process's thread writes its flag, and
            // a locked exchange costs a quarter of the delivery loop.
            if flags[i].load(Relaxed) != ok {
                flags[i].store(ok, Relaxed);
                if ok {
                    bad.fetch_sub(1, Relaxed);
                } else {
                    bad.fetch_add(1, Relaxed);
                }
            }
        }
    }

    fn ring_bad(&self) -> usize {
        self.ring_bad.load(Relaxed)
    }

    fn bmg_bad(&self) -> usize {
        self.bmg_bad.load(Relaxed)
    }
}

/// Run one experiment.
pub fn run(cfg: &BmgSimConfig) -> Result<BmgRun, BmgError> {
    let started = Instant::now();
    let tree = build_tree(cfg)?;
    cfg.refresh
        .check(tree.len() as u32, cfg.scheduler, cfg.max_rounds)?;
    let mut world = build_world(&tree, cfg);
    // A separate stream for the corruption, so the tree of a seed is the same in both inits.
    let mut rng = SimRng::new(cfg.seed ^ 0x5eed_c0de_0bad_f00d);
    if cfg.init == Init::Random {
        corrupt(&mut world, &mut rng, cfg.garbage_per_node);
    }
    let judge = Judge::new(Oracle::new(&tree), world.nodes());
    // The oracle holds the ring order; the tree itself is not needed any more.
    let n = tree.len() as u64;
    drop(tree);
    let watch = |p, node: &Overlay| judge.update(p, node);
    world.start(&watch);
    // From an arbitrary configuration, a correct state counts only if it survives everything
    // in flight: when all is correct and no message descends from the initial garbage, every
    // message in flight is tainted too, and convergence is declared once they and all they
    // cause have been delivered with the state still correct (the flush of Lemma A.1). From an
    // empty start the first correct configuration is final (closure).
    let flush = cfg.init == Init::Random;
    let (mut ring_at, mut both_at) = (None, None);
    let mut flushing = false;
    let mut snapshot = None;
    let mut converged_at = None;
    while world.round() < cfg.max_rounds {
        let changed = world.run_round(&watch) > 0;
        let round = world.round();
        ring_at = if judge.ring_bad() == 0 {
            ring_at.or(Some(round))
        } else {
            None
        };
        let correct = judge.ring_bad() == 0 && judge.bmg_bad() == 0;
        if !correct || (changed && flushing) {
            both_at = None;
            flushing = false;
        }
        if correct && both_at.is_none() && world.tainted_in_flight() == 0 {
            both_at = Some(round);
            snapshot = Some((world.traffic().max_received(), world.traffic().sent));
            if flush {
                world.taint_in_flight();
                flushing = true;
            }
        }
        if both_at.is_some() && world.tainted_in_flight() == 0 {
            converged_at = both_at;
            break;
        }
    }
    let both_at = converged_at;
    let converged = both_at.is_some();
    let (max_msgs, total_msgs) =
        snapshot.unwrap_or((world.traffic().max_received(), world.traffic().sent));
    let mut changes_after = 0u64;
    if converged {
        for _ in 0..cfg.silence_rounds {
            changes_after += world.run_round(&watch);
        }
    }
    Ok(BmgRun {
        nodes: n,
        tree: cfg.tree,
        depth: cfg.depth,
        degree: cfg.degree,
        scheduler: cfg.scheduler,
        policy: (cfg.scheduler == Scheduler::Async).then(|| cfg.policy.to_string()),
        init: cfg.init,
        ring_phases: ring_at,
        bmg_phases: both_at.zip(ring_at).map(|(b, r)| b.saturating_sub(r)),
        total_phases: both_at,
        projected_s: both_at.map(|t| t as f64 * cfg.latency.as_secs_f64()),
        rounds_run: world.round(),
        max_msgs_per_proc: max_msgs,
        total_msgs,
        converged,
        quiet_nodes: world.nodes().iter().filter(|o| o.is_quiet()).count() as u64,
        silence_rounds: if converged { cfg.silence_rounds } else { 0 },
        changes_after,
        seed: cfg.seed,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

/// The depths a sweep visits: from the smallest interesting tree up to `max_depth`.
pub fn sweep_depths(tree: TreeKind, max_depth: u32) -> std::ops::RangeInclusive<u32> {
    let first = match tree {
        TreeKind::Binomial => 2,
        _ => 1,
    };
    first..=max_depth.max(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(tree: TreeKind, depth: u32, scheduler: Scheduler) -> BmgSimConfig {
        BmgSimConfig {
            tree,
            depth,
            scheduler,
            degree: 3,
            silence_rounds: 20,
            ..BmgSimConfig::default()
        }
    }

    /// A phase split across threads delivers what one thread would, in the same order: the
    /// same states, message for message, from an arbitrary start (where order matters most).
    #[test]
    fn threads_do_not_change_a_phase() {
        let run_on = |threads| {
            let c = BmgSimConfig {
                init: Init::Random,
                threads,
                ..cfg(TreeKind::Random, 12, Scheduler::Sync)
            };
            let tree = build_tree(&c).unwrap();
            assert!(tree.len() > 3 << BLOCK, "several blocks: {}", tree.len());
            let mut w = build_world(&tree, &c);
            corrupt(&mut w, &mut SimRng::new(5), 3);
            let changes = std::sync::atomic::AtomicU64::new(0);
            let watch = |_, _: &Overlay| {
                changes.fetch_add(1, Relaxed);
            };
            w.start(&watch);
            let per_round: Vec<u64> = (0..40).map(|_| w.run_round(&watch)).collect();
            let states: Vec<String> = w.nodes().iter().map(|o| format!("{o:?}")).collect();
            (per_round, states, w.traffic().sent, changes.into_inner())
        };
        let one = run_on(1);
        assert!(one.0.iter().sum::<u64>() > 0);
        for t in [2, 3] {
            assert!(one == run_on(t), "{t} threads differ from one");
        }
    }

    /// Receivers per block in the world (2^10).
    const BLOCK: u32 = 10;

    #[test]
    fn binomial_tree_ring_in_four_sync_phases_at_every_size() {
        for depth in 2..=12 {
            let r = run(&cfg(TreeKind::Binomial, depth, Scheduler::Sync)).unwrap();
            assert!(r.converged);
            assert_eq!(r.ring_phases, Some(4), "depth {depth}");
        }
    }

    #[test]
    fn binary_tree_ring_grows_with_depth() {
        // The longest Info path climbs the whole tree: depth + 2 phases.
        for depth in 1..=12 {
            let r = run(&cfg(TreeKind::Binary, depth, Scheduler::Sync)).unwrap();
            assert!(r.converged);
            assert_eq!(r.ring_phases, Some(depth as u64 + 2), "depth {depth}");
        }
    }

    #[test]
    fn every_tree_converges_silently_under_both_schedulers() {
        for tree in [TreeKind::Binary, TreeKind::Binomial, TreeKind::Random] {
            for scheduler in [Scheduler::Sync, Scheduler::Async] {
                for seed in 0..4 {
                    let c = BmgSimConfig {
                        seed,
                        ..cfg(tree, 6, scheduler)
                    };
                    let r = run(&c).unwrap();
                    assert!(r.converged, "{tree} {scheduler} seed {seed}");
                    assert_eq!(r.quiet_nodes, r.nodes, "every process goes quiet");
                    assert_eq!(r.changes_after, 0, "silent after convergence");
                    assert!(r.ring_phases <= r.total_phases);
                }
            }
        }
    }

    #[test]
    fn same_seed_same_run() {
        let c = BmgSimConfig {
            init: Init::Random,
            refresh: Refresh::Every(8),
            seed: 99,
            ..cfg(TreeKind::Random, 5, Scheduler::Async)
        };
        let (a, b) = (run(&c).unwrap(), run(&c).unwrap());
        assert_eq!(
            (
                a.nodes,
                a.ring_phases,
                a.total_phases,
                a.total_msgs,
                a.max_msgs_per_proc
            ),
            (
                b.nodes,
                b.ring_phases,
                b.total_phases,
                b.total_msgs,
                b.max_msgs_per_proc
            )
        );
    }

    #[test]
    fn single_process_and_pairs() {
        for depth in 0..=1 {
            let r = run(&cfg(TreeKind::Binary, depth, Scheduler::Sync)).unwrap();
            assert!(r.converged, "depth {depth}");
        }
        let r = run(&cfg(TreeKind::Binomial, 1, Scheduler::Async)).unwrap();
        assert!(r.converged);
        assert_eq!(r.nodes, 2);
    }

    /// A run cut short reports no phase counts, only that it did not converge; a refresh the
    /// asynchronous scheduler cannot carry, or one longer than the run, is refused.
    #[test]
    fn a_run_that_does_not_converge_invents_no_phases() {
        let c = BmgSimConfig {
            max_rounds: 5,
            ..cfg(TreeKind::Binary, 4, Scheduler::Sync)
        };
        let r = run(&c).unwrap();
        assert!(!r.converged);
        assert_eq!(
            (r.ring_phases, r.total_phases, r.projected_s),
            (None, None, None)
        );
        assert_eq!(r.rounds_run, 5);
        let flood = BmgSimConfig {
            refresh: Refresh::Every(1),
            ..cfg(TreeKind::Binomial, 8, Scheduler::Async)
        };
        assert!(matches!(run(&flood), Err(BmgError::Refresh(_))));
        let huge = BmgSimConfig {
            refresh: Refresh::Every(18_446_744_073_709),
            ..cfg(TreeKind::Binary, 4, Scheduler::Sync)
        };
        assert!(matches!(run(&huge), Err(BmgError::Refresh(_))));
        let ok = BmgSimConfig {
            refresh: Refresh::Every(Refresh::async_min(256)),
            ..cfg(TreeKind::Binomial, 8, Scheduler::Async)
        };
        assert!(run(&ok).unwrap().converged);
    }

    #[test]
    fn oracle_rejects_a_wrong_finger() {
        let c = cfg(TreeKind::Binary, 4, Scheduler::Sync);
        let tree = build_tree(&c).unwrap();
        let mut world = build_world(&tree, &c);
        world.start(&|_, _| {});
        while world.round() < 100 {
            world.run_round(&|_, _| {});
        }
        let oracle = Oracle::new(&tree);
        assert!((0..tree.len() as u32).all(|p| oracle.bmg_ok(p, &world.nodes()[p as usize])));
        // Corrupt one finger of one process: the oracle must notice.
        let mut rng = SimRng::new(1);
        world.nodes_mut()[3]
            .bmg
            .corrupt(|| Some(NodeId(rng.below(3))));
        assert!(!oracle.bmg_ok(3, &world.nodes()[3]));
    }
}
