//! Relay: tokens passed around a ring of nodes, one message per hop. On the engine, with
//! enough tokens in flight to keep every core busy, it measures the per-message CPU cost `c`
//! of the contention model: the cost of one message (send, network stack, receive, handling)
//! when the cores, not the latency, are the limit.
//!
//! `tokens` tokens start at evenly spaced nodes; every node forwards a token to its successor
//! until the token has made `laps` laps. A token's first lap opens the ring's
//! connections, so the measured window runs from the first token finishing its first lap to the
//! last token finishing (times from the driver's clock, read after the nodes stop).

use super::{Event, Outbox, Protocol, Time, TimerId};
use crate::NodeId;

pub use self::wire_form::RelayMsg;

/// A module of its own for the archived form: rkyv derives a resolver enum whose variant
/// fields carry no docs, and kept private it stays out of the public API.
mod wire_form {
    /// Messages of the relay.
    #[derive(
        Clone, Copy, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
    )]
    pub enum RelayMsg {
        /// A token that has made `hops` hops.
        Token {
            /// Hops so far.
            hops: u64,
        },
    }
}

impl super::Message for RelayMsg {
    const TAG: super::Tag = 3;
    const NAME: &'static str = "relay";
}

/// One node of the ring.
#[derive(Debug)]
pub struct Relay {
    me: u64,
    n: u64,
    tokens: u64,
    limit: u64,
    /// When this node saw a token complete its first lap (the earliest), and its last.
    warm_at: Option<Time>,
    done_at: Option<Time>,
    /// Tokens this node handled.
    pub handled: u64,
}

impl Relay {
    /// Node `me` of a ring of `n` carrying `tokens` tokens (at most `n`) for `laps` laps.
    pub fn new(me: u64, n: u64, tokens: u64, laps: u64) -> Self {
        Self {
            me,
            n: n.max(1),
            tokens,
            limit: laps.max(2) * n.max(1),
            warm_at: None,
            done_at: None,
            handled: 0,
        }
    }

    /// Hops the measured window covers per token (every lap after the first).
    pub fn timed_hops(&self) -> u64 {
        self.limit - self.n
    }

    /// When this node saw a first lap end, if it did.
    pub fn warm_at(&self) -> Option<Time> {
        self.warm_at
    }

    /// When this node ended a token, if it did.
    pub fn done_at(&self) -> Option<Time> {
        self.done_at
    }
}

impl Protocol for Relay {
    type Msg = RelayMsg;
    type Event = crate::proto::Event;
    type Request = crate::proto::NoRequest;

    fn on_start(&mut self, _now: Time, out: &mut Outbox<RelayMsg>) {
        // Token t starts at node t·n/tokens: distinct nodes while tokens <= n.
        let tokens = self.tokens.clamp(1, self.n);
        let starts = (0..tokens)
            .filter(|t| t * self.n / tokens == self.me)
            .count();
        for _ in 0..starts {
            out.send(NodeId((self.me + 1) % self.n), RelayMsg::Token { hops: 1 });
        }
    }

    fn on_message(&mut self, now: Time, _from: NodeId, msg: RelayMsg, out: &mut Outbox<RelayMsg>) {
        let RelayMsg::Token { hops } = msg;
        self.handled += 1;
        if hops == self.n {
            self.warm_at = Some(self.warm_at.map_or(now, |w| w.min(now)));
        }
        if hops >= self.limit {
            self.done_at = Some(now);
            out.report(Event::Done);
            return;
        }
        out.send(
            NodeId((self.me + 1) % self.n),
            RelayMsg::Token { hops: hops + 1 },
        );
    }

    fn on_timer(&mut self, _now: Time, _timer: TimerId, _out: &mut Outbox<RelayMsg>) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Action;

    #[test]
    fn every_token_starts_once() {
        for (n, tokens) in [(4, 4), (10, 3), (64, 64), (1024, 64)] {
            let mut started = 0;
            for me in 0..n {
                let mut out = Outbox::new();
                Relay::new(me, n, tokens, 3).on_start(Time::ZERO, &mut out);
                started += out.len() as u64;
            }
            assert_eq!(started, tokens, "n={n}");
        }
    }

    #[test]
    fn a_token_goes_round_then_stops() {
        let mut r = Relay::new(2, 4, 1, 2);
        let mut out = Outbox::new();
        r.on_message(Time(5), NodeId(1), RelayMsg::Token { hops: 3 }, &mut out);
        let a: Vec<_> = out.drain().collect();
        assert_eq!(
            a,
            vec![Action::Send {
                to: NodeId(3),
                msg: RelayMsg::Token { hops: 4 }
            }]
        );
        r.on_message(Time(9), NodeId(1), RelayMsg::Token { hops: 4 }, &mut out);
        assert_eq!(r.warm_at(), Some(Time(9)), "hop n ends the first lap");
        out.drain().for_each(drop);
        r.on_message(Time(20), NodeId(1), RelayMsg::Token { hops: 8 }, &mut out);
        assert_eq!(
            out.drain().collect::<Vec<_>>(),
            vec![Action::Report(Event::Done)]
        );
        assert_eq!(
            (r.done_at(), r.handled, r.timed_hops()),
            (Some(Time(20)), 3, 4)
        );
    }
}
