//! The simulated system: every process's protocol instance, the channels between them and the
//! timers, advanced by one of the two schedulers of Bosilca et al. section 4.
//!
//! Processes are numbered `0..n` and their [`NodeId`] is their number. Channels are reliable and
//! FIFO. Time is counted in scheduler rounds (phases or steps); a protocol sees
//! `round × tick` as its clock, and a timer armed for `d` comes due `max(1, ceil(d / tick))`
//! rounds later.

use crate::proto::{Action, Outbox, Protocol, Time, TimerId};
use crate::rng::SimRng;
use crate::NodeId;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::time::Duration;

/// How rounds are scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheduler {
    /// A phase: every process fires its due spontaneous rules, then every process consumes every
    /// message in its channels (including those the spontaneous rules just sent); what is sent
    /// while consuming is delivered in the next phase.
    Sync,
    /// A step: each process either fires one due spontaneous rule or consumes exactly one
    /// message (FIFO over all its channels); what is sent is delivered from the next step on.
    /// Which of the two it does when both are possible is the [`AsyncPolicy`].
    Async,
}

/// Most steps a due rule waits behind messages under [`AsyncPolicy::MsgFirst`].
pub const MSG_FIRST_PATIENCE: u64 = 1024;

/// What a process does in an asynchronous step when it could both fire a due spontaneous rule
/// and consume a message. The paper's text ("each process either executes the spontaneous
/// rule if applicable, or consumes one (and only one) message") fixes one action per step, not
/// which; the choice moves the projected time by 2× on binomial trees, because a leaf that
/// fires before it reads re-sends `Info` messages that queue at the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncPolicy {
    /// Take a pending message first; fire a due rule when nothing is left to read, or once it
    /// has waited [`MSG_FIRST_PATIENCE`] steps (without that bound two processes that keep a
    /// garbage message bouncing between them would never fire their rules, which the proofs'
    /// fair scheduler forbids; from a clean start no rule waits that long).
    MsgFirst,
    /// Alternate between the two, so neither starves the other.
    Alternate,
    /// A seeded coin decides, and every message is delayed by `0..=max_delay` further steps
    /// (channels stay FIFO): one random interleaving per seed, for the self-stabilization
    /// tests and to see how far a schedule moves a figure.
    Random {
        /// Most extra steps a message may wait before it can be consumed.
        max_delay: u32,
    },
}

impl fmt::Display for AsyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AsyncPolicy::MsgFirst => f.write_str("msg-first"),
            AsyncPolicy::Alternate => f.write_str("alternate"),
            AsyncPolicy::Random { max_delay } => write!(f, "random(delay<={max_delay})"),
        }
    }
}

impl fmt::Display for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scheduler::Sync => "sync",
            Scheduler::Async => "async",
        })
    }
}

/// Receivers per delivery block in a sync phase (2^10 processes: about a megabyte of state).
const BLOCK_SHIFT: u32 = 10;

/// A message in flight.
#[derive(Clone, Debug)]
struct Envelope<M> {
    from: u32,
    to: u32,
    /// Descends from a message injected before the run (causally, as in Lemma A.1).
    tainted: bool,
    msg: M,
}

/// Counters of the traffic so far.
#[derive(Clone, Debug, Default)]
pub struct Traffic {
    /// Messages sent to a known process.
    pub sent: u64,
    /// Messages sent to an id nobody has (corrupt state); dropped.
    pub dropped: u64,
    /// Messages received, per process.
    pub received: Vec<u32>,
}

impl Traffic {
    /// The largest number of messages one process received.
    pub fn max_received(&self) -> u32 {
        self.received.iter().copied().max().unwrap_or(0)
    }
}

/// The simulated system.
pub struct World<P: Protocol> {
    nodes: Vec<P>,
    scheduler: Scheduler,
    tick_ns: u64,
    round: u64,
    /// Pending timers per process: (timer, due round).
    timers: Vec<Vec<(TimerId, u64)>>,
    /// Sync only: processes with a timer due at a round (entries may be stale).
    wheel: BTreeMap<u64, Vec<u32>>,
    /// Sync only: messages to deliver in the current phase.
    in_flight: Vec<Envelope<P::Msg>>,
    /// Sync only: the phase's messages grouped by block of receivers.
    buckets: Vec<Vec<Envelope<P::Msg>>>,
    /// Async only: each process's incoming queue, with the step from which each message may
    /// be consumed (in order: the queue is FIFO over all the process's channels).
    inbox: Vec<VecDeque<(u64, Envelope<P::Msg>)>>,
    /// Async only: the choice between a rule and a message.
    policy: AsyncPolicy,
    /// Async, random policy only: the coin and the delays.
    rng: SimRng,
    /// Async, random policy only: each channel's latest ready step, so that a delayed message
    /// is never overtaken by a later one on its channel.
    channel_ready: HashMap<(u32, u32), u64>,
    /// Messages in flight that descend from injected garbage.
    tainted: u64,
    /// Async only: whether the process fired a rule in its last step (for alternation).
    fired_last: Vec<bool>,
    versions: Vec<u64>,
    traffic: Traffic,
    out: Outbox<P::Msg>,
}

impl<P: Protocol> World<P> {
    /// A system of `nodes` (process `i` is `NodeId(i)`) whose round lasts `tick`.
    pub fn new(nodes: Vec<P>, scheduler: Scheduler, tick: Duration) -> Self {
        let n = nodes.len();
        let versions = nodes.iter().map(|p| p.state_version()).collect();
        Self {
            nodes,
            scheduler,
            tick_ns: tick.as_nanos().max(1) as u64,
            round: 0,
            timers: (0..n).map(|_| Vec::new()).collect(),
            wheel: BTreeMap::new(),
            in_flight: Vec::new(),
            buckets: (0..(n >> BLOCK_SHIFT) + 1).map(|_| Vec::new()).collect(),
            inbox: match scheduler {
                Scheduler::Async => (0..n).map(|_| VecDeque::new()).collect(),
                Scheduler::Sync => Vec::new(),
            },
            policy: AsyncPolicy::MsgFirst,
            rng: SimRng::new(0),
            channel_ready: HashMap::new(),
            tainted: 0,
            fired_last: vec![false; if scheduler == Scheduler::Async { n } else { 0 }],
            versions,
            traffic: Traffic {
                received: vec![0; n],
                ..Traffic::default()
            },
            out: Outbox::new(),
        }
    }

    /// Choose the asynchronous scheduler's policy (the default takes messages first), with the
    /// seed of its random choices.
    pub fn with_policy(mut self, policy: AsyncPolicy, seed: u64) -> Self {
        self.policy = policy;
        self.rng = SimRng::new(seed);
        self
    }

    /// The protocol instances.
    pub fn nodes(&self) -> &[P] {
        &self.nodes
    }

    /// Mutable access, for corrupting state before a run.
    pub fn nodes_mut(&mut self) -> &mut [P] {
        &mut self.nodes
    }

    /// Rounds run so far.
    pub fn round(&self) -> u64 {
        self.round
    }

    /// Traffic counters.
    pub fn traffic(&self) -> &Traffic {
        &self.traffic
    }

    /// Put a message in the channel `from → to` before the run starts (arbitrary initial
    /// configurations hold garbage messages too).
    pub fn inject(&mut self, from: u32, to: u32, msg: P::Msg) {
        self.tainted += 1;
        let env = Envelope {
            from,
            to,
            tainted: true,
            msg,
        };
        match self.scheduler {
            Scheduler::Sync => self.in_flight.push(env),
            // Garbage is there from the start: ahead of anything the run sends.
            Scheduler::Async => self.inbox[to as usize].push_back((0, env)),
        }
    }

    /// Mark every message now in flight as tainted: [`Self::tainted_in_flight`] then reaches zero
    /// only once all of them, and everything sent in reaction to them, have been delivered.
    pub fn taint_in_flight(&mut self) {
        for env in self
            .in_flight
            .iter_mut()
            .chain(self.inbox.iter_mut().flatten().map(|(_, env)| env))
        {
            env.tainted = true;
        }
        self.tainted =
            self.in_flight.len() as u64 + self.inbox.iter().map(|q| q.len() as u64).sum::<u64>();
    }

    /// Messages in flight that were injected before the run or were sent in reaction to one
    /// (transitively). Once this is zero, no message depends on the initial garbage.
    pub fn tainted_in_flight(&self) -> u64 {
        self.tainted
    }

    fn now(&self) -> Time {
        Time(self.round.saturating_mul(self.tick_ns))
    }

    /// Call `on_start` on every process (round 0). `changed(p, node)` is called each time a
    /// process's state version changes, right away (while its state is still in cache).
    pub fn start(&mut self, changed: &mut impl FnMut(u32, &P)) {
        let now = self.now();
        let mut sent = Vec::new();
        for i in 0..self.nodes.len() {
            self.nodes[i].on_start(now, &mut self.out);
            self.apply(i as u32, false, &mut sent, changed);
        }
        self.enqueue(sent);
    }

    /// Messages sent during a round become receivable from the next one.
    fn enqueue(&mut self, sent: Vec<Envelope<P::Msg>>) {
        match self.scheduler {
            Scheduler::Sync => self.in_flight.extend(sent),
            Scheduler::Async => {
                let next = self.round + 1;
                for env in sent {
                    let AsyncPolicy::Random { max_delay } = self.policy else {
                        self.inbox[env.to as usize].push_back((next, env));
                        continue;
                    };
                    let delay = self.rng.below(max_delay as u64 + 1);
                    let last = self.channel_ready.entry((env.from, env.to)).or_insert(0);
                    let ready = (next + delay).max(*last);
                    *last = ready;
                    // After everything ready no later: the channel's earlier messages stay
                    // ahead, and the queue stays sorted by readiness.
                    let q = &mut self.inbox[env.to as usize];
                    let at = q.partition_point(|&(r, _)| r <= ready);
                    q.insert(at, (ready, env));
                }
            }
        }
    }

    /// Run one round (a phase or a step) of the configured scheduler, calling `changed` as
    /// [`Self::start`] does.
    pub fn run_round(&mut self, changed: &mut impl FnMut(u32, &P)) {
        match self.scheduler {
            Scheduler::Sync => self.sync_phase(changed),
            Scheduler::Async => self.async_step(changed),
        }
    }

    fn sync_phase(&mut self, changed: &mut impl FnMut(u32, &P)) {
        self.round += 1;
        let now = self.now();
        let mut this_phase = Vec::new();
        // 1. Spontaneous rules that are due.
        while let Some(entry) = self.wheel.first_entry() {
            if *entry.key() > self.round {
                break;
            }
            let due_nodes = entry.remove();
            for p in due_nodes {
                while let Some(t) = self.take_due_timer(p) {
                    self.nodes[p as usize].on_timer(now, t, &mut self.out);
                    self.apply(p, false, &mut this_phase, changed);
                }
            }
        }
        // 2. Every message in the channels: last phase's, then this phase's spontaneous ones
        // (per channel that is FIFO order).
        // Visit receivers block by block: the phase's outcome does not depend on how different
        // receivers interleave, and touching a cache-sized block of processes at a time instead
        // of jumping at random is what lets a million-process phase run from cache. Bucketing
        // keeps send order inside a bucket, so every channel stays FIFO.
        let mut buckets = std::mem::take(&mut self.buckets);
        for env in self.in_flight.drain(..).chain(this_phase.drain(..)) {
            buckets[(env.to >> BLOCK_SHIFT) as usize].push(env);
        }
        let mut next = Vec::new();
        for bucket in buckets.iter_mut() {
            for env in bucket.drain(..) {
                self.traffic.received[env.to as usize] += 1;
                self.tainted -= env.tainted as u64;
                self.nodes[env.to as usize].on_message(
                    now,
                    NodeId(env.from as u64),
                    env.msg,
                    &mut self.out,
                );
                self.apply(env.to, env.tainted, &mut next, changed);
            }
        }
        self.buckets = buckets;
        self.in_flight = next;
    }

    fn async_step(&mut self, changed: &mut impl FnMut(u32, &P)) {
        self.round += 1;
        let now = self.now();
        let mut sent = Vec::new();
        for p in 0..self.nodes.len() {
            let due_since = self.timers[p]
                .iter()
                .map(|&(_, d)| d)
                .filter(|&d| d <= self.round)
                .min();
            let has_msg = self.inbox[p]
                .front()
                .is_some_and(|&(ready, _)| ready <= self.round);
            let fire = due_since.is_some_and(|since| {
                !has_msg
                    || match self.policy {
                        AsyncPolicy::MsgFirst => self.round - since >= MSG_FIRST_PATIENCE,
                        AsyncPolicy::Alternate => !self.fired_last[p],
                        AsyncPolicy::Random { .. } => self.rng.chance(0.5),
                    }
            });
            let mut tainted = false;
            if fire {
                if let Some(t) = self.take_due_timer(p as u32) {
                    self.nodes[p].on_timer(now, t, &mut self.out);
                }
            } else if let Some((_, env)) = has_msg.then(|| self.inbox[p].pop_front()).flatten() {
                self.traffic.received[p] += 1;
                self.tainted -= env.tainted as u64;
                tainted = env.tainted;
                self.nodes[p].on_message(now, NodeId(env.from as u64), env.msg, &mut self.out);
            } else {
                continue;
            }
            self.fired_last[p] = fire;
            self.apply(p as u32, tainted, &mut sent, changed);
        }
        self.enqueue(sent);
    }

    /// Remove and return the earliest timer of `p` that is due.
    fn take_due_timer(&mut self, p: u32) -> Option<TimerId> {
        let timers = &mut self.timers[p as usize];
        let (at, _) = timers
            .iter()
            .enumerate()
            .filter(|(_, &(_, due))| due <= self.round)
            .min_by_key(|(_, &(t, due))| (due, t))?;
        Some(timers.swap_remove(at).0)
    }

    /// Carry out the actions process `p` just produced.
    fn apply(
        &mut self,
        p: u32,
        tainted: bool,
        buf: &mut Vec<Envelope<P::Msg>>,
        changed: &mut impl FnMut(u32, &P),
    ) {
        let n = self.nodes.len() as u64;
        for action in self.out.drain() {
            match action {
                Action::Send { to, msg } => {
                    if to.0 >= n {
                        self.traffic.dropped += 1;
                        continue;
                    }
                    self.traffic.sent += 1;
                    self.tainted += tainted as u64;
                    buf.push(Envelope {
                        from: p,
                        to: to.0 as u32,
                        tainted,
                        msg,
                    });
                }
                Action::SetTimer { timer, after } => {
                    let rounds = (after.as_nanos() as u64).div_ceil(self.tick_ns).max(1);
                    let due = self.round + rounds;
                    let timers = &mut self.timers[p as usize];
                    timers.retain(|&(t, _)| t != timer);
                    timers.push((timer, due));
                    if self.scheduler == Scheduler::Sync {
                        self.wheel.entry(due).or_default().push(p);
                    }
                }
                Action::CancelTimer(timer) => self.timers[p as usize].retain(|&(t, _)| t != timer),
                Action::Report(_) => {}
            }
        }
        let v = self.nodes[p as usize].state_version();
        if v != self.versions[p as usize] {
            self.versions[p as usize] = v;
            changed(p, &self.nodes[p as usize]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every process sends `count` numbered messages to every other at start and checks that
    /// each channel delivers them in order; a timer that re-arms itself makes every step a
    /// choice between a rule and a message.
    struct Numbered {
        n: u32,
        count: u32,
        next: Vec<u32>,
        fired: u32,
        /// The step of the first rule fired.
        first_fire: Option<u64>,
        order: Vec<(u32, u32)>,
    }

    impl Protocol for Numbered {
        type Msg = u32;
        fn on_start(&mut self, _: Time, out: &mut Outbox<u32>) {
            for i in 0..self.count {
                for to in 0..self.n {
                    out.send(NodeId(to as u64), i);
                }
            }
            out.set_timer(TimerId(1), Duration::from_micros(1));
        }
        fn on_message(&mut self, _: Time, from: NodeId, msg: u32, _: &mut Outbox<u32>) {
            let next = &mut self.next[from.0 as usize];
            assert_eq!(msg, *next, "channel {from} out of order");
            *next += 1;
            self.order.push((from.0 as u32, msg));
        }
        fn on_timer(&mut self, now: Time, _: TimerId, out: &mut Outbox<u32>) {
            // A step lasts 1 µs.
            self.first_fire.get_or_insert(now.0 / 1000);
            self.fired += 1;
            if self.fired < 40 {
                out.set_timer(TimerId(1), Duration::from_micros(1));
            }
        }
    }

    type Outcome = (Vec<Vec<(u32, u32)>>, u64, Vec<Option<u64>>);

    fn run(policy: AsyncPolicy, seed: u64) -> Outcome {
        let (n, count) = (4, 30);
        let nodes = (0..n)
            .map(|_| Numbered {
                n,
                count,
                next: vec![0; n as usize],
                fired: 0,
                first_fire: None,
                order: Vec::new(),
            })
            .collect();
        let mut w =
            World::new(nodes, Scheduler::Async, Duration::from_micros(1)).with_policy(policy, seed);
        w.start(&mut |_, _| {});
        while w.round() < 1000 {
            w.run_round(&mut |_, _| {});
        }
        for p in w.nodes() {
            assert!(p.next.iter().all(|&k| k == count), "every message arrived");
        }
        let first_fire = w.nodes().iter().map(|p| p.first_fire).collect();
        (
            w.nodes().iter().map(|p| p.order.clone()).collect(),
            w.traffic().sent,
            first_fire,
        )
    }

    /// Two processes bounce one message forever; each has a rule due from the first step.
    struct Bounce {
        fired_at: Option<u64>,
    }

    impl Protocol for Bounce {
        type Msg = u32;
        fn on_start(&mut self, _: Time, out: &mut Outbox<u32>) {
            out.send(NodeId(0), 0u32);
            out.send(NodeId(1), 0u32);
            out.set_timer(TimerId(1), Duration::from_micros(1));
        }
        fn on_message(&mut self, _: Time, from: NodeId, msg: u32, out: &mut Outbox<u32>) {
            out.send(NodeId(1 - from.0), msg + 1);
        }
        fn on_timer(&mut self, now: Time, _: TimerId, _: &mut Outbox<u32>) {
            self.fired_at.get_or_insert(now.0 / 1000);
        }
    }

    #[test]
    fn msg_first_is_fair_to_a_rule_behind_endless_messages() {
        let nodes = (0..2).map(|_| Bounce { fired_at: None }).collect();
        let mut w = World::new(nodes, Scheduler::Async, Duration::from_micros(1))
            .with_policy(AsyncPolicy::MsgFirst, 0);
        w.start(&mut |_, _| {});
        while w.round() < 2 * MSG_FIRST_PATIENCE {
            w.run_round(&mut |_, _| {});
        }
        for p in w.nodes() {
            assert_eq!(p.fired_at, Some(1 + MSG_FIRST_PATIENCE));
        }
    }

    #[test]
    fn random_delays_keep_every_channel_fifo_and_seeds_differ() {
        let (a, sent, _) = run(AsyncPolicy::Random { max_delay: 6 }, 1);
        assert_eq!(sent, 4 * 4 * 30);
        let (b, _, _) = run(AsyncPolicy::Random { max_delay: 6 }, 2);
        assert_ne!(a, b, "another seed, another interleaving");
        assert_eq!(
            a,
            run(AsyncPolicy::Random { max_delay: 6 }, 1).0,
            "same seed"
        );
    }

    #[test]
    fn msg_first_reads_everything_before_a_rule_and_alternate_takes_turns() {
        // 120 messages are receivable from step 1 and the rule is due from step 1.
        let (m, _, m_fire) = run(AsyncPolicy::MsgFirst, 0);
        let (a, _, a_fire) = run(AsyncPolicy::Alternate, 0);
        assert!(m_fire.iter().all(|&f| f == Some(121)), "{m_fire:?}");
        assert!(a_fire.iter().all(|&f| f == Some(1)), "{a_fire:?}");
        // Either way every channel carried the same messages in the same order.
        assert_eq!(m, a);
    }
}
