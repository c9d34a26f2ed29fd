//! `weft bench heartbeat`: how fast the ring heartbeats of [`crate::proto::heartbeat`] find a
//! process that hangs with its connections up, and how often they blame a live one, on
//! in-process engine nodes running the Process Order broadcast with heartbeats on.
//!
//! 1. N nodes start, with the 2-D grid application ([`crate::proto::grid`]) beside them keeping
//!    both cores busy (unless asked not to).
//! 2. Quiet phase: nothing hangs for `quiet_periods` heartbeat periods; every suspicion
//!    counted then is a false one.
//! 3. Trials, one process at a time: a live process hangs ([`Hang`]: it stops handling
//!    messages and timers, so it stops sending, while its sockets stay open and its kernel
//!    keeps taking bytes, as a SIGSTOPped process's does); the time from the hang to the
//!    first suspicion of it, by anyone, is its detection time. A hung process stays hung (it
//!    is out of the table by then) and the next trial hangs another.
//!
//! [`run_procs`] does the same with one `weft node` process per node (the radix membership
//! with its ring heartbeats, [`crate::proto::membership::MembershipConfig::heartbeat`]), and a
//! hang is a real SIGSTOP.

use super::procs;
use super::scenario::Fail;
use super::stabilize::{BenchConfig, BenchError};
use crate::engine::reactor::NodeEvent;
use crate::proto::broadcast::{Broadcast, BroadcastConfig, OrderEvent};
use crate::proto::heartbeat::HeartbeatConfig;
use crate::proto::membership::TreeMode;
use crate::proto::{Event, OutboxOf, Protocol, Time, TimerId};
use crate::transport::{Cluster, NodeOptions};
use crate::NodeId;
use serde::Serialize;
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A protocol that can be made to hang: once `hung` is set it handles nothing more (no
/// message, no timer, no suspicion), so it sends nothing more.
pub struct Hang<P> {
    inner: P,
    hung: Arc<AtomicBool>,
}

impl<P> Hang<P> {
    /// `inner`, running until `hung` is set.
    pub fn new(inner: P, hung: Arc<AtomicBool>) -> Self {
        Self { inner, hung }
    }

    fn running(&self) -> bool {
        !self.hung.load(Ordering::Relaxed)
    }
}

impl<P: Protocol> Protocol for Hang<P> {
    type Msg = P::Msg;
    type Event = P::Event;
    type Request = P::Request;

    fn on_start(&mut self, now: Time, out: &mut OutboxOf<P>) {
        self.inner.on_start(now, out);
    }

    fn on_message(&mut self, now: Time, from: NodeId, msg: P::Msg, out: &mut OutboxOf<P>) {
        if self.running() {
            self.inner.on_message(now, from, msg, out);
        }
    }

    fn on_timer(&mut self, now: Time, timer: TimerId, out: &mut OutboxOf<P>) {
        if self.running() {
            self.inner.on_timer(now, timer, out);
        }
    }

    fn on_suspect(&mut self, now: Time, peer: NodeId, out: &mut OutboxOf<P>) {
        if self.running() {
            self.inner.on_suspect(now, peer, out);
        }
    }

    fn on_wake(&mut self, now: Time, out: &mut OutboxOf<P>) {
        if self.running() {
            self.inner.on_wake(now, out);
        }
    }

    fn state_version(&self) -> u64 {
        self.inner.state_version()
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct HeartbeatBenchConfig {
    /// Nodes.
    pub nodes: usize,
    /// The detector's settings.
    pub heartbeat: HeartbeatConfig,
    /// Processes hung, one after another.
    pub trials: usize,
    /// Periods of the quiet phase.
    pub quiet_periods: u32,
    /// Run the grid application beside, exchanging this many doubles (`None`: idle cores).
    pub background: Option<usize>,
    /// Engine settings.
    pub opts: NodeOptions,
}

/// The result (`--json`).
#[derive(Clone, Debug, Serialize)]
pub struct HeartbeatBenchRow {
    /// Nodes.
    pub nodes: usize,
    /// The period, µs.
    pub heartbeat_us: u64,
    /// Silence, in periods, before a suspicion.
    pub suspect_after: f64,
    /// Processes hung (fewer than asked when false suspicions left too few live ones).
    pub trials: usize,
    /// Median time from a hang to its first suspicion, µs.
    pub detect_us_p50: f64,
    /// Longest, µs.
    pub detect_us_max: f64,
    /// The longest in periods (the goal: within 3).
    pub detect_periods_max: f64,
    /// Process-periods watched: live processes × periods, over the quiet phase and the trials.
    pub periods: u64,
    /// Suspicions of processes that were not hung.
    pub false_suspicions: u64,
    /// The grid application kept the cores busy.
    pub background: bool,
    /// Its rounds, summed over its processes.
    pub grid_rounds: u64,
    /// What the nodes ran on.
    pub backend: String,
    /// The protocol the heartbeats served: `order` (the Process Order broadcast, in-process
    /// nodes) or `membership` (`weft node` processes).
    pub protocol: String,
    /// One OS process per node, hung with SIGSTOP.
    pub procs: bool,
}

impl HeartbeatBenchConfig {
    /// Whether it can run: enough nodes for the trials, a sound detector.
    fn check(&self) -> Result<(), BenchError> {
        let n = self.nodes;
        if n < 3 || self.trials + 2 > n {
            return Err(BenchError::Config(format!(
                "{} trials on {n} nodes: need 3 nodes and 2 left after the trials",
                self.trials
            )));
        }
        self.heartbeat.check().map_err(BenchError::Config)
    }

    /// The victim of trial `t`, spread over the ring so that watchers and victims differ
    /// from trial to trial; `None` when no live process is left to hang (false suspicions
    /// may have removed the rest).
    fn victim(&self, t: usize, out: impl Fn(usize) -> bool) -> Option<usize> {
        let n = self.nodes;
        let first = (1 + t * 5) % n;
        (0..n).map(|k| (first + k) % n).find(|&v| !out(v))
    }

    /// The longest a trial waits for its suspicion.
    fn limit(&self) -> Duration {
        self.heartbeat.timeout() * 20 + Duration::from_secs(1)
    }
}

/// The row of a run: detection times (µs) and the counts.
struct Tally {
    detect: Vec<f64>,
    periods: u64,
    false_suspicions: u64,
}

impl Tally {
    fn row(
        self,
        cfg: &HeartbeatBenchConfig,
        grid_rounds: u64,
        backend: String,
        protocol: &str,
        procs: bool,
    ) -> HeartbeatBenchRow {
        let period = cfg.heartbeat.period;
        let mut sorted = self.detect;
        sorted.sort_by(f64::total_cmp);
        let max = sorted.last().copied().unwrap_or(0.0);
        HeartbeatBenchRow {
            nodes: cfg.nodes,
            heartbeat_us: period.as_micros() as u64,
            suspect_after: cfg.heartbeat.suspect_after,
            trials: sorted.len(),
            detect_us_p50: sorted.get(sorted.len() / 2).copied().unwrap_or(0.0),
            detect_us_max: max,
            detect_periods_max: max / (period.as_secs_f64() * 1e6),
            periods: self.periods,
            false_suspicions: self.false_suspicions,
            background: cfg.background.is_some(),
            grid_rounds,
            backend,
            protocol: protocol.into(),
            procs,
        }
    }
}

/// Process-periods of `live` processes over `since`'s time.
fn periods(live: usize, since: Instant, period: Duration) -> u64 {
    (live as f64 * since.elapsed().as_secs_f64() / period.as_secs_f64()) as u64
}

/// Run it.
pub fn run(cfg: &HeartbeatBenchConfig) -> Result<HeartbeatBenchRow, BenchError> {
    cfg.check()?;
    let n = cfg.nodes;
    let period = cfg.heartbeat.period;
    let grid = super::broadcast::start_grid(n, cfg.background, &cfg.opts)?;
    let bcfg = BroadcastConfig {
        heartbeat: Some(cfg.heartbeat),
        ..BroadcastConfig::default()
    };
    let hung: Arc<[Arc<AtomicBool>]> = (0..n).map(|_| Arc::new(AtomicBool::new(false))).collect();
    let opts = NodeOptions {
        params: bcfg.params(n),
        ..cfg.opts.clone()
    };
    let flags = hung.clone();
    let c = Cluster::start(n, opts, move |i, ids| {
        Hang::new(
            Broadcast::new(ids[i], ids.to_vec(), bcfg.clone()),
            flags[i].clone(),
        )
    })?;
    let backend = c.backend_name();
    let since = |t: Instant| t.duration_since(c.epoch).as_nanos() as u64;
    let mut w = Watcher {
        suspected: vec![false; n],
        false_suspicions: 0,
    };
    let quiet_start = Instant::now();
    let quiet = period * cfg.quiet_periods;
    w.watch(&c.events, &hung, quiet_start + quiet, None);
    let mut tally = Tally {
        detect: Vec::with_capacity(cfg.trials),
        periods: periods(n, quiet_start, period),
        false_suspicions: 0,
    };
    for t in 0..cfg.trials {
        let Some(victim) = cfg.victim(t, |v| w.suspected[v] || hung[v].load(Ordering::Relaxed))
        else {
            break;
        };
        let start = Instant::now();
        hung[victim].store(true, Ordering::Relaxed);
        let at_hang = since(start);
        let limit = cfg.limit();
        let Some(at) = w.watch(&c.events, &hung, start + limit, Some(victim)) else {
            return Err(BenchError::Timeout(
                limit,
                format!("trial {t}: process {victim} hung and nobody suspected it"),
            ));
        };
        tally.detect.push(at.saturating_sub(at_hang) as f64 / 1e3);
        tally.periods += periods(n - t, start, period);
    }
    c.shutdown()?;
    let grid_rounds = super::broadcast::stop_grid(grid)?;
    tally.false_suspicions = w.false_suspicions;
    Ok(tally.row(cfg, grid_rounds, backend, "order", false))
}

/// The same on `weft node` processes (the executable at `exe`): the radix membership with
/// its ring heartbeats, a hang a real SIGSTOP, a suspicion any process's `detected` report.
pub fn run_procs(cfg: &HeartbeatBenchConfig, exe: &Path) -> Result<HeartbeatBenchRow, BenchError> {
    cfg.check()?;
    let n = cfg.nodes;
    let period = cfg.heartbeat.period;
    let grid = super::broadcast::start_grid(n, cfg.background, &cfg.opts)?;
    let bench = BenchConfig::new(
        n as u32,
        4,
        TreeMode::Patch,
        Fail::Leaf,
        0,
        cfg.opts.clone(),
    );
    let forced = crate::engine::forced_backend(cfg.opts.backend)?.map(|b| b.to_string());
    let extra = [
        "--heartbeat-us".to_string(),
        period.as_micros().to_string(),
        "--suspect-after".into(),
        cfg.heartbeat.suspect_after.to_string(),
    ];
    let job = procs::start(exe, &bench, forced.as_deref(), &extra)?;
    let pids: Vec<i32> = job
        .children
        .iter()
        .map(|c| c.as_ref().map_or(0, |c| c.id() as i32))
        .collect();
    let mut ran_on = Vec::new();
    // Every process beats to its successor once the ring's connections are up.
    let mut ring: HashSet<(u64, u64)> = (0..n as u64).map(|i| (i, (i + 1) % n as u64)).collect();
    let deadline = Instant::now() + cfg.limit() + Duration::from_secs(10);
    while !ring.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok((who, r)) = job.reports.recv_timeout(left) else {
            return Err(BenchError::Timeout(
                cfg.limit(),
                format!("{} heartbeat ring connections missing", ring.len()),
            ));
        };
        match r["kind"].as_str() {
            Some("started") => ran_on.extend(r["backend"].as_str().map(str::to_owned)),
            Some("authenticated") => {
                ring.remove(&(who, r["peer"].as_u64().unwrap_or(u64::MAX)));
            }
            _ => {}
        }
    }
    let mut stopped = vec![false; n];
    let mut w = Watcher {
        suspected: vec![false; n],
        false_suspicions: 0,
    };
    let quiet_start = Instant::now();
    w.reports(
        &job.reports,
        quiet_start + period * cfg.quiet_periods,
        None,
        &stopped,
    );
    let mut tally = Tally {
        detect: Vec::with_capacity(cfg.trials),
        periods: periods(n, quiet_start, period),
        false_suspicions: 0,
    };
    for t in 0..cfg.trials {
        let Some(victim) = cfg.victim(t, |v| stopped[v] || w.suspected[v]) else {
            break;
        };
        let start = Instant::now();
        let at = crate::engine::monotonic_ns();
        // SAFETY: a signal to a child this benchmark started and still holds.
        unsafe { libc::kill(pids[victim], libc::SIGSTOP) };
        stopped[victim] = true;
        let Some(seen) = w.reports(&job.reports, start + cfg.limit(), Some(victim), &stopped)
        else {
            return Err(BenchError::Timeout(
                cfg.limit(),
                format!("trial {t}: process {victim} stopped and nobody suspected it"),
            ));
        };
        tally.detect.push(seen.saturating_sub(at) as f64 / 1e3);
        tally.periods += periods(n - t, start, period);
    }
    tally.false_suspicions = w.false_suspicions;
    // Stopped processes die of the job's SIGKILL as they are.
    drop(job);
    let grid_rounds = super::broadcast::stop_grid(grid)?;
    Ok(tally.row(
        cfg,
        grid_rounds,
        crate::transport::backend_name(&ran_on),
        "membership",
        true,
    ))
}

/// The suspicions seen so far.
struct Watcher {
    /// Each process was suspected (by anyone).
    suspected: Vec<bool>,
    /// Suspicions of processes that were not hung.
    false_suspicions: u64,
}

impl Watcher {
    /// A suspicion of `peer` reported (by anyone); whether it is `victim`'s first.
    fn saw(&mut self, peer: usize, victim: Option<usize>, hung: impl Fn(usize) -> bool) -> bool {
        if peer >= self.suspected.len() || std::mem::replace(&mut self.suspected[peer], true) {
            return false; // told again, by another process
        }
        if Some(peer) == victim {
            return true;
        }
        if !hung(peer) {
            self.false_suspicions += 1;
        }
        false
    }

    /// Read node processes' reports until `until`; the time (their CLOCK_MONOTONIC, ns) of
    /// `victim`'s first suspicion, if it came.
    fn reports(
        &mut self,
        reports: &std::sync::mpsc::Receiver<(u64, serde_json::Value)>,
        until: Instant,
        victim: Option<usize>,
        stopped: &[bool],
    ) -> Option<u64> {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let (_, r) = reports.recv_timeout(left).ok()?;
            if r["kind"] != "detected" {
                continue;
            }
            let Some(peer) = r["peer"].as_u64() else {
                continue;
            };
            if self.saw(peer as usize, victim, |p| stopped[p]) {
                return r["mono_ns"].as_u64();
            }
        }
    }

    /// Read suspicions until `until`; the time of `victim`'s first, if it came.
    fn watch(
        &mut self,
        events: &std::sync::mpsc::Receiver<(NodeId, NodeEvent)>,
        hung: &[Arc<AtomicBool>],
        until: Instant,
        victim: Option<usize>,
    ) -> Option<u64> {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let Ok((_, e)) = events.recv_timeout(left) else {
                return None;
            };
            let NodeEvent::Protocol(Event::Order(OrderEvent::Suspected { peer, at })) = e else {
                continue;
            };
            if self.saw(peer.0 as usize, victim, |p| hung[p].load(Ordering::Relaxed)) {
                return Some(at.0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::ping::PingPong;

    #[test]
    fn a_hung_protocol_handles_and_sends_nothing() {
        let flag = Arc::new(AtomicBool::new(false));
        let mut p = Hang::new(PingPong::ponger(), flag.clone());
        let mut out = crate::proto::Outbox::new();
        let ping = crate::proto::ping::PingMsg::Ping {
            seq: 1,
            payload: vec![1u8].into(),
        };
        p.on_message(Time::ZERO, NodeId(1), ping.clone(), &mut out);
        assert_eq!(out.sends(), 1, "a running ponger echoes");
        out.drain();
        flag.store(true, Ordering::Relaxed);
        p.on_message(Time::ZERO, NodeId(1), ping, &mut out);
        p.on_timer(Time::ZERO, TimerId(1), &mut out);
        assert!(out.is_empty(), "a hung one does nothing");
    }
}
