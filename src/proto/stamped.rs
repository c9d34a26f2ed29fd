//! A protocol stamped with when its state last changed. A self-stabilizing construction has
//! no local "done": a process goes quiet once its own rules are settled, while messages it
//! forwards for others (Algorithm 2's) still change their state. The moment the whole
//! structure is built is the last change anywhere, which a driver reads from every process
//! once the run has ended, the simulator's and the engine's alike.

use super::{OutboxOf, Protocol, Time, TimerId};
use crate::NodeId;

/// `P`, with the time of the last event that changed its [`Protocol::state_version`].
#[derive(Debug)]
pub struct Stamped<P> {
    inner: P,
    changed: Option<Time>,
}

impl<P: Protocol> Stamped<P> {
    /// `inner`, not changed yet.
    pub fn new(inner: P) -> Self {
        Self {
            inner,
            changed: None,
        }
    }

    /// When an event last changed the state (`None`: never).
    pub fn changed(&self) -> Option<Time> {
        self.changed
    }

    /// The protocol.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The protocol, unwrapped.
    pub fn into_inner(self) -> P {
        self.inner
    }

    /// Run one event's handling, stamping `now` if it changed the state.
    fn around(&mut self, now: Time, handle: impl FnOnce(&mut P)) {
        let before = self.inner.state_version();
        handle(&mut self.inner);
        if self.inner.state_version() != before {
            self.changed = Some(now);
        }
    }
}

impl<P: Protocol> Protocol for Stamped<P> {
    type Msg = P::Msg;
    type Event = P::Event;
    type Request = P::Request;

    fn on_start(&mut self, now: Time, out: &mut OutboxOf<P>) {
        self.around(now, |p| p.on_start(now, out));
    }

    fn on_message(&mut self, now: Time, from: NodeId, msg: P::Msg, out: &mut OutboxOf<P>) {
        self.around(now, |p| p.on_message(now, from, msg, out));
    }

    fn on_timer(&mut self, now: Time, timer: TimerId, out: &mut OutboxOf<P>) {
        self.around(now, |p| p.on_timer(now, timer, out));
    }

    fn on_suspect(&mut self, now: Time, peer: NodeId, out: &mut OutboxOf<P>) {
        self.around(now, |p| p.on_suspect(now, peer, out));
    }

    fn on_wake(&mut self, now: Time, out: &mut OutboxOf<P>) {
        self.around(now, |p| p.on_wake(now, out));
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
    use crate::proto::overlay::{Overlay, OVERLAY_TIMER};
    use crate::proto::ring::Ring;
    use crate::proto::spontaneous::SpontaneousConfig;
    use crate::proto::Action;
    use std::time::Duration;

    /// The stamp follows the events that change the state and ignores those that do not:
    /// a leaf's first firing sets nothing of its own, the ring's answer does.
    #[test]
    fn only_a_change_moves_the_stamp() {
        let cfg = SpontaneousConfig {
            period: Duration::from_millis(1),
            refresh: None,
            backoff: 0,
        };
        // A tree of two: 0 the root, 1 its leaf.
        let root = Ring::new(NodeId(0), None, vec![NodeId(1)]);
        let leaf = Ring::new(NodeId(1), Some(NodeId(0)), vec![]);
        let mut a = Stamped::new(Overlay::new(root, 2, cfg));
        let mut b = Stamped::new(Overlay::new(leaf, 2, cfg));
        let mut out = crate::proto::Outbox::default();
        a.on_start(Time(0), &mut out);
        b.on_start(Time(0), &mut out);
        out.drain().for_each(drop);
        assert_eq!(a.changed(), None, "starting sets no neighbor");
        // Run both to the end by hand, every message delivered at once, time moving 1 µs an
        // event; remember the last event that changed either.
        let mut t = 0u64;
        let mut pending: Vec<(u64, u64, crate::proto::overlay::OverlayMsg)> = Vec::new();
        let mut last_change = None;
        for round in 0..200 {
            for (who, p) in [(0u64, &mut a), (1, &mut b)] {
                t += 1_000;
                let before = p.state_version();
                if round % 2 == 0 {
                    p.on_timer(Time(t), OVERLAY_TIMER, &mut out);
                }
                let mine: Vec<_> = pending.iter().filter(|m| m.1 == who).cloned().collect();
                pending.retain(|m| m.1 != who);
                for (from, _, m) in mine {
                    p.on_message(Time(t), NodeId(from), m, &mut out);
                }
                if p.state_version() != before {
                    last_change = Some(Time(t));
                    assert_eq!(p.changed(), Some(Time(t)));
                }
                for a in out.drain() {
                    if let Action::Send { to, msg } = a {
                        pending.push((who, to.0, msg));
                    }
                }
            }
        }
        assert!(a.inner().settled() && b.inner().settled());
        let latest = a.changed().max(b.changed());
        assert!(latest.is_some());
        assert_eq!(latest, last_change);
        assert!(
            latest < Some(Time(t)),
            "quiet at the end: no change in the last events"
        );
    }
}
