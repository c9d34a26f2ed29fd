//! A protocol held until its driver first wakes it. A launcher of many processes brings every
//! engine up first and then starts the protocol everywhere at one agreed moment, so what it
//! times is the protocol, not the processes' start-up (at 1024 processes on two cores the
//! start-up alone took 2 s, most of a construction's time).

use super::{OutboxOf, Protocol, Time, TimerId};
use crate::NodeId;

/// `P`, started by the first [`Protocol::on_wake`] instead of [`Protocol::on_start`]; later
/// wakes are `P`'s own. A message that comes before (from a peer started first) is handed to
/// `P` as it comes: a protocol of the papers takes messages in any state.
#[derive(Debug)]
pub struct Held<P> {
    inner: P,
    started: bool,
}

impl<P> Held<P> {
    /// `inner`, not started.
    pub fn new(inner: P) -> Self {
        Self {
            inner,
            started: false,
        }
    }

    /// Whether the first wake started it.
    pub fn started(&self) -> bool {
        self.started
    }

    /// The protocol held.
    pub fn into_inner(self) -> P {
        self.inner
    }
}

impl<P: Protocol> Protocol for Held<P> {
    type Msg = P::Msg;
    type Event = P::Event;
    type Request = P::Request;

    fn on_start(&mut self, _now: Time, _out: &mut OutboxOf<P>) {}

    fn on_message(&mut self, now: Time, from: NodeId, msg: P::Msg, out: &mut OutboxOf<P>) {
        self.inner.on_message(now, from, msg, out);
    }

    fn on_timer(&mut self, now: Time, timer: TimerId, out: &mut OutboxOf<P>) {
        self.inner.on_timer(now, timer, out);
    }

    fn on_suspect(&mut self, now: Time, peer: NodeId, out: &mut OutboxOf<P>) {
        self.inner.on_suspect(now, peer, out);
    }

    fn on_wake(&mut self, now: Time, out: &mut OutboxOf<P>) {
        if self.started {
            self.inner.on_wake(now, out);
        } else {
            self.started = true;
            self.inner.on_start(now, out);
        }
    }

    fn state_version(&self) -> u64 {
        self.inner.state_version()
    }

    fn prefetch(&self) {
        self.inner.prefetch();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::ping::PingPong;
    use crate::proto::Action;

    /// Nothing is sent at the start; the first wake is the held protocol's start, the next
    /// its own wake.
    #[test]
    fn the_first_wake_starts_it() {
        let mut p = Held::new(PingPong::pinger(NodeId(1), vec![32], 1, 0));
        let mut out = crate::proto::Outbox::default();
        p.on_start(Time::ZERO, &mut out);
        assert!(out.drain().next().is_none(), "held: nothing sent");
        assert!(!p.started());
        p.on_wake(Time(5), &mut out);
        assert!(p.started());
        let sent: Vec<_> = out.drain().collect();
        assert!(
            sent.iter()
                .any(|a| matches!(a, Action::Send { to, .. } if *to == NodeId(1))),
            "the pinger's start pings: {sent:?}"
        );
        p.on_wake(Time(6), &mut out);
        assert!(out.drain().next().is_none(), "a pinger ignores later wakes");
    }
}
