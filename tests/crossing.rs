//! Crossing dials (`engine/reactor/crossing.rs`): every node of a job sends every other a burst
//! at the same moment, so nearly every pair dials each other at once, and the lower id defers
//! the higher one's dial to its own (or the higher one's yields, when the lower's
//! authenticates first). Whatever happened to a pair's dials, every message arrives once and
//! in order, no node suspects or refuses another, and nearly every pair keeps one connection.

mod common;

use common::events::collect;
use weft::buf::Payload;
use weft::engine::reactor::NodeEvent;
use weft::engine::{Backend, ReactorOptions, WaitMode};
use weft::proto::held::Held;
use weft::proto::ping::PingMsg;
use weft::proto::{Event, Outbox, Protocol, Time};
use weft::transport::{Cluster, NodeOptions, Transport};
use weft::NodeId;

/// Messages each node sends each other node.
const BURST: u64 = 20;

/// Sends `BURST` numbered pings to every other node at its start; reports `Done` once it has
/// every other node's burst, and counts arrivals out of order.
struct Crosser {
    me: u64,
    n: u64,
    next: Vec<u64>,
    out_of_order: u64,
    done: bool,
}

impl Protocol for Crosser {
    type Msg = PingMsg;
    type Event = weft::proto::Event;
    type Request = weft::proto::NoRequest;

    fn on_start(&mut self, _now: Time, out: &mut Outbox<PingMsg>) {
        for seq in 0..BURST {
            for to in (0..self.n).filter(|&j| j != self.me) {
                out.send(
                    NodeId(to),
                    PingMsg::Ping {
                        seq,
                        payload: Payload::from(vec![1u8; 16]),
                    },
                );
            }
        }
    }

    fn on_message(&mut self, _: Time, from: NodeId, msg: PingMsg, out: &mut Outbox<PingMsg>) {
        let PingMsg::Ping { seq, .. } = msg else {
            return;
        };
        let next = &mut self.next[from.0 as usize];
        if seq != *next {
            self.out_of_order += 1;
        }
        *next += 1;
        let all = (0..self.n)
            .filter(|&j| j != self.me)
            .all(|j| self.next[j as usize] >= BURST);
        if all && !self.done {
            self.done = true;
            out.report(Event::Done);
        }
    }

    fn on_timer(&mut self, _: Time, _: weft::proto::TimerId, _: &mut Outbox<PingMsg>) {}
}

#[test]
fn crossing_dials_lose_no_message_reorder_none_and_suspect_nobody() {
    let n = 16u64;
    let pairs = (n * (n - 1) / 2) as usize;
    for backend in Backend::ALL {
        // Connection ends authenticated over the rounds: two connections a pair are four.
        let mut ends = 0;
        for round in 0..3 {
            let opts = NodeOptions {
                pin: false,
                backend: Some(backend),
                reactors: Some(2),
                // Crossing dials are connections': the nodes talk over loopback TCP.
                transport: Some(Transport::Tcp),
                reactor: ReactorOptions {
                    wait: WaitMode::Block,
                    ..Default::default()
                },
                ..NodeOptions::default()
            };
            let c = Cluster::start(n as usize, opts, move |i, _| {
                Held::new(Crosser {
                    me: i as u64,
                    n,
                    next: vec![0; n as usize],
                    out_of_order: 0,
                    done: false,
                })
            })
            .expect("nodes start");
            c.wake_all();
            let seen = collect(&c.events, 30, |s| {
                s.iter()
                    .filter(|(_, e)| *e == NodeEvent::Protocol(Event::Done))
                    .count()
                    == n as usize
            });
            let done = seen
                .iter()
                .filter(|(_, e)| *e == NodeEvent::Protocol(Event::Done))
                .count();
            assert_eq!(done, n as usize, "{backend:?} #{round}: {seen:?}");
            let trouble: Vec<_> = seen
                .iter()
                .filter(|(_, e)| {
                    matches!(
                        e,
                        NodeEvent::Suspect(_)
                            | NodeEvent::Refused(_)
                            | NodeEvent::RefusedMore { .. }
                    )
                })
                .collect();
            assert!(trouble.is_empty(), "{backend:?} #{round}: {trouble:?}");
            ends += seen
                .iter()
                .filter(|(_, e)| matches!(e, NodeEvent::Authenticated(_)))
                .count();
            let nodes = c.stop_all().expect("nodes stop");
            for (i, node) in nodes.into_iter().map(Held::into_inner).enumerate() {
                assert_eq!(node.out_of_order, 0, "{backend:?} #{round}: node {i}");
                let got: u64 = node.next.iter().sum();
                assert_eq!(got, BURST * (n - 1), "{backend:?} #{round}: node {i}");
            }
        }
        // Every pair crosses (all dial at once): without yielding or deferring, 4 ends a
        // pair every round (12 × pairs over three); the lower end defers the higher one's
        // dial whenever its own is under way, so a pair keeps one connection (6 × pairs),
        // short of the few whose first Hello came before the lower end had dialed.
        assert!(
            ends <= 7 * pairs,
            "{backend:?}: {ends} ends for {pairs} pairs"
        );
    }
}
