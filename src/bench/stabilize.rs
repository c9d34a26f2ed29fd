//! The stabilization benchmark on real sockets (ICS'06 section 6, the main job): N membership
//! nodes on loopback, some killed for real (reactor stopped, sockets closed), and Ts measured
//! from the first detection to the root's stabilization of the final view.
//!
//! Every node of a trial runs in this process on the engine, with one clock (the cluster's
//! epoch), so a detection on one node and a stabilization on another compare directly.
//! Detection is the engine's: the failed node's tree neighbors hold connections to it (opened
//! by the first `HowAreYou` round, which the trial waits for) and see them close.
//!
//! A join trial ([`BenchConfig::join`]) starts a new process once the job is connected and
//! times the paper's join path instead: Ts from the root's admission (it installs the view with
//! the joiner and sends `NewNodeJoin` down) to its stabilization, and the joiner's whole wait
//! (dial, handshake, `NewNode`, stabilization, `JoinDetAck`).

use super::bare_wave::{WaveConfig, WaveReport};
pub use super::scenario::Fail;
use super::scenario::Plan;
use crate::engine::reactor::NodeEvent;
use crate::engine::EngineError;
use crate::proto::membership::{IdTree, MemberEvent, Membership, MembershipConfig, TreeMode};
use crate::proto::{Event, Time};
use crate::topology::radix::RadixTree;
use crate::transport::{bind, spawn, Cluster, NodeOptions, NodeSpec};
use crate::NodeId;
use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a trial could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The settings cannot be run.
    #[error("{0}")]
    Config(String),
    /// Something did not happen in time.
    #[error("timed out after {0:?}: {1}")]
    Timeout(Duration, String),
}

/// One benchmark's settings.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Nodes.
    pub nodes: u32,
    /// Children per node.
    pub radix: u32,
    /// Patch or rebalance.
    pub mode: TreeMode,
    /// Which nodes are killed.
    pub fail: Fail,
    /// Seed of the victims' choice (trial `r` uses `seed + r`).
    pub seed: u64,
    /// Engine settings (backend, wait mode, ...).
    pub opts: NodeOptions,
    /// Longest wait for any phase of a trial.
    pub timeout: Duration,
    /// Run every node as its own `weft node` process of this executable instead of in this
    /// process (see [`super::procs`]).
    pub procs: Option<std::path::PathBuf>,
    /// The root's batching window ([`MembershipConfig::batch`]).
    pub batch: Duration,
    /// How long a failed process's children leave the report to its parent
    /// ([`MembershipConfig::orphan_hold`]).
    pub orphan_hold: Duration,
    /// The root collects failures found during an epoch into the next
    /// ([`MembershipConfig::collect`]).
    pub collect: bool,
    /// Time a new process joining instead of a failure (`fail` is then unused).
    pub join: bool,
    /// How in-process nodes are spread over the reactors.
    pub placement: Placement,
}

/// How a job's in-process nodes are spread over the reactors (one per core).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Whole subtrees of the initial radix tree per reactor ([`RadixTree::preorder_blocks`]):
    /// most tree edges stay on one core, where a message wakes no other.
    Subtree,
    /// Node `i` on reactor `i mod reactors`: every parent's children spread over all cores.
    RoundRobin,
}

impl BenchConfig {
    /// One failure benchmark with the usual rest: a 30 s phase timeout, in-process nodes, no
    /// batching window, no join.
    pub fn new(
        nodes: u32,
        radix: u32,
        mode: TreeMode,
        fail: Fail,
        seed: u64,
        opts: NodeOptions,
    ) -> Self {
        Self {
            nodes,
            radix,
            mode,
            fail,
            seed,
            opts,
            timeout: Duration::from_secs(30),
            procs: None,
            batch: Duration::ZERO,
            orphan_hold: crate::proto::membership::ORPHAN_HOLD,
            collect: false,
            join: false,
            placement: Placement::Subtree,
        }
    }

    /// The engine options of one in-process job: `opts`, with the nodes placed as asked.
    fn job_opts(&self) -> Result<NodeOptions, BenchError> {
        let mut opts = self.opts.clone();
        if self.placement == Placement::Subtree {
            let reactors = opts.reactors.unwrap_or_else(crate::engine::online_cpus);
            let tree = RadixTree::new(self.nodes, self.radix)
                .map_err(|e| BenchError::Config(e.to_string()))?;
            opts.placement = Some(tree.preorder_blocks(reactors as u32).into());
        }
        Ok(opts)
    }
}

/// The engine settings of a stabilization job: `wait` and `backend` as asked, and many small
/// io_uring receive buffers per reactor (small messages over hundreds of sockets per reactor:
/// a burst must not run the ring dry).
pub fn job_options(
    wait: crate::engine::WaitMode,
    backend: Option<crate::engine::Backend>,
) -> NodeOptions {
    NodeOptions {
        backend,
        reactor: crate::engine::ReactorOptions {
            wait,
            recv_buffers: (2048, 4096),
            ..Default::default()
        },
        ..NodeOptions::default()
    }
}

/// One trial's measures.
#[derive(Clone, Debug)]
pub struct Trial {
    /// The nodes killed (none in a join trial).
    pub victims: Vec<NodeId>,
    /// First detection to the root's stabilization of the final view. A join: the root's
    /// admission to its stabilization.
    pub ts: Duration,
    /// Kill to the first detection (the engine's failure detector). A join: the joiner's
    /// start to the root's admission.
    pub detect: Duration,
    /// Epochs until the final view.
    pub epochs: u64,
    /// Every survivor ended with the same view, exactly the survivors.
    pub views_agree: bool,
    /// CPU this process used from the kill until the stabilization was seen (all reactors;
    /// with blocking reactors, the work of the failure, detection and stabilization); `None`
    /// when the nodes ran in other processes, whose CPU this one cannot read.
    pub cpu: Option<Duration>,
    /// What the nodes ran on ([`crate::transport::backend_name`]: `uring+poll` if some
    /// reactors could not have a ring).
    pub backend: String,
    /// How the nodes reached each other (`tcp`, `inproc`: [`crate::transport::Transport`]).
    pub transport: String,
    /// With processes on different clocks (a launcher's ranks): the bound on the error of the
    /// offsets their times were put on one time line with. `None`: one clock.
    pub clock_err: Option<Duration>,
}

/// The membership settings of a benchmark node: probes (and greets its standby) once at start,
/// to open the tree's connections, and then only after an hour, so probes do not mix into the
/// measure.
pub fn member_config(cfg: &BenchConfig) -> MembershipConfig {
    let quiet = Duration::from_secs(3600);
    MembershipConfig {
        radix: cfg.radix,
        mode: cfg.mode,
        probe: Some((quiet, quiet)),
        warm: true,
        batch: cfg.batch,
        collect: cfg.collect,
        orphan_hold: cfg.orphan_hold,
        heartbeat: None,
    }
}

/// The next event, or `None` at the deadline. Polls with short sleeps instead of blocking in
/// `recv`: a blocked receiver is woken by every event, and on a machine whose cores all run
/// reactors each wake-up preempts one of them mid-stabilization (a scheduler time slice, ms).
fn next_event(
    events: &Receiver<(NodeId, NodeEvent)>,
    deadline: Instant,
) -> Option<(NodeId, NodeEvent)> {
    loop {
        match events.try_recv() {
            Ok(e) => return Some(e),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if Instant::now() >= deadline => return None,
            Err(TryRecvError::Empty) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// The next event, or the phase's timeout error with what `why` says was seen so far.
fn next_or_timeout(
    events: &Receiver<(NodeId, NodeEvent)>,
    deadline: Instant,
    cfg: &BenchConfig,
    why: impl FnOnce() -> String,
) -> Result<(NodeId, NodeEvent), BenchError> {
    next_event(events, deadline).ok_or_else(|| BenchError::Timeout(cfg.timeout, why()))
}

/// How long a job of `n` nodes needs after its connections are up for the start-up traffic to
/// drain: a few messages per node at well under 50 µs each, with margin.
pub(crate) fn settle(n: u32) -> Duration {
    Duration::from_millis(10) + Duration::from_micros(50) * n
}

/// Check the settings and plan trial `rep` (no victims for a join).
pub(crate) fn plan(cfg: &BenchConfig, rep: u32) -> Result<Plan, BenchError> {
    let fail = (!cfg.join).then_some(&cfg.fail);
    super::scenario::plan(cfg.nodes, cfg.radix, fail, cfg.seed, rep).map_err(BenchError::Config)
}

/// Wait until every connection of `missing` is authenticated at both ends, then until the first
/// probe round's answers have drained, so the event meets an idle job, as in the paper.
fn connected(
    events: &Receiver<(NodeId, NodeEvent)>,
    missing: &mut HashSet<(NodeId, NodeId)>,
    cfg: &BenchConfig,
) -> Result<Vec<(NodeId, String)>, BenchError> {
    let deadline = Instant::now() + cfg.timeout;
    let mut refused: Vec<(NodeId, String)> = Vec::new();
    while !missing.is_empty() {
        match next_event(events, deadline) {
            Some((who, NodeEvent::Authenticated(peer))) => {
                missing.remove(&(who, peer));
            }
            Some((who, e)) => refused.extend(refusal(who, &e)),
            None => {
                return Err(BenchError::Timeout(
                    cfg.timeout,
                    format!(
                        "{} tree connections still missing: {missing:?}; refused: {refused:?}",
                        missing.len()
                    ),
                ))
            }
        }
    }
    std::thread::sleep(settle(cfg.nodes));
    while let Ok((who, e)) = events.try_recv() {
        refused.extend(refusal(who, &e));
    }
    Ok(refused)
}

/// A refused connection or a suspicion, as a timed-out trial reports them.
fn refusal(who: NodeId, e: &NodeEvent) -> Option<(NodeId, String)> {
    match e {
        NodeEvent::Refused(why) => Some((who, why.to_string())),
        NodeEvent::RefusedMore { count, last } => {
            Some((who, format!("{count} more refused, the last: {last}")))
        }
        NodeEvent::Suspect(peer) => Some((who, format!("suspects {peer}"))),
        _ => None,
    }
}

/// A member's last installed view: its name (epoch, root) and the ids.
type Installed = ((u64, NodeId), Arc<[NodeId]>);

/// For a timed-out trial: how many of `members` installed exactly `want`, and every distinct
/// (epoch, root, size, ids of `want` missing) the members' last views had.
fn views_seen(
    last_view: &HashMap<NodeId, Installed>,
    members: &[NodeId],
    want: &[NodeId],
) -> String {
    let on_want = members
        .iter()
        .filter(|i| last_view.get(i).is_some_and(|(_, v)| v[..] == want[..]))
        .count();
    let seen: HashSet<(u64, NodeId, usize, Vec<NodeId>)> = last_view
        .values()
        .map(|((e, r), v)| {
            let gone = want.iter().filter(|w| !v.contains(w)).copied().collect();
            (*e, *r, v.len(), gone)
        })
        .collect();
    format!(
        "{on_want} of {} installed the expected view; (epoch, root, size, ids missing) seen: \
         {seen:?}",
        members.len()
    )
}

/// Run one join trial: start the job, wait until it is connected, start process `N` as a
/// joiner that knows the initial view, measure until the root stabilizes the view with it and
/// the joiner is welcomed.
pub fn trial_join(cfg: &BenchConfig, rep: u32) -> Result<Trial, BenchError> {
    let Plan {
        ids, mut missing, ..
    } = plan(cfg, rep)?;
    let n = cfg.nodes;
    let key =
        crate::transport::JobKey::generate().map_err(|e| BenchError::Config(e.to_string()))?;
    let opts = NodeOptions {
        key: Some(key.clone()),
        epoch: Some(Instant::now()),
        ..cfg.job_opts()?
    };
    let member = member_config(cfg);
    let cluster = Cluster::start(n as usize, opts.clone(), move |i, ids| {
        Membership::new(ids[i], ids.to_vec(), member)
    })?;
    let (events, epoch) = (&cluster.events, cluster.epoch);
    connected(events, &mut missing, cfg)?;

    // The joiner: its own listener, known to everyone (as a launcher would announce it).
    let joiner = NodeId(n as u64);
    let listener = bind("127.0.0.1:0".parse().expect("an address"))?;
    let addr = listener.local_addr().map_err(EngineError::from)?;
    for node in &cluster.nodes {
        node.add_peer(joiner, addr);
    }
    let peers = cluster.nodes.iter().map(|h| (h.id, h.addr)).collect();
    let spec = NodeSpec {
        id: joiner,
        listener,
        peers,
        key,
        core: None,
    };
    let (tx, joiner_events) = std::sync::mpsc::channel();
    let everyone: Vec<NodeId> = ids.iter().copied().chain([joiner]).collect();
    let cpu_before = crate::engine::process_cpu();
    let started = Time(epoch.elapsed().as_nanos() as u64);
    // Asks the next process of the list if the root has not answered within 100 ms.
    let proto = Membership::joiner(joiner, ids.clone(), member, Duration::from_millis(100));
    let mut handle = spawn(spec, &opts, proto, tx)?;

    // The root's admission (its view with the joiner), its stabilization, and the welcome.
    let root = ids[0];
    let mut admitted: Option<((u64, NodeId), Time)> = None;
    let mut last_view: HashMap<NodeId, Installed> = HashMap::new();
    let deadline = Instant::now() + cfg.timeout;
    let (stable_epoch, stable_at) = loop {
        let (who, e) = next_or_timeout(events, deadline, cfg, || {
            format!(
                "the join did not stabilize: admitted {admitted:?}; {}",
                views_seen(&last_view, &ids, &everyone)
            )
        })?;
        let NodeEvent::Protocol(Event::Member(e)) = e else {
            continue;
        };
        match e {
            MemberEvent::ViewChanged {
                epoch,
                root: r,
                view,
                at,
            } => {
                if who == root && admitted.is_none() && view[..] == everyone[..] {
                    admitted = Some(((epoch, r), at));
                }
                last_view.insert(who, ((epoch, r), view));
            }
            // The admission's epoch, or a later one that superseded it with the same view.
            MemberEvent::Stabilized { epoch, at }
                if admitted.is_some_and(|a| a.0 .0 <= epoch)
                    && last_view
                        .get(&who)
                        .is_some_and(|(e, v)| *e == (epoch, who) && v[..] == everyone[..]) =>
            {
                break ((epoch, who), at);
            }
            _ => {}
        }
    };
    let welcomed = loop {
        match next_event(&joiner_events, deadline) {
            Some((_, NodeEvent::Protocol(Event::Member(MemberEvent::Joined { .. })))) => {
                break true;
            }
            Some(_) => {}
            None => break false,
        }
    };
    let cpu = crate::engine::process_cpu().saturating_sub(cpu_before);
    let joined = handle.stop()?;
    let views_agree = welcomed
        && joined.view() == everyone.as_slice()
        && ids.iter().all(|s| {
            last_view
                .get(s)
                .is_some_and(|(e, v)| *e == stable_epoch && v[..] == everyone[..])
        });
    let stable_epoch = stable_epoch.0;
    let backend = cluster.backend_name();
    let transport = cluster.transport.to_string();
    cluster.shutdown()?;
    let admitted_at = admitted.map_or(stable_at, |a| a.1);
    Ok(Trial {
        victims: Vec::new(),
        ts: stable_at.since(admitted_at),
        detect: admitted_at.since(started),
        epochs: stable_epoch,
        views_agree,
        cpu: Some(cpu),
        backend,
        transport,
        clock_err: None,
    })
}

/// Run one trial: start the job, wait until every tree edge is connected, kill, measure.
pub fn trial(cfg: &BenchConfig, rep: u32) -> Result<Trial, BenchError> {
    let plan = plan(cfg, rep)?;
    let survivors = plan.survivors();
    let Plan {
        ids: _,
        victims,
        mut missing,
    } = plan;
    let n = cfg.nodes;
    let member = member_config(cfg);
    let mut cluster = Cluster::start(n as usize, cfg.job_opts()?, move |i, ids| {
        Membership::new(ids[i], ids.to_vec(), member)
    })?;
    let (events, epoch) = (&cluster.events, cluster.epoch);
    let mut refused = connected(events, &mut missing, cfg)?;

    // Kill every victim at once, then wait for their threads.
    let cpu_before = crate::engine::process_cpu();
    let killed_at = Time(epoch.elapsed().as_nanos() as u64);
    for v in &victims {
        cluster.nodes[v.0 as usize].kill();
    }
    for v in &victims {
        cluster.nodes[v.0 as usize].stop()?;
    }

    // Until a root reports the stabilization of an epoch whose view is exactly the survivors.
    let mut detected: Option<Time> = None;
    let mut last_view: HashMap<NodeId, Installed> = HashMap::new();
    let deadline = Instant::now() + cfg.timeout;
    let (stable_epoch, stable_at) = loop {
        let (who, e) = next_or_timeout(events, deadline, cfg, || {
            format!(
                "no stabilization after killing {victims:?}: detected {detected:?}; {}; \
                 refused: {refused:?}",
                views_seen(&last_view, &survivors, &survivors)
            )
        })?;
        let e = match e {
            NodeEvent::Protocol(Event::Member(e)) => e,
            other => {
                refused.extend(refusal(who, &other));
                continue;
            }
        };
        match e {
            MemberEvent::Detected { at, .. } => {
                detected = Some(detected.map_or(at, |d| d.min(at)));
            }
            MemberEvent::ViewChanged {
                epoch, root, view, ..
            } => {
                last_view.insert(who, ((epoch, root), view));
            }
            MemberEvent::Stabilized { epoch, at } => {
                if last_view
                    .get(&who)
                    .is_some_and(|(e, v)| *e == (epoch, who) && v[..] == survivors[..])
                {
                    break ((epoch, who), at);
                }
            }
            MemberEvent::Joined { .. } | MemberEvent::Left { .. } => {}
        }
    };

    let cpu = crate::engine::process_cpu().saturating_sub(cpu_before);
    // The root's ack implies every survivor installed the epoch, and each one's `ViewChanged`
    // left it before its ack did, so all of them are in `last_view` by now.
    let views_agree = survivors.iter().all(|s| {
        last_view
            .get(s)
            .is_some_and(|(e, v)| *e == stable_epoch && v[..] == survivors[..])
    });
    let backend = cluster.backend_name();
    let transport = cluster.transport.to_string();
    // Stop everyone at once, so no survivor reacts to the others leaving one by one.
    cluster.shutdown()?;
    let detected = detected.unwrap_or(stable_at);
    Ok(Trial {
        victims,
        ts: stable_at.since(detected),
        detect: detected.since(killed_at),
        epochs: stable_epoch.0,
        views_agree,
        cpu: Some(cpu),
        backend,
        transport,
        clock_err: None,
    })
}

/// A benchmark's figures (a JSON line of `weft bench stabilize --json`).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct BenchReport {
    /// Nodes.
    pub nodes: u32,
    /// Radix.
    pub radix: u32,
    /// Tree mode.
    pub mode: TreeMode,
    /// Failure case.
    pub fail: String,
    /// Engine backend.
    pub backend: String,
    /// How the nodes reached each other: `tcp`, `inproc` ([`crate::transport::Transport`]),
    /// both joined by `+` if trials differed.
    pub transport: String,
    /// Reactor wait mode.
    pub wait: String,
    /// How in-process nodes were spread over the reactors (`None`: one process per node).
    pub placement: Option<Placement>,
    /// Trials.
    pub repeat: u32,
    /// Height H of the initial tree.
    pub height: u32,
    /// Ts median, µs.
    pub ts_p50_us: f64,
    /// Ts 90th percentile, µs.
    pub ts_p90_us: f64,
    /// Ts 99th percentile, µs.
    pub ts_p99_us: f64,
    /// Largest Ts, µs.
    pub ts_max_us: f64,
    /// Mean Ts, µs.
    pub ts_mean_us: f64,
    /// Half-width of the 99% confidence interval of the mean, µs (`None` with one trial:
    /// no interval exists).
    pub ci99_us: Option<f64>,
    /// Kill to first detection, median, µs.
    pub detect_p50_us: f64,
    /// CPU of the whole process from the kill to the observed stabilization, mean, µs
    /// (meaningful with blocking reactors, since spinning ones burn CPU while idle; `None`
    /// with one process per node, whose CPU this process cannot read).
    pub cpu_mean_us: Option<f64>,
    /// CPU time the hypervisor took from this machine during the run, as a share of all its
    /// CPUs' time, % (`None` where the kernel does not report it). A few % already put
    /// millisecond stalls into the tail.
    pub steal_pct: Option<f64>,
    /// Most epochs any trial needed.
    pub epochs_max: u64,
    /// Every trial ended with all survivors on the same view, exactly the survivors.
    pub views_agree: bool,
    /// Seed of the victims' choice.
    pub seed: u64,
    /// Under a launcher: its ranks (one node each).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranks: Option<u32>,
    /// Under a launcher: which (`slurm`, `ompi`, `pmi`, `env`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launcher: Option<String>,
    /// Under a launcher: the largest bound on the clock offsets' error over the trials, µs
    /// (the ranks' times are put on rank 0's clock with Cristian's round trips).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_err_us: Option<f64>,
    /// Under `--hosts K`: the network-namespace hosts the ranks were spread over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<u32>,
    /// Under `--hosts K --shape RATE`: every host's link rate (under `--torus`, every
    /// torus link's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<String>,
    /// Under `--torus XxYxZ`: the emulated torus the hosts were linked as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torus: Option<String>,
    /// The run ended early, why: the report holds the trials done before (`repeat` of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The floor of this benchmark's stabilization on this machine ([`super::bare_wave`]): one
/// wave over the survivors' tree with the same radix, placement, reactor count and wait mode,
/// over plain TCP sockets, `repeat` times.
///
/// The survivors' tree is as large as the failure leaves it (`--fail multi:7` of 8: one
/// process). `None` when it has a single process: there is no wave to time.
pub fn floor(cfg: &BenchConfig, repeat: u32) -> Result<Option<WaveReport>, BenchError> {
    let killed = if cfg.join {
        0
    } else {
        cfg.fail.killed() as u32
    };
    let processes = cfg.nodes.saturating_sub(killed);
    if processes < 2 {
        return Ok(None);
    }
    let threads = cfg
        .opts
        .reactors
        .unwrap_or_else(crate::engine::online_cpus)
        .max(1);
    let placement = match cfg.placement {
        Placement::Subtree => Some(
            RadixTree::new(processes, cfg.radix)
                .map_err(|e| BenchError::Config(e.to_string()))?
                .preorder_blocks(threads as u32),
        ),
        Placement::RoundRobin => None,
    };
    let wave = WaveConfig {
        processes,
        radix: cfg.radix,
        placement,
        threads,
        wait: cfg.opts.reactor.wait,
        waves: repeat,
        // As long as a trial's job idles before its kill: TCP's delayed-ACK state depends on it.
        gap: settle(cfg.nodes),
    };
    let steal = crate::engine::StealMeter::start();
    let run = super::bare_wave::run(&wave).map_err(EngineError::from)?;
    Ok(Some(WaveReport::of(cfg.nodes, &wave, &run, steal.pct())))
}

/// Check that `cfg` can run, before anything runs: a job size, radix and failure that go
/// together (its first trial is planned), and no join with node processes.
pub fn check(cfg: &BenchConfig) -> Result<(), BenchError> {
    if cfg.procs.is_some() && cfg.join {
        return Err(BenchError::Config(
            "joins are measured with in-process nodes only".into(),
        ));
    }
    if let super::scenario::Fail::Host(_) = cfg.fail {
        // The host is drawn once the ranks have said where they run.
        return super::scenario::plan(cfg.nodes, cfg.radix, None, cfg.seed, 0)
            .map(drop)
            .map_err(BenchError::Config);
    }
    plan(cfg, 0).map(drop)
}

/// Run `repeat` trials; `each` sees every trial as it ends (progress, raw samples).
pub fn run(
    cfg: &BenchConfig,
    repeat: u32,
    mut each: impl FnMut(u32, &Trial),
) -> Result<BenchReport, BenchError> {
    if repeat == 0 {
        return Err(BenchError::Config("--repeat must be at least 1".into()));
    }
    check(cfg)?;
    // The backend is not pinned here: an automatic choice stays one, so that a reactor (or a
    // node process) refused a ring falls back, and each trial says what its nodes ran on.
    let steal = crate::engine::StealMeter::start();
    let mut trials = Vec::with_capacity(repeat as usize);
    for rep in 0..repeat {
        let t = match (&cfg.procs, cfg.join) {
            (Some(_), true) => {
                return Err(BenchError::Config(
                    "joins are measured with in-process nodes only".into(),
                ))
            }
            (Some(exe), false) => super::procs::trial(exe, cfg, rep)?,
            (None, true) => trial_join(cfg, rep)?,
            (None, false) => trial(cfg, rep)?,
        };
        each(rep, &t);
        trials.push(t);
    }
    Ok(summarize(cfg, &trials, steal.pct()))
}

/// The report of `cfg`'s `trials`, run while the hypervisor stole `steal_pct` of the CPU.
pub(crate) fn summarize(
    cfg: &BenchConfig,
    trials: &[Trial],
    steal_pct: Option<f64>,
) -> BenchReport {
    let repeat = trials.len() as u32;
    let samples: Vec<f64> = trials.iter().map(|t| t.ts.as_secs_f64() * 1e6).collect();
    let detect: Vec<f64> = trials
        .iter()
        .map(|t| t.detect.as_secs_f64() * 1e6)
        .collect();
    let epochs_max = trials.iter().map(|t| t.epochs).max().unwrap_or(0);
    let views_agree = trials.iter().all(|t| t.views_agree);
    let cpu = trials
        .iter()
        .try_fold(Duration::ZERO, |acc, t| t.cpu.map(|c| acc + c));
    let ran_on: Vec<&str> = trials.iter().map(|t| t.backend.as_str()).collect();
    let clock_err = trials.iter().filter_map(|t| t.clock_err).max();
    let s = crate::metrics::summarize_exact(&samples);
    let ids: Vec<NodeId> = (0..cfg.nodes as u64).map(NodeId).collect();
    BenchReport {
        nodes: cfg.nodes,
        radix: cfg.radix,
        mode: cfg.mode,
        fail: if cfg.join {
            "join".into()
        } else {
            cfg.fail.to_string()
        },
        backend: crate::transport::backend_name(&ran_on),
        transport: {
            let mut went: Vec<&str> = trials.iter().map(|t| t.transport.as_str()).collect();
            went.sort_unstable();
            went.dedup();
            went.join("+")
        },
        wait: cfg.opts.reactor.wait.to_string(),
        placement: cfg.procs.is_none().then_some(cfg.placement),
        repeat,
        height: IdTree::radix(&ids, cfg.radix).height(),
        ts_p50_us: s.p50_us,
        ts_p90_us: s.p90_us,
        ts_p99_us: s.p99_us,
        ts_max_us: s.max_us,
        ts_mean_us: s.mean_us,
        ci99_us: crate::metrics::mean_ci99(&samples).map(|(_, h)| h),
        detect_p50_us: crate::metrics::summarize_exact(&detect).p50_us,
        cpu_mean_us: cpu.map(|c| c.as_secs_f64() * 1e6 / repeat as f64),
        steal_pct,
        epochs_max,
        views_agree,
        seed: cfg.seed,
        ranks: None,
        launcher: None,
        clock_err_us: clock_err.map(|d| d.as_secs_f64() * 1e6),
        hosts: None,
        shape: None,
        torus: None,
        error: None,
    }
}
