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

use super::stabilize::BenchError;
use crate::engine::reactor::NodeEvent;
use crate::proto::broadcast::{Broadcast, BroadcastConfig, OrderEvent};
use crate::proto::heartbeat::HeartbeatConfig;
use crate::proto::{Event, Outbox, Protocol, Time, TimerId};
use crate::transport::{Cluster, NodeOptions};
use crate::NodeId;
use serde::Serialize;
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

    fn on_start(&mut self, now: Time, out: &mut Outbox<P::Msg>) {
        self.inner.on_start(now, out);
    }

    fn on_message(&mut self, now: Time, from: NodeId, msg: P::Msg, out: &mut Outbox<P::Msg>) {
        if self.running() {
            self.inner.on_message(now, from, msg, out);
        }
    }

    fn on_timer(&mut self, now: Time, timer: TimerId, out: &mut Outbox<P::Msg>) {
        if self.running() {
            self.inner.on_timer(now, timer, out);
        }
    }

    fn on_suspect(&mut self, now: Time, peer: NodeId, out: &mut Outbox<P::Msg>) {
        if self.running() {
            self.inner.on_suspect(now, peer, out);
        }
    }

    fn on_wake(&mut self, now: Time, out: &mut Outbox<P::Msg>) {
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
}

/// Run it.
pub fn run(cfg: &HeartbeatBenchConfig) -> Result<HeartbeatBenchRow, BenchError> {
    let n = cfg.nodes;
    if n < 3 || cfg.trials + 2 > n {
        return Err(BenchError::Config(format!(
            "{} trials on {n} nodes: need 3 nodes and 2 left after the trials",
            cfg.trials
        )));
    }
    cfg.heartbeat.check().map_err(BenchError::Config)?;
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
    let mut periods =
        (n as f64 * quiet_start.elapsed().as_secs_f64() / period.as_secs_f64()) as u64;
    let mut detect = Vec::with_capacity(cfg.trials);
    for t in 0..cfg.trials {
        // Spread over the ring: watchers and victims differ from trial to trial.
        let victim = (1 + t * 5) % n;
        // False suspicions may have removed the rest: the trials end there (`trials` says
        // how many ran).
        let Some(victim) = (0..n)
            .map(|k| (victim + k) % n)
            .find(|&v| !w.suspected[v] && !hung[v].load(Ordering::Relaxed))
        else {
            break;
        };
        let start = Instant::now();
        hung[victim].store(true, Ordering::Relaxed);
        let at_hang = since(start);
        let limit = cfg.heartbeat.timeout() * 20 + Duration::from_secs(1);
        let Some(at) = w.watch(&c.events, &hung, start + limit, Some(victim)) else {
            return Err(BenchError::Timeout(
                limit,
                format!("trial {t}: process {victim} hung and nobody suspected it"),
            ));
        };
        detect.push(at.saturating_sub(at_hang) as f64 / 1e3);
        let live = n - t;
        periods += (live as f64 * start.elapsed().as_secs_f64() / period.as_secs_f64()) as u64;
    }
    c.shutdown()?;
    let grid_rounds = super::broadcast::stop_grid(grid)?;
    let mut sorted = detect.clone();
    sorted.sort_by(f64::total_cmp);
    let max = sorted.last().copied().unwrap_or(0.0);
    Ok(HeartbeatBenchRow {
        nodes: n,
        heartbeat_us: period.as_micros() as u64,
        suspect_after: cfg.heartbeat.suspect_after,
        trials: detect.len(),
        detect_us_p50: sorted.get(sorted.len() / 2).copied().unwrap_or(0.0),
        detect_us_max: max,
        detect_periods_max: max / (period.as_secs_f64() * 1e6),
        periods,
        false_suspicions: w.false_suspicions,
        background: cfg.background.is_some(),
        grid_rounds,
        backend,
    })
}

/// The suspicions seen so far.
struct Watcher {
    /// Each process was suspected (by anyone).
    suspected: Vec<bool>,
    /// Suspicions of processes that were not hung.
    false_suspicions: u64,
}

impl Watcher {
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
            let peer = peer.0 as usize;
            if std::mem::replace(&mut self.suspected[peer], true) {
                continue; // told again, by another process
            }
            if Some(peer) == victim {
                return Some(at.0);
            }
            if !hung[peer].load(Ordering::Relaxed) {
                self.false_suspicions += 1;
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
        let mut out = Outbox::new();
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
