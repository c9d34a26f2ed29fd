//! A contiguous range of processes and what they produce in a round: the unit a synchronous
//! phase hands to one thread. A process's state, timers and counters live only in its shard,
//! and what it sends goes to the shard's own outgoing lists, so shards run in parallel without
//! sharing anything but the read-only clock and the watcher.

use super::timers::Timers;
use crate::proto::{Action, Outbox, Protocol, Time};
use crate::NodeId;

/// The bit of [`Envelope::from`] that marks a message descending from injected garbage
/// (processes are numbered below 2^31).
const TAINT: u32 = 1 << 31;

/// A message in flight: 8 bytes besides the message.
#[derive(Clone, Debug)]
pub(super) struct Envelope<M> {
    /// The sender, with [`TAINT`] set when the message descends (causally, as in Lemma A.1)
    /// from a message injected before the run.
    from: u32,
    pub(super) to: u32,
    pub(super) msg: M,
}

impl<M> Envelope<M> {
    pub(super) fn new(from: u32, to: u32, tainted: bool, msg: M) -> Self {
        debug_assert!(from < TAINT && to < TAINT);
        Self {
            from: from | if tainted { TAINT } else { 0 },
            to,
            msg,
        }
    }

    pub(super) fn from(&self) -> u32 {
        self.from & !TAINT
    }

    pub(super) fn tainted(&self) -> bool {
        self.from & TAINT != 0
    }

    pub(super) fn taint(&mut self) {
        self.from |= TAINT;
    }
}

/// Most processes a world holds: ids must leave [`Envelope`]'s taint bit free.
pub const MAX_PROCESSES: usize = TAINT as usize;

/// What every shard reads during a round.
#[derive(Clone, Copy, Debug)]
pub(super) struct Clock {
    /// Processes in the world (messages to ids at or above are dropped).
    pub(super) n: u64,
    pub(super) tick_ns: u64,
    pub(super) round: u64,
    /// Receivers per outgoing list, as a shift (0 with one list: the asynchronous scheduler).
    pub(super) block_shift: u32,
}

impl Clock {
    pub(super) fn now(&self) -> Time {
        Time(self.round.saturating_mul(self.tick_ns))
    }
}

/// Counts a shard adds to the world's after the round.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Tally {
    pub(super) sent: u64,
    pub(super) dropped: u64,
    /// Tainted messages sent.
    pub(super) tainted_sent: u64,
    /// Tainted messages consumed.
    pub(super) tainted_taken: u64,
    /// State version changes.
    pub(super) changes: u64,
}

/// Processes `first..first + nodes.len()` for one round.
pub(super) struct Shard<'w, P: Protocol> {
    pub(super) first: u32,
    pub(super) nodes: &'w mut [P],
    pub(super) timers: &'w mut [Timers],
    pub(super) versions: &'w mut [u64],
    pub(super) received: &'w mut [u32],
    /// What the shard's processes send, by block of receivers (one list when `block_shift` is
    /// 0 and there is one block), in send order.
    pub(super) sink: Vec<Vec<Envelope<P::Msg>>>,
    /// Timers armed, as (due round, process): the synchronous scheduler's wheel entries.
    pub(super) armed: Vec<(u64, u32)>,
    pub(super) tally: Tally,
    pub(super) clock: Clock,
    out: Outbox<P::Msg, P::Event>,
    /// Receivers of the list being delivered, for loading them ahead.
    scratch: Vec<usize>,
}

/// How many messages ahead of its delivery a receiver's state is loaded: enough to cover a
/// miss to memory (~100 ns) at ~50 ns of work per message, few enough to stay in L1.
const AHEAD: usize = 8;

impl<'w, P: Protocol> Shard<'w, P> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        first: u32,
        nodes: &'w mut [P],
        timers: &'w mut [Timers],
        versions: &'w mut [u64],
        received: &'w mut [u32],
        sink: Vec<Vec<Envelope<P::Msg>>>,
        clock: Clock,
    ) -> Self {
        Self {
            first,
            nodes,
            timers,
            versions,
            received,
            sink,
            armed: Vec::new(),
            tally: Tally::default(),
            clock,
            out: Outbox::new(),
            scratch: Vec::new(),
        }
    }

    fn local(&self, p: u32) -> usize {
        (p - self.first) as usize
    }

    /// `on_start` of process `p`.
    pub(super) fn start(&mut self, p: u32, changed: &(impl Fn(u32, &P) + Sync)) {
        let i = self.local(p);
        self.nodes[i].on_start(self.clock.now(), &mut self.out);
        self.apply(p, false, changed);
    }

    /// Fire `p`'s timers due this round, earliest first: all of them (a phase) or one (a step).
    pub(super) fn fire_due(&mut self, p: u32, all: bool, changed: &(impl Fn(u32, &P) + Sync)) {
        let i = self.local(p);
        while let Some(t) = self.timers[i].take_due(self.clock.round) {
            self.nodes[i].on_timer(self.clock.now(), t, &mut self.out);
            self.apply(p, false, changed);
            if !all {
                break;
            }
        }
    }

    /// Hand every message of `list` to its receiver (all in this shard), in order. Receivers
    /// are far apart in memory, so each is loaded ahead: its state [`AHEAD`] messages before
    /// its turn, what that state points to ([`Protocol::prefetch`]) half as many before.
    pub(super) fn deliver_all(
        &mut self,
        list: &mut Vec<Envelope<P::Msg>>,
        changed: &(impl Fn(u32, &P) + Sync),
    ) {
        let mut to = std::mem::take(&mut self.scratch);
        to.clear();
        to.extend(list.iter().map(|e| self.local(e.to)));
        for (i, env) in list.drain(..).enumerate() {
            if let Some(&far) = to.get(i + AHEAD) {
                crate::proto::prefetch_bytes(&self.nodes[far], std::mem::size_of::<P>());
            }
            if let Some(&near) = to.get(i + AHEAD / 2) {
                self.nodes[near].prefetch();
            }
            self.deliver(env, changed);
        }
        self.scratch = to;
        // Freed at once, not kept for its capacity: the phase's messages then take the
        // memory of one phase, not two (at 2^24 processes, 1.5 GB), and fresh lists fill
        // faster than reused ones, cold by the next phase, do.
        *list = Vec::new();
    }

    /// Hand `env` to its receiver, which must be in this shard.
    pub(super) fn deliver(&mut self, env: Envelope<P::Msg>, changed: &(impl Fn(u32, &P) + Sync)) {
        let (to, from, tainted) = (env.to, env.from(), env.tainted());
        let i = self.local(to);
        self.received[i] += 1;
        self.tally.tainted_taken += tainted as u64;
        self.nodes[i].on_message(
            self.clock.now(),
            NodeId(from as u64),
            env.msg,
            &mut self.out,
        );
        self.apply(to, tainted, changed);
    }

    /// Carry out the actions process `p` just produced, and tell `changed` when its state
    /// version moved (right away, while its state is in cache).
    fn apply(&mut self, p: u32, tainted: bool, changed: &(impl Fn(u32, &P) + Sync)) {
        let i = self.local(p);
        let c = self.clock;
        for action in self.out.drain() {
            match action {
                Action::Send { to, msg } => {
                    if to.0 >= c.n {
                        self.tally.dropped += 1;
                        continue;
                    }
                    self.tally.sent += 1;
                    self.tally.tainted_sent += tainted as u64;
                    let to = to.0 as u32;
                    let block = if self.sink.len() == 1 {
                        0
                    } else {
                        (to >> c.block_shift) as usize
                    };
                    self.sink[block].push(Envelope::new(p, to, tainted, msg));
                }
                Action::SetTimer { timer, after } => {
                    let rounds = (after.as_nanos() as u64).div_ceil(c.tick_ns).max(1);
                    let due = c.round + rounds;
                    self.timers[i].set(timer, due);
                    self.armed.push((due, p));
                }
                Action::CancelTimer(timer) => self.timers[i].cancel(timer),
                Action::Report(_) => {}
            }
        }
        let v = self.nodes[i].state_version();
        if v != self.versions[i] {
            self.versions[i] = v;
            self.tally.changes += 1;
            changed(p, &self.nodes[i]);
        }
    }
}
