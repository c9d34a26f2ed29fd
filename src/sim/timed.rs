//! A continuous-time discrete-event simulator: messages take a latency from a network model,
//! each process handles one event at a time and each handling costs `ocp` of its CPU, so load
//! on one process (a parent with many children) turns into delay, as on a real machine.
//!
//! Used for stabilization latency (ICS'06): the base model (constant `L`), the 3-D torus
//! distance model (`hops × L`) and contention (a sender pays `send` per message, so the k-th
//! of c messages leaves `k × send` later).

use super::rng::SimRng;
use crate::proto::{Action, Event, Outbox, Protocol, Time, TimerId};
use crate::topology::torus::Torus;
use crate::{NodeId, Rank};
use std::cmp::Reverse;
use std::collections::HashMap;
use std::collections::{BinaryHeap, HashSet};
use std::time::Duration;

/// Message latency between two processes.
#[derive(Clone, Copy, Debug)]
pub enum Net {
    /// Every message takes `l`.
    Constant {
        /// Latency.
        l: Duration,
    },
    /// `hops × l` on a torus, ranks in XYZ order (process i at rank i).
    Torus {
        /// Per-hop latency.
        l: Duration,
        /// The torus.
        torus: Torus,
    },
}

impl Net {
    fn delay(&self, from: u32, to: u32) -> u64 {
        match self {
            Net::Constant { l } => l.as_nanos() as u64,
            Net::Torus { l, torus } => {
                torus.hops(Rank(from), Rank(to)).max(1) as u64 * l.as_nanos() as u64
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Deliver {
        to: u32,
        from: u32,
        slot: usize,
        /// The incarnation of `to` it was sent to (a restarted process does not get them).
        incarnation: u32,
    },
    Start {
        node: u32,
    },
    Suspect {
        at: u32,
        peer: u32,
    },
    Timer {
        node: u32,
        timer: TimerId,
        generation: u64,
    },
}

/// Costs and the network.
#[derive(Clone, Copy, Debug)]
pub struct TimedConfig {
    /// Latency model.
    pub net: Net,
    /// CPU time to handle one event (the paper's `Ocp` per message).
    pub ocp: Duration,
    /// CPU time to send one message (contention: a node sending c messages spends `c × send`).
    pub send: Duration,
    /// Time for a sender to notice that its peer is dead (a failed send).
    pub detect: Duration,
}

/// Processes, alive or dead, and the events in flight.
pub struct TimedWorld<P: Protocol> {
    nodes: Vec<P>,
    alive: Vec<bool>,
    busy_until: Vec<u64>,
    queue: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    msgs: Vec<Option<P::Msg>>,
    seq: u64,
    cfg: TimedConfig,
    now: u64,
    suspected: HashSet<(u32, u32)>,
    /// Live generation of each (process, timer): re-arming makes older events stale.
    timers: HashMap<(u32, TimerId), u64>,
    /// Messages sent.
    pub sent: u64,
    out: Outbox<P::Msg>,
    /// What processes reported: (process, time its handling ended, event).
    reports: Vec<(u32, u64, Event)>,
    /// Incarnation of each process (bumped when it restarts).
    incarnation: Vec<u32>,
    /// Protocols waiting for their `Start` (a joiner, a restarted process).
    pending: HashMap<u32, P>,
}

impl<P: Protocol> TimedWorld<P> {
    /// Processes `0..n` (process i is `NodeId(i)`).
    pub fn new(nodes: Vec<P>, cfg: TimedConfig) -> Self {
        let n = nodes.len();
        Self {
            nodes,
            alive: vec![true; n],
            busy_until: vec![0; n],
            queue: BinaryHeap::new(),
            msgs: Vec::new(),
            seq: 0,
            cfg,
            now: 0,
            suspected: HashSet::new(),
            timers: HashMap::new(),
            sent: 0,
            out: Outbox::new(),
            reports: Vec::new(),
            incarnation: vec![0; n],
            pending: HashMap::new(),
        }
    }

    /// The protocols.
    pub fn nodes(&self) -> &[P] {
        &self.nodes
    }

    /// The events reported since the last call: (process, time its handling ended, event).
    pub fn take_reports(&mut self) -> Vec<(u32, u64, Event)> {
        std::mem::take(&mut self.reports)
    }

    /// Whether process `i` is alive.
    pub fn is_alive(&self, i: u32) -> bool {
        self.alive[i as usize]
    }

    /// Simulated time, in nanoseconds.
    pub fn now(&self) -> u64 {
        self.now
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, ev)));
    }

    /// Call `on_start` on every live process at time 0.
    pub fn start(&mut self) {
        for i in 0..self.nodes.len() {
            if !self.alive[i] {
                continue; // killed before the start: a slot for a later joiner
            }
            self.nodes[i].on_start(Time(0), &mut self.out);
            self.apply(i as u32, 0);
        }
    }

    /// Kill process `i` now: it stops handling events; messages to it are lost, and each
    /// sender notices after `detect`.
    pub fn kill(&mut self, i: u32) {
        self.alive[i as usize] = false;
    }

    /// At time `t`, process `i` starts running `proto` (alive, `on_start`): a joiner that was
    /// idle so far, or a dead process restarted without its state. Messages sent to an
    /// earlier incarnation are lost.
    pub fn spawn_at(&mut self, t: u64, i: u32, proto: P) {
        self.pending.insert(i, proto);
        self.push(t, Ev::Start { node: i });
    }

    /// Process `at` suspects `peer` at time `t` (an external failure detector).
    pub fn suspect_at(&mut self, t: u64, at: u32, peer: u32) {
        if self.suspected.insert((at, peer)) {
            self.push(t, Ev::Suspect { at, peer });
        }
    }

    fn apply(&mut self, i: u32, start: u64) {
        let mut t = start + self.cfg.ocp.as_nanos() as u64;
        // The outbox's own storage, not a fresh Vec per event (no protocol runs in this loop).
        let mut out = std::mem::take(&mut self.out);
        for a in out.drain() {
            match a {
                Action::SetTimer { timer, after } => {
                    self.seq += 1;
                    let generation = self.seq;
                    self.timers.insert((i, timer), generation);
                    let at = start + after.as_nanos() as u64;
                    self.push(
                        at,
                        Ev::Timer {
                            node: i,
                            timer,
                            generation,
                        },
                    );
                    continue;
                }
                Action::CancelTimer(timer) => {
                    self.timers.remove(&(i, timer));
                    continue;
                }
                Action::Report(e) => {
                    self.reports
                        .push((i, start + self.cfg.ocp.as_nanos() as u64, e));
                    continue;
                }
                Action::Send { .. } => {}
            }
            if let Action::Send { to, msg } = a {
                if to.0 >= self.nodes.len() as u64 {
                    continue;
                }
                t += self.cfg.send.as_nanos() as u64;
                self.sent += 1;
                let to = to.0 as u32;
                if !self.alive[to as usize] {
                    let at = t + self.cfg.detect.as_nanos() as u64;
                    self.suspect_at(at, i, to);
                    continue;
                }
                let slot = self.msgs.len();
                self.msgs.push(Some(msg));
                let arrive = t + self.cfg.net.delay(i, to);
                let incarnation = self.incarnation[to as usize];
                self.push(
                    arrive,
                    Ev::Deliver {
                        to,
                        from: i,
                        slot,
                        incarnation,
                    },
                );
            }
        }
        self.out = out;
        self.busy_until[i as usize] = t;
    }

    /// Handle the next event; returns the process that handled it (`Some(None)` if the event
    /// was lost on a dead process), `None` when nothing is left.
    pub fn step(&mut self) -> Option<Option<u32>> {
        let Reverse((at, _, ev)) = self.queue.pop()?;
        let node = match &ev {
            Ev::Deliver { to, .. } => *to,
            Ev::Suspect { at, .. } => *at,
            Ev::Timer { node, .. } => *node,
            Ev::Start { node } => {
                let node = *node;
                let Some(proto) = self.pending.remove(&node) else {
                    return Some(None);
                };
                let i = node as usize;
                self.nodes[i] = proto;
                self.alive[i] = true;
                self.incarnation[i] += 1;
                self.busy_until[i] = self.busy_until[i].max(at);
                self.timers.retain(|&(n, _), _| n != node);
                // Detectors may suspect the new incarnation again.
                self.suspected.retain(|&(_, peer)| peer != node);
                self.now = at;
                self.nodes[i].on_start(Time(at), &mut self.out);
                self.apply(node, at);
                return Some(Some(node));
            }
        };
        if !self.alive[node as usize] {
            if let Ev::Deliver { slot, .. } = ev {
                self.msgs[slot] = None;
            }
            return Some(None);
        }
        // A busy process handles the event when it is free.
        let start = at.max(self.busy_until[node as usize]);
        self.now = start;
        let now = Time(start);
        match ev {
            Ev::Deliver {
                to,
                from,
                slot,
                incarnation,
            } => {
                let msg = self.msgs[slot].take();
                if incarnation != self.incarnation[to as usize] {
                    return Some(None); // sent to a process that has since restarted
                }
                if let Some(msg) = msg {
                    self.nodes[to as usize].on_message(
                        now,
                        NodeId(from as u64),
                        msg,
                        &mut self.out,
                    );
                }
            }
            Ev::Suspect { at, peer } => {
                self.nodes[at as usize].on_suspect(now, NodeId(peer as u64), &mut self.out);
            }
            Ev::Start { .. } => unreachable!("handled above"),
            Ev::Timer {
                node,
                timer,
                generation,
            } => {
                if self.timers.get(&(node, timer)) != Some(&generation) {
                    return Some(None); // re-armed or cancelled since
                }
                self.timers.remove(&(node, timer));
                self.nodes[node as usize].on_timer(now, timer, &mut self.out);
            }
        }
        self.apply(node, start);
        Some(Some(node))
    }

    /// When the last handled event's work ended on `node` (its CPU time included).
    pub fn done_at(&self, node: u32) -> u64 {
        self.busy_until[node as usize]
    }
}

/// Pick `k` distinct processes among `0..n` excluding `except`.
pub fn pick(rng: &mut SimRng, n: u32, k: usize, except: &[u32]) -> Vec<u32> {
    let mut out = Vec::new();
    while out.len() < k && out.len() + except.len() < n as usize {
        let c = rng.below(n as u64) as u32;
        if !out.contains(&c) && !except.contains(&c) {
            out.push(c);
        }
    }
    out
}
