//! FIFO per pair of nodes, which every protocol assumes, holds when a send fails in the middle
//! of carrying out a protocol's actions: the protocol hears `on_suspect` then, and what it
//! answers must leave after what it had queued before, not overtake it.

mod common;

use common::events::collect;
use std::time::Duration;
use weft::buf::Payload;
use weft::engine::reactor::NodeEvent;
use weft::engine::{Backend, ReactorOptions, WaitMode};
use weft::proto::ping::PingMsg;
use weft::proto::{Event, Outbox, Protocol, Time, TimerId};
use weft::transport::{Cluster, NodeOptions, Transport};
use weft::NodeId;

const STALL: TimerId = TimerId(1);
const BURST: TimerId = TimerId(2);
/// Bytes a connection may queue beyond what the kernel took before it is closed as stalled.
const QUEUED: usize = 64 << 10;

/// Node 0 greets node 1; node 1 answers and then stops reading (its reactor sleeps, as a
/// stopped process's); node 0 then queues, in one call, more for node 1 than its connection
/// may hold, and message 1 for node 2. The connection to node 1 is closed as stalled while
/// those are carried out, and node 0, suspecting node 1, sends message 2 to node 2. Node 2
/// records the order.
struct Herald {
    me: u64,
    got: Vec<u64>,
}

fn ping(seq: u64, len: usize) -> PingMsg {
    PingMsg::Ping {
        seq,
        payload: Payload::from(vec![7u8; len]),
    }
}

impl Protocol for Herald {
    type Msg = PingMsg;
    type Event = weft::proto::Event;
    type Request = weft::proto::NoRequest;

    fn on_start(&mut self, _now: Time, out: &mut Outbox<PingMsg>) {
        if self.me == 0 {
            out.send(NodeId(1), ping(0, 8));
        }
    }

    fn on_message(&mut self, _: Time, from: NodeId, msg: PingMsg, out: &mut Outbox<PingMsg>) {
        match (self.me, msg) {
            (1, PingMsg::Ping { .. }) => {
                out.send(
                    from,
                    PingMsg::Pong {
                        seq: 0,
                        payload: Payload::default(),
                    },
                );
                out.set_timer(STALL, Duration::from_millis(1));
            }
            (0, PingMsg::Pong { .. }) => out.set_timer(BURST, Duration::from_millis(50)),
            (2, PingMsg::Ping { seq, .. }) => {
                self.got.push(seq);
                if self.got.len() == 2 {
                    out.report(Event::Done);
                }
            }
            _ => {}
        }
    }

    fn on_timer(&mut self, _now: Time, timer: TimerId, out: &mut Outbox<PingMsg>) {
        match timer {
            STALL => std::thread::sleep(Duration::from_secs(3)),
            _ => {
                for _ in 0..64 {
                    out.send(NodeId(1), ping(100, 1 << 20));
                }
                out.send(NodeId(2), ping(1, 8));
            }
        }
    }

    fn on_suspect(&mut self, _now: Time, peer: NodeId, out: &mut Outbox<PingMsg>) {
        if self.me == 0 && peer == NodeId(1) && self.got.is_empty() {
            self.got.push(u64::MAX); // once
            out.send(NodeId(2), ping(2, 8));
        }
    }
}

#[test]
fn an_answer_to_a_suspicion_raised_by_a_failed_send_does_not_overtake_earlier_messages() {
    for backend in Backend::ALL {
        let opts = NodeOptions {
            pin: false,
            backend: Some(backend),
            reactors: Some(2),
            // A send that fails is a connection's: the nodes talk over loopback TCP.
            transport: Some(Transport::Tcp),
            // Node 1 alone on the second reactor, whose sleep stalls nobody else.
            placement: Some(vec![0u32, 1, 0].into()),
            reactor: ReactorOptions {
                wait: WaitMode::Block,
                max_queued: QUEUED,
                ..Default::default()
            },
            ..NodeOptions::default()
        };
        let c = Cluster::start(3, opts, |i, _| Herald {
            me: i as u64,
            got: Vec::new(),
        })
        .expect("nodes start");
        let seen = collect(&c.events, 30, |s| {
            s.iter()
                .any(|(_, e)| *e == NodeEvent::Protocol(Event::Done))
        });
        assert!(
            seen.iter()
                .any(|(id, e)| *id == NodeId(0) && *e == NodeEvent::Suspect(NodeId(1))),
            "{backend:?}: node 1's connection was closed as stalled: {seen:?}"
        );
        let nodes = c.stop_all().expect("nodes stop");
        assert_eq!(nodes[2].got, vec![1, 2], "{backend:?}: node 2's arrivals");
    }
}
