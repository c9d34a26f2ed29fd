//! Released connections (`ReactorOptions::reconnect`): every message on a connection of its
//! own, closed with a goodbye, on both backends. Nothing is lost or reordered, nobody is
//! suspected for the closes, and a peer that really stops is still suspected.

mod common;

use common::events::collect;
use common::handshake::shake_hands_as;
use std::io::Read;
use std::time::Duration;
use weft::buf::Payload;
use weft::engine::reactor::NodeEvent;
use weft::engine::{Backend, ReactorOptions, WaitMode};
use weft::proto::ping::{PingMsg, PingPong};
use weft::proto::{Outbox, Protocol, Time, TimerId};
use weft::transport::{Cluster, NodeOptions};
use weft::wire::handshake::{Identity, JobKey, Role};
use weft::NodeId;

fn reconnecting(backend: Backend) -> NodeOptions {
    NodeOptions {
        pin: false,
        backend: Some(backend),
        reactor: ReactorOptions {
            wait: WaitMode::Block,
            reconnect: true,
            ..Default::default()
        },
        ..NodeOptions::default()
    }
}

fn suspicions(seen: &[(NodeId, NodeEvent)]) -> Vec<&(NodeId, NodeEvent)> {
    seen.iter()
        .filter(|(_, e)| matches!(e, NodeEvent::Suspect(_)))
        .collect()
}

/// Each ping and each echo on its own connection: every echo carries its ping's bytes, no
/// one is suspected, and the connections really were new (one authentication each).
#[test]
fn every_message_on_its_own_connection_arrives_and_nobody_is_suspected() {
    for backend in Backend::ALL {
        let sizes = vec![8, 100_000];
        let plan = sizes.clone();
        let c = Cluster::start(2, reconnecting(backend), move |i, ids| {
            if i == 0 {
                PingPong::pinger(ids[1], plan.clone(), 100, 0).verifying()
            } else {
                PingPong::ponger()
            }
        })
        .unwrap();
        let seen = collect(&c.events, 30, |s| {
            s.iter()
                .any(|(_, e)| *e == NodeEvent::Protocol(weft::proto::Event::Done))
        });
        let pinger = c.stop_all().unwrap().into_iter().next().unwrap();
        assert_eq!(pinger.samples().len(), 200, "{backend:?}: {seen:?}");
        assert_eq!(pinger.mismatches(), 0, "{backend:?}");
        assert!(suspicions(&seen).is_empty(), "{backend:?}: {seen:?}");
        let connections = seen
            .iter()
            .filter(|(_, e)| matches!(e, NodeEvent::Authenticated(_)))
            .count();
        // Each side authenticates each connection once: two per message, 400 messages.
        assert!(
            connections >= 400,
            "{backend:?}: {connections} authentications for 400 messages"
        );
    }
}

/// Sends its peer a message every millisecond and answers nothing: a node that always has
/// something for its peer, whatever the peer does.
struct Chatter {
    peer: Option<NodeId>,
    seq: u64,
}

const TICK: TimerId = TimerId(1);

impl Protocol for Chatter {
    type Msg = PingMsg;
    type Event = weft::proto::Event;
    type Request = weft::proto::NoRequest;

    fn on_start(&mut self, _now: Time, out: &mut Outbox<PingMsg>) {
        out.set_timer(TICK, Duration::from_millis(1));
    }

    fn on_message(&mut self, _: Time, _: NodeId, _: PingMsg, _: &mut Outbox<PingMsg>) {}

    fn on_timer(&mut self, _now: Time, _timer: TimerId, out: &mut Outbox<PingMsg>) {
        if let Some(peer) = self.peer {
            self.seq += 1;
            let payload = Payload::default();
            out.send(
                peer,
                PingMsg::Ping {
                    seq: self.seq,
                    payload,
                },
            );
        }
        out.set_timer(TICK, Duration::from_millis(1));
    }
}

/// A peer that stops in the middle of the stream is still suspected by a node that goes on
/// sending to it: its releases do not hide its failure. (A node with nothing for a released
/// peer has no connection to watch: an echo test here, whose pinger waits for the echo, lost
/// it with the stopped peer now and then and never sent again.)
#[test]
fn a_stopped_peer_is_still_suspected() {
    for backend in Backend::ALL {
        let mut c = Cluster::start(2, reconnecting(backend), move |i, ids| Chatter {
            peer: (i == 0).then_some(ids[1]),
            seq: 0,
        })
        .unwrap();
        let count = |s: &[(NodeId, NodeEvent)]| {
            s.iter()
                .filter(|(_, e)| matches!(e, NodeEvent::Authenticated(_)))
                .count()
        };
        collect(&c.events, 10, |s| count(s) >= 100);
        let mut peer = c.nodes.pop().unwrap();
        peer.stop().unwrap();
        let lost = |s: &[(NodeId, NodeEvent)]| {
            s.iter()
                .any(|(who, e)| *who == NodeId(0) && *e == NodeEvent::Suspect(NodeId(1)))
        };
        let seen = collect(&c.events, 10, lost);
        assert!(lost(&seen), "{backend:?}: node 0 never suspected node 1");
    }
}

/// Algorithms 1 and 2, which need FIFO channels, build the BMG when every message goes on a
/// new connection.
#[test]
fn the_bmg_builds_over_released_connections() {
    for backend in Backend::ALL {
        common::overlay::builds_the_bmg(2, reconnecting(backend));
    }
}

/// A peer that dies in the middle of a goodbye (it reads the message and the goodbye, then its
/// socket closes without an answer) is suspected at once: the end of a connection is a
/// release only when the goodbyes were exchanged. Before, the close passed for a release and
/// nothing else was sent to the peer, so nobody ever suspected it.
#[test]
fn a_peer_that_dies_during_a_goodbye_is_suspected() {
    for backend in Backend::ALL {
        let key = JobKey::from_bytes([5; 32]);
        let raw = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let listener = weft::transport::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let spec = weft::transport::NodeSpec {
            id: NodeId(0),
            listener,
            peers: [(NodeId(1), raw.local_addr().unwrap())]
                .into_iter()
                .collect(),
            key: key.clone(),
            core: None,
        };
        let opts = NodeOptions {
            key: Some(key.clone()),
            ..reconnecting(backend)
        };
        let (tx, events) = std::sync::mpsc::channel();
        let pinger = PingPong::pinger(NodeId(1), vec![8], 10, 0);
        let _node = weft::transport::spawn(spec, &opts, pinger, tx).unwrap();
        let (mut s, _) = raw.accept().unwrap();
        let me = Identity::new(opts.job_id, NodeId(1), key);
        let patience = Duration::from_secs(5);
        assert_eq!(
            shake_hands_as(Role::Responder, &mut s, me, patience),
            Ok(NodeId(0))
        );
        // The node writes the ping and its goodbye as soon as it has authenticated us: with
        // its handshake's last frame (then the handshake above read them already), or when
        // our last frame reaches it (then they come now). Either way they are sent before
        // this socket closes.
        let mut buf = [0u8; 4096];
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let _ = s.read(&mut buf);
        drop(s);
        let lost =
            |s: &[(NodeId, NodeEvent)]| s.iter().any(|(_, e)| *e == NodeEvent::Suspect(NodeId(1)));
        let seen = collect(&events, 10, lost);
        assert!(lost(&seen), "{backend:?}: never suspected: {seen:?}");
    }
}
