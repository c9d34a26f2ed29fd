//! Co-located delivery: in-process (`engine::link::inproc`) and through shared-memory links
//! (`engine::link::shm`, here between nodes of one process, which take the same path as
//! processes do). Nodes reach each other without a TCP connection, in order, on both
//! backends, blocking or spinning, on one reactor and across two; and a node that stops is
//! reported to the nodes it talked with as a lost connection is.

mod common;

use common::events::collect;
use std::collections::HashSet;
use weft::buf::Payload;
use weft::engine::reactor::NodeEvent;
use weft::engine::{Backend, ReactorOptions, WaitMode};
use weft::proto::ping::PingMsg;
use weft::proto::{Event, Outbox, Protocol, Time, TimerId};
use weft::transport::{Cluster, NodeOptions, Transport};
use weft::NodeId;

/// More than a pair of reactors' queue holds (`inproc::QUEUE_SLOTS`), sent in one turn: the
/// rest waits in the sender's backlog and must still come in order.
const BURST: u64 = 5000;

/// Node 0 sends `burst` numbered messages to each of `to` when it starts, and one more to
/// each when woken; every other node checks that numbers from one sender come in order and
/// reports `Done` once it has `BURST` of them.
struct Chat {
    me: NodeId,
    to: Vec<NodeId>,
    burst: u64,
    next: u64,
    got: Vec<(NodeId, u64)>,
}

fn msg(seq: u64) -> PingMsg {
    PingMsg::Ping {
        seq,
        payload: Payload::from(vec![seq as u8; 24]),
    }
}

impl Protocol for Chat {
    type Msg = PingMsg;
    type Event = weft::proto::Event;
    type Request = weft::proto::NoRequest;

    fn on_start(&mut self, _: Time, out: &mut Outbox<PingMsg>) {
        for _ in 0..self.burst {
            for &to in &self.to {
                out.send(to, msg(self.next));
            }
            self.next += 1;
        }
    }

    fn on_message(&mut self, _: Time, from: NodeId, m: PingMsg, out: &mut Outbox<PingMsg>) {
        let PingMsg::Ping { seq, payload } = m else {
            return;
        };
        assert_eq!(&payload[..], &[seq as u8; 24][..], "the payload came whole");
        let last = self.got.iter().rev().find(|(f, _)| *f == from);
        assert!(
            last.is_none_or(|&(_, s)| s + 1 == seq),
            "{}: {seq} from {from} after {last:?}",
            self.me
        );
        self.got.push((from, seq));
        if self.got.len() as u64 == BURST {
            out.report(Event::Done);
        }
    }

    fn on_timer(&mut self, _: Time, _: TimerId, _: &mut Outbox<PingMsg>) {}

    fn on_wake(&mut self, _: Time, out: &mut Outbox<PingMsg>) {
        for &to in &self.to {
            out.send(to, msg(self.next));
        }
        self.next += 1;
    }
}

/// Three nodes on two reactors: 0 and 2 on reactor 0, 1 on reactor 1.
fn cluster(
    (transport, backend, wait): (Transport, Backend, WaitMode),
    to: Vec<NodeId>,
    burst: u64,
) -> Cluster<Chat> {
    let opts = NodeOptions {
        backend: Some(backend),
        transport: Some(transport),
        reactors: Some(2),
        placement: Some(vec![0, 1, 0].into()),
        pin: false,
        reactor: ReactorOptions {
            wait,
            ..Default::default()
        },
        ..Default::default()
    };
    let c = Cluster::start(3, opts, move |i, _| Chat {
        me: NodeId(i as u64),
        to: if i == 0 { to.clone() } else { Vec::new() },
        burst: if i == 0 { burst } else { 0 },
        next: 0,
        got: Vec::new(),
    })
    .unwrap();
    assert_eq!(c.transport, transport);
    c
}

/// How a test runs: transport, backend, waiting.
type Way = (Transport, Backend, WaitMode);

fn on_every_engine(test: impl Fn(Way)) {
    for transport in [Transport::Inproc, Transport::Shm] {
        for backend in Backend::ALL {
            if backend == Backend::Uring && weft::engine::uring_unavailable().is_some() {
                common::skip::skip("io_uring unavailable");
                continue;
            }
            for wait in [WaitMode::Block, WaitMode::Busy] {
                test((transport, backend, wait));
            }
        }
    }
}

/// How a failed assertion names the way it ran.
fn named((t, b, w): Way) -> String {
    format!("{t} {b} {w}")
}

/// The TCP connections open or opening to or from any of `ports`, as the kernel lists them
/// (closed ones in TIME_WAIT may be other tests' that used a port before one of ours did).
fn connections_on(ports: &HashSet<u16>) -> Vec<String> {
    let mut found = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let port = |a: &str| u16::from_str_radix(a.rsplit(':').next().unwrap_or(""), 16).ok();
            // ESTABLISHED, SYN_SENT, SYN_RECV.
            let (Some(l), Some(r), Some(state)) = (port(f[1]), port(f[2]), f.get(3)) else {
                continue;
            };
            if ["01", "02", "03"].contains(state) && (ports.contains(&l) || ports.contains(&r)) {
                found.push(line.to_string());
            }
        }
    }
    found
}

#[test]
fn messages_between_nodes_of_one_process_come_in_order_without_a_connection() {
    on_every_engine(|way| {
        let c = cluster(way, vec![NodeId(1), NodeId(2)], BURST);
        let done = |s: &[(NodeId, NodeEvent)]| {
            s.iter()
                .filter(|(_, e)| *e == NodeEvent::Protocol(Event::Done))
                .count()
                == 2
        };
        let seen = collect(&c.events, 30, done);
        assert!(done(&seen), "{}: {seen:?}", named(way));
        // Each end of each pair that talked says so once, as a connection's would.
        let mut authenticated: Vec<(NodeId, NodeId)> = seen
            .iter()
            .filter_map(|(who, e)| match e {
                NodeEvent::Authenticated(p) => Some((*who, *p)),
                _ => None,
            })
            .collect();
        authenticated.sort();
        let want = [(0, 1), (0, 2), (1, 0), (2, 0)].map(|(a, b)| (NodeId(a), NodeId(b)));
        assert_eq!(authenticated, want, "{}", named(way));
        let ports: HashSet<u16> = c.nodes.iter().map(|n| n.addr.port()).collect();
        assert_eq!(
            connections_on(&ports),
            Vec::<String>::new(),
            "{}",
            named(way)
        );
        let protos = c.stop_all().unwrap();
        for p in &protos[1..] {
            assert_eq!(p.got.len() as u64, BURST, "{}", named(way));
        }
    });
}

#[test]
fn a_stopped_node_is_suspected_by_every_node_it_talked_with() {
    on_every_engine(|way| {
        let mut c = cluster(way, vec![NodeId(1), NodeId(2)], BURST);
        let done = |s: &[(NodeId, NodeEvent)]| {
            s.iter()
                .filter(|(_, e)| *e == NodeEvent::Protocol(Event::Done))
                .count()
                == 2
        };
        assert!(done(&collect(&c.events, 30, done)), "{}", named(way));
        // Node 0 stops: node 2 (its reactor) and node 1 (the other) lose it.
        c.nodes[0].stop().unwrap();
        let lost = |s: &[(NodeId, NodeEvent)]| {
            [1, 2].iter().all(|&x| {
                s.iter()
                    .any(|(who, e)| *who == NodeId(x) && *e == NodeEvent::Suspect(NodeId(0)))
            })
        };
        let seen = collect(&c.events, 10, lost);
        assert!(lost(&seen), "{}: {seen:?}", named(way));
        // Nodes 1 and 2 never talked: neither suspects the other.
        assert!(
            !seen.iter().any(|(who, e)| *who != NodeId(0)
                && matches!(e, NodeEvent::Suspect(p) if *p != NodeId(0))),
            "{}: {seen:?}",
            named(way)
        );
    });
}

#[test]
fn a_message_to_a_stopped_node_makes_its_sender_suspect_it() {
    on_every_engine(|way| {
        // Node 0 says nothing until woken.
        let mut c = cluster(way, vec![NodeId(1), NodeId(2)], 0);
        c.nodes[1].stop().unwrap();
        c.nodes[2].stop().unwrap();
        // Now it sends to both: node 2 was on its reactor, node 1 on the other.
        c.nodes[0].wake();
        let lost = |s: &[(NodeId, NodeEvent)]| {
            [1, 2].iter().all(|&x| {
                s.iter()
                    .any(|(who, e)| *who == NodeId(0) && *e == NodeEvent::Suspect(NodeId(x)))
            })
        };
        let seen = collect(&c.events, 10, lost);
        assert!(lost(&seen), "{}: {seen:?}", named(way));
    });
}

/// The overlay's BMG, built by nodes that talk in-process or through shared memory, is the
/// formula's, on both backends.
#[test]
fn the_bmg_builds_on_colocated_links() {
    for (transport, backend) in [Transport::Inproc, Transport::Shm]
        .into_iter()
        .flat_map(|t| Backend::ALL.into_iter().map(move |b| (t, b)))
    {
        if backend == Backend::Uring && weft::engine::uring_unavailable().is_some() {
            common::skip::skip("io_uring unavailable");
            continue;
        }
        let opts = NodeOptions {
            backend: Some(backend),
            transport: Some(transport),
            pin: false,
            reactor: ReactorOptions {
                wait: WaitMode::Block,
                ..Default::default()
            },
            ..Default::default()
        };
        common::overlay::builds_the_bmg(3, opts);
    }
}

/// `weft ping`'s ping-pong in-process and through shared memory, on one reactor and on two:
/// every round trip of every size comes back, and the rows say how they went.
#[test]
fn a_colocated_ping_pong_says_so_on_one_reactor_and_two() {
    for (transport, reactors) in [Transport::Inproc, Transport::Shm]
        .into_iter()
        .flat_map(|t| [1, 2].map(move |r| (t, r)))
    {
        let opts = NodeOptions {
            transport: Some(transport),
            reactors: Some(reactors),
            pin: false,
            reactor: ReactorOptions {
                wait: WaitMode::Block,
                ..Default::default()
            },
            ..Default::default()
        };
        let rows = weft::bench::ping::engine(&[8, 70_000, 1 << 20], 200, opts).unwrap();
        assert_eq!(rows.len(), 3);
        for r in rows {
            let want = transport.to_string();
            assert_eq!(
                (r.transport.as_str(), r.iters),
                (want.as_str(), 200),
                "{r:?}"
            );
        }
    }
}
