//! A continuous-time discrete-event simulator: messages take a latency from a network model,
//! each process handles one event at a time and each handling costs `ocp` of its CPU, so load
//! on one process (a parent with many children) turns into delay, as on a real machine.
//!
//! Used for stabilization latency (ICS'06): the base model (constant `L`), the 3-D torus
//! distance model (`hops × L`) and contention (a sender pays `send` per message, so the k-th
//! of c messages leaves `k × send` later).
//!
//! Failures are seen as over the engine's connections: two processes that exchanged a message
//! hold a connection, and when one dies the other suspects it `detect` later; a message sent
//! to a dead process is lost and its sender suspects the receiver. A process killed while it
//! sends a batch (each send costs `send`) gets out only the messages that left before the kill.
//! The experiments add their own detections on top (a neighbor of each victim at its kill).
//!
//! Messages between two processes arrive in the order they were sent, whatever the latency
//! model (TCP's FIFO, which the protocols assume), and a process can hang ([`TimedWorld::hang_at`]:
//! it handles nothing for a while, as a stopped process, while its connections stay up).
//!
//! On top of that the network can misbehave ([`TimedWorld::with_faults`], [`super::faultnet`]):
//! lose, duplicate, reorder or hold up messages, and cut the processes into sides
//! ([`TimedWorld::partition_at`]) until it heals.

use super::faultnet::{FaultCounts, LinkFaults, Sides};
use super::turns::{Held, Turns};
use crate::proto::{Action, Outbox, Protocol, Time, TimerId};
use crate::rng::SimRng;
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
    /// `l` plus a uniform extra up to `spread` per message, drawn from `seed` (FIFO kept per
    /// pair): many interleavings from one schedule of events.
    Jitter {
        /// Least latency.
        l: Duration,
        /// Most extra latency.
        spread: Duration,
        /// Seed of the draws.
        seed: u64,
    },
}

impl Net {
    fn delay(&self, from: u32, to: u32, rng: &mut SimRng) -> u64 {
        match self {
            Net::Constant { l } => l.as_nanos() as u64,
            Net::Torus { l, torus } => {
                torus.hops(Rank(from), Rank(to)).max(1) as u64 * l.as_nanos() as u64
            }
            Net::Jitter { l, spread, .. } => {
                l.as_nanos() as u64 + rng.below(spread.as_nanos() as u64 + 1)
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
        /// When it left `from`, and `from`'s incarnation then: a message that would have left
        /// after its sender was killed never left.
        departed: u64,
        from_incarnation: u32,
    },
    Hang {
        node: u32,
        until: u64,
    },
    Start {
        node: u32,
    },
    Kill {
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
    Wake {
        node: u32,
    },
    /// Process `node` gets its application's request `id` (kept in `requests`).
    Request {
        node: u32,
        id: u64,
    },
    /// The open turn of a core has handled what it gathered: its held sends leave.
    TurnEnd {
        core: u32,
    },
    /// A partition forms: process `i` is on side `sides[i]`.
    Cut {
        sides: Vec<u8>,
    },
    Heal,
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

impl TimedConfig {
    /// A loopback-like network for protocol runs under faults: 5 µs latency plus up to 10 µs
    /// of seeded jitter (interleavings change with the seed, channels stay FIFO), `ocp` per
    /// event, sends free, a dead peer noticed 50 µs after a failed send.
    pub fn jittered(seed: u64, ocp: Duration) -> Self {
        Self {
            net: Net::Jitter {
                l: Duration::from_micros(5),
                spread: Duration::from_micros(10),
                seed,
            },
            ocp,
            send: Duration::ZERO,
            detect: Duration::from_micros(50),
        }
    }
}

/// Processes, alive or dead, and the events in flight.
pub struct TimedWorld<P: Protocol> {
    nodes: Vec<P>,
    alive: Vec<bool>,
    busy_until: Vec<u64>,
    queue: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    /// Messages in flight, by slot; a delivered (or lost) message's slot is reused, so memory
    /// follows the messages in flight, not every message ever sent.
    msgs: Vec<Option<P::Msg>>,
    /// Empty slots of `msgs`.
    free_slots: Vec<usize>,
    seq: u64,
    cfg: TimedConfig,
    now: u64,
    suspected: HashSet<(u32, u32)>,
    /// Live generation of each (process, timer): re-arming makes older events stale.
    timers: HashMap<(u32, TimerId), u64>,
    /// Messages sent.
    pub sent: u64,
    /// Connections opened: first messages between two processes.
    pub connections: u64,
    out: Outbox<P::Msg, P::Event>,
    /// What processes reported: (process, time its handling ended, event).
    reports: Vec<(u32, u64, P::Event)>,
    /// Requests of applications waiting for their time, by the sequence number that
    /// scheduled them.
    requests: HashMap<u64, P::Request>,
    /// Incarnation of each process (bumped when it restarts).
    incarnation: Vec<u32>,
    /// Protocols waiting for their `Start` (a joiner, a restarted process).
    pending: HashMap<u32, P>,
    /// The peers each process holds a connection to (it sent them a message, or they it).
    links: Vec<Vec<u32>>,
    /// When each (process, incarnation) was killed.
    killed_at: HashMap<(u32, u32), u64>,
    /// The last arrival on each (from, to) pair: later messages arrive after it (FIFO).
    last_arrival: HashMap<(u32, u32), u64>,
    /// Latency draws of [`Net::Jitter`].
    rng: SimRng,
    /// Sees every message sent: (time, from, to, message), for traces.
    send_hook: Option<SendHook<P::Msg>>,
    /// `Some(k)`: process `i` runs on CPU `i mod k` with others (a reactor per core hosting
    /// many nodes); `None`: every process has a CPU of its own.
    cores: Option<u32>,
    /// CPU time the first message between two processes costs its sender, ns: the dial and
    /// the handshake of a connection, both ends' work charged to one (0: connections exist
    /// from the start).
    connect: u64,
    /// Time the first message between two processes waits on the wire besides, ns, its
    /// sender's CPU free: the round trips of the dial and the handshake.
    connect_wait: u64,
    /// `Some`: a handshake's two steps (the acceptor's answer, the dialer's proof) wait for
    /// their cores as messages do, each as long as the last event handled on that core
    /// waited for it (by CPU, the entry's value, ns).
    lag: Option<Vec<u64>>,
    /// `Some`: cores work in reactor turns ([`Self::with_turns`]).
    turns: Option<Turns<P::Msg>>,
    /// `Some`: each process's own routes ([`Self::with_crossing_dials`]): the peers it
    /// dialed, and those whose first message reached it.
    routes: Option<Vec<Vec<u32>>>,
    /// Per-message faults, their draws and what they did.
    faults: LinkFaults,
    fault_rng: SimRng,
    fault_counts: FaultCounts,
    /// The partition standing, if any.
    sides: Sides,
    /// Copies a message for a duplicate delivery (set with the faults, which need it).
    cloner: Option<Cloner<P::Msg>>,
}

/// Copies a message (for a duplicate delivery).
type Cloner<M> = fn(&M) -> M;

/// A watcher of sent messages (see [`TimedWorld::on_send`]).
pub type SendHook<M> = Box<dyn FnMut(u64, u32, u32, &M)>;

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
            free_slots: Vec::new(),
            seq: 0,
            cfg,
            now: 0,
            suspected: HashSet::new(),
            timers: HashMap::new(),
            sent: 0,
            connections: 0,
            out: Outbox::new(),
            reports: Vec::new(),
            requests: HashMap::new(),
            incarnation: vec![0; n],
            pending: HashMap::new(),
            links: vec![Vec::new(); n],
            killed_at: HashMap::new(),
            last_arrival: HashMap::new(),
            rng: SimRng::new(match cfg.net {
                Net::Jitter { seed, .. } => seed,
                _ => 0,
            }),
            send_hook: None,
            cores: None,
            connect: 0,
            connect_wait: 0,
            lag: None,
            turns: None,
            routes: None,
            faults: LinkFaults::NONE,
            fault_rng: SimRng::new(0),
            fault_counts: FaultCounts::default(),
            sides: Sides::default(),
            cloner: None,
        }
    }

    /// Let the network lose, duplicate, reorder and hold up messages at these rates, the
    /// draws seeded by `seed`.
    pub fn with_faults(mut self, faults: LinkFaults, seed: u64) -> Self
    where
        P::Msg: Clone,
    {
        self.faults = faults;
        self.fault_rng = SimRng::new(seed);
        self.cloner = Some(<P::Msg as Clone>::clone);
        self
    }

    /// From now on the network loses, duplicates, reorders and holds up nothing (the faults
    /// are over; what is on its way keeps its fate).
    pub fn calm(&mut self) {
        self.faults = LinkFaults::NONE;
    }

    /// What the network's faults did so far.
    pub fn fault_counts(&self) -> FaultCounts {
        self.fault_counts
    }

    /// At time `t` a partition forms: process `i` is on side `sides[i]` (processes beyond
    /// the list on the side of the last). Every connection across it breaks, and both ends
    /// notice after `detect`; messages across are lost until it heals.
    pub fn partition_at(&mut self, t: u64, sides: Vec<u8>) {
        self.push(t, Ev::Cut { sides });
    }

    /// At time `t` the partition heals.
    pub fn heal_at(&mut self, t: u64) {
        self.push(t, Ev::Heal);
    }

    /// Form the partition now: break the connections across it.
    fn cut(&mut self, mut sides: Vec<u8>, now: u64) {
        let last = sides.last().copied().unwrap_or(0);
        sides.resize(self.nodes.len(), last);
        self.sides.form(sides);
        let at = now + self.cfg.detect.as_nanos() as u64;
        for a in 0..self.nodes.len() as u32 {
            let across: Vec<u32> = self.links[a as usize]
                .iter()
                .copied()
                .filter(|&b| self.sides.cut(a, b))
                .collect();
            self.links[a as usize].retain(|&b| !across.contains(&b));
            if self.alive[a as usize] {
                for b in across {
                    self.suspect_at(at, a, b);
                }
            }
        }
    }

    /// Heal the partition: processes may suspect each other across it again later.
    fn heal(&mut self) {
        let old = std::mem::take(&mut self.sides);
        self.suspected.retain(|&(a, b)| !old.cut(a, b));
    }

    /// Run the processes on `cores` CPUs, process `i` on CPU `i mod cores`, as a
    /// `transport::Cluster` places its nodes on its reactors: work queues behind the work of
    /// every process of that CPU.
    pub fn share_cores(mut self, cores: u32) -> Self {
        self.cores = Some(cores.max(1));
        self
    }

    /// The first message between two processes costs its sender `connect` of CPU before it
    /// leaves (the engine dials and handshakes a connection on first use, and the handshake's
    /// cryptography is CPU on cores the nodes share); later ones, either way, do not.
    pub fn with_connect(mut self, connect: Duration) -> Self {
        self.connect = connect.as_nanos() as u64;
        self
    }

    /// The first message between two processes also waits `wait` on its way (the dial's and
    /// the handshake's round trips), while its sender's CPU does other work; the messages
    /// after it on the pair queue behind it.
    pub fn with_connect_wait(mut self, wait: Duration) -> Self {
        self.connect_wait = wait.as_nanos() as u64;
        self
    }

    /// A connection's handshake waits for both ends' cores besides [`Self::with_connect_wait`]:
    /// the acceptor answers the dial, and the dialer proves itself, when their reactors get
    /// to it, each as late as the last event on its core was handled. Idle, nothing changes;
    /// at the start, when every process dials at once and the cores are behind, the wait
    /// grows with their backlog, as a real storm of dials does.
    pub fn with_queued_handshake(mut self) -> Self {
        self.lag = Some(vec![0; self.busy_until.len()]);
        self
    }

    /// Each core works in reactor turns ([`super::turns`]): when it comes back from its work
    /// it takes every event due by then, and of the sends that work makes only the first
    /// leaves at once, the others when the turn's work is done.
    pub fn with_turns(mut self) -> Self {
        self.turns = Some(Turns::new(self.busy_until.len()));
        self
    }

    /// Two processes that each send the other a first message before the other's has
    /// arrived open two connections, each charged (the engine keeps both: a connection
    /// becomes the acceptor's route to its dialer only once the dialer's handshake and first
    /// message have come in). Without it, a pair opens one connection, at its first message
    /// either way.
    pub fn with_crossing_dials(mut self) -> Self {
        self.routes = Some(vec![Vec::new(); self.nodes.len()]);
        self
    }

    /// The CPU (index into `busy_until`) process `i` runs on.
    fn cpu(&self, i: u32) -> usize {
        match self.cores {
            Some(k) => (i % k) as usize,
            None => i as usize,
        }
    }

    /// Call `hook` with every message sent (time, from, to, message): a trace of a run.
    pub fn on_send(&mut self, hook: SendHook<P::Msg>) {
        self.send_hook = Some(hook);
    }

    /// The incarnation of process `i` (1 once started, bumped at each restart).
    pub fn incarnation(&self, i: u32) -> u32 {
        self.incarnation[i as usize]
    }

    /// When the next event happens, if any.
    pub fn peek_time(&self) -> Option<u64> {
        self.queue.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Process `i` hangs from `t` for `d`: it handles nothing meanwhile (messages and timers
    /// wait), as a stopped process whose connections stay up.
    pub fn hang_at(&mut self, t: u64, i: u32, d: Duration) {
        let until = t + d.as_nanos() as u64;
        self.push(t, Ev::Hang { node: i, until });
    }

    /// `a` and `b` hold a connection from now on (as processes a launcher connected at start:
    /// one learns of the other's death without ever sending it a message).
    pub fn link(&mut self, a: u32, b: u32) {
        if !self.links[a as usize].contains(&b) {
            self.links[a as usize].push(b);
            self.links[b as usize].push(a);
        }
    }

    /// Process `i` is dead: every live process connected to it notices after `detect` (its
    /// connection closes), and its connections are gone.
    fn break_links(&mut self, i: u32, now: u64) {
        let peers = std::mem::take(&mut self.links[i as usize]);
        let at = now + self.cfg.detect.as_nanos() as u64;
        for p in peers {
            self.links[p as usize].retain(|&q| q != i);
            if self.alive[p as usize] {
                self.suspect_at(at, p, i);
            }
        }
    }

    /// The protocols.
    pub fn nodes(&self) -> &[P] {
        &self.nodes
    }

    /// The events reported since the last call: (process, time its handling ended, event).
    pub fn take_reports(&mut self) -> Vec<(u32, u64, P::Event)> {
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
    /// sender notices after `detect` (one whose message was on its way too: its connection
    /// breaks).
    pub fn kill(&mut self, i: u32) {
        self.alive[i as usize] = false;
        self.killed_at
            .insert((i, self.incarnation[i as usize]), self.now);
        self.break_links(i, self.now);
    }

    /// Kill process `i` at time `t` (in the middle of whatever it was doing: what it sent
    /// before `t` is on its way, what it would have sent after is not).
    pub fn kill_at(&mut self, t: u64, i: u32) {
        if t == 0 && self.now == 0 {
            self.kill(i);
        } else {
            self.push(t, Ev::Kill { node: i });
        }
    }

    /// Messages in flight (queued for delivery, not yet handled or lost).
    pub fn in_flight(&self) -> usize {
        self.msgs.len() - self.free_slots.len()
    }

    /// Put `msg` in a free slot.
    fn hold(&mut self, msg: P::Msg) -> usize {
        match self.free_slots.pop() {
            Some(slot) => {
                self.msgs[slot] = Some(msg);
                slot
            }
            None => {
                self.msgs.push(Some(msg));
                self.msgs.len() - 1
            }
        }
    }

    /// Take the message out of `slot` and free the slot.
    fn release(&mut self, slot: usize) -> Option<P::Msg> {
        let msg = self.msgs[slot].take();
        if msg.is_some() {
            self.free_slots.push(slot);
        }
        msg
    }

    /// At time `t`, process `i` starts running `proto` (alive, `on_start`): a joiner that was
    /// idle so far, or a dead process restarted without its state. Messages sent to an
    /// earlier incarnation are lost.
    pub fn spawn_at(&mut self, t: u64, i: u32, proto: P) {
        self.pending.insert(i, proto);
        self.push(t, Ev::Start { node: i });
    }

    /// At time `t`, process `i` is woken ([`Protocol::on_wake`]), as after `NodeHandle::wake`
    /// on the engine.
    pub fn wake_at(&mut self, t: u64, i: u32) {
        self.push(t, Ev::Wake { node: i });
    }

    /// At time `t`, process `i`'s application hands it `req` ([`Protocol::on_request`]), as
    /// `NodeHandle::request` does on the engine. Lost if `i` is dead then.
    pub fn request_at(&mut self, t: u64, i: u32, req: P::Request) {
        self.seq += 1;
        self.requests.insert(self.seq, req);
        self.push(
            t,
            Ev::Request {
                node: i,
                id: self.seq,
            },
        );
    }

    /// Process `at` suspects `peer` at time `t` (an external failure detector).
    pub fn suspect_at(&mut self, t: u64, at: u32, peer: u32) {
        if self.suspected.insert((at, peer)) {
            self.push(t, Ev::Suspect { at, peer });
        }
    }

    fn apply(&mut self, i: u32, start: u64) {
        let mut t = start + self.cfg.ocp.as_nanos() as u64;
        let cpu = self.cpu(i);
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
                if let Some(hook) = self.send_hook.as_mut() {
                    hook(t, i, to, &msg);
                }
                if !self.alive[to as usize] || self.sides.cut(i, to) {
                    // Dead, or across a partition: the dial or the connection fails.
                    if self.alive[to as usize] {
                        self.fault_counts.cut += 1;
                    }
                    let at = t + self.cfg.detect.as_nanos() as u64;
                    self.suspect_at(at, i, to);
                    continue;
                }
                let mut dialing = 0;
                let routed = match self.routes.as_mut() {
                    Some(routes) if routes[i as usize].contains(&to) => true,
                    Some(routes) => {
                        routes[i as usize].push(to);
                        false
                    }
                    None => self.links[i as usize].contains(&to),
                };
                if !routed {
                    self.connections += 1;
                    t += self.connect;
                    dialing = self.connect_wait;
                    if let Some(lag) = &self.lag {
                        dialing += lag[self.cpu(to)] + lag[self.cpu(i)];
                    }
                }
                self.link(i, to);
                let held = Held {
                    from: i,
                    to,
                    msg,
                    dialing,
                };
                let now = match self.turns.as_mut() {
                    Some(turns) => turns.send(cpu, held),
                    None => Some(held),
                };
                if let Some(held) = now {
                    self.dispatch(held, t);
                }
            }
        }
        self.out = out;
        self.busy_until[cpu] = t;
    }

    /// Put a send on the wire, leaving its sender at `t`: the network's faults, the latency,
    /// FIFO per pair, then its delivery (and a copy's).
    fn dispatch(&mut self, held: Held<P::Msg>, t: u64) {
        let Held {
            from: i,
            to,
            msg,
            dialing,
        } = held;
        let fate = self
            .faults
            .draw(&mut self.fault_rng, &mut self.fault_counts);
        if fate.lost {
            return;
        }
        let copy = fate.dup.and_then(|_| self.cloner.map(|c| c(&msg)));
        let mut arrive = t + dialing + self.cfg.net.delay(i, to, &mut self.rng) + fate.extra;
        if !fate.reordered {
            let last = self.last_arrival.entry((i, to)).or_insert(0);
            arrive = arrive.max(*last);
            *last = arrive;
        }
        let dup = fate.dup.zip(copy).map(|(after, c)| (arrive + after, c));
        // The message, then its copy if the network duplicates it (no allocation: this runs
        // for every message sent).
        for (arrive, msg) in std::iter::once((arrive, msg)).chain(dup) {
            let slot = self.hold(msg);
            let incarnation = self.incarnation[to as usize];
            let from_incarnation = self.incarnation[i as usize];
            self.push(
                arrive,
                Ev::Deliver {
                    to,
                    from: i,
                    slot,
                    incarnation,
                    departed: t,
                    from_incarnation,
                },
            );
        }
    }

    /// The turn of `core` is over: what it held leaves as its work ends.
    fn end_turn(&mut self, core: u32) {
        let Some(turns) = self.turns.as_mut() else {
            return;
        };
        let mut held = turns.end(core as usize);
        let t = self.busy_until[core as usize];
        for h in held.drain(..) {
            self.dispatch(h, t);
        }
        if let Some(turns) = self.turns.as_mut() {
            turns.recycle(core as usize, held);
        }
    }

    /// Handle the next event; returns the process that handled it (`Some(None)` if the event
    /// was lost on a dead process), `None` when nothing is left.
    pub fn step(&mut self) -> Option<Option<u32>> {
        let Reverse((at, _, ev)) = self.queue.pop()?;
        let node = match &ev {
            Ev::Deliver {
                from,
                slot,
                departed,
                from_incarnation,
                ..
            } => {
                let killed = self.killed_at.get(&(*from, *from_incarnation));
                if killed.is_some_and(|&k| *departed > k) {
                    // Its sender was killed before it left: it never did.
                    self.release(*slot);
                    return Some(None);
                }
                let to = match &ev {
                    Ev::Deliver { to, .. } => *to,
                    _ => unreachable!(),
                };
                if self.sides.cut(*from, to) {
                    // On its way when the partition formed.
                    self.fault_counts.cut += 1;
                    self.release(*slot);
                    return Some(None);
                }
                to
            }
            Ev::Suspect { at, .. } => *at,
            Ev::Timer { node, .. } | Ev::Wake { node } | Ev::Request { node, .. } => *node,
            Ev::Hang { node, until } => {
                let cpu = self.cpu(*node);
                self.now = self.now.max(at);
                self.busy_until[cpu] = self.busy_until[cpu].max(*until);
                return Some(None);
            }
            Ev::Cut { sides } => {
                self.now = self.now.max(at);
                let sides = sides.clone();
                self.cut(sides, at);
                return Some(None);
            }
            Ev::Heal => {
                self.now = self.now.max(at);
                self.heal();
                return Some(None);
            }
            Ev::TurnEnd { core } => {
                self.now = self.now.max(at);
                self.end_turn(*core);
                return Some(None);
            }
            Ev::Kill { node } => {
                let node = *node;
                self.now = self.now.max(at);
                self.alive[node as usize] = false;
                self.killed_at
                    .insert((node, self.incarnation[node as usize]), at);
                self.break_links(node, at);
                return Some(None);
            }
            Ev::Start { node } => {
                let node = *node;
                let Some(proto) = self.pending.remove(&node) else {
                    return Some(None);
                };
                let i = node as usize;
                self.nodes[i] = proto;
                self.alive[i] = true;
                self.incarnation[i] += 1;
                let cpu = self.cpu(node);
                self.busy_until[cpu] = self.busy_until[cpu].max(at);
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
            if let Ev::Deliver {
                slot,
                from,
                incarnation,
                ..
            } = ev
            {
                self.release(slot);
                // The receiver died with the message on its way: the sender's connection to
                // it breaks, as over TCP, and the sender notices after `detect`.
                if incarnation == self.incarnation[node as usize] && self.alive[from as usize] {
                    let at = at + self.cfg.detect.as_nanos() as u64;
                    self.suspect_at(at, from, node);
                }
            }
            if let Ev::Request { id, .. } = ev {
                self.requests.remove(&id); // lost with its process
            }
            return Some(None);
        }
        // A busy process handles the event when it is free.
        let cpu = self.cpu(node);
        if let Some(turns) = self.turns.as_mut() {
            if let Some(gather) = turns.reach(cpu, at, self.busy_until[cpu]) {
                self.push(gather, Ev::TurnEnd { core: cpu as u32 });
            }
        }
        let start = at.max(self.busy_until[cpu]);
        if let Some(lag) = self.lag.as_mut() {
            lag[cpu] = start - at;
        }
        self.now = start;
        let now = Time(start);
        match ev {
            Ev::Deliver {
                to,
                from,
                slot,
                incarnation,
                ..
            } => {
                let msg = self.release(slot);
                if incarnation != self.incarnation[to as usize] {
                    return Some(None); // sent to a process that has since restarted
                }
                if let Some(routes) = self.routes.as_mut() {
                    // The dialer's connection is the receiver's route back, if it has none.
                    if !routes[to as usize].contains(&from) {
                        routes[to as usize].push(from);
                    }
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
            Ev::Start { .. }
            | Ev::Kill { .. }
            | Ev::Hang { .. }
            | Ev::Cut { .. }
            | Ev::Heal
            | Ev::TurnEnd { .. } => {
                unreachable!("handled above")
            }
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
            Ev::Wake { node } => self.nodes[node as usize].on_wake(now, &mut self.out),
            Ev::Request { node, id } => {
                if let Some(req) = self.requests.remove(&id) {
                    self.nodes[node as usize].on_request(now, req, &mut self.out);
                }
            }
        }
        self.apply(node, start);
        Some(Some(node))
    }

    /// When the last handled event's work ended on `node` (its CPU time included).
    pub fn done_at(&self, node: u32) -> u64 {
        self.busy_until[self.cpu(node)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::relay::Relay;

    /// A 1 µs network, 100 ns per event, no send cost or detection delay.
    fn fast() -> TimedConfig {
        TimedConfig {
            net: Net::Constant {
                l: Duration::from_micros(1),
            },
            ocp: Duration::from_nanos(100),
            send: Duration::ZERO,
            detect: Duration::ZERO,
        }
    }

    /// Reports each request it is handed.
    struct Asked;

    impl Protocol for Asked {
        type Msg = crate::proto::ping::PingMsg;
        type Event = u32;
        type Request = u32;
        fn on_start(&mut self, _: Time, _: &mut Outbox<Self::Msg, u32>) {}
        fn on_request(&mut self, _: Time, k: u32, out: &mut Outbox<Self::Msg, u32>) {
            out.report(k);
        }
        fn on_message(&mut self, _: Time, _: NodeId, _: Self::Msg, _: &mut Outbox<Self::Msg, u32>) {
        }
        fn on_timer(&mut self, _: Time, _: TimerId, _: &mut Outbox<Self::Msg, u32>) {}
    }

    /// Requests reach the protocol in the order they were made, those made for one instant
    /// too, as the engine hands them in; one for a dead process is lost with it, and its
    /// request is not kept.
    #[test]
    fn requests_arrive_in_order_and_die_with_their_process() {
        let mut w = TimedWorld::new(vec![Asked, Asked], fast());
        w.start();
        for k in 0..100 {
            w.request_at(1_000, 0, k);
        }
        w.kill_at(500, 1);
        w.request_at(1_000, 1, 999);
        while w.step().is_some() {}
        let reports = w.take_reports();
        let got: Vec<u32> = reports.iter().map(|&(_, _, k)| k).collect();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        assert!(reports.iter().all(|&(i, t, _)| i == 0 && t >= 1_000));
        assert!(w.requests.is_empty(), "the dead process's request is kept");
    }

    /// Processes that share a CPU queue behind each other's work: two relays on one core end
    /// later than on two, and by about the whole of the other's work.
    #[test]
    fn shared_cores_serialize_work() {
        let run = |cores: Option<u32>| {
            let nodes: Vec<Relay> = (0..2).map(|i| Relay::new(i, 2, 2, 100)).collect();
            let mut w = TimedWorld::new(
                nodes,
                TimedConfig {
                    net: Net::Constant {
                        l: Duration::from_nanos(1),
                    },
                    ocp: Duration::from_micros(10),
                    send: Duration::ZERO,
                    detect: Duration::ZERO,
                },
            );
            if let Some(k) = cores {
                w = w.share_cores(k);
            }
            w.start();
            while w.step().is_some() {}
            w.now()
        };
        let (own, shared) = (run(None), run(Some(1)));
        assert!(
            shared as f64 > 1.8 * own as f64,
            "own {own} ns, shared {shared} ns"
        );
    }

    /// A connection's cost is paid once per pair, as CPU or as a wait: a ring of relays ends
    /// later by at most one connection per link, whatever the laps, and sends the same
    /// messages.
    #[test]
    fn the_first_message_of_a_pair_pays_for_the_connection() {
        let n = 4u64;
        let run = |connect: Duration, wait: Duration| {
            let nodes: Vec<Relay> = (0..n).map(|i| Relay::new(i, n, 1, 50)).collect();
            let mut w = TimedWorld::new(nodes, fast())
                .with_connect(connect)
                .with_connect_wait(wait);
            w.start();
            while w.step().is_some() {}
            (w.now(), w.sent)
        };
        let c = 1_000_000u64;
        let (plain, sent) = run(Duration::ZERO, Duration::ZERO);
        for (cpu, wait) in [(c, 0), (0, c)] {
            let (connected, sent_c) = run(Duration::from_nanos(cpu), Duration::from_nanos(wait));
            assert_eq!(sent, sent_c);
            let extra = connected - plain;
            assert!(
                extra >= c && extra <= n * c,
                "{extra} ns more for {n} links (cpu {cpu}, wait {wait})"
            );
        }
    }

    /// With crossing dials, two processes that ping each other at once open two
    /// connections, each charged; a ping and its answer share one, as do the crossing pings
    /// without the option.
    #[test]
    fn crossing_first_messages_open_two_connections() {
        use crate::proto::ping::PingPong;
        let run = |both: bool, crossing: bool| {
            let second = if both {
                PingPong::pinger(NodeId(0), vec![32], 1, 0)
            } else {
                PingPong::ponger()
            };
            let nodes = vec![PingPong::pinger(NodeId(1), vec![32], 1, 0), second];
            let cfg = TimedConfig {
                net: Net::Constant {
                    l: Duration::from_micros(10),
                },
                ocp: Duration::from_micros(1),
                send: Duration::ZERO,
                detect: Duration::ZERO,
            };
            let mut w = TimedWorld::new(nodes, cfg)
                .with_connect(Duration::from_micros(100))
                .with_connect_wait(Duration::from_micros(100));
            if crossing {
                w = w.with_crossing_dials();
            }
            w.start();
            while w.step().is_some() {}
            (w.connections, w.sent)
        };
        assert_eq!(run(false, true), (1, 2), "a ping and its pong");
        assert_eq!(run(false, false), (1, 2));
        assert_eq!(run(true, true), (2, 4), "two pings crossing, two pongs");
        assert_eq!(run(true, false), (1, 4));
    }

    /// Eight relays passing `tokens` tokens for 20 laps (5 µs to handle an event, 5 µs to
    /// send, latency `l`) on `cores` shared CPUs (`None`: one each), the world set up further
    /// by `with`: (the end, messages sent).
    fn relay_run(
        cores: Option<u32>,
        tokens: u64,
        l: Duration,
        with: impl FnOnce(TimedWorld<Relay>) -> TimedWorld<Relay>,
    ) -> (u64, u64) {
        let n = 8u64;
        let nodes: Vec<Relay> = (0..n).map(|i| Relay::new(i, n, tokens, 20)).collect();
        let cfg = TimedConfig {
            net: Net::Constant { l },
            ocp: Duration::from_micros(5),
            send: Duration::from_micros(5),
            detect: Duration::ZERO,
        };
        let mut w = with(TimedWorld::new(nodes, cfg));
        if let Some(k) = cores {
            w = w.share_cores(k);
        }
        w.start();
        while w.step().is_some() {}
        assert_eq!(w.in_flight(), 0);
        (w.now(), w.sent)
    }

    /// A queued handshake costs nothing more where no core is behind (each process on a CPU
    /// of its own, one token), and makes connections wait where the cores are (eight
    /// processes on one core, two tokens: the links past the first two open while the core
    /// works for the other token): the same messages, a later end.
    #[test]
    fn a_queued_handshake_waits_for_busy_cores_only() {
        let run = |cores: Option<u32>, tokens: u64, queued: bool| {
            relay_run(cores, tokens, Duration::from_micros(1), |w| {
                let w = w
                    .with_connect(Duration::from_micros(50))
                    .with_connect_wait(Duration::from_micros(50));
                if queued {
                    w.with_queued_handshake()
                } else {
                    w
                }
            })
        };
        assert_eq!(run(None, 1, false), run(None, 1, true));
        let (plain, sent) = run(Some(1), 2, false);
        let (queued, sent_q) = run(Some(1), 2, true);
        assert_eq!(sent, sent_q);
        assert!(queued > plain, "queued {queued} ns, plain {plain} ns");
    }

    /// Turns change nothing where every turn has one event (one token, each process on a
    /// CPU of its own), and hold sends back where a core is behind (eight tokens on one core:
    /// a turn gathers several, and of the sends it makes only the first leaves at once): the
    /// same messages, a later end.
    #[test]
    fn turns_hold_sends_only_when_a_core_is_behind() {
        let run = |cores: Option<u32>, tokens: u64, turns: bool| {
            relay_run(cores, tokens, Duration::from_micros(20), |w| {
                if turns {
                    w.with_turns()
                } else {
                    w
                }
            })
        };
        assert_eq!(run(None, 1, false), run(None, 1, true));
        let (plain, sent) = run(Some(1), 8, false);
        let (turns, sent_t) = run(Some(1), 8, true);
        assert_eq!(sent, sent_t);
        assert!(turns > plain, "turns {turns} ns, plain {plain} ns");
    }

    /// A long run reuses the slots of delivered messages: memory follows the messages in
    /// flight (here a handful of tokens), not the millions sent.
    #[test]
    fn delivered_messages_free_their_slots() {
        let n = 8u64;
        let nodes: Vec<Relay> = (0..n).map(|i| Relay::new(i, n, 2, 10_000)).collect();
        let mut w = TimedWorld::new(nodes, fast());
        w.start();
        let mut steps = 0u64;
        while w.step().is_some() {
            steps += 1;
            assert!(
                w.msgs.len() <= 16,
                "{} slots after {steps} steps",
                w.msgs.len()
            );
        }
        assert!(w.sent > 100_000, "{} messages", w.sent);
        assert_eq!(w.in_flight(), 0);
    }
}
