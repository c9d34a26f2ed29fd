//! The simulated system: every process's protocol instance, the channels between them and the
//! timers, advanced by one of the two schedulers of Bosilca et al. section 4.
//!
//! Processes are numbered `0..n` and their [`NodeId`] is their number. Channels are reliable and
//! FIFO. Time is counted in scheduler rounds (phases or steps); a protocol sees
//! `round × tick` as its clock, and a timer armed for `d` comes due `max(1, ceil(d / tick))`
//! rounds later.

use crate::proto::Protocol;
use crate::rng::SimRng;
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

mod shard;
mod timers;

pub use shard::MAX_PROCESSES;
use shard::{Clock, Envelope, Shard, Tally};
use timers::Timers;

/// Receivers per delivery block in a sync phase (2^10 processes: about half a megabyte of
/// state), and the unit a phase's work is split into across threads.
const BLOCK_SHIFT: u32 = 10;

/// Fewest processes for which a sync phase is split across threads: below, a phase takes
/// less than spawning the threads does.
const PARALLEL_FROM: usize = 1 << 15;

/// Lists of messages by block of receivers.
type Lists<M> = Vec<Vec<Envelope<M>>>;

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
///
/// A synchronous phase runs its deliveries on [`Self::with_threads`] threads, each over a
/// contiguous range of receiver blocks. The outcome is the same for every thread count: a
/// receiver takes the phase's messages in the order one thread would deliver them (the
/// senders' shards in order, then the spontaneous rules' messages), which keeps every channel
/// FIFO, and timers are queued in that order too.
pub struct World<P: Protocol> {
    nodes: Vec<P>,
    timers: Vec<Timers>,
    versions: Vec<u64>,
    scheduler: Scheduler,
    tick_ns: u64,
    round: u64,
    threads: usize,
    /// Sync only: processes with a timer due at a round (entries may be stale).
    wheel: BTreeMap<u64, Vec<u32>>,
    /// Sync only: the next phase's messages sent while consuming, per shard, by block of
    /// receivers.
    queued: Vec<Lists<P::Msg>>,
    /// Sync only: the messages of spontaneous rules (and `on_start`, and injected garbage), by
    /// block of receivers; delivered after `queued` in the same phase.
    spont: Lists<P::Msg>,
    /// Async only: each process's incoming queue, with the step from which each message may
    /// be consumed (in order: the queue is FIFO over all the process's channels).
    inbox: Vec<VecDeque<(u64, Envelope<P::Msg>)>>,
    /// Async only: a step's messages, in send order.
    async_sink: Lists<P::Msg>,
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
    traffic: Traffic,
    /// State version changes in the current round.
    changes: u64,
}

impl<P: Protocol + Send> World<P>
where
    P::Msg: Send,
    P::Event: Send,
{
    /// A system of `nodes` (process `i` is `NodeId(i)`, fewer than [`MAX_PROCESSES`]) whose
    /// round lasts `tick`.
    pub fn new(nodes: Vec<P>, scheduler: Scheduler, tick: Duration) -> Self {
        let n = nodes.len();
        assert!(
            n < MAX_PROCESSES,
            "a world holds fewer than {MAX_PROCESSES} processes"
        );
        let versions = nodes.iter().map(|p| p.state_version()).collect();
        let blocks = Self::blocks_of(n);
        let mut w = Self {
            nodes,
            timers: vec![Timers::None; n],
            versions,
            scheduler,
            tick_ns: tick.as_nanos().max(1) as u64,
            round: 0,
            threads: 1,
            wheel: BTreeMap::new(),
            queued: Vec::new(),
            spont: (0..blocks).map(|_| Vec::new()).collect(),
            inbox: match scheduler {
                Scheduler::Async => (0..n).map(|_| VecDeque::new()).collect(),
                Scheduler::Sync => Vec::new(),
            },
            async_sink: vec![Vec::new()],
            policy: AsyncPolicy::MsgFirst,
            rng: SimRng::new(0),
            channel_ready: HashMap::new(),
            tainted: 0,
            fired_last: vec![false; if scheduler == Scheduler::Async { n } else { 0 }],
            traffic: Traffic {
                received: vec![0; n],
                ..Traffic::default()
            },
            changes: 0,
        };
        let threads = if n >= PARALLEL_FROM {
            std::thread::available_parallelism().map_or(1, |t| t.get())
        } else {
            1
        };
        w.set_threads(threads);
        w
    }

    fn blocks_of(n: usize) -> usize {
        n.div_ceil(1 << BLOCK_SHIFT).max(1)
    }

    /// An empty list per block of receivers.
    fn lists(&self) -> Lists<P::Msg> {
        (0..self.spont.len()).map(|_| Vec::new()).collect()
    }

    fn set_threads(&mut self, threads: usize) {
        let t = threads.clamp(1, Self::blocks_of(self.nodes.len()));
        self.threads = t;
        self.queued = (0..t).map(|_| self.lists()).collect();
    }

    /// Split synchronous phases across `threads` threads (default: every core from
    /// 2^15 processes on, one below). Call before [`Self::start`]; the outcome does not change.
    pub fn with_threads(mut self, threads: usize) -> Self {
        assert!(
            self.queued.iter().flatten().all(Vec::is_empty),
            "threads are chosen before the run"
        );
        self.set_threads(threads);
        self
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
        let env = Envelope::new(from, to, true, msg);
        match self.scheduler {
            Scheduler::Sync => self.spont[(to >> BLOCK_SHIFT) as usize].push(env),
            // Garbage is there from the start: ahead of anything the run sends.
            Scheduler::Async => self.inbox[to as usize].push_back((0, env)),
        }
    }

    fn in_flight_mut(&mut self) -> impl Iterator<Item = &mut Envelope<P::Msg>> {
        self.queued
            .iter_mut()
            .flatten()
            .chain(self.spont.iter_mut())
            .flatten()
            .chain(self.inbox.iter_mut().flatten().map(|(_, env)| env))
    }

    /// Mark every message now in flight as tainted: [`Self::tainted_in_flight`] then reaches zero
    /// only once all of them, and everything sent in reaction to them, have been delivered.
    pub fn taint_in_flight(&mut self) {
        let mut count = 0;
        for env in self.in_flight_mut() {
            env.taint();
            count += 1;
        }
        self.tainted = count;
    }

    /// Messages in flight that were injected before the run or were sent in reaction to one
    /// (transitively). Once this is zero, no message depends on the initial garbage.
    pub fn tainted_in_flight(&self) -> u64 {
        self.tainted
    }

    fn clock(&self) -> Clock {
        Clock {
            n: self.nodes.len() as u64,
            tick_ns: self.tick_ns,
            round: self.round,
            block_shift: BLOCK_SHIFT,
        }
    }

    /// One shard over every process, sending into `sink`.
    fn whole(&mut self, sink: Lists<P::Msg>) -> Shard<'_, P> {
        let clock = self.clock();
        Shard::new(
            0,
            &mut self.nodes,
            &mut self.timers,
            &mut self.versions,
            &mut self.traffic.received,
            sink,
            clock,
        )
    }

    /// Add a shard's counts and armed timers to the world's.
    fn absorb(&mut self, tally: Tally, armed: Vec<(u64, u32)>) {
        self.changes += tally.changes;
        self.traffic.sent += tally.sent;
        self.traffic.dropped += tally.dropped;
        self.tainted = self.tainted + tally.tainted_sent - tally.tainted_taken;
        if self.scheduler == Scheduler::Sync {
            // Runs of one due round (nearly all of a phase's) cost one lookup each.
            for run in armed.chunk_by(|a, b| a.0 == b.0) {
                let slot = self.wheel.entry(run[0].0).or_default();
                slot.extend(run.iter().map(|&(_, p)| p));
            }
        }
    }

    /// Call `on_start` on every process (round 0). `changed(p, node)` is called each time a
    /// process's state version changes, right away (while its state is still in cache).
    pub fn start(&mut self, changed: &(impl Fn(u32, &P) + Sync)) {
        let sink = match self.scheduler {
            Scheduler::Sync => std::mem::take(&mut self.spont),
            Scheduler::Async => std::mem::take(&mut self.async_sink),
        };
        let mut shard = self.whole(sink);
        for p in 0..shard.nodes.len() as u32 {
            shard.start(p, changed);
        }
        let Shard {
            sink, armed, tally, ..
        } = shard;
        self.absorb(tally, armed);
        match self.scheduler {
            Scheduler::Sync => self.spont = sink,
            Scheduler::Async => self.enqueue(sink),
        }
    }

    /// Async only: a step's messages become receivable from the next step.
    fn enqueue(&mut self, mut sink: Lists<P::Msg>) {
        let next = self.round + 1;
        for env in sink[0].drain(..) {
            let AsyncPolicy::Random { max_delay } = self.policy else {
                self.inbox[env.to as usize].push_back((next, env));
                continue;
            };
            let delay = self.rng.below(max_delay as u64 + 1);
            let last = self.channel_ready.entry((env.from(), env.to)).or_insert(0);
            let ready = (next + delay).max(*last);
            *last = ready;
            // After everything ready no later: the channel's earlier messages stay
            // ahead, and the queue stays sorted by readiness.
            let q = &mut self.inbox[env.to as usize];
            let at = q.partition_point(|&(r, _)| r <= ready);
            q.insert(at, (ready, env));
        }
        self.async_sink = sink;
    }

    /// Run one round (a phase or a step) of the configured scheduler, calling `changed` as
    /// [`Self::start`] does. Returns how many times a process's state version changed.
    pub fn run_round(&mut self, changed: &(impl Fn(u32, &P) + Sync)) -> u64 {
        self.changes = 0;
        match self.scheduler {
            Scheduler::Sync => self.sync_phase(changed),
            Scheduler::Async => self.async_step(changed),
        }
        self.changes
    }

    fn sync_phase(&mut self, changed: &(impl Fn(u32, &P) + Sync)) {
        self.round += 1;
        // 1. Spontaneous rules that are due, into the spontaneous lists.
        let mut due = Vec::new();
        while let Some(entry) = self.wheel.first_entry() {
            if *entry.key() > self.round {
                break;
            }
            due.extend(entry.remove());
        }
        if !due.is_empty() {
            let sink = std::mem::take(&mut self.spont);
            let mut shard = self.whole(sink);
            for p in due {
                shard.fire_due(p, true, changed);
            }
            let Shard {
                sink, armed, tally, ..
            } = shard;
            self.spont = sink;
            self.absorb(tally, armed);
        }
        // 2. Every message in the channels: last phase's, then this phase's spontaneous ones
        // (per channel that is FIFO order). Receivers are visited block by block: touching a
        // cache-sized block of processes at a time instead of jumping at random is what lets
        // a million-process phase run from cache; and blocks are what threads share out.
        let clock = self.clock();
        let t = self.threads;
        let blocks = self.spont.len();
        let bounds: Vec<usize> = (0..=t).map(|i| i * blocks / t).collect();
        // Each shard's incoming lists, in delivery order: per block, the senders' shards in
        // order, then the spontaneous list.
        let mut incoming: Vec<Lists<P::Msg>> = (0..t)
            .map(|s| {
                (bounds[s]..bounds[s + 1])
                    .flat_map(|b| {
                        let mut lists: Vec<_> = (0..t)
                            .map(|q| std::mem::take(&mut self.queued[q][b]))
                            .collect();
                        lists.push(std::mem::take(&mut self.spont[b]));
                        lists
                    })
                    .collect()
            })
            .collect();
        let n = self.nodes.len();
        let mut shards = Vec::with_capacity(t);
        let (mut nodes, mut timers, mut versions, mut received) = (
            &mut self.nodes[..],
            &mut self.timers[..],
            &mut self.versions[..],
            &mut self.traffic.received[..],
        );
        for s in 0..t {
            let first = (bounds[s] << BLOCK_SHIFT).min(n);
            let len = (bounds[s + 1] << BLOCK_SHIFT).min(n) - first;
            let (a, rest) = std::mem::take(&mut nodes).split_at_mut(len);
            nodes = rest;
            let (b, rest) = std::mem::take(&mut timers).split_at_mut(len);
            timers = rest;
            let (c, rest) = std::mem::take(&mut versions).split_at_mut(len);
            versions = rest;
            let (d, rest) = std::mem::take(&mut received).split_at_mut(len);
            received = rest;
            let sink = (0..blocks).map(|_| Vec::new()).collect();
            shards.push(Shard::new(first as u32, a, b, c, d, sink, clock));
        }
        let deliver = |shard: &mut Shard<'_, P>, lists: &mut Lists<P::Msg>| {
            for list in lists.iter_mut() {
                shard.deliver_all(list, changed);
            }
        };
        if t == 1 {
            deliver(&mut shards[0], &mut incoming[0]);
        } else {
            std::thread::scope(|scope| {
                let mut work = shards.iter_mut().zip(incoming.iter_mut());
                let (first_shard, first_lists) = work.next().expect("one shard at least");
                for (shard, lists) in work {
                    scope.spawn(move || deliver(shard, lists));
                }
                deliver(first_shard, first_lists);
            });
        }
        // What the shards sent is the next phase's, and timers are queued in delivery order.
        let done: Vec<_> = shards
            .into_iter()
            .map(|shard| (shard.sink, shard.tally, shard.armed))
            .collect();
        for (s, (sink, tally, armed)) in done.into_iter().enumerate() {
            self.queued[s] = sink;
            self.absorb(tally, armed);
        }
    }

    fn async_step(&mut self, changed: &(impl Fn(u32, &P) + Sync)) {
        self.round += 1;
        let round = self.round;
        let clock = self.clock();
        let sink = std::mem::take(&mut self.async_sink);
        let mut shard = Shard::new(
            0,
            &mut self.nodes,
            &mut self.timers,
            &mut self.versions,
            &mut self.traffic.received,
            sink,
            clock,
        );
        for p in 0..shard.nodes.len() {
            let due_since = shard.timers[p].due_since(round);
            let has_msg = self.inbox[p]
                .front()
                .is_some_and(|&(ready, _)| ready <= round);
            let fire = due_since.is_some_and(|since| {
                !has_msg
                    || match self.policy {
                        AsyncPolicy::MsgFirst => round - since >= MSG_FIRST_PATIENCE,
                        AsyncPolicy::Alternate => !self.fired_last[p],
                        AsyncPolicy::Random { .. } => self.rng.chance(0.5),
                    }
            });
            if fire {
                shard.fire_due(p as u32, false, changed);
            } else if let Some((_, env)) = has_msg.then(|| self.inbox[p].pop_front()).flatten() {
                shard.deliver(env, changed);
            } else {
                continue;
            }
            self.fired_last[p] = fire;
        }
        let Shard {
            sink, armed, tally, ..
        } = shard;
        self.absorb(tally, armed);
        self.enqueue(sink);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Outbox, Time, TimerId};
    use crate::NodeId;

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
        type Event = crate::proto::Event;
        type Request = crate::proto::NoRequest;
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
        w.start(&|_, _| {});
        while w.round() < 1000 {
            w.run_round(&|_, _| {});
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
        type Event = crate::proto::Event;
        type Request = crate::proto::NoRequest;
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
        w.start(&|_, _| {});
        while w.round() < 2 * MSG_FIRST_PATIENCE {
            w.run_round(&|_, _| {});
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
