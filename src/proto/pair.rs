//! Two protocols on one node, without glue: a runtime's own protocol beside one of weft's
//! (routing, storage, membership), or two of weft's. [`Pair`] is itself a [`Protocol`]:
//! every driver runs it as it runs one.
//!
//! Each side keeps its own messages, requests, events and timers: a message of either goes
//! out and comes back as [`Either`] (the wire reads each frame by its tag, so the two sides'
//! message tags must differ), a request or an event is [`Either::First`] or
//! [`Either::Second`], and a side's timer `t` is the pair's `2t` (first) or `2t + 1` (second).
//! Both sides hear every suspicion and every wake; each handles only its own messages,
//! requests and timers.

use super::{Action, Outbox, Protocol, Time, TimerId};
use crate::NodeId;

/// One side's message, request or event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Either<A, B> {
    /// The first protocol's.
    First(A),
    /// The second protocol's.
    Second(B),
}

/// Protocols `A` and `B` on one node.
pub struct Pair<A: Protocol, B: Protocol> {
    /// The first protocol.
    pub first: A,
    /// The second protocol.
    pub second: B,
    out_a: Outbox<A::Msg, A::Event>,
    out_b: Outbox<B::Msg, B::Event>,
}

/// The pair's timer of a side's timer: even for the first, odd for the second.
fn timer_of(t: TimerId, second: bool) -> TimerId {
    debug_assert!(t.0 < 1 << 31, "timer {} does not fit a pair", t.0);
    TimerId((t.0 << 1) | u32::from(second))
}

/// The outbox of a [`Pair`] of `A` and `B`.
pub type PairOutbox<A, B> = Outbox<
    Either<<A as Protocol>::Msg, <B as Protocol>::Msg>,
    Either<<A as Protocol>::Event, <B as Protocol>::Event>,
>;

impl<A: Protocol, B: Protocol> Pair<A, B> {
    /// `first` and `second` on one node.
    pub fn new(first: A, second: B) -> Self {
        Self {
            first,
            second,
            out_a: Outbox::new(),
            out_b: Outbox::new(),
        }
    }

    /// Let the owner of the pair act on its first side outside a driver's call (a composite
    /// asking it something it has a method for, not a request), and take what it asked for.
    pub fn with_first<T>(
        &mut self,
        f: impl FnOnce(&mut A, &mut Outbox<A::Msg, A::Event>) -> T,
        out: &mut PairOutbox<A, B>,
    ) -> T {
        let t = f(&mut self.first, &mut self.out_a);
        self.merge(out);
        t
    }

    /// [`Pair::with_first`] for the second side.
    pub fn with_second<T>(
        &mut self,
        f: impl FnOnce(&mut B, &mut Outbox<B::Msg, B::Event>) -> T,
        out: &mut PairOutbox<A, B>,
    ) -> T {
        let t = f(&mut self.second, &mut self.out_b);
        self.merge(out);
        t
    }

    /// Move what the sides asked for into the pair's outbox, in the order they asked.
    fn merge(&mut self, out: &mut PairOutbox<A, B>) {
        for a in self.out_a.drain() {
            out.push(lift(a, false, Either::First, Either::First));
        }
        for a in self.out_b.drain() {
            out.push(lift(a, true, Either::Second, Either::Second));
        }
    }
}

/// A side's action as the pair's: its message and event wrapped, its timer mapped.
fn lift<M, E, PM, PE>(
    a: Action<M, E>,
    second: bool,
    msg: impl FnOnce(M) -> PM,
    event: impl FnOnce(E) -> PE,
) -> Action<PM, PE> {
    match a {
        Action::Send { to, msg: m } => Action::Send { to, msg: msg(m) },
        Action::SetTimer { timer, after } => Action::SetTimer {
            timer: timer_of(timer, second),
            after,
        },
        Action::CancelTimer(t) => Action::CancelTimer(timer_of(t, second)),
        Action::Report(e) => Action::Report(event(e)),
    }
}

impl<A: Protocol, B: Protocol> Protocol for Pair<A, B> {
    type Msg = Either<A::Msg, B::Msg>;
    type Event = Either<A::Event, B::Event>;
    type Request = Either<A::Request, B::Request>;

    fn on_start(&mut self, now: Time, out: &mut PairOutbox<A, B>) {
        self.first.on_start(now, &mut self.out_a);
        self.second.on_start(now, &mut self.out_b);
        self.merge(out);
    }

    fn on_message(&mut self, now: Time, from: NodeId, msg: Self::Msg, out: &mut PairOutbox<A, B>) {
        match msg {
            Either::First(m) => self.first.on_message(now, from, m, &mut self.out_a),
            Either::Second(m) => self.second.on_message(now, from, m, &mut self.out_b),
        }
        self.merge(out);
    }

    fn on_timer(&mut self, now: Time, timer: TimerId, out: &mut PairOutbox<A, B>) {
        let own = TimerId(timer.0 >> 1);
        if timer.0 & 1 == 0 {
            self.first.on_timer(now, own, &mut self.out_a);
        } else {
            self.second.on_timer(now, own, &mut self.out_b);
        }
        self.merge(out);
    }

    fn on_suspect(&mut self, now: Time, peer: NodeId, out: &mut PairOutbox<A, B>) {
        self.first.on_suspect(now, peer, &mut self.out_a);
        self.second.on_suspect(now, peer, &mut self.out_b);
        self.merge(out);
    }

    fn on_request(&mut self, now: Time, req: Self::Request, out: &mut PairOutbox<A, B>) {
        match req {
            Either::First(r) => self.first.on_request(now, r, &mut self.out_a),
            Either::Second(r) => self.second.on_request(now, r, &mut self.out_b),
        }
        self.merge(out);
    }

    fn on_wake(&mut self, now: Time, out: &mut PairOutbox<A, B>) {
        self.first.on_wake(now, &mut self.out_a);
        self.second.on_wake(now, &mut self.out_b);
        self.merge(out);
    }

    fn state_version(&self) -> u64 {
        // Each side's counter only grows: their sum changes whenever either does.
        self.first
            .state_version()
            .wrapping_add(self.second.state_version())
    }

    fn prefetch(&self) {
        self.first.prefetch();
        self.second.prefetch();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::ping::PingMsg;
    use std::time::Duration;

    /// Arms timer 3, reports its name when a timer fires or a request or a message comes.
    struct Named(&'static str);

    impl Protocol for Named {
        type Msg = PingMsg;
        type Event = (&'static str, u32);
        type Request = u32;
        fn on_start(&mut self, _: Time, out: &mut Outbox<PingMsg, (&'static str, u32)>) {
            out.set_timer(TimerId(3), Duration::from_millis(1));
        }
        fn on_message(
            &mut self,
            _: Time,
            _: NodeId,
            _: PingMsg,
            out: &mut Outbox<PingMsg, (&'static str, u32)>,
        ) {
            out.report((self.0, 100));
        }
        fn on_timer(
            &mut self,
            _: Time,
            t: TimerId,
            out: &mut Outbox<PingMsg, (&'static str, u32)>,
        ) {
            out.report((self.0, t.0));
        }
        fn on_request(&mut self, _: Time, r: u32, out: &mut Outbox<PingMsg, (&'static str, u32)>) {
            out.report((self.0, r));
            out.send(
                NodeId(9),
                PingMsg::Pong {
                    seq: u64::from(r),
                    payload: Default::default(),
                },
            );
        }
    }

    fn events<A, B>(out: &mut Outbox<A, B>) -> Vec<Action<A, B>> {
        out.drain().collect()
    }

    /// Timers, requests, messages and events go to and come from the side they belong to.
    #[test]
    fn each_side_gets_its_own() {
        let mut p = Pair::new(Named("a"), Named("b"));
        let mut out = Outbox::new();
        p.on_start(Time::ZERO, &mut out);
        let armed: Vec<_> = events(&mut out)
            .into_iter()
            .filter_map(|a| match a {
                Action::SetTimer { timer, .. } => Some(timer),
                _ => None,
            })
            .collect();
        assert_eq!(armed, [TimerId(6), TimerId(7)]);
        p.on_timer(Time::ZERO, TimerId(7), &mut out);
        assert_eq!(events(&mut out), [Action::Report(Either::Second(("b", 3)))]);
        p.on_request(Time::ZERO, Either::First(5), &mut out);
        assert_eq!(
            events(&mut out),
            [
                Action::Report(Either::First(("a", 5))),
                Action::Send {
                    to: NodeId(9),
                    msg: Either::First(PingMsg::Pong {
                        seq: 5,
                        payload: Default::default()
                    })
                }
            ]
        );
        p.on_message(
            Time::ZERO,
            NodeId(9),
            Either::Second(PingMsg::Pong {
                seq: 1,
                payload: Default::default(),
            }),
            &mut out,
        );
        assert_eq!(
            events(&mut out),
            [Action::Report(Either::Second(("b", 100)))]
        );
    }
}
