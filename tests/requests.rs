//! The typed application channel on the real engine: what the application hands a node
//! (`NodeHandle::request`) reaches its protocol in the order it was handed, and what the
//! protocol reports comes back as the protocol's own event type, on both backends and over
//! every link kind; a request to a killed node is dropped, not a hang or a panic.

use rkyv::{Archive, Deserialize, Serialize};
use std::time::Duration;
use weft::engine::{Backend, WaitMode};
use weft::prelude::*;

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Num(u32);

impl Message for Num {
    const TAG: Tag = APP_TAGS + 5;
    const NAME: &'static str = "num";
}

/// Forward `k` to the peer.
struct Forward(u32);

/// What a node reports.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    /// The request `k` reached this node's protocol.
    Asked(u32),
    /// The peer's forwarded `k` arrived.
    Got(u32),
}

/// Forwards each request to its one peer, and reports requests and arrivals.
struct Forwarder {
    peer: NodeId,
}

impl Protocol for Forwarder {
    type Msg = Num;
    type Event = Seen;
    type Request = Forward;

    fn on_start(&mut self, _: Time, _: &mut Outbox<Num, Seen>) {}

    fn on_request(&mut self, _: Time, Forward(k): Forward, out: &mut Outbox<Num, Seen>) {
        out.report(Seen::Asked(k));
        out.send(self.peer, Num(k));
    }

    fn on_message(&mut self, _: Time, _: NodeId, Num(k): Num, out: &mut Outbox<Num, Seen>) {
        out.report(Seen::Got(k));
    }

    fn on_timer(&mut self, _: Time, _: TimerId, _: &mut Outbox<Num, Seen>) {}
}

const COUNT: u32 = 2000;

fn opts(backend: Backend, transport: Transport) -> NodeOptions {
    NodeOptions {
        pin: false,
        backend: Some(backend),
        transport: Some(transport),
        reactor: weft::engine::ReactorOptions {
            wait: WaitMode::Block,
            ..Default::default()
        },
        ..NodeOptions::default()
    }
}

fn in_order_with(opts: NodeOptions) {
    let what = format!("{:?} over {:?}", opts.backend, opts.transport);
    let cluster = Cluster::start(2, opts, |i, ids| Forwarder { peer: ids[1 - i] })
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let sender = cluster.nodes[0].id;
    for k in 0..COUNT {
        cluster.nodes[0].request(Forward(k));
    }
    let (mut asked, mut got) = (Vec::new(), Vec::new());
    while got.len() < COUNT as usize {
        let (who, ev) = cluster
            .events
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{what}: {} of {COUNT} arrived", got.len()));
        match ev {
            NodeEvent::Protocol(Seen::Asked(k)) => {
                assert_eq!(who, sender, "{what}: only node 0 was asked");
                asked.push(k);
            }
            NodeEvent::Protocol(Seen::Got(k)) => {
                assert_ne!(who, sender, "{what}: node 0 got its own number");
                got.push(k);
            }
            NodeEvent::Suspect(p) => panic!("{what}: {who} suspects {p}"),
            _ => {}
        }
    }
    let want: Vec<u32> = (0..COUNT).collect();
    assert_eq!(
        asked, want,
        "{what}: requests reached the protocol out of order"
    );
    assert_eq!(got, want, "{what}: forwarded numbers out of order");
    cluster.shutdown().unwrap_or_else(|e| panic!("{what}: {e}"));
}

#[test]
fn requests_reach_the_protocol_in_order_and_events_come_back_typed() {
    for backend in Backend::ALL {
        for transport in [Transport::Tcp, Transport::Inproc, Transport::Shm] {
            in_order_with(opts(backend, transport));
        }
    }
}

#[test]
fn a_request_to_a_killed_node_is_dropped() {
    let mut cluster = Cluster::start(2, opts(Backend::Poll, Transport::Tcp), |i, ids| Forwarder {
        peer: ids[1 - i],
    })
    .expect("start");
    cluster.nodes[1].kill();
    cluster.nodes[1].request(Forward(7));
    // The live node still takes requests: its request comes back.
    cluster.nodes[0].request(Forward(8));
    let mut seen = Vec::new();
    while !seen.contains(&Seen::Asked(8)) {
        match cluster.events.recv_timeout(Duration::from_secs(10)) {
            Ok((_, NodeEvent::Protocol(e))) => seen.push(e),
            Ok(_) => {}
            Err(e) => panic!("the live node's request did not come back: {e}"),
        }
    }
    // Each reactor takes its commands in order: a request the killed node took would be
    // reported before the reactor stops, and so be in the channel once it has.
    let events = std::mem::replace(&mut cluster.events, std::sync::mpsc::channel().1);
    cluster.shutdown().expect("shutdown");
    seen.extend(events.try_iter().filter_map(|(_, e)| match e {
        NodeEvent::Protocol(e) => Some(e),
        _ => None,
    }));
    assert!(
        !seen.contains(&Seen::Asked(7)),
        "the killed node took a request: {seen:?}"
    );
}

/// Routing and storage on the same nodes, as one protocol (`Pair`): each side's requests,
/// messages, timers and events stay its own, on real connections.
#[test]
fn two_protocols_share_a_node_without_glue() {
    use std::sync::Arc;
    use weft::proto::pair::{Either, Pair};
    use weft::proto::route::{Route, RouteConfig, RouteRequest};
    use weft::storage::{Request, Storage};

    let n = 4;
    let cluster = Cluster::start(n, opts(Backend::Poll, Transport::Tcp), |i, ids| {
        let ring: Arc<[NodeId]> = ids.into();
        Pair::new(
            Route::new(Rank(i as u32), ring, RouteConfig::default()),
            Storage::new(ids[i], ids, StorageConfig::default()),
        )
    })
    .expect("start");
    for (i, node) in cluster.nodes.iter().enumerate() {
        node.request(Either::Second(Request::Protect {
            vid: i as u64,
            data: vec![i as u8; 100_000].into(),
        }));
        node.request(Either::Second(Request::Checkpoint { version: 1 }));
        node.request(Either::First(RouteRequest::Send {
            to: Rank(((i + 2) % n) as u32),
            tag: i as u64,
            data: vec![7u8; 64].into(),
        }));
    }
    let (mut delivered, mut received, mut checkpointed) = (0, 0, 0);
    while delivered < n || received < n || checkpointed < n {
        let (who, ev) = cluster
            .events
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| {
                panic!("delivered {delivered}, received {received}, checkpointed {checkpointed} of {n}")
            });
        match ev {
            NodeEvent::Protocol(Either::First(RouteEvent::Delivered { .. })) => delivered += 1,
            NodeEvent::Protocol(Either::First(RouteEvent::Received { data, .. })) => {
                assert_eq!(&data[..], &[7u8; 64][..], "{who}: routed bytes changed");
                received += 1;
            }
            NodeEvent::Protocol(Either::First(RouteEvent::Failed { to, why, .. })) => {
                panic!("{who}: send to {to} failed: {why:?}")
            }
            NodeEvent::Protocol(Either::Second(StorageEvent::Checkpointed { lost, .. })) => {
                assert_eq!(lost, 0, "{who}: pieces lost with every node alive");
                checkpointed += 1;
            }
            NodeEvent::Protocol(Either::Second(StorageEvent::Rejected { why })) => {
                panic!("{who}: storage refused: {why}")
            }
            NodeEvent::Suspect(p) => panic!("{who} suspects {p}"),
            _ => {}
        }
    }
    cluster.shutdown().expect("shutdown");
}
