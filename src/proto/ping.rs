//! Ping-pong: the latency probe behind `weft ping` and the model's `L`, as a sans-IO protocol
//! so that it runs on the engine exactly like the other protocols.
//!
//! The pinger sends `Ping { seq, payload }`, the ponger echoes it, and each `Pong` records the
//! round trip, measured with the driver's clock, then sends the next ping; `Event::Done` when
//! every size is done. A pinger of several peers (`fan_out`, the parent with two or four
//! children of ICS'06's Figure 7) sends each round's ping to all of them at once, and the
//! round ends with the last echo: what one level of a tree wave costs the parent. Samples stay in the protocol (read them after stopping the node): an
//! event per round trip would wake an observer thread that competes for the reactors' cores.

use super::{Event, Outbox, Protocol, Time, TimerId};
use crate::buf::Payload;
use crate::NodeId;

pub use self::wire_form::PingMsg;

/// A module of its own for the archived form: rkyv derives a resolver enum whose variant
/// fields carry no docs, and kept private it stays out of the public API.
mod wire_form {
    use super::*;

    /// Messages of ping-pong.
    #[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
    pub enum PingMsg {
        /// Echo this.
        Ping {
            /// Sequence number.
            seq: u64,
            /// Payload.
            payload: Payload,
        },
        /// The echo.
        Pong {
            /// Sequence number.
            seq: u64,
            /// Payload.
            payload: Payload,
        },
    }
}

impl super::Message for PingMsg {
    const TAG: super::Tag = 1;
    const NAME: &'static str = "ping";
    const BULK: bool = true;

    fn payload(&self) -> Option<&Payload> {
        match self {
            PingMsg::Ping { payload, .. } | PingMsg::Pong { payload, .. } => Some(payload),
        }
    }
}

/// Either end of a ping-pong.
#[derive(Debug)]
pub struct PingPong {
    /// `Some` on the pinger: the peers, the rounds per size and the sizes still to do.
    plan: Option<(Vec<NodeId>, u64, Vec<usize>)>,
    seq: u64,
    /// Echoes of the current round still to come.
    waiting: usize,
    left: u64,
    sent_at: Time,
    warmup: u64,
    samples: Vec<(usize, u64)>,
    /// The current size's payload, made once and shared by every ping of that size.
    payload: Payload,
    /// Compare every echo with what was sent (tests; a benchmark would pay for the compare).
    verify: bool,
    mismatches: u64,
    /// Idle time between rounds (zero: the next ping goes with the last echo).
    gap: std::time::Duration,
}

/// The timer of a round's idle gap.
const GAP: TimerId = TimerId(1);

impl PingPong {
    /// The echoing end.
    pub fn ponger() -> Self {
        Self {
            plan: None,
            seq: 0,
            waiting: 0,
            left: 0,
            sent_at: Time::ZERO,
            warmup: 0,
            samples: Vec::new(),
            payload: Payload::default(),
            verify: false,
            mismatches: 0,
            gap: std::time::Duration::ZERO,
        }
    }

    /// The measuring end: `iters` timed round trips per size (after `warmup` untimed ones), in
    /// the order of `sizes`, to `peer`.
    pub fn pinger(peer: NodeId, sizes: Vec<usize>, iters: u64, warmup: u64) -> Self {
        Self::fan_out(vec![peer], sizes, iters, warmup)
    }

    /// The measuring end of a star: like [`Self::pinger`], but each round pings every one of
    /// `peers` at once and lasts until the last of them has echoed.
    pub fn fan_out(peers: Vec<NodeId>, sizes: Vec<usize>, iters: u64, warmup: u64) -> Self {
        Self {
            plan: Some((peers, iters, sizes.into_iter().rev().collect())),
            seq: 0,
            waiting: 0,
            left: 0,
            sent_at: Time::ZERO,
            warmup,
            samples: Vec::with_capacity(4096),
            payload: Payload::default(),
            verify: false,
            mismatches: 0,
            gap: std::time::Duration::ZERO,
        }
    }

    /// Wait `gap` after each round before the next ping: long enough, and every ping finds
    /// its receiver idle (a blocked reactor, a sleeping process), as a failure's first message
    /// does; the round trip is timed from the ping, not from the gap.
    pub fn with_gap(mut self, gap: std::time::Duration) -> Self {
        self.gap = gap;
        self
    }

    /// Whether this end measures (a pinger), rather than echoes.
    pub fn is_pinger(&self) -> bool {
        self.plan.is_some()
    }

    /// Check every echo's bytes against the ping's (see [`Self::mismatches`]).
    pub fn verifying(mut self) -> Self {
        self.verify = true;
        self
    }

    /// Echoes whose bytes differed from the ping's (counted only when verifying).
    pub fn mismatches(&self) -> u64 {
        self.mismatches
    }

    /// Send the next ping of the current size, or report `Done` when no size is left.
    fn send_current(&mut self, now: Time, out: &mut Outbox<PingMsg>) {
        let Some((peers, _, sizes)) = &self.plan else {
            return;
        };
        let Some(&size) = sizes.last() else {
            out.report(Event::Done);
            return;
        };
        self.seq += 1;
        if self.payload.len() != size {
            // Not a constant byte: a chunk delivered out of place must show when verifying.
            self.payload = (0..size)
                .map(|i| (i % 251) as u8)
                .collect::<Vec<_>>()
                .into();
        }
        self.sent_at = now;
        self.waiting = peers.len();
        for &peer in peers {
            out.send(
                peer,
                PingMsg::Ping {
                    seq: self.seq,
                    payload: self.payload.clone(),
                },
            );
        }
    }

    /// Timed round trips so far: `(payload bytes, round-trip nanoseconds)`.
    pub fn samples(&self) -> &[(usize, u64)] {
        &self.samples
    }

    fn rounds_per_size(&self) -> u64 {
        self.plan.as_ref().map_or(0, |p| p.1) + self.warmup
    }
}

impl Protocol for PingPong {
    type Msg = PingMsg;
    type Event = crate::proto::Event;
    type Request = crate::proto::NoRequest;

    fn on_start(&mut self, now: Time, out: &mut Outbox<PingMsg>) {
        self.left = self.rounds_per_size();
        self.send_current(now, out);
    }

    fn on_message(&mut self, now: Time, from: NodeId, msg: PingMsg, out: &mut Outbox<PingMsg>) {
        match msg {
            PingMsg::Ping { seq, payload } => out.send(from, PingMsg::Pong { seq, payload }),
            PingMsg::Pong { seq, payload } => {
                if self.plan.is_none() || seq != self.seq || self.waiting == 0 {
                    return;
                }
                if self.verify && payload != self.payload {
                    self.mismatches += 1;
                }
                self.waiting -= 1;
                if self.waiting > 0 {
                    return;
                }
                let timed = self.left <= self.plan.as_ref().map_or(0, |p| p.1);
                if timed {
                    self.samples
                        .push((payload.len(), now.since(self.sent_at).as_nanos() as u64));
                }
                self.left -= 1;
                if self.left == 0 {
                    if let Some((_, _, sizes)) = &mut self.plan {
                        sizes.pop();
                    }
                    self.left = self.rounds_per_size();
                }
                if self.gap.is_zero() {
                    self.send_current(now, out);
                } else {
                    out.set_timer(GAP, self.gap);
                }
            }
        }
    }

    fn on_timer(&mut self, now: Time, timer: TimerId, out: &mut Outbox<PingMsg>) {
        if timer == GAP {
            self.send_current(now, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Action;

    #[test]
    fn pinger_walks_sizes_and_reports_timed_rounds_only() {
        let (a, b) = (NodeId(1), NodeId(2));
        let mut p = PingPong::pinger(b, vec![8, 64], 3, 1);
        let mut q = PingPong::ponger();
        let mut out = Outbox::new();
        let mut back = Outbox::new();
        p.on_start(Time(0), &mut out);
        let mut reports = Vec::new();
        let mut t = 0;
        for _ in 0..100 {
            let acts: Vec<_> = out.drain().collect();
            if acts.is_empty() {
                break;
            }
            for act in acts {
                match act {
                    Action::Send { msg, .. } => {
                        q.on_message(Time(t), a, msg, &mut back);
                        t += 10;
                        for reply in back.drain() {
                            if let Action::Send { msg, .. } = reply {
                                p.on_message(Time(t), b, msg, &mut out);
                            }
                        }
                    }
                    Action::Report(e) => reports.push(e),
                    _ => {}
                }
            }
        }
        assert_eq!(
            p.samples(),
            &[(8, 10), (8, 10), (8, 10), (64, 10), (64, 10), (64, 10)]
        );
        assert_eq!(reports.last(), Some(&Event::Done));
    }

    #[test]
    fn a_fan_out_round_lasts_until_the_last_echo() {
        let kids = [NodeId(2), NodeId(3), NodeId(4)];
        let mut p = PingPong::fan_out(kids.to_vec(), vec![32], 2, 0);
        let mut out = Outbox::new();
        let pong = |seq| PingMsg::Pong {
            seq,
            payload: vec![0u8; 32].into(),
        };
        p.on_start(Time(0), &mut out);
        let mut last = Vec::new();
        for round in 0..2u64 {
            let sent: Vec<NodeId> = out
                .drain()
                .filter_map(|a| match a {
                    Action::Send { to, .. } => Some(to),
                    _ => None,
                })
                .collect();
            assert_eq!(sent, kids, "round {round} pings every child at once");
            let t0 = round * 30; // the next round starts with the last echo
                                 // Echoes at +10, +20 and +30: nothing more is sent before the last.
            for (k, dt) in [(kids[0], 10), (kids[2], 20), (kids[1], 30)] {
                p.on_message(Time(t0 + dt), k, pong(round + 1), &mut out);
                if dt < 30 {
                    assert_eq!(out.drain().count(), 0, "round {round} ended early");
                }
            }
        }
        last.extend(out.drain());
        assert!(
            matches!(last[..], [Action::Report(Event::Done)]),
            "{last:?}"
        );
        // A late copy of the last round's echo changes nothing.
        p.on_message(Time(500), kids[0], pong(2), &mut out);
        assert_eq!(out.drain().count(), 0);
        assert_eq!(p.samples(), &[(32, 30), (32, 30)]);
    }

    #[test]
    fn with_a_gap_the_next_ping_waits_for_its_timer_and_is_timed_from_its_send() {
        let b = NodeId(2);
        let gap = std::time::Duration::from_millis(2);
        let mut p = PingPong::pinger(b, vec![8], 2, 0).with_gap(gap);
        let mut out = Outbox::new();
        let pong = |seq| PingMsg::Pong {
            seq,
            payload: vec![0u8; 8].into(),
        };
        p.on_start(Time(0), &mut out);
        assert!(matches!(out.drain().next(), Some(Action::Send { .. })));
        p.on_message(Time(10), b, pong(1), &mut out);
        let acts: Vec<_> = out.drain().collect();
        assert!(
            matches!(acts[..], [Action::SetTimer { timer: GAP, after }] if after == gap),
            "the echo sets the gap's timer and sends nothing: {acts:?}"
        );
        p.on_timer(Time(2_000_010), GAP, &mut out);
        assert!(matches!(out.drain().next(), Some(Action::Send { .. })));
        p.on_message(Time(2_000_025), b, pong(2), &mut out);
        assert_eq!(p.samples(), &[(8, 10), (8, 15)]);
    }
}
