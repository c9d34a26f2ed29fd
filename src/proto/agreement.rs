//! BSPAGREEMENT (Kontogiannis et al., section 3.4, Figure 4): the live processes agree on one
//! value (an estimate of how many are alive, a common random seed) without a coordinator.
//!
//! Each process takes an **initial value**: one given (BSPRANDOMCHOICE draws a random seed),
//! or RANDOMSAMPLING, which polls `N` targets drawn uniformly with replacement from the job's
//! ids and estimates the live count as `n · answers / N`. Then, for `rounds` rounds, it samples
//! `fanout` (`log n`) random processes' values of the previous round and applies the
//! agreement rule (a parameter: median, majority, min, max) to them and its own. Lemma 3.1:
//! `O(log n / log N)` rounds bring every live process to one value with high probability.
//!
//! Departure: the paper's round is a BSP superstep in which each process *sends* its value to
//! `log n` targets. Over an asynchronous network a process could not know when a round's
//! pushes are all in, so weft *pulls*: a process asks its targets for their value of the
//! previous round (`Poll`), and a target answers once it has that value. A target that fails
//! is suspected by the transport and dropped from the sample. The sample is the same size and
//! as random, so the paper's analysis carries over.

use super::{Event, Outbox, Protocol, Time, TimerId};
use crate::rng::SimRng;
use crate::NodeId;
use std::collections::HashMap;

pub use self::wire_form::AgreeMsg;

/// A module of its own for the archived form (see `proto::ping`).
mod wire_form {
    /// Messages of BSPAGREEMENT.
    #[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
    pub enum AgreeMsg {
        /// RANDOMSAMPLING's poll: are you alive?
        Sample,
        /// The answer to [`AgreeMsg::Sample`].
        Alive,
        /// Send me your value of this round (0: the initial value).
        Poll {
            /// The round.
            round: u32,
        },
        /// A value of a round.
        Value {
            /// The round.
            round: u32,
            /// The value.
            value: u64,
        },
    }
}

impl super::Message for AgreeMsg {
    const TAG: super::Tag = 7;
    const NAME: &'static str = "agreement";
}

/// How a new estimate is made from a round's samples (the process's own value included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The middle value (the lower of the two middles): estimates such as the live count.
    Median,
    /// The most frequent value, the smallest among ties: a choice among few candidates.
    Majority,
    /// The smallest value: a common random seed spreads like a rumor.
    Min,
    /// The largest value.
    Max,
}

impl Rule {
    /// Apply the rule to `values` (not empty).
    pub fn apply(self, values: &mut [u64]) -> u64 {
        values.sort_unstable();
        match self {
            Rule::Median => values[(values.len() - 1) / 2],
            Rule::Min => values[0],
            Rule::Max => values[values.len() - 1],
            Rule::Majority => {
                let (mut best, mut best_n, mut i) = (values[0], 0, 0);
                while i < values.len() {
                    let j = values[i..].partition_point(|&v| v == values[i]) + i;
                    if j - i > best_n {
                        (best, best_n) = (values[i], j - i);
                    }
                    i = j;
                }
                best
            }
        }
    }
}

/// Where the initial value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Initial {
    /// This value (BSPRANDOMCHOICE: a seed drawn by the process).
    Value(u64),
    /// RANDOMSAMPLING: `polls` targets drawn with replacement; the estimate of the live count.
    LiveCount {
        /// Polls sent (`N`, the paper's `O(log n)`).
        polls: u32,
    },
}

/// What the agreement tells its user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgreementEvent {
    /// The initial value is known.
    Initial {
        /// It.
        value: u64,
    },
    /// The last round is done: this process's agreed value.
    Agreed {
        /// It.
        value: u64,
        /// Rounds run.
        rounds: u32,
    },
}

/// BSPAGREEMENT on one process.
pub struct Agreement {
    me: NodeId,
    ids: Vec<NodeId>,
    rule: Rule,
    initial: Initial,
    fanout: usize,
    rounds: u32,
    rng: SimRng,
    /// This process's value after each finished round (index 0: the initial value).
    values: Vec<u64>,
    /// RANDOMSAMPLING: polls outstanding (by target, with multiplicity) and answers.
    sampling: HashMap<NodeId, u32>,
    alive_answers: u32,
    /// The round in progress: outstanding polls by target, and the values in.
    waiting: HashMap<NodeId, u32>,
    samples: Vec<u64>,
    /// Polls for rounds not finished yet here.
    deferred: Vec<(NodeId, u32)>,
    /// Processes the transport reported failed: a draw of one is a missing sample at once
    /// (the transport need not report a failure twice).
    suspected: std::collections::HashSet<NodeId>,
    version: u64,
}

impl Agreement {
    /// Agreement among `ids` (the job's processes, `me` among them): `rounds` rounds of
    /// `fanout` samples under `rule`, from `initial`; `seed` draws the samples.
    pub fn new(
        me: NodeId,
        ids: &[NodeId],
        rule: Rule,
        initial: Initial,
        rounds: u32,
        fanout: usize,
        seed: u64,
    ) -> Self {
        Self {
            me,
            ids: ids.to_vec(),
            rule,
            initial,
            fanout: fanout.max(1),
            rounds,
            rng: SimRng::stream(seed, me.0),
            values: Vec::new(),
            sampling: HashMap::new(),
            alive_answers: 0,
            waiting: HashMap::new(),
            samples: Vec::new(),
            deferred: Vec::new(),
            suspected: Default::default(),
            version: 0,
        }
    }

    /// `⌈log2 n⌉`, at least 1: the paper's sample size per round.
    pub fn log_fanout(n: usize) -> usize {
        (usize::BITS - n.saturating_sub(1).leading_zeros()).max(1) as usize
    }

    /// The agreed value, once every round is done.
    pub fn agreed(&self) -> Option<u64> {
        (self.values.len() as u64 > u64::from(self.rounds))
            .then(|| self.values.last().copied())
            .flatten()
    }

    /// This process's value after round `r` (0: the initial value), if it has it.
    pub fn value_at(&self, r: u32) -> Option<u64> {
        self.values.get(r as usize).copied()
    }

    fn draw(&mut self) -> NodeId {
        self.ids[self.rng.below(self.ids.len() as u64) as usize]
    }

    /// A value of round `r` is known: record it, answer deferred polls, start the next round.
    fn finish_round(&mut self, value: u64, out: &mut Outbox<AgreeMsg>) {
        let r = self.values.len() as u32;
        self.values.push(value);
        self.version += 1;
        let (ready, later): (Vec<_>, Vec<_>) =
            self.deferred.drain(..).partition(|&(_, round)| round <= r);
        self.deferred = later;
        for (to, round) in ready {
            let value = self.values[round as usize];
            out.send(to, AgreeMsg::Value { round, value });
        }
        if r == 0 {
            out.report(Event::Agreement(AgreementEvent::Initial { value }));
        }
        if r == self.rounds {
            out.report(Event::Agreement(AgreementEvent::Agreed {
                value,
                rounds: self.rounds,
            }));
            return;
        }
        // Round r + 1: sample `fanout` processes' round-r values.
        self.samples.clear();
        self.waiting.clear();
        for _ in 0..self.fanout {
            let t = self.draw();
            if t == self.me {
                self.samples.push(value);
            } else if !self.suspected.contains(&t) {
                *self.waiting.entry(t).or_default() += 1;
            }
        }
        for (&t, _) in self.waiting.iter() {
            out.send(t, AgreeMsg::Poll { round: r });
        }
        self.round_done(out);
    }

    /// When no sample is outstanding, apply the rule and finish the round.
    fn round_done(&mut self, out: &mut Outbox<AgreeMsg>) {
        if !self.waiting.is_empty() || self.values.is_empty() {
            return;
        }
        let Some(&own) = self.values.last() else {
            return;
        };
        let mut values = std::mem::take(&mut self.samples);
        values.push(own);
        let next = self.rule.apply(&mut values);
        self.finish_round(next, out);
    }

    /// When RANDOMSAMPLING has all its answers, the initial value is the estimate.
    fn sampling_done(&mut self, out: &mut Outbox<AgreeMsg>) {
        if !self.values.is_empty() || !self.sampling.is_empty() {
            return;
        }
        if let Initial::LiveCount { polls } = self.initial {
            let n = self.ids.len() as u64;
            let estimate = (n * u64::from(self.alive_answers) + u64::from(polls) / 2)
                / u64::from(polls.max(1));
            self.finish_round(estimate, out);
        }
    }
}

impl Protocol for Agreement {
    type Msg = AgreeMsg;
    type Event = crate::proto::Event;
    type Request = crate::proto::NoRequest;

    fn on_start(&mut self, _now: Time, out: &mut Outbox<AgreeMsg>) {
        match self.initial {
            Initial::Value(v) => self.finish_round(v, out),
            Initial::LiveCount { polls } => {
                for _ in 0..polls.max(1) {
                    let t = self.draw();
                    if t == self.me {
                        self.alive_answers += 1;
                    } else if !self.suspected.contains(&t) {
                        *self.sampling.entry(t).or_default() += 1;
                    }
                }
                for (&t, _) in self.sampling.iter() {
                    out.send(t, AgreeMsg::Sample);
                }
                self.sampling_done(out);
            }
        }
    }

    fn on_message(&mut self, _now: Time, from: NodeId, msg: AgreeMsg, out: &mut Outbox<AgreeMsg>) {
        match msg {
            AgreeMsg::Sample => out.send(from, AgreeMsg::Alive),
            AgreeMsg::Alive => {
                if let Some(k) = self.sampling.remove(&from) {
                    self.alive_answers += k;
                    self.sampling_done(out);
                }
            }
            AgreeMsg::Poll { round } => match self.values.get(round as usize) {
                Some(&value) => out.send(from, AgreeMsg::Value { round, value }),
                // A round this process has not reached; at most one deferral per round and
                // peer, and never past the last round (a stranger cannot grow the list).
                None if round <= self.rounds && self.deferred.len() < self.ids.len() * 4 => {
                    self.deferred.push((from, round))
                }
                None => {}
            },
            AgreeMsg::Value { round, value } => {
                let current = self.values.len().checked_sub(1).map(|r| r as u32);
                if current == Some(round) {
                    if let Some(k) = self.waiting.remove(&from) {
                        self.samples.extend(std::iter::repeat_n(value, k as usize));
                        self.round_done(out);
                    }
                }
            }
        }
        self.version += 1;
    }

    fn on_timer(&mut self, _now: Time, _timer: TimerId, _out: &mut Outbox<AgreeMsg>) {}

    fn on_suspect(&mut self, _now: Time, peer: NodeId, out: &mut Outbox<AgreeMsg>) {
        // A dead target answers nothing: it is out of the sample (and counted dead).
        self.suspected.insert(peer);
        if self.sampling.remove(&peer).is_some() {
            self.sampling_done(out);
        }
        if self.waiting.remove(&peer).is_some() {
            self.round_done(out);
        }
        self.deferred.retain(|&(p, _)| p != peer);
        self.version += 1;
    }

    fn state_version(&self) -> u64 {
        self.version
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_pick_what_they_say() {
        assert_eq!(Rule::Median.apply(&mut [5, 1, 9, 3]), 3);
        assert_eq!(Rule::Majority.apply(&mut [4, 2, 4, 2, 7]), 2);
        assert_eq!(Rule::Majority.apply(&mut [4, 4, 2, 7]), 4);
        assert_eq!(Rule::Min.apply(&mut [4, 2, 7]), 2);
        assert_eq!(Rule::Max.apply(&mut [4, 2, 7]), 7);
    }

    #[test]
    fn a_poll_for_a_round_not_reached_waits_and_one_past_the_last_is_ignored() {
        let ids: Vec<NodeId> = (0..4).map(NodeId).collect();
        let mut a = Agreement::new(NodeId(0), &ids, Rule::Min, Initial::Value(9), 2, 1, 1);
        let mut out = Outbox::new();
        a.on_message(Time::ZERO, NodeId(1), AgreeMsg::Poll { round: 0 }, &mut out);
        a.on_message(Time::ZERO, NodeId(1), AgreeMsg::Poll { round: 3 }, &mut out);
        assert!(out.is_empty(), "nothing known yet");
        a.on_start(Time::ZERO, &mut out);
        let answers: Vec<_> = out
            .drain()
            .filter(|x| {
                matches!(
                    x,
                    crate::proto::Action::Send {
                        msg: AgreeMsg::Value { .. },
                        ..
                    }
                )
            })
            .collect();
        assert_eq!(
            answers.len(),
            1,
            "the deferred round-0 poll is answered, round 3 never"
        );
        assert!(a.deferred.is_empty());
    }
}
