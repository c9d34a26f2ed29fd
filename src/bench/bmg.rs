//! `weft bench bmg`: the BMG built from a launch tree (Algorithms 1 and 2, tree → ring → BMG)
//! on real in-process engine nodes, timed, every finger checked against `topology::bmg`, and
//! beside it the timed simulator's projection of the same tree with the costs the same command
//! measured: the one-way latency `L` (ping-pong) and the CPU per message `c` (relay ring), the
//! nodes sharing the reactors' cores as they do for real.
//!
//! Six projections bracket the real run: connections free; each new connection's whole
//! first-message cost charged as its sender's CPU; its CPU charged and the rest a wait on the
//! wire ("split"); the same with the wait of a connection dialed while every process dials
//! ("storm", [`storm_connect`]), which is what the start is; the split with the handshake
//! waiting for busy cores ("queued"); and the storm with the cores working in reactor turns
//! ("turns", [`TimedWorld::with_turns`]), as the engine's do.
//!
//! Both runs use the same spontaneous period and no refresh (the paper's simulator: a quiet
//! process fires no more until a message changes its state), so the real run ends when the
//! last process reports itself quiet and nothing wakes any process for a settling time after
//! that. Two ends are timed in both: the last quiet, and the BMG built, the last change of
//! any process's state ([`Stamped`]). A process is quiet once its own rules are settled;
//! Algorithm 2's messages it forwarded still set others' fingers after that, for as long
//! again at 256 processes. The turns projection is also run with crossing dials
//! ([`TimedWorld::with_crossing_dials`]), and both count their connections beside the
//! engine's.

use super::stabilize::BenchError;
use super::validate::measure_engine_at;
use crate::engine::reactor::NodeEvent;
use crate::metrics::middle;
use crate::proto::held::Held;
use crate::proto::overlay::Overlay;
use crate::proto::spontaneous::SpontaneousConfig;
use crate::proto::stamped::Stamped;
use crate::proto::{Event, Time};
use crate::sim::bmg::{overlay_of, wrong_fingers, Fingers};
use crate::sim::timed::{Net, TimedConfig, TimedWorld};
use crate::sim::tree::{Tree, TreeKind};
use crate::transport::{Cluster, NodeOptions};
use serde::Serialize;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Clone, Debug)]
pub struct BmgBenchConfig {
    /// Launch tree shape.
    pub tree: TreeKind,
    /// A random tree's largest number of children per process.
    pub degree: u32,
    /// Seeds a random tree.
    pub seed: u64,
    /// Firing period of the spontaneous rules.
    pub period: Duration,
    /// Doublings of the period a process waiting for an answer allows
    /// ([`SpontaneousConfig::backoff`]; 0: fixed, the paper's simulator).
    pub backoff: u8,
    /// After the last process went quiet, how long nothing may wake one for the run to end.
    pub settle: Duration,
    /// Engine settings.
    pub opts: NodeOptions,
    /// Longest wait for the construction.
    pub timeout: Duration,
    /// Real runs of each N: the row gives the middle one and the range (one run on a
    /// shared machine can be twice another's, with the same messages).
    pub repeat: u32,
    /// Run every node as its own process of this `weft` executable (`--procs`), not in
    /// this process.
    pub procs: Option<std::path::PathBuf>,
}

/// The projection that is the model, named before any run: the *turns* projection to the
/// BMG built (the timed simulator with the storm's measured connection wait and the cores
/// working in reactor turns; derivation in `bluegene_notes/bmg-routing.md`). Its parameters
/// (`L`, `c`, a connection's CPU and the storm's wait) are measured on nodes of their own
/// before each run, never taken from the run it predicts. The other projections are the
/// steps that led to it and stay behind `--projections all`.
pub const MODEL: &str = "turns";

/// One N (a JSON line of `weft bench bmg --json`).
#[derive(Clone, Debug, Serialize)]
pub struct BmgBenchRow {
    /// Processes.
    pub nodes: u32,
    /// Launch tree.
    pub tree: String,
    /// Its depth (random trees: what the ring's rounds follow, the paper's Figure 4).
    pub depth: u32,
    /// Real: start to the last process going quiet, ms; the middle of
    /// [`BmgBenchRow::repeat`] runs (the counts and the CPU below are that run's).
    pub real_ms: f64,
    /// The fastest of the real runs, ms.
    pub real_ms_min: f64,
    /// The slowest of the real runs, ms.
    pub real_ms_max: f64,
    /// Real runs (every one's fingers checked).
    pub repeat: u32,
    /// Which projection is the model ([`MODEL`]): the one `ratio` compares with.
    pub model: String,
    /// The model's ratio: the real BMG built over the turns projection's, the middle of the
    /// runs' (each run against the projection from its own storm), as `ratio_built`.
    pub ratio: f64,
    /// The timed simulator's projection with the measured costs, connections free, ms.
    pub sim_ms: f64,
    /// `real_ms / sim_ms`.
    pub ratio_free: f64,
    /// Real: how long starting every node's overlay took, ms: every engine is up first
    /// with its overlay held, and the run is timed from the start (in-process: the time to
    /// ask every node to start, the nodes of each reactor then starting in its next turn;
    /// `--procs`: how late after the agreed start the last process's overlay started). The
    /// projection starts all at 0.
    pub start_ms: f64,
    /// The projection that also charges each new connection [`BmgBenchRow::connect_us`] of
    /// its sender's CPU, ms: the real run falls between the two (connections are neither
    /// free nor all CPU; the idle first round trip is partly waiting).
    pub sim_connect_ms: f64,
    /// `real_ms / sim_connect_ms`.
    pub ratio_connect: f64,
    /// The projection that splits each new connection into its CPU
    /// ([`BmgBenchRow::connect_cpu_us`], charged to its sender) and the rest of
    /// [`BmgBenchRow::connect_us`] as a wait on the wire (the dial's and the handshake's round
    /// trips, during which the sender works on), ms.
    pub sim_split_ms: f64,
    /// `real_ms / sim_split_ms`.
    pub ratio_split: f64,
    /// Messages of the split projection (a process fires its rules again while its first
    /// messages wait for their connections, as a real one does).
    pub sim_split_msgs: u64,
    /// Messages of the real run.
    pub msgs: u64,
    /// Messages of the simulated run.
    pub sim_msgs: u64,
    /// Of `msgs`, Algorithm 1's (tree → ring): the rest, Algorithm 2's, is the same count in
    /// every run of a tree; the ring's grows with every period a leaf waits for its answer.
    pub ring_msgs: u64,
    /// Of `sim_msgs`, Algorithm 1's.
    pub sim_ring_msgs: u64,
    /// Of `sim_split_msgs`, Algorithm 1's.
    pub sim_split_ring_msgs: u64,
    /// The split projection with the wait of a connection dialed in the start's storm
    /// ([`BmgBenchRow::storm_connect_us`]) instead of a lone pair's, ms.
    pub sim_storm_ms: f64,
    /// `real_ms / sim_storm_ms`.
    pub ratio_storm: f64,
    /// Messages of the storm projection.
    pub sim_storm_msgs: u64,
    /// Of `sim_storm_msgs`, Algorithm 1's.
    pub sim_storm_ring_msgs: u64,
    /// The split projection with each handshake's two steps waiting for their cores
    /// ([`TimedWorld::with_queued_handshake`]): the storm's wait modelled, not measured, ms.
    pub sim_queued_ms: f64,
    /// `real_ms / sim_queued_ms`.
    pub ratio_queued: f64,
    /// Messages of the queued-handshake projection.
    pub sim_queued_msgs: u64,
    /// Of `sim_queued_msgs`, Algorithm 1's.
    pub sim_queued_ring_msgs: u64,
    /// Real: the CPU of every node (reactors and the kernel's socket work) from the moment
    /// all ran to the end of the settling time, Algorithm 2's last messages included, ms
    /// (`--procs`: every process's, from its overlay's start to its answer to the
    /// launcher's first round of counters, after the settling time). Against `built_ms`
    /// it says how busy the cores were, and per message what the run really cost beside
    /// `c_us`.
    pub real_cpu_ms: f64,
    /// `real_cpu_ms` per message sent, connections included, µs.
    pub real_cpu_us_per_msg: f64,
    /// The CPU the measured costs give the real run's own counts, ms: `msgs × c_us +
    /// conns × connect_cpu_us` (`None` with `--procs`). Beside `real_cpu_ms` it checks the
    /// costs the projections charge against the run itself.
    pub real_counts_cpu_ms: Option<f64>,
    /// The turns projection: the storm projection with the cores working in reactor turns
    /// ([`TimedWorld::with_turns`]): a core behind takes its whole backlog in one turn, the
    /// turn's sends leave at its end, and a process fires at most once a turn, ms.
    pub sim_turns_ms: f64,
    /// The middle of the real runs' ratios to the turns projection, each run against the
    /// projection from the storm measured just before it (so `sim_turns_ms` is that pair's
    /// projection, and `real_ms / sim_turns_ms` need not equal it).
    pub ratio_turns: f64,
    /// The smallest of those ratios.
    pub ratio_turns_min: f64,
    /// The largest of those ratios.
    pub ratio_turns_max: f64,
    /// Real: start to the BMG built, the last change of any process's state, ms; the middle
    /// of the runs. A process goes quiet once its own rules are settled, while Algorithm 2's
    /// messages it forwarded are still on their way and change others' fingers: the
    /// construction ends here, after the last quiet.
    pub built_ms: f64,
    /// The fastest of the real runs to built, ms.
    pub built_ms_min: f64,
    /// The slowest of the real runs to built, ms.
    pub built_ms_max: f64,
    /// The turns projection's time to built, ms (the middle pair's).
    pub sim_turns_built_ms: f64,
    /// The middle of the real runs' built times over their own turns projections'.
    pub ratio_built: f64,
    /// The smallest of those ratios.
    pub ratio_built_min: f64,
    /// The largest of those ratios.
    pub ratio_built_max: f64,
    /// Real: connections authenticated, the middle run's (`None` with `--procs`). The
    /// engine keeps both connections of two processes that dialed each other at once.
    /// In-process, the pairs that talked (each end counted, as a connection's).
    pub conns: Option<u64>,
    /// How the real nodes reached each other: `tcp`, or `inproc` (no connections: a link
    /// costs no dial, and [`Self::connect_cpu_us`] reads about 0).
    pub transport: String,
    /// The turns projection's connections: one per pair of processes that exchanged a
    /// message.
    pub sim_turns_conns: u64,
    /// The turns projection with crossing dials ([`TimedWorld::with_crossing_dials`]): two
    /// processes that send each other a first message before the other's arrived open two
    /// connections, as the engine does; its time to built, ms (the middle pair's).
    pub sim_crossing_built_ms: f64,
    /// The middle of the real runs' built times over their own crossing projections'.
    pub ratio_crossing: f64,
    /// The smallest of those ratios.
    pub ratio_crossing_min: f64,
    /// The largest of those ratios.
    pub ratio_crossing_max: f64,
    /// The crossing projection's connections.
    pub sim_crossing_conns: u64,
    /// Messages of the turns projection.
    pub sim_turns_msgs: u64,
    /// Of `sim_turns_msgs`, Algorithm 1's.
    pub sim_turns_ring_msgs: u64,
    /// Real: times a leaf's spontaneous rules fired, mean over the leaves. Each firing
    /// re-sends `Info` until the leaf's successor answers, so this, against
    /// [`BmgBenchRow::sim_turns_leaf_fires`], says whether the real reactors take their timers
    /// more often than the projection's cores do (the ring messages follow it).
    pub leaf_fires: f64,
    /// Of the turns projection, the same.
    pub sim_turns_leaf_fires: f64,
    /// Measured cost of a connection dialed while every process dials its tree parent at
    /// once, on its first message, µs ([`storm_connect`]): the middle of
    /// [`BmgBenchRow::repeat`] storms, one just before each real run.
    pub storm_connect_us: f64,
    /// Every process's successor and fingers are the formulas'.
    pub converged: bool,
    /// Processes whose ring or BMG neighbors are wrong, in the worst of the runs.
    pub wrong: u32,
    /// Measured one-way latency, µs.
    pub l_us: f64,
    /// Measured CPU per message, µs.
    pub c_us: f64,
    /// Measured cost of a new connection (dial and handshake) on its first message, µs: the
    /// projection charges it to the first message between each pair.
    pub connect_us: f64,
    /// Measured CPU of a new connection, both ends, µs ([`connect_cpu`]).
    pub connect_cpu_us: f64,
    /// Cores the nodes share (the reactors).
    pub cores: u32,
    /// Spontaneous period, µs.
    pub period_us: f64,
    /// Doublings of the period allowed while a process waits for an answer.
    pub backoff: u8,
    /// What the nodes ran on.
    pub backend: String,
    /// One OS process per node (`--procs`); the costs are still measured on in-process
    /// nodes.
    pub procs: bool,
}

/// The launch tree of `n` processes: binomial for a power of two, binary for `2^k − 1`, or
/// random (`1..=degree` children per process, breadth first, from `seed`) for any `n`.
pub fn tree_of(kind: TreeKind, n: u32, degree: u32, seed: u64) -> Result<Tree, BenchError> {
    let bad = |what: &str| BenchError::Config(format!("{n} nodes: a {what}"));
    let wrap = |e: crate::sim::tree::TreeError| BenchError::Config(e.to_string());
    match kind {
        TreeKind::Binomial if n.is_power_of_two() => {
            Tree::binomial(n.trailing_zeros(), u64::from(n)).map_err(wrap)
        }
        TreeKind::Binomial => Err(bad(
            "binomial tree has a power of two of them (16, 64, ...)",
        )),
        TreeKind::Binary if n >= 1 && (n + 1).is_power_of_two() => {
            Tree::binary((n + 1).trailing_zeros() - 1, u64::from(n)).map_err(wrap)
        }
        TreeKind::Binary => Err(bad("binary tree has 2^k - 1 of them (15, 63, ...)")),
        TreeKind::Random => {
            let mut rng = crate::rng::SimRng::new(seed ^ u64::from(n));
            Tree::random_sized(n, degree, &mut rng).map_err(wrap)
        }
    }
}

fn overlays(tree: &Tree, spont: SpontaneousConfig) -> Vec<Overlay> {
    (0..tree.len() as u32)
        .map(|p| overlay_of(tree, p, spont))
        .collect()
}

/// Which processes are quiet, and when the last of them went quiet.
pub(crate) struct Settling {
    quiet: Vec<bool>,
    count: usize,
    /// When the last process went quiet, from the start.
    pub(crate) last: Duration,
}

impl Settling {
    pub(crate) fn new(n: usize) -> Self {
        Self {
            quiet: vec![false; n],
            count: 0,
            last: Duration::ZERO,
        }
    }

    /// Process `i` went quiet `at` after the start.
    pub(crate) fn quiet(&mut self, i: usize, at: Duration) {
        if !self.quiet[i] {
            self.quiet[i] = true;
            self.count += 1;
        }
        self.last = self.last.max(at);
    }

    /// A message woke process `i`.
    pub(crate) fn woke(&mut self, i: usize) {
        if self.quiet[i] {
            self.quiet[i] = false;
            self.count -= 1;
        }
    }

    pub(crate) fn all_quiet(&self) -> bool {
        self.count == self.quiet.len()
    }

    pub(crate) fn timed_out(&self, after: Duration) -> BenchError {
        BenchError::Timeout(
            after,
            format!("{} of {} processes quiet", self.count, self.quiet.len()),
        )
    }
}

/// What a real run gives.
pub(crate) struct RealRun {
    /// From the start to the last process going quiet.
    pub(crate) last: Duration,
    /// From the start to the last change of any process's state: the BMG built.
    pub(crate) built: Duration,
    /// From the start until every node ran.
    pub(crate) started: Duration,
    /// Messages sent.
    pub(crate) msgs: Sent,
    /// Every process's final neighbors.
    pub(crate) fingers: Vec<Fingers>,
    /// What the nodes ran on.
    pub(crate) backend: String,
    /// CPU of every node over the construction ([`BmgBenchRow::real_cpu_ms`]).
    pub(crate) cpu: Duration,
    /// Connections authenticated (`None`: not counted).
    pub(crate) connections: Option<u64>,
}

/// Messages of a run: all, and Algorithm 1's among them; and how often the leaves fired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sent {
    pub(crate) all: u64,
    pub(crate) ring: u64,
    /// Firings of the leaves' spontaneous rules, summed.
    leaf_fired: u64,
    leaves: u64,
}

impl Sent {
    fn of<'a>(nodes: impl IntoIterator<Item = &'a Overlay>) -> Self {
        nodes.into_iter().fold(Self::default(), |s, o| {
            let leaf = o.ring.is_leaf().then(|| o.fired());
            s.add(o.sent(), o.ring_sent(), leaf)
        })
    }

    /// One process's counts; `leaf_fired`: how often it fired, if a leaf.
    pub(crate) fn add(self, all: u64, ring: u64, leaf_fired: Option<u64>) -> Self {
        Self {
            all: self.all + all,
            ring: self.ring + ring,
            leaf_fired: self.leaf_fired + leaf_fired.unwrap_or(0),
            leaves: self.leaves + u64::from(leaf_fired.is_some()),
        }
    }

    /// Times a leaf fired, mean over the leaves.
    fn leaf_fires(&self) -> f64 {
        self.leaf_fired as f64 / self.leaves.max(1) as f64
    }
}

/// How often the real run's events are taken while it runs (see [`real`]).
const EVENT_BATCH: Duration = Duration::from_millis(1);

/// Build the BMG over `tree` on real in-process nodes.
fn real(
    tree: &Tree,
    spont: SpontaneousConfig,
    cfg: &BmgBenchConfig,
) -> Result<RealRun, BenchError> {
    let n = tree.len();
    let launch = tree.clone();
    // Every reactor comes up with its overlays held; all start at one moment, `go`, from
    // which the run is timed (the projection starts all at 0).
    let c = Cluster::start(n, cfg.opts.clone(), move |i, _| {
        Held::new(Stamped::new(overlay_of(&launch, i as u32, spont)))
    })?;
    // The job's CPU: every reactor's, with the kernel's work on their sockets.
    let cpu_at_start = crate::engine::process_cpu();
    let go = c.epoch.elapsed();
    c.wake_all();
    let started = c.epoch.elapsed() - go;
    let deadline = Instant::now() + cfg.timeout;
    let mut settling = Settling::new(n);
    let mut ends = 0u64;
    let mut heard = Instant::now();
    loop {
        // The events are taken a batch at a time: woken for each one (a futex wake and a
        // switch per event, tens of thousands of them), this thread took 80-100 ms of the
        // 790-890 ms of CPU a 512-process run used, from the cores the nodes share; 40-70
        // ms in batches. Nothing is timed by when it is taken: a quiet process says when.
        let event = match c.events.try_recv() {
            Ok(e) => {
                heard = Instant::now();
                Ok(e)
            }
            Err(_) => {
                let now = Instant::now();
                let over = if settling.all_quiet() {
                    now >= heard + cfg.settle
                } else {
                    now >= deadline
                };
                if !over {
                    std::thread::sleep(EVENT_BATCH);
                    continue;
                }
                Err(())
            }
        };
        match event {
            Ok((id, NodeEvent::Protocol(Event::Quiet { at }))) => {
                // The nodes' clocks start at the cluster's epoch.
                settling.quiet(id.0 as usize, at.since(Time::ZERO).saturating_sub(go));
            }
            Ok((id, NodeEvent::Protocol(Event::Woke))) => settling.woke(id.0 as usize),
            // Each end of a connection says so.
            Ok((_, NodeEvent::Authenticated(_))) => ends += 1,
            Ok((id, NodeEvent::Suspect(p))) => {
                // The engine says why right after the suspicion.
                let why = c
                    .events
                    .recv_timeout(Duration::from_secs(1))
                    .map_or(String::new(), |(_, e)| format!(": {e:?}"));
                return Err(BenchError::Config(format!(
                    "{id} lost {p} while building the BMG{why}"
                )));
            }
            Ok(_) => {}
            Err(_) if settling.all_quiet() => break,
            Err(_) => return Err(settling.timed_out(cfg.timeout)),
        }
    }
    // The construction's CPU, Algorithm 2's last messages included (idle since: the
    // settling time is silent, and blocking reactors do not spin).
    let cpu = crate::engine::process_cpu().saturating_sub(cpu_at_start);
    let backend = c.backend_name();
    let stamped: Vec<Stamped<Overlay>> = c.stop_all()?.into_iter().map(Held::into_inner).collect();
    let built = built_at(&stamped).saturating_sub(go);
    let finals: Vec<Overlay> = stamped.into_iter().map(Stamped::into_inner).collect();
    let msgs = Sent::of(&finals);
    let fingers = finals.iter().map(Fingers::of).collect();
    Ok(RealRun {
        last: settling.last,
        built,
        started,
        msgs,
        fingers,
        backend,
        cpu,
        connections: Some(ends / 2),
    })
}

/// How a projection charges what the engine does besides messages.
#[derive(Clone, Copy, Debug, Default)]
struct Charges {
    /// CPU of each new connection, charged to its sender.
    connect: Duration,
    /// Wait of each new connection on the wire.
    wait: Duration,
    /// The handshake's steps wait for their cores ([`TimedWorld::with_queued_handshake`]).
    queued: bool,
    /// The cores work in reactor turns ([`TimedWorld::with_turns`]).
    turns: bool,
    /// Two processes dialing each other at once open two connections
    /// ([`TimedWorld::with_crossing_dials`]).
    crossing: bool,
}

/// When the last process's state changed, on the processes' clock: the BMG built (a
/// process goes quiet when its own rules are settled, before the messages it forwards for
/// others have arrived).
fn built_at(nodes: &[Stamped<Overlay>]) -> Duration {
    let last = nodes.iter().filter_map(Stamped::changed).max();
    last.map_or(Duration::ZERO, |t| t.since(Time::ZERO))
}

/// What a projection gives.
#[derive(Clone, Copy, Debug)]
struct Projected {
    /// The last process going quiet.
    quiet: Duration,
    /// The last change of any process's state ([`built_at`]).
    built: Duration,
    /// Messages sent.
    sent: Sent,
    /// Connections opened.
    conns: u64,
}

/// The timed simulator's run of the same tree.
fn projected(
    tree: &Tree,
    spont: SpontaneousConfig,
    l: Duration,
    c: Duration,
    charges: Charges,
    cores: u32,
) -> Projected {
    let mut w = TimedWorld::new(
        overlays(tree, spont)
            .into_iter()
            .map(Stamped::new)
            .collect(),
        TimedConfig {
            net: Net::Constant { l },
            // A message's CPU, half at each end.
            ocp: c / 2,
            send: c / 2,
            detect: Duration::ZERO,
        },
    )
    .share_cores(cores)
    .with_connect(charges.connect)
    .with_connect_wait(charges.wait);
    if charges.crossing {
        w = w.with_crossing_dials();
    }
    if charges.queued {
        w = w.with_queued_handshake();
    }
    if charges.turns {
        w = w.with_turns();
    }
    w.start();
    let mut last = 0u64;
    while w.step().is_some() {
        for (_, t, e) in w.take_reports() {
            if matches!(e, Event::Quiet { .. }) {
                last = last.max(t);
            }
        }
    }
    let built = built_at(w.nodes());
    let sent = Sent::of(w.nodes().iter().map(Stamped::inner));
    debug_assert_eq!(sent.all, w.sent);
    Projected {
        quiet: Duration::from_nanos(last),
        built,
        sent,
        conns: w.connections,
    }
}

/// One process pings `peers` fresh processes `iters` rounds (each round all of them at once,
/// on connections the first round opens); returns the job once the pinger is done, and the
/// process's CPU from the start of the pings to then.
fn pinged(
    opts: &NodeOptions,
    peers: usize,
    iters: u64,
) -> Result<(Cluster<Held<crate::proto::ping::PingPong>>, Duration), BenchError> {
    use crate::engine::process_cpu;
    use crate::proto::ping::PingPong;
    // Held until the CPU is read: started at once, the pinger's dials raced the reading, and
    // the CPU charged to 32 connections went from 0 to 150 µs each from one round to the next.
    let c = Cluster::start(peers + 1, opts.clone(), move |i, ids| {
        Held::new(if i == 0 {
            PingPong::fan_out(ids[1..].to_vec(), vec![32], iters, 0)
        } else {
            PingPong::ponger()
        })
    })?;
    let before = process_cpu();
    c.wake_all();
    loop {
        match c.events.recv_timeout(Duration::from_secs(10)) {
            Ok((_, NodeEvent::Protocol(Event::Done))) => break,
            Ok(_) => {}
            Err(_) => {
                return Err(BenchError::Timeout(
                    Duration::from_secs(10),
                    "pings on new connections".into(),
                ))
            }
        }
    }
    let spent = process_cpu().saturating_sub(before);
    Ok((c, spent))
}

/// The CPU a new connection costs, both ends together, µs: one process pings `peers` fresh
/// processes at once (a dial and a handshake each, then the ping and its echo), and the
/// process's CPU over that round, less the ping's own two messages at `c_us` each, is shared
/// out per connection. The median of `trials` such rounds.
pub fn connect_cpu(
    opts: &NodeOptions,
    peers: usize,
    c_us: f64,
    trials: u32,
) -> Result<f64, BenchError> {
    let mut per = Vec::with_capacity(trials as usize);
    for _ in 0..trials.max(1) {
        let (c, spent) = pinged(opts, peers, 1)?;
        c.stop_all()?;
        per.push((spent.as_secs_f64() * 1e6 / peers as f64 - 2.0 * c_us).max(0.0));
    }
    Ok(middle(&mut per))
}

/// What a new connection adds to its first message when every process of the job dials at
/// once, µs: each process of `tree` pings its parent once, all at the start, as the
/// construction's first messages go over the tree's edges; the median first round trip less
/// two one-way latencies `l_us`. Beside [`connect_cost`]'s lone pair it has the start's storm
/// in it: a dial and a handshake wait behind everyone else's on the shared cores.
pub fn storm_connect(opts: &NodeOptions, tree: &Tree, l_us: f64) -> Result<f64, BenchError> {
    use crate::proto::ping::PingPong;
    let n = tree.len();
    let parents: Vec<Option<u32>> = (0..n as u32).map(|p| tree.parent(p)).collect();
    // Held until every reactor is up and then started together, as the construction is.
    let c = Cluster::start(n, opts.clone(), move |i, _| {
        Held::new(match parents[i] {
            Some(p) => PingPong::pinger(crate::NodeId(u64::from(p)), vec![32], 1, 0),
            None => PingPong::ponger(),
        })
    })?;
    c.wake_all();
    let wait = Duration::from_secs(30);
    let mut done = 0;
    while done + 1 < n {
        match c.events.recv_timeout(wait) {
            Ok((_, NodeEvent::Protocol(Event::Done))) => done += 1,
            Ok(_) => {}
            Err(_) => {
                return Err(BenchError::Timeout(
                    wait,
                    format!("{} of {} first pings over the tree", n - 1 - done, n - 1),
                ))
            }
        }
    }
    let mut first: Vec<f64> = c
        .stop_all()?
        .into_iter()
        .map(Held::into_inner)
        .filter_map(|p| p.samples().first().map(|s| s.1 as f64 / 1e3))
        .collect();
    Ok((middle(&mut first) - 2.0 * l_us).max(0.0))
}

/// What a new connection adds to its first message, µs: the median over `trials` fresh
/// pairs of nodes of the first round trip (a dial, the handshake both ways, the ping and its
/// echo) less the median of the 20 that follow on the same connection.
pub fn connect_cost(opts: &NodeOptions, trials: u32) -> Result<f64, BenchError> {
    let mut extra = Vec::with_capacity(trials as usize);
    for _ in 0..trials.max(1) {
        let (c, _) = pinged(opts, 1, 21)?;
        let pinger = c.stop_all()?.into_iter().next().map(Held::into_inner);
        let rtts: Vec<u64> =
            pinger.map_or(Vec::new(), |p| p.samples().iter().map(|s| s.1).collect());
        if let Some((first, rest)) = rtts.split_first().filter(|(_, r)| !r.is_empty()) {
            let mut rest = rest.to_vec();
            rest.sort_unstable();
            extra.push(first.saturating_sub(rest[rest.len() / 2]) as f64 / 1e3);
        }
    }
    Ok(middle(&mut extra))
}

/// Run one N.
pub fn run(n: u32, cfg: &BmgBenchConfig) -> Result<BmgBenchRow, BenchError> {
    let tree = tree_of(cfg.tree, n, cfg.degree, cfg.seed)?;
    let planned;
    let cfg = match cfg.procs {
        None => {
            planned = BmgBenchConfig {
                opts: super::route::plan_descriptors(n as usize, &cfg.opts)?,
                ..cfg.clone()
            };
            &planned
        }
        Some(_) => {
            super::bmg_procs::fits_memory(n)?;
            cfg
        }
    };
    let spont = SpontaneousConfig {
        period: cfg.period,
        refresh: None,
        backoff: cfg.backoff,
    };
    let (l_us, c_us, cores) = measure_engine_at(n.max(2), &cfg.opts)?;
    let connect_us = connect_cost(&cfg.opts, 15)?;
    // The work of a connection, not the spinning of idle reactors between the round's
    // events: measured with blocking reactors, 128 connections a round to share their wakes.
    let blocking = NodeOptions {
        reactor: crate::engine::ReactorOptions {
            wait: crate::engine::WaitMode::Block,
            ..cfg.opts.reactor.clone()
        },
        ..cfg.opts.clone()
    };
    let connect_cpu_us = connect_cpu(&blocking, 128, c_us, 5)?.min(connect_us);
    // The storm's wait is the turns projection's main input. Each real run follows a storm of
    // its own, and is set beside the projection from that storm: the two see the same state
    // of the host (a noisy neighbour, a busy minute), which a median storm measured minutes
    // apart does not.
    let mut storms = Vec::with_capacity(cfg.repeat.max(1) as usize);
    let mut runs = Vec::with_capacity(cfg.repeat.max(1) as usize);
    for _ in 0..cfg.repeat.max(1) {
        storms.push(storm_connect(&cfg.opts, &tree, l_us)?.max(connect_cpu_us));
        let run = match &cfg.procs {
            None => real(&tree, spont, cfg)?,
            Some(exe) => super::bmg_procs::real(
                exe,
                &tree,
                (cfg.tree, cfg.degree, cfg.seed),
                spont,
                cfg.settle,
                &cfg.opts,
                cfg.timeout,
            )?,
        };
        let wrong = wrong_fingers(&tree, &run.fingers);
        runs.push((run, wrong));
    }
    let wrong = runs.iter().map(|r| r.1).max().unwrap_or(0);
    let paired: Vec<(Duration, Duration)> = runs.iter().map(|r| (r.0.last, r.0.built)).collect();
    let storm_us = middle(&mut storms.clone());
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut built: Vec<f64> = paired.iter().map(|p| ms(p.1)).collect();
    let built_ms = middle(&mut built);
    let (built_ms_min, built_ms_max) = (built[0], built[built.len() - 1]);
    runs.sort_by_key(|r| r.0.last);
    let (real_ms_min, real_ms_max) = (ms(runs[0].0.last), ms(runs[runs.len() - 1].0.last));
    let (run, _) = runs.swap_remove(runs.len() / 2);
    let RealRun {
        last: real_t,
        built: _,
        connections,
        started: start_t,
        msgs,
        fingers: _,
        backend,
        cpu,
    } = run;
    let us = |x: f64| Duration::from_secs_f64(x / 1e6);
    let project_with = |cpu_us: f64, wait_us: f64, queued: bool, turns: bool, crossing: bool| {
        let charges = Charges {
            connect: us(cpu_us),
            wait: us(wait_us),
            queued,
            turns,
            crossing,
        };
        projected(&tree, spont, us(l_us), us(c_us), charges, cores)
    };
    let project = |cpu_us: f64, wait_us: f64, queued: bool, turns: bool| {
        project_with(cpu_us, wait_us, queued, turns, false)
    };
    let free = project(0.0, 0.0, false, false);
    let (sim_t, sim_msgs) = (free.quiet, free.sent);
    let sim_connect_t = project(connect_us, 0.0, false, false).quiet;
    let split_wait = connect_us - connect_cpu_us;
    let storm_wait = storm_us - connect_cpu_us;
    let split = project(connect_cpu_us, split_wait, false, false);
    let (sim_split_t, sim_split_msgs) = (split.quiet, split.sent);
    let storm = project(connect_cpu_us, storm_wait, false, false);
    let (sim_storm_t, sim_storm_msgs) = (storm.quiet, storm.sent);
    let queued = project(connect_cpu_us, split_wait, true, false);
    let (sim_queued_t, sim_queued_msgs) = (queued.quiet, queued.sent);
    // Each real run against the turns projection from its own storm; the row gives the
    // middle pair's projection and ratio, and the range of the ratios; for the last quiet
    // and for the BMG built alike.
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-12);
    /// One real run beside its projections: its ratios to them, and the projections.
    struct Beside {
        quiet: f64,
        built: f64,
        crossing: f64,
        turns: Projected,
        crossed: Projected,
    }
    let pairs: Vec<Beside> = storms
        .iter()
        .zip(&paired)
        .map(|(&storm, &(last, built))| {
            let wait = storm - connect_cpu_us;
            let turns = project(connect_cpu_us, wait, false, true);
            let crossed = project_with(connect_cpu_us, wait, false, true, true);
            Beside {
                quiet: ratio(last, turns.quiet),
                built: ratio(built, turns.built),
                crossing: ratio(built, crossed.built),
                turns,
                crossed,
            }
        })
        .collect();
    // The middle of one ratio over the runs, its range, and the middle pair's projection.
    let by = |key: fn(&Beside) -> (f64, Projected)| {
        let mut v: Vec<(f64, Projected)> = pairs.iter().map(key).collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (lo, hi) = (v[0].0, v[v.len() - 1].0);
        let (mid, p) = v.swap_remove(v.len() / 2);
        (mid, lo, hi, p)
    };
    let (ratio_turns, ratio_turns_min, ratio_turns_max, turns) = by(|b| (b.quiet, b.turns));
    let (sim_turns_t, sim_turns_msgs) = (turns.quiet, turns.sent);
    let (ratio_built, ratio_built_min, ratio_built_max, turns_built) = by(|b| (b.built, b.turns));
    let (ratio_crossing, ratio_crossing_min, ratio_crossing_max, crossing) =
        by(|b| (b.crossing, b.crossed));
    let sim_turns_built_ms = ms(turns_built.built);
    let sim_turns_ms = sim_turns_t.as_secs_f64() * 1e3;
    let sim_queued_ms = sim_queued_t.as_secs_f64() * 1e3;
    let sim_storm_ms = sim_storm_t.as_secs_f64() * 1e3;
    let real_ms = real_t.as_secs_f64() * 1e3;
    let sim_ms = sim_t.as_secs_f64() * 1e3;
    let sim_connect_ms = sim_connect_t.as_secs_f64() * 1e3;
    let sim_split_ms = sim_split_t.as_secs_f64() * 1e3;
    Ok(BmgBenchRow {
        nodes: n,
        tree: cfg.tree.to_string(),
        depth: tree.depth(),
        real_ms,
        real_ms_min,
        real_ms_max,
        repeat: cfg.repeat.max(1),
        model: MODEL.to_string(),
        ratio: ratio_built,
        sim_ms,
        ratio_free: real_ms / sim_ms.max(1e-9),
        start_ms: start_t.as_secs_f64() * 1e3,
        sim_connect_ms,
        ratio_connect: real_ms / sim_connect_ms.max(1e-9),
        sim_split_ms,
        ratio_split: real_ms / sim_split_ms.max(1e-9),
        sim_split_msgs: sim_split_msgs.all,
        msgs: msgs.all,
        sim_msgs: sim_msgs.all,
        ring_msgs: msgs.ring,
        sim_ring_msgs: sim_msgs.ring,
        sim_split_ring_msgs: sim_split_msgs.ring,
        sim_storm_ms,
        ratio_storm: real_ms / sim_storm_ms.max(1e-9),
        sim_storm_msgs: sim_storm_msgs.all,
        sim_storm_ring_msgs: sim_storm_msgs.ring,
        storm_connect_us: storm_us,
        sim_queued_ms,
        ratio_queued: real_ms / sim_queued_ms.max(1e-9),
        sim_queued_msgs: sim_queued_msgs.all,
        sim_queued_ring_msgs: sim_queued_msgs.ring,
        real_cpu_ms: cpu.as_secs_f64() * 1e3,
        real_cpu_us_per_msg: cpu.as_secs_f64() * 1e6 / msgs.all.max(1) as f64,
        real_counts_cpu_ms: connections
            .map(|k| (msgs.all as f64 * c_us + k as f64 * connect_cpu_us) / 1e3),
        sim_turns_ms,
        ratio_turns,
        ratio_turns_min,
        ratio_turns_max,
        built_ms,
        built_ms_min,
        built_ms_max,
        sim_turns_built_ms,
        ratio_built,
        ratio_built_min,
        ratio_built_max,
        conns: connections,
        transport: match cfg.procs {
            Some(_) => "tcp".into(),
            None => cfg.opts.links()?.to_string(),
        },
        sim_turns_conns: turns.conns,
        sim_crossing_built_ms: ms(crossing.built),
        ratio_crossing,
        ratio_crossing_min,
        ratio_crossing_max,
        sim_crossing_conns: crossing.conns,
        sim_turns_msgs: sim_turns_msgs.all,
        sim_turns_ring_msgs: sim_turns_msgs.ring,
        leaf_fires: msgs.leaf_fires(),
        sim_turns_leaf_fires: sim_turns_msgs.leaf_fires(),
        converged: wrong == 0,
        wrong,
        l_us,
        c_us,
        connect_us,
        connect_cpu_us,
        cores,
        period_us: cfg.period.as_secs_f64() * 1e6,
        backoff: cfg.backoff,
        backend,
        procs: cfg.procs.is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check finds every process of an unbuilt overlay wrong and none of a built one.
    #[test]
    fn the_finger_check_tells_built_from_unbuilt() {
        let tree = tree_of(TreeKind::Binomial, 32, 0, 0).unwrap();
        let spont = SpontaneousConfig {
            period: Duration::from_micros(100),
            refresh: None,
            backoff: 0,
        };
        assert_eq!(wrong_fingers(&tree, &overlays(&tree, spont)), 32);
        let mut w = TimedWorld::new(
            overlays(&tree, spont),
            TimedConfig {
                net: Net::Constant {
                    l: Duration::from_micros(30),
                },
                ocp: Duration::from_micros(3),
                send: Duration::from_micros(3),
                detect: Duration::ZERO,
            },
        )
        .share_cores(2);
        w.start();
        while w.step().is_some() {}
        assert_eq!(wrong_fingers(&tree, w.nodes()), 0);
        // What a node process reports survives JSON and is judged the same; one finger off
        // is one process wrong.
        let mut reported: Vec<Fingers> = w
            .nodes()
            .iter()
            .map(|o| serde_json::from_str(&serde_json::to_string(&Fingers::of(o)).unwrap()))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(wrong_fingers(&tree, &reported), 0);
        reported[7].cw[2] = reported[7].cw[3];
        assert_eq!(wrong_fingers(&tree, &reported), 1);
        // Nothing in flight once the run ended: every message sent was received, the
        // balance `--procs` waits for.
        let sent: u64 = w.nodes().iter().map(Overlay::sent).sum();
        let received: u64 = w.nodes().iter().map(Overlay::received).sum();
        assert_eq!((sent, received), (w.sent, w.sent));
    }

    /// The stamped end of a projection is the moment the last finger is set: the oracle
    /// finds a process wrong just before it and none from then on, while the last process
    /// went quiet earlier (Algorithm 2's forwarded messages were still on their way).
    #[test]
    fn built_is_when_the_last_finger_is_set() {
        let tree = tree_of(TreeKind::Binomial, 64, 0, 0).unwrap();
        let spont = SpontaneousConfig {
            period: Duration::from_millis(1),
            refresh: None,
            backoff: 5,
        };
        let world = || {
            TimedWorld::new(
                overlays(&tree, spont)
                    .into_iter()
                    .map(Stamped::new)
                    .collect(),
                TimedConfig {
                    net: Net::Constant {
                        l: Duration::from_micros(30),
                    },
                    ocp: Duration::from_micros(4),
                    send: Duration::from_micros(4),
                    detect: Duration::ZERO,
                },
            )
            .share_cores(2)
            .with_connect(Duration::from_micros(90))
            .with_connect_wait(Duration::from_millis(2))
        };
        let mut w = world();
        w.start();
        let mut quiet = 0;
        while w.step().is_some() {
            for (_, t, e) in w.take_reports() {
                if matches!(e, Event::Quiet { .. }) {
                    quiet = quiet.max(t);
                }
            }
        }
        let built = built_at(w.nodes()).as_nanos() as u64;
        let wrong = |w: &TimedWorld<Stamped<Overlay>>| {
            let f: Vec<Fingers> = w.nodes().iter().map(|s| Fingers::of(s.inner())).collect();
            wrong_fingers(&tree, &f)
        };
        assert_eq!(wrong(&w), 0);
        assert!(
            built > quiet,
            "built at {built} ns, last quiet at {quiet} ns"
        );
        // The same deterministic run again, stopped before the stamped moment.
        let mut again = world();
        again.start();
        while again.peek_time().is_some_and(|t| t < built) {
            again.step();
        }
        assert!(wrong(&again) > 0, "every finger right before {built} ns");
        while again.step().is_some() {}
        assert_eq!(built_at(again.nodes()).as_nanos() as u64, built);
    }

    /// Sizes that no tree of the kind has are refused, naming the sizes it has.
    #[test]
    fn tree_sizes_are_checked() {
        assert_eq!(tree_of(TreeKind::Binary, 15, 0, 0).unwrap().len(), 15);
        assert_eq!(tree_of(TreeKind::Binomial, 64, 0, 0).unwrap().len(), 64);
        assert!(tree_of(TreeKind::Binary, 16, 0, 0).is_err());
        assert!(tree_of(TreeKind::Binomial, 63, 0, 0).is_err());
        assert_eq!(tree_of(TreeKind::Random, 63, 3, 1).unwrap().len(), 63);
        assert!(tree_of(TreeKind::Random, 63, 0, 1).is_err());
    }
}
