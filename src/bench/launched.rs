//! `weft bench stabilize` under a real launcher (`srun`, `mpirun`, `mpiexec.hydra`): one
//! membership node per rank, and rank 0's process drives the trials over an authenticated
//! control channel ([`super::control`]).
//!
//! **Each trial is a fresh job**, as in the in-process benchmark: every rank stops its node,
//! binds its port again, and only once every rank is bound do all start a new node (a new
//! incarnation) with the whole job as its view, so no early dial meets a port not yet
//! listening. Trials therefore never use up ranks, and every trial's victims are chosen on
//! the same initial tree (`--fail` as in-process). A victim's node crashes abruptly (its
//! sockets close, as when a process dies) while its process lives on to take part in the
//! next trial.
//!
//! **One time line.** Ranks on rank 0's host share its `CLOCK_MONOTONIC` (the same kernel:
//! the same `boot_id`), and their times are used as they are. Ranks on other hosts have
//! unrelated clocks: before each kill, rank 0 estimates each one's offset with Cristian's
//! method (the best of several round trips over the control channel; error bound = half that
//! round trip) and puts its reported times on its own clock. The trial's `clock_err` is the
//! largest bound among the ranks whose times decide it: 0 when they all share rank 0's host.
//!
//! **Hosts fail too.** Every rank names its host in its hello; `--fail host` crashes every
//! node of a host drawn per trial (never rank 0's). On the namespace hosts of
//! [`super::hosts`], `--fail host-down` takes that host's link down instead, so that nothing
//! says goodbye, and `--fail link` cuts the link between it and rank 0's host while both
//! reach the others; either is undone when the trial ends.

use super::contention::{self, Contention};
use super::control::{split, ControlError, ControlReceiver, ControlSender, Direction};
use super::hosts::Cluster;
use super::scenario::{Fail, HostFailure, Plan};
use super::stabilize::{
    member_config, settle, summarize, BenchConfig, BenchError, BenchReport, Trial,
};
use crate::bootstrap::{exchange, launch, Launch, ProcessEnv, Want};
use crate::engine::monotonic_ns;
use crate::engine::reactor::NodeEvent;
use crate::proto::membership::Membership;
use crate::proto::ping::PingPong;
use crate::proto::Event;
use crate::rng::SimRng;
use crate::transport::process::report_of;
use crate::transport::{bind, spawn, NodeHandle, NodeOptions, NodeSpec};
use crate::NodeId;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What a rank's reader says when the rank's control channel closes.
const GONE: &str = "gone";

fn failed(what: impl std::fmt::Display) -> BenchError {
    BenchError::Config(what.to_string())
}

impl From<ControlError> for BenchError {
    fn from(e: ControlError) -> Self {
        failed(e)
    }
}

impl From<crate::bootstrap::BootstrapError> for BenchError {
    fn from(e: crate::bootstrap::BootstrapError) -> Self {
        failed(e)
    }
}

/// Run the benchmark as this rank of a launched job. Rank 0 returns the report (`cfg.nodes` is
/// the job's size); the others return `None` once rank 0 lets them go.
pub fn run(
    cfg: &BenchConfig,
    want: Want,
    repeat: u32,
    each: impl FnMut(u32, &Trial),
) -> Result<Option<BenchReport>, BenchError> {
    let Some(mut job) = join(cfg, want)? else {
        return Ok(None);
    };
    let (trials, stopped) = job.driver.trials(&job.cfg, repeat, each);
    match stopped {
        None => {
            let report = job.report(Ok(trials));
            job.end();
            Ok(Some(report?))
        }
        // A rank died, say: the trials done are kept (with the reason), every rank is told,
        // and the run ends with the error (at every rank).
        Some(e) if !trials.is_empty() => {
            let mut report = job.report(Ok(trials))?;
            report.error = Some(e.to_string());
            job.abort(&e);
            Ok(Some(report))
        }
        Some(e) => {
            job.abort(&e);
            Err(e)
        }
    }
}

/// What `weft model validate` measures on a launched job, besides its trials.
#[derive(Clone, Debug)]
pub struct Measured {
    /// `L`: ping-pong between rank 0 and the last rank (on the last host, when there are
    /// several), nothing else running; `fanout` 1.
    pub pair: Contention,
    /// Cold round trips ([`contention::COLD_GAP`] idle before each) between rank 0 and the
    /// first probe (else the last rank).
    pub cold_pair: Contention,
    /// `L(N)` for each fan-out asked for: every rank in its group at once ([`contention`]).
    pub loaded: Vec<Contention>,
    /// Cold `L(N)` for the tree's own fan-out (its radix).
    pub cold_loaded: Contention,
    /// Ping-pong between rank 0 and each rank of `probes`, one pair at a time, nothing else
    /// running (on a torus: one rank at each hop count).
    pub probes: Vec<Contention>,
    /// The trials' report.
    pub report: BenchReport,
    /// Machines the ranks run on (distinct kernels: namespace hosts share one).
    pub machines: u32,
}

/// Run the model validation's measurements as this rank of a launched job: `L` between two
/// ranks, `L` between rank 0 and each rank `probes` names for the job's size, `L(N)` for
/// every fan-out of `fanouts` ([`contention`], `iters` timed rounds per parent), then
/// `repeat` trials. Rank 0 returns them; the others `None`.
pub fn measure(
    cfg: &BenchConfig,
    want: Want,
    repeat: u32,
    fanouts: &[u32],
    probes: &dyn Fn(u32) -> Vec<u32>,
    iters: u64,
) -> Result<Option<Measured>, BenchError> {
    let Some(mut job) = join(cfg, want)? else {
        return Ok(None);
    };
    let measured = job.measure(repeat, fanouts, probes, iters);
    job.end();
    measured.map(Some)
}

/// Rank 0's side of a launched job, once every rank is on the control channel.
struct Root {
    driver: Driver,
    cfg: BenchConfig,
    launcher: String,
    steal: crate::engine::StealMeter,
    rank_thread: std::thread::JoinHandle<Result<(), BenchError>>,
}

impl Root {
    /// The report of `trials`, as the in-process benchmark gives it, plus the launch.
    fn report(&self, trials: Result<Vec<Trial>, BenchError>) -> Result<BenchReport, BenchError> {
        let mut report = summarize(&self.cfg, &trials?, self.steal.pct());
        report.ranks = Some(self.cfg.nodes);
        report.launcher = Some(self.launcher.clone());
        report.placement = None;
        Ok(report)
    }

    fn measure(
        &mut self,
        repeat: u32,
        fanouts: &[u32],
        probes: &dyn Fn(u32) -> Vec<u32>,
        iters: u64,
    ) -> Result<Measured, BenchError> {
        let n = self.cfg.nodes;
        let warmup = (iters / 10).max(1);
        let probes = probes(n);
        let mut pair_with = |r: u32, gap: Duration| -> Result<Contention, BenchError> {
            let pair = vec![vec![NodeId(0), NodeId(u64::from(r))]];
            let (iters, warmup) = if gap.is_zero() {
                (iters, warmup)
            } else {
                (contention::COLD_ROUNDS, 2)
            };
            let rtt = self.driver.ping(&pair, iters, warmup, gap)?;
            Ok(Contention::of(n, 1, 1, &rtt))
        };
        let pair = pair_with(n - 1, Duration::ZERO)?;
        // The cold pair is the one-hop probe where there is one (the paper's L is one hop's).
        let cold_peer = probes.first().copied().unwrap_or(n - 1);
        let cold_pair = pair_with(cold_peer, contention::COLD_GAP)?;
        let probes = probes
            .into_iter()
            .map(|r| pair_with(r, Duration::ZERO))
            .collect::<Result<Vec<_>, _>>()?;
        let mut loaded = Vec::new();
        for &f in fanouts {
            let g = contention::groups(n, f);
            let rtt = self.driver.ping(&g, iters, warmup, Duration::ZERO)?;
            loaded.push(Contention::of(n, f, g.len() as u32, &rtt));
        }
        let tree = self.cfg.radix;
        let g = contention::groups(n, tree);
        let rtt = self
            .driver
            .ping(&g, contention::COLD_ROUNDS, 2, contention::COLD_GAP)?;
        let cold_loaded = Contention::of(n, tree, g.len() as u32, &rtt);
        let trials = match self.driver.trials(&self.cfg, repeat, |_, _| {}) {
            (t, None) => Ok(t),
            (_, Some(e)) => Err(e),
        };
        let mut boots = self.driver.boot.clone();
        boots.sort();
        boots.dedup();
        Ok(Measured {
            pair,
            cold_pair,
            loaded,
            cold_loaded,
            probes,
            report: self.report(trials)?,
            machines: boots.len() as u32,
        })
    }

    /// Let the ranks go and wait for rank 0's own (whose errors the driver has seen).
    fn end(mut self) {
        self.driver.dismiss();
        let _ = self.rank_thread.join();
    }

    /// End the job on `why`: every rank still there exits with it (non-zero), as rank 0 does.
    fn abort(mut self, why: &BenchError) {
        let _ = self
            .driver
            .tell_all_alive(json!({"c": "exit", "error": why.to_string()}));
        let _ = self.rank_thread.join();
    }
}

/// Take this process's place in the launched job: every rank serves its node as rank 0 says;
/// rank 0 also drives, and gets the [`Root`] once every rank is on the control channel. The
/// others return `None` once rank 0 lets them go.
fn join(cfg: &BenchConfig, want: Want) -> Result<Option<Root>, BenchError> {
    let env = ProcessEnv;
    let launch: Launch = launch::detect(want, &env)?;
    let cfg = BenchConfig {
        nodes: launch.size,
        ..cfg.clone()
    };
    super::stabilize::check(&cfg)?;
    let listener = bind(SocketAddr::from(([0, 0, 0, 0], 0)))?;
    let port = listener.local_addr().map_err(failed)?.port();
    let mine = exchange::advertised(SocketAddr::from(([0, 0, 0, 0], port)), &launch, &env)?;
    // Rank 0's control channel listens beside its node, on the address the others dial.
    let control = if launch.rank == 0 {
        Some(TcpListener::bind(SocketAddr::new(mine.ip(), 0)).map_err(failed)?)
    } else {
        None
    };
    let ctl_word = match &control {
        Some(l) => l.local_addr().map_err(failed)?.to_string(),
        None => "?".into(),
    };
    let deadline = Instant::now() + cfg.timeout;
    let params = member_config(&cfg).params(launch.size as usize);
    let joined = exchange::exchange(
        launch,
        mine,
        crate::transport::JobKey::from_env().map_err(failed)?,
        Some(&ctl_word),
        &params,
        &env,
        deadline,
    )?;
    let ctl_addr: SocketAddr = joined
        .extra
        .as_deref()
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| failed("rank 0 handed out no control address"))?;
    let rank = Rank {
        id: NodeId(u64::from(joined.launch.rank)),
        members: (0..u64::from(joined.launch.size)).map(NodeId).collect(),
        peers: joined.peers.without(NodeId(u64::from(joined.launch.rank))),
        key: joined.key.clone(),
        listen: SocketAddr::from(([0, 0, 0, 0], port)),
        opts: cfg.opts.clone(),
        membership: member_config(&cfg),
        host: host_name(joined.launch.node.as_deref()),
    };
    let key = joined.key.clone();
    let rank_thread = std::thread::Builder::new()
        .name("weft-rank".into())
        .spawn(move || rank.serve(listener, ctl_addr, deadline))
        .map_err(failed)?;
    let Some(control) = control else {
        rank_thread
            .join()
            .map_err(|_| failed("the rank's thread panicked"))??;
        return Ok(None);
    };
    let launcher = joined.launch.launcher.to_string();
    let driver = Driver::accept(control, &key, &cfg, deadline)?;
    Ok(Some(Root {
        driver,
        cfg,
        launcher,
        steal: crate::engine::StealMeter::start(),
        rank_thread,
    }))
}

/// One rank's side: a node it starts, crashes and restarts as rank 0 says.
struct Rank {
    id: NodeId,
    members: Vec<NodeId>,
    peers: HashMap<NodeId, SocketAddr>,
    key: crate::transport::JobKey,
    listen: SocketAddr,
    opts: NodeOptions,
    membership: crate::proto::membership::MembershipConfig,
    /// The host it runs on, as [`host_name`] names it.
    host: String,
}

impl Rank {
    /// Connect to rank 0's control channel and do what it says until it lets this rank go.
    fn serve(
        self,
        listener: std::net::TcpListener,
        ctl: SocketAddr,
        deadline: Instant,
    ) -> Result<(), BenchError> {
        let stream = loop {
            match TcpStream::connect_timeout(&ctl, Duration::from_secs(5)) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(failed(format!("control channel at {ctl}: {e}")))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let (tx, mut rx) = split(stream, &self.key, Direction::Up)?;
        let tx = Arc::new(Mutex::new(tx));
        let send = |tx: &Arc<Mutex<ControlSender>>, v: Value| -> Result<(), BenchError> {
            tx.lock().map_err(|_| failed("poisoned"))?.send(&v)?;
            Ok(())
        };
        send(
            &tx,
            json!({"r": "hello", "rank": self.id.0, "boot": boot_id(), "host": self.host,
                   "netns_host": std::env::var(super::hosts::HOST_VAR).ok()}),
        )?;
        let mut listener = Some(listener);
        let held: Arc<HeldReports> = Arc::default();
        let mut node: Option<NodeHandle<Membership>> = None;
        // A ping phase's node (`ping`), until its `stop`.
        let mut pinger: Option<NodeHandle<PingPong>> = None;
        loop {
            let m = rx.recv(None)?;
            let reply = match m["c"].as_str() {
                Some("bind") => {
                    if listener.is_none() {
                        listener = Some(bind(self.listen)?);
                    }
                    json!({"r": "bound"})
                }
                Some("start") => {
                    let l = listener.take().ok_or_else(|| failed("start before bind"))?;
                    // A fresh job reports as it goes (a victim cut off may still hold).
                    *held.held.lock().map_err(|_| failed("poisoned"))? = Held::default();
                    let n = self.start(l, tx.clone(), held.clone())?;
                    let reply = json!({"r": "started", "backend": n.backend.to_string()});
                    node = Some(n);
                    reply
                }
                Some("kill") => {
                    // The time of the kill, not of its end: peers may see it before `kill`
                    // returns.
                    let at = monotonic_ns();
                    if let Some(mut n) = node.take() {
                        n.kill();
                    }
                    json!({"r": "killed", "ns": at})
                }
                Some("ping") => {
                    let l = listener.take().ok_or_else(|| failed("ping before bind"))?;
                    let groups: Vec<Vec<NodeId>> =
                        serde_json::from_value::<Vec<Vec<u64>>>(m["groups"].clone())
                            .map_err(|e| failed(format!("ping: groups: {e}")))?
                            .into_iter()
                            .map(|g| g.into_iter().map(NodeId).collect())
                            .collect();
                    let (iters, warmup) = (
                        m["iters"].as_u64().unwrap_or(0),
                        m["warmup"].as_u64().unwrap_or(0),
                    );
                    let gap = Duration::from_micros(m["gap_us"].as_u64().unwrap_or(0));
                    if groups.iter().any(|g| g.contains(&self.id)) {
                        let proto = contention::protocol(&groups, self.id, iters, warmup, gap);
                        pinger = Some(self.start_pinger(l, proto, tx.clone())?);
                    } else {
                        // Sits this phase out; the listener waits for the next.
                        listener = Some(l);
                    }
                    json!({"r": "started"})
                }
                Some("stop") => {
                    if let Some(mut n) = node.take() {
                        let _ = n.stop();
                    }
                    let rtt: Vec<u64> = match pinger.take() {
                        Some(mut p) => p.stop()?.samples().iter().map(|&(_, ns)| ns).collect(),
                        None => Vec::new(),
                    };
                    json!({"r": "stopped", "rtt_ns": rtt})
                }
                Some("clock") => json!({"r": "clock", "seq": m["seq"], "ns": monotonic_ns()}),
                Some("hold") => {
                    let mut h = held.held.lock().map_err(|_| failed("poisoned"))?;
                    *h = Held {
                        holding: true,
                        ..Held::default()
                    };
                    json!({"r": "holding"})
                }
                Some("flush") => {
                    let want = (m["epoch"].as_u64(), m["root"].as_u64());
                    let evs = held.flush(want, Duration::from_millis(500))?;
                    json!({"r": "flushed", "evs": evs})
                }
                Some("exit") => {
                    if let Some(mut n) = node.take() {
                        let _ = n.stop();
                    }
                    if let Some(mut p) = pinger.take() {
                        let _ = p.stop();
                    }
                    return dismissed(&m);
                }
                _ => return Err(failed(format!("control: unexpected {m}"))),
            };
            if let Err(e) = send(&tx, reply) {
                return dismissed_or(e, &mut rx);
            }
        }
    }

    /// A fresh node (a new incarnation, the whole job as its view) on `listener`; its events go
    /// up the control channel as report lines.
    fn start(
        &self,
        listener: std::net::TcpListener,
        tx: Arc<Mutex<ControlSender>>,
        held: Arc<HeldReports>,
    ) -> Result<NodeHandle<Membership>, BenchError> {
        let epoch = Instant::now();
        let epoch_ns = monotonic_ns();
        let opts = NodeOptions {
            epoch: Some(epoch),
            pin: false,
            incarnation: crate::transport::incarnation_now(),
            params: self.membership.params(self.members.len()),
            ..self.opts.clone()
        };
        let (etx, erx) = channel();
        let spec = NodeSpec {
            id: self.id,
            listener,
            peers: self.peers.clone(),
            key: self.key.clone(),
            core: None,
        };
        let proto = Membership::new(self.id, self.members.clone(), self.membership);
        let node = spawn(spec, &opts, proto, etx)?;
        let id = self.id;
        std::thread::spawn(move || {
            let send = |line: &Value| tx.lock().map(|mut t| t.send(line).is_ok()).unwrap_or(false);
            for (_, e) in erx {
                let Some(r) = report_of(id, epoch_ns, e) else {
                    continue;
                };
                let line = json!({"r": "ev", "ev": r});
                let now = match held.held.lock() {
                    Ok(mut h) => h.keep(line),
                    Err(_) => return,
                };
                held.changed.notify_all();
                if !now.iter().all(send) {
                    return;
                }
            }
        });
        Ok(node)
    }
}

/// A rank's reports while a trial's failure is handled (from `hold` to `flush`). Sent as they
/// come, they cost every rank a wake-up and a write per event and rank 0's process, which
/// hosts the root, a read and a parse of each (a line per view per rank): CPU taken from the
/// stabilization they measure. So they wait here, and only a root's `stabilized` goes up at
/// once, after its view: it is what ends the trial.
#[derive(Default)]
struct Held {
    holding: bool,
    lines: Vec<Value>,
    last_view: Option<Value>,
}

/// A rank's [`Held`] reports, shared by its event thread (which keeps them) and its control
/// loop (which flushes them).
#[derive(Default)]
struct HeldReports {
    held: Mutex<Held>,
    changed: Condvar,
}

impl HeldReports {
    /// Stop holding and take what was held, once it holds the view named `(epoch, root)` if
    /// one is named, or `within` has passed: a survivor installed that view before its
    /// acknowledgment left, but the event that reports it comes through the node's event
    /// channel and may not have reached the held reports yet.
    fn flush(
        &self,
        want: (Option<u64>, Option<u64>),
        within: Duration,
    ) -> Result<Vec<Value>, BenchError> {
        let deadline = Instant::now() + within;
        let has = |h: &Held| {
            let (Some(epoch), Some(root)) = want else {
                return true;
            };
            h.lines.iter().any(|l| {
                let e = &l["ev"];
                e["kind"] == "view" && e["epoch"] == epoch && e["root"] == root
            })
        };
        let mut h = self.held.lock().map_err(|_| failed("poisoned"))?;
        while !has(&h) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            h = self
                .changed
                .wait_timeout(h, left)
                .map_err(|_| failed("poisoned"))?
                .0;
        }
        Ok(std::mem::take(&mut *h).lines)
    }
}

impl Held {
    /// Keep `line` (a node's event as the control channel carries it); what to send now.
    fn keep(&mut self, line: Value) -> Vec<Value> {
        if !self.holding {
            return vec![line];
        }
        match line["ev"]["kind"].as_str() {
            Some("view") => {
                self.last_view = Some(line.clone());
                self.lines.push(line);
                Vec::new()
            }
            Some("stabilized") => self.last_view.iter().cloned().chain([line]).collect(),
            _ => {
                self.lines.push(line);
                Vec::new()
            }
        }
    }
}

impl Rank {
    /// A ping phase's node on `listener`; a pinger says `done` up the control channel when its
    /// rounds are over.
    fn start_pinger(
        &self,
        listener: std::net::TcpListener,
        proto: PingPong,
        tx: Arc<Mutex<ControlSender>>,
    ) -> Result<NodeHandle<PingPong>, BenchError> {
        let opts = NodeOptions {
            pin: false,
            incarnation: crate::transport::incarnation_now(),
            ..self.opts.clone()
        };
        let (etx, erx) = channel();
        let spec = NodeSpec {
            id: self.id,
            listener,
            peers: self.peers.clone(),
            key: self.key.clone(),
            core: None,
        };
        let node = spawn(spec, &opts, proto, etx)?;
        std::thread::spawn(move || {
            for (_, e) in erx {
                if matches!(e, NodeEvent::Protocol(Event::Done)) {
                    let line = json!({"r": "ev", "ev": {"kind": "done"}});
                    let _ = tx.lock().map(|mut t| t.send(&line));
                }
            }
        });
        Ok(node)
    }
}

/// After a reply that could not be written: rank 0 may have dismissed the ranks and exited
/// (it does not wait for the last replies, such as a victim's "killed", which a busy host may
/// send after the stabilization it trails). Its "exit" is then still in this socket's receive
/// buffer and ends the rank as it says ([`dismissed`]); anything else is the error `e`.
fn dismissed_or(e: BenchError, rx: &mut ControlReceiver) -> Result<(), BenchError> {
    while let Ok(m) = rx.recv(Some(Duration::from_secs(2))) {
        if m["c"] == "exit" {
            return dismissed(&m);
        }
    }
    Err(e)
}

/// How a rank ends on rank 0's "exit" `m`: normally, or, if rank 0 ended the job on an error,
/// with that error (every rank of a failed job exits non-zero).
fn dismissed(m: &Value) -> Result<(), BenchError> {
    match m["error"].as_str() {
        Some(why) => Err(failed(format!("rank 0 ended the job: {why}"))),
        None => Ok(()),
    }
}

/// A view as a rank reports it: its name (epoch, root) and its members.
type ViewReport = ((u64, u64), Vec<u64>);

/// A "view" event's name (epoch, root) and members.
fn view_report(e: &Value) -> ViewReport {
    let view: Vec<u64> = serde_json::from_value(e["view"].clone()).unwrap_or_default();
    let name = (
        e["epoch"].as_u64().unwrap_or(0),
        e["root"].as_u64().unwrap_or(u64::MAX),
    );
    (name, view)
}

/// This host's kernel boot id: processes that report the same one share `CLOCK_MONOTONIC`.
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The host this rank runs on: the namespace host of `weft bench stabilize --hosts`, else the
/// launcher's name for it (`launcher`: Slurm's node name, which tells apart hosts whose
/// kernels share a name, as containers and namespaces do), else the machine's name.
fn host_name(launcher: Option<&str>) -> String {
    if let Ok(h) = std::env::var(super::hosts::HOST_VAR) {
        return format!("netns-h{h}");
    }
    if let Some(h) = launcher {
        return h.to_string();
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Rank 0's side: one control connection per rank, their messages on one channel.
struct Driver {
    down: Vec<ControlSender>,
    up: Receiver<(u32, Value)>,
    timeout: Duration,
    /// Which ranks share rank 0's clock (the same boot id).
    same_clock: Vec<bool>,
    /// Each rank's host, as it names it.
    host: Vec<String>,
    /// Each rank's host in the namespace cluster, under `--hosts`.
    netns_host: Vec<Option<u32>>,
    /// Each rank's kernel boot id (one per machine).
    boot: Vec<String>,
}

/// A host a trial silences instead of crashing its processes, on the namespace cluster: its
/// link down, or (`from`: the root's host) the link between the two cut.
struct Silence {
    cluster: Cluster,
    host: u32,
    from: Option<u32>,
}

impl Silence {
    /// Silence the host until the returned guard is dropped.
    fn apply(&self) -> Result<Restore<'_>, BenchError> {
        match self.from {
            None => self.cluster.down(self.host),
            Some(f) => self.cluster.cut(f, self.host),
        }
        .map_err(failed)?;
        Ok(Restore(self))
    }
}

/// Undoes a [`Silence`] when the trial ends, however it ends.
struct Restore<'a>(&'a Silence);

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        let s = self.0;
        let _ = match s.from {
            None => s.cluster.up(s.host),
            Some(f) => s.cluster.mend(f, s.host),
        };
    }
}

/// A rank's reported time put on rank 0's clock, with its error bound.
#[derive(Clone, Copy, Default)]
struct Offset {
    ns: i128,
    err_ns: u64,
}

impl Driver {
    /// Take every rank's connection (its hello names it).
    fn accept(
        listener: TcpListener,
        key: &crate::transport::JobKey,
        cfg: &BenchConfig,
        deadline: Instant,
    ) -> Result<Self, BenchError> {
        let n = cfg.nodes as usize;
        listener.set_nonblocking(true).map_err(failed)?;
        let (tx, up) = channel();
        let mut down: Vec<Option<ControlSender>> = (0..n).map(|_| None).collect();
        let mut same_clock = vec![false; n];
        let mut host = vec![String::new(); n];
        let mut netns_host = vec![None; n];
        let mut boot = vec![String::new(); n];
        let ours = boot_id();
        // `WEFT_CLOCK_SYNC=always` estimates every rank's offset, as for ranks on other hosts
        // (to check the estimate where the true offset is known: zero).
        let estimate_anyway = std::env::var("WEFT_CLOCK_SYNC").is_ok_and(|v| v == "always");
        let mut pending: Vec<(ControlSender, ControlReceiver)> = Vec::new();
        let mut named = 0;
        while named < n {
            if Instant::now() >= deadline {
                return Err(BenchError::Timeout(
                    cfg.timeout,
                    format!("{} of {n} ranks on the control channel", named),
                ));
            }
            match listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false).map_err(failed)?;
                    pending.push(split(s, key, Direction::Down)?);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
            // Hellos first, in order of arrival; a stranger's line ends only its connection.
            for (s, mut r) in pending.drain(..) {
                match r.recv(Some(Duration::from_secs(10))) {
                    Ok(v) if v["r"] == "hello" => {
                        let rank = v["rank"].as_u64().unwrap_or(u64::MAX) as usize;
                        if rank < n && down[rank].is_none() {
                            down[rank] = Some(s);
                            same_clock[rank] =
                                !ours.is_empty() && v["boot"] == ours.as_str() && !estimate_anyway;
                            host[rank] = v["host"].as_str().unwrap_or("").to_string();
                            netns_host[rank] =
                                v["netns_host"].as_str().and_then(|h| h.parse().ok());
                            boot[rank] = v["boot"].as_str().unwrap_or("").to_string();
                            named += 1;
                            let tx: Sender<(u32, Value)> = tx.clone();
                            std::thread::spawn(move || loop {
                                match r.recv(None) {
                                    Ok(v) => {
                                        if tx.send((rank as u32, v)).is_err() {
                                            return;
                                        }
                                    }
                                    Err(e) => {
                                        // The rank's process is gone: the driver names it.
                                        let why = e.to_string();
                                        let _ =
                                            tx.send((rank as u32, json!({"r": GONE, "why": why})));
                                        return;
                                    }
                                }
                            });
                        }
                    }
                    Ok(_) | Err(_) => {}
                }
            }
        }
        Ok(Self {
            down: down
                .into_iter()
                .map(|d| d.expect("every rank named"))
                .collect(),
            up,
            timeout: cfg.timeout,
            same_clock,
            host,
            netns_host,
            boot,
        })
    }

    fn tell(&mut self, rank: usize, v: Value) -> Result<(), BenchError> {
        self.down[rank].send(&v).map_err(|e| {
            failed(format!(
                "rank {rank}'s control channel: {e}: its process ended"
            ))
        })
    }

    fn tell_all(&mut self, v: Value) -> Result<(), BenchError> {
        for r in 0..self.down.len() {
            self.tell(r, v.clone())?;
        }
        Ok(())
    }

    /// [`Self::tell_all`], past ranks whose channel is gone.
    fn tell_all_alive(&mut self, v: Value) -> Result<(), BenchError> {
        for r in 0..self.down.len() {
            let _ = self.tell(r, v.clone());
        }
        Ok(())
    }

    /// The next message from any rank, within the phase's time; a rank whose control
    /// channel closed (its process died) is an error naming it.
    fn next(&self, deadline: Instant, what: &str) -> Result<(u32, Value), BenchError> {
        let (r, v) = self
            .up
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .map_err(|_| BenchError::Timeout(self.timeout, what.to_string()))?;
        if v["r"] == GONE {
            return Err(failed(format!(
                "rank {r}'s control channel closed while waiting for {what} ({}): its process \
                 ended",
                v["why"].as_str().unwrap_or("?")
            )));
        }
        Ok((r, v))
    }

    /// What each survivor last installed, for an error that says why no stabilization came:
    /// the views a root reported at once (`reported`) and, from the others, what they held.
    fn last_views(&mut self, survivors: &[u64], reported: &HashMap<u64, ViewReport>) -> String {
        let ranks: Vec<u32> = survivors.iter().map(|&s| s as u32).collect();
        for &r in &ranks {
            if self.tell(r as usize, json!({"c": "flush"})).is_err() {
                return "the survivors' views could not be asked for".into();
            }
        }
        let mut seen = Vec::new();
        let Ok(flushed) = self.these_say(&ranks, "flushed", &mut seen) else {
            return "the survivors did not say what they installed".into();
        };
        let mut out = Vec::new();
        for (&r, reply) in ranks.iter().zip(flushed) {
            let held: &[Value] = reply["evs"].as_array().map_or(&[], Vec::as_slice);
            let last = held
                .iter()
                .rfind(|l| l["ev"]["kind"] == "view")
                .map(|l| view_report(&l["ev"]))
                .or_else(|| reported.get(&u64::from(r)).cloned());
            out.push(match last {
                Some(((epoch, root), view)) => {
                    format!("n{r} in epoch {epoch} of root n{root} with {view:?}")
                }
                None => format!("n{r} installed no view"),
            });
        }
        format!("the survivors last installed: {}", out.join("; "))
    }

    /// Wait until every rank has answered `want` (events that come meanwhile go to `seen`).
    fn all_say(&self, want: &str, seen: &mut Vec<(u32, Value)>) -> Result<Vec<Value>, BenchError> {
        let all: Vec<u32> = (0..self.down.len() as u32).collect();
        self.these_say(&all, want, seen)
    }

    /// Wait until each of `ranks` has answered `want`; the answers in the order of `ranks`.
    fn these_say(
        &self,
        ranks: &[u32],
        want: &str,
        seen: &mut Vec<(u32, Value)>,
    ) -> Result<Vec<Value>, BenchError> {
        let deadline = Instant::now() + self.timeout;
        let mut got: HashMap<u32, Value> = HashMap::new();
        while got.len() < ranks.len() {
            let (r, v) = self.next(deadline, &format!("ranks answering {want}"))?;
            if v["r"] == want && ranks.contains(&r) {
                got.insert(r, v);
            } else {
                seen.push((r, v));
            }
        }
        Ok(ranks
            .iter()
            .map(|r| got.remove(r).unwrap_or_default())
            .collect())
    }

    /// Each rank's clock offset to this one (Cristian: the best of `tries` round trips).
    fn offsets(
        &mut self,
        tries: u32,
        seen: &mut Vec<(u32, Value)>,
    ) -> Result<Vec<Offset>, BenchError> {
        let mut best: Vec<Option<(u64, Offset)>> = vec![None; self.down.len()];
        let mut seq = 0u64;
        for (r, slot) in best.iter_mut().enumerate() {
            if self.same_clock[r] {
                *slot = Some((0, Offset::default()));
                continue;
            }
            for _ in 0..tries {
                seq += 1;
                let t0 = monotonic_ns();
                self.tell(r, json!({"c": "clock", "seq": seq}))?;
                let deadline = Instant::now() + self.timeout;
                let v = loop {
                    let (who, v) = self.next(deadline, "a clock reply")?;
                    if who as usize == r && v["r"] == "clock" && v["seq"] == seq {
                        break v;
                    }
                    seen.push((who, v));
                };
                let t1 = monotonic_ns();
                let theirs = v["ns"].as_u64().unwrap_or(0) as i128;
                let rtt = t1.saturating_sub(t0);
                let o = Offset {
                    ns: theirs - (i128::from(t0) + i128::from(t1)) / 2,
                    err_ns: rtt / 2,
                };
                if slot.is_none_or(|(b, _)| rtt < b) {
                    *slot = Some((rtt, o));
                }
            }
        }
        Ok(best
            .into_iter()
            .map(|b| b.map(|(_, o)| o).unwrap_or_default())
            .collect())
    }

    /// Run `repeat` trials, each on a fresh job: the trials done, and the error that stopped
    /// the rest if one did.
    fn trials(
        &mut self,
        cfg: &BenchConfig,
        repeat: u32,
        mut each: impl FnMut(u32, &Trial),
    ) -> (Vec<Trial>, Option<BenchError>) {
        let mut trials = Vec::new();
        for rep in 0..repeat {
            match self.trial(cfg, rep) {
                Ok(t) => {
                    each(rep, &t);
                    trials.push(t);
                }
                Err(e) => return (trials, Some(e)),
            }
        }
        (trials, None)
    }

    /// For `--fail host` and `host-down`: the host drawn for trial `rep` (never rank 0's, which
    /// drives), the ranks on it as named victims, and its index in the namespace cluster if
    /// the ranks run on one.
    fn host_victims(
        &self,
        cfg: &BenchConfig,
        rep: u32,
    ) -> Result<(String, Fail, Option<u32>), BenchError> {
        let mut others: Vec<&String> = self.host.iter().filter(|h| **h != self.host[0]).collect();
        others.sort();
        others.dedup();
        if others.is_empty() {
            return Err(failed(format!(
                "--fail {}: every rank runs on rank 0's host {:?}",
                cfg.fail, self.host[0]
            )));
        }
        let mut rng = SimRng::new(cfg.seed.wrapping_add(u64::from(rep)));
        let h = others[rng.below(others.len() as u64) as usize].clone();
        let on: Vec<NodeId> = (0..self.host.len() as u64)
            .filter(|&r| self.host[r as usize] == h)
            .map(NodeId)
            .collect();
        let index = self.netns_host[on[0].0 as usize];
        Ok((h, Fail::Named(on), index))
    }

    /// One trial: a fresh job, its tree connected, the victims' nodes crashed (or their host's
    /// link taken down), Ts measured.
    fn trial(&mut self, cfg: &BenchConfig, rep: u32) -> Result<Trial, BenchError> {
        let mut silent = None;
        let plan = match cfg.fail {
            Fail::Host(how) if !cfg.join => {
                let (h, fail, index) = self.host_victims(cfg, rep)?;
                if how != HostFailure::Crash {
                    let cluster = std::env::var(super::hosts::CLUSTER_VAR).map_err(|_| {
                        failed(format!(
                            "--fail {} silences a host's link: it needs the hosts of \
                             --hosts K ({} is not set)",
                            cfg.fail,
                            super::hosts::CLUSTER_VAR
                        ))
                    })?;
                    let cluster = Cluster::attach(&cluster).map_err(failed)?;
                    let not_netns = |h: &str| failed(format!("host {h} is not a netns host"));
                    let host = index.ok_or_else(|| not_netns(&h))?;
                    let from = match how {
                        HostFailure::Link => {
                            Some(self.netns_host[0].ok_or_else(|| not_netns(&self.host[0]))?)
                        }
                        _ => None,
                    };
                    silent = Some(Silence {
                        cluster,
                        host,
                        from,
                    });
                }
                super::stabilize::plan(
                    &BenchConfig {
                        fail,
                        ..cfg.clone()
                    },
                    rep,
                )?
            }
            _ => super::stabilize::plan(cfg, rep)?,
        };
        let survivors: Vec<u64> = plan.survivors().iter().map(|i| i.0).collect();
        let Plan {
            victims,
            mut missing,
            ..
        } = plan;
        let mut seen = Vec::new();
        // Every rank's old node down, every port bound again, then every node up.
        self.tell_all(json!({"c": "stop"}))?;
        self.all_say("stopped", &mut seen)?;
        self.tell_all(json!({"c": "bind"}))?;
        self.all_say("bound", &mut seen)?;
        seen.clear();
        self.tell_all(json!({"c": "start", "trial": rep}))?;
        let started = self.all_say("started", &mut seen)?;
        let ran_on: Vec<String> = started
            .iter()
            .filter_map(|v| v["backend"].as_str().map(str::to_owned))
            .collect();
        let ev = |v: &Value| (v["r"] == "ev").then(|| v["ev"].clone());
        let deadline = Instant::now() + self.timeout;
        let mut pending = std::mem::take(&mut seen).into_iter();
        while !missing.is_empty() {
            let (who, v) = match pending.next() {
                Some(x) => x,
                None => self.next(
                    deadline,
                    &format!("{} tree connections between ranks missing", missing.len()),
                )?,
            };
            if let Some(e) = ev(&v) {
                if e["kind"] == "authenticated" {
                    if let Some(p) = e["peer"].as_u64() {
                        missing.remove(&(NodeId(u64::from(who)), NodeId(p)));
                    }
                }
            }
        }
        std::thread::sleep(settle(cfg.nodes));
        while self.up.try_recv().is_ok() {}
        let offsets = self.offsets(4, &mut seen)?;
        let on_ours = |who: u32, ns: u64| -> u64 {
            (i128::from(ns) - offsets[who as usize].ns).max(0) as u64
        };
        // From here to the stabilization the ranks hold their reports ([`Held`]).
        self.tell_all(json!({"c": "hold"}))?;
        self.all_say("holding", &mut seen)?;
        let mut killed_at: Option<u64> = None;
        let _restore = match &silent {
            Some(s) => {
                killed_at = Some(monotonic_ns());
                Some(s.apply()?)
            }
            None => {
                for v in &victims {
                    self.tell(v.0 as usize, json!({"c": "kill"}))?;
                }
                None
            }
        };
        let mut detected: Option<u64> = None;
        let mut last_view: HashMap<u64, ((u64, u64), Vec<u64>)> = HashMap::new();
        let mut decided: HashSet<u32> = HashSet::new();
        let deadline = Instant::now() + self.timeout;
        let mut pending = std::mem::take(&mut seen).into_iter();
        let (epoch, stable_at) = loop {
            let (who, v) = match pending.next() {
                Some(x) => x,
                None => match self.next(
                    deadline,
                    &format!("no stabilization after killing {victims:?}"),
                ) {
                    Ok(x) => x,
                    Err(BenchError::Timeout(t, what)) => {
                        let last = self.last_views(&survivors, &last_view);
                        return Err(BenchError::Timeout(t, format!("{what}; {last}")));
                    }
                    Err(e) => return Err(e),
                },
            };
            if v["r"] == "killed" {
                let at = on_ours(who, v["ns"].as_u64().unwrap_or(0));
                killed_at = Some(killed_at.map_or(at, |k| k.min(at)));
                continue;
            }
            let Some(e) = ev(&v) else { continue };
            let at = on_ours(who, e["mono_ns"].as_u64().unwrap_or(0));
            match e["kind"].as_str() {
                Some("detected") if detected.is_none_or(|d| at < d) => {
                    detected = Some(at);
                    decided.insert(who);
                }
                Some("view") => {
                    last_view.insert(u64::from(who), view_report(&e));
                }
                Some("stabilized") => {
                    let name = (e["epoch"].as_u64().unwrap_or(0), u64::from(who));
                    if last_view
                        .get(&u64::from(who))
                        .is_some_and(|(x, v)| *x == name && *v == survivors)
                    {
                        decided.insert(who);
                        break (name, at);
                    }
                }
                _ => {}
            }
        };
        // What every survivor held meanwhile: its detections and views. The root's
        // `stabilized` may have overtaken the first detection, which is why it is read only
        // now. A victim's process may be cut off (`host-down`, `link`): its reports are not
        // the trial's; it holds them until its next `start`.
        let told: Vec<u32> = survivors.iter().map(|&s| s as u32).collect();
        for &r in &told {
            self.tell(
                r as usize,
                json!({"c": "flush", "epoch": epoch.0, "root": epoch.1}),
            )?;
        }
        let mut installed: HashSet<(u64, ViewReport)> = HashSet::new();
        let flushed = self.these_say(&told, "flushed", &mut seen)?;
        for (&who, reply) in told.iter().zip(flushed) {
            for e in reply["evs"].as_array().into_iter().flatten() {
                let Some(e) = ev(e) else { continue };
                let at = on_ours(who, e["mono_ns"].as_u64().unwrap_or(0));
                match e["kind"].as_str() {
                    Some("view") => {
                        installed.insert((u64::from(who), view_report(&e)));
                    }
                    Some("detected") if detected.is_none_or(|d| at < d) => {
                        detected = Some(at);
                        decided.insert(who);
                    }
                    _ => {}
                }
            }
        }
        for (who, v) in seen.drain(..) {
            if v["r"] == "killed" {
                let at = on_ours(who, v["ns"].as_u64().unwrap_or(0));
                killed_at = Some(killed_at.map_or(at, |k| k.min(at)));
            } else if let Some(e) = ev(&v).filter(|e| e["kind"] == "view") {
                installed.insert((u64::from(who), view_report(&e)));
            }
        }
        // Every survivor installed the stabilized view (a later epoch may have followed).
        let views_agree = survivors
            .iter()
            .all(|&s| installed.contains(&(s, (epoch, survivors.clone()))));
        let detected = detected.unwrap_or(stable_at);
        let clock_err = decided
            .iter()
            .chain(
                victims
                    .iter()
                    .map(|v| v.0 as u32)
                    .collect::<Vec<_>>()
                    .iter(),
            )
            .map(|&r| offsets[r as usize].err_ns)
            .max()
            .unwrap_or(0);
        Ok(Trial {
            victims,
            ts: Duration::from_nanos(stable_at.saturating_sub(detected)),
            detect: Duration::from_nanos(detected.saturating_sub(killed_at.unwrap_or(detected))),
            epochs: epoch.0,
            views_agree,
            cpu: None,
            backend: crate::transport::backend_name(&ran_on),
            // One node per process: their messages cross the kernel.
            transport: "tcp".into(),
            clock_err: Some(Duration::from_nanos(clock_err)),
        })
    }

    /// A ping phase: every rank's node down and its port bound again, then every group of
    /// `groups` (a parent and its children, [`contention`]) pings at once, `iters` timed
    /// rounds after `warmup`; every parent's round trips, ns.
    fn ping(
        &mut self,
        groups: &[Vec<NodeId>],
        iters: u64,
        warmup: u64,
        gap: Duration,
    ) -> Result<Vec<u64>, BenchError> {
        let mut seen = Vec::new();
        self.tell_all(json!({"c": "stop"}))?;
        self.all_say("stopped", &mut seen)?;
        self.tell_all(json!({"c": "bind"}))?;
        self.all_say("bound", &mut seen)?;
        let ids: Vec<Vec<u64>> = groups
            .iter()
            .map(|g| g.iter().map(|i| i.0).collect())
            .collect();
        seen.clear();
        self.tell_all(
            json!({"c": "ping", "groups": ids, "iters": iters, "warmup": warmup,
                             "gap_us": gap.as_micros() as u64}),
        )?;
        self.all_say("started", &mut seen)?;
        let mut parents: HashSet<u32> = groups.iter().map(|g| g[0].0 as u32).collect();
        let deadline = Instant::now() + self.timeout;
        let mut pending = std::mem::take(&mut seen).into_iter();
        while !parents.is_empty() {
            let (who, v) = match pending.next() {
                Some(x) => x,
                None => self.next(
                    deadline,
                    &format!("{} ping groups still running", parents.len()),
                )?,
            };
            if v["r"] == "ev" && v["ev"]["kind"] == "done" {
                parents.remove(&who);
            }
        }
        self.tell_all(json!({"c": "stop"}))?;
        let stopped = self.all_say("stopped", &mut seen)?;
        Ok(stopped
            .iter()
            .flat_map(|v| {
                v["rtt_ns"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_u64).collect::<Vec<_>>())
                    .unwrap_or_default()
            })
            .collect())
    }

    /// Stop every rank's node and let the ranks go.
    fn dismiss(&mut self) {
        let _ = self.tell_all(json!({"c": "exit"}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::control::split;

    /// A rank and rank 0's end of one control connection, and rank 0 telling the rank `lines`
    /// before it goes away.
    fn rank_after_driver_left(lines: &[Value]) -> (ControlSender, ControlReceiver) {
        let key = crate::transport::JobKey::from_bytes([4; 32]);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let rank = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (driver, _) = l.accept().unwrap();
        let (mut down, up) = split(driver, &key, Direction::Down).unwrap();
        for v in lines {
            down.send(v).unwrap();
        }
        drop((down, up));
        split(rank, &key, Direction::Up).unwrap()
    }

    /// A reply written after rank 0 left fails (the first write may still be taken).
    fn failed_reply(tx: &mut ControlSender) -> BenchError {
        for _ in 0..100 {
            if let Err(e) = tx.send(&json!({"r": "killed", "ns": 1})) {
                return e.into();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("writes to a closed connection kept succeeding");
    }

    #[test]
    fn a_reply_that_finds_rank_0_gone_after_its_exit_ends_the_rank_normally() {
        let (mut tx, mut rx) = rank_after_driver_left(&[json!({"c": "exit"})]);
        let e = failed_reply(&mut tx);
        assert!(dismissed_or(e, &mut rx).is_ok());
    }

    /// CI saw rank 2 exit 0 in a job rank 0 had ended on an error: the leftover exit was
    /// taken for a normal end whatever it said.
    #[test]
    fn a_reply_that_finds_rank_0_gone_after_an_exit_on_an_error_ends_the_rank_with_it() {
        let exit = json!({"c": "exit", "error": "rank 3's control channel closed"});
        let (mut tx, mut rx) = rank_after_driver_left(&[exit]);
        let e = failed_reply(&mut tx);
        let why = dismissed_or(e, &mut rx)
            .expect_err("the job failed")
            .to_string();
        assert!(why.contains("rank 0 ended the job: rank 3's"), "{why}");
    }

    #[test]
    fn a_reply_that_finds_rank_0_gone_without_an_exit_is_an_error() {
        let (mut tx, mut rx) = rank_after_driver_left(&[json!({"c": "clock", "seq": 1})]);
        let e = failed_reply(&mut tx);
        assert!(dismissed_or(e, &mut rx).is_err());
    }

    #[test]
    fn held_reports_wait_except_the_roots_stabilization_with_its_view() {
        let ev = |kind: &str, epoch: u64| json!({"r": "ev", "ev": {"kind": kind, "epoch": epoch}});
        let mut h = Held::default();
        assert_eq!(h.keep(ev("view", 0)), [ev("view", 0)], "not holding: sent");
        h = Held {
            holding: true,
            ..Held::default()
        };
        assert!(h.keep(ev("detected", 1)).is_empty());
        assert!(h.keep(ev("view", 1)).is_empty());
        assert!(h.keep(ev("authenticated", 1)).is_empty());
        // The root's stabilization goes at once, after the view it stabilized.
        assert_eq!(
            h.keep(ev("stabilized", 1)),
            [ev("view", 1), ev("stabilized", 1)]
        );
        // Everything else waits for the flush, in order.
        let kinds: Vec<&str> = h
            .lines
            .iter()
            .map(|l| l["ev"]["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["detected", "view", "authenticated"]);
    }
}
