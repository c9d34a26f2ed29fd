//! Embedding weft as a transport: your own messages, requests and events, and your own sans-IO
//! protocol, run by the engine over authenticated connections.
//!
//! `cargo run --release --example embed` starts four nodes in this process. The application
//! asks each node to greet every other (a request, handed to the protocol in order); each
//! greeting heard comes back to the application as an event of this protocol's own type, with
//! the sender and the note. The same protocol runs unchanged on nodes of different processes or
//! hosts ([`spawn`] with a [`NodeSpec`] naming the peers, then [`Handle`]) and in the simulator
//! (`weft::sim`), since it never touches a socket or a clock.

use rkyv::{Archive, Deserialize, Serialize};
use std::time::Duration;
use weft::prelude::*;

/// The messages of this application. Deriving the archive is all the wire needs: frames carry
/// the archived bytes, and the receiver validates them before it reads them.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
enum Greeting {
    Hello { note: Vec<u8> },
}

impl Message for Greeting {
    /// Any tag from `APP_TAGS` (128) up: weft's own protocols take the ones below.
    const TAG: Tag = APP_TAGS + 72;
    const NAME: &'static str = "greeting";
}

/// What the application asks of its node.
#[derive(Debug)]
enum Ask {
    /// Greet every peer with this note.
    Greet(String),
}

/// What the node tells the application.
#[derive(Debug, Clone, PartialEq)]
enum News {
    /// A peer's greeting.
    Heard { from: NodeId, note: String },
    /// Every peer has greeted this node.
    Everyone,
}

/// Greets its peers when asked; tells the application of every greeting heard.
struct Greeter {
    me: NodeId,
    peers: Vec<NodeId>,
    heard: usize,
}

impl Protocol for Greeter {
    type Msg = Greeting;
    type Event = News;
    type Request = Ask;

    fn on_start(&mut self, _now: Time, _out: &mut Outbox<Greeting, News>) {}

    fn on_request(&mut self, _now: Time, ask: Ask, out: &mut Outbox<Greeting, News>) {
        let Ask::Greet(note) = ask;
        for &p in &self.peers {
            let note = format!("{note}, {p}, from {}", self.me).into_bytes();
            out.send(p, Greeting::Hello { note });
        }
    }

    fn on_message(
        &mut self,
        _: Time,
        from: NodeId,
        msg: Greeting,
        out: &mut Outbox<Greeting, News>,
    ) {
        let Greeting::Hello { note } = msg;
        let note = String::from_utf8_lossy(&note).into_owned();
        out.report(News::Heard { from, note });
        self.heard += 1;
        if self.heard == self.peers.len() {
            out.report(News::Everyone);
        }
    }

    fn on_timer(&mut self, _now: Time, _timer: TimerId, _out: &mut Outbox<Greeting, News>) {}
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = 4;
    // A generated job key, loopback listeners, the automatic backend (io_uring where it may).
    let cluster = Cluster::start(n, NodeOptions::default(), |i, ids| Greeter {
        me: ids[i],
        peers: ids.iter().copied().filter(|&p| p != ids[i]).collect(),
        heard: 0,
    })?;
    for node in &cluster.nodes {
        node.request(Ask::Greet("hello".into()));
    }
    let (mut heard, mut everyone) = (0, 0);
    while everyone < n {
        match cluster.events.recv_timeout(Duration::from_secs(10))? {
            (me, NodeEvent::Protocol(News::Heard { from, note })) => {
                println!("{me} heard {from}: {note:?}");
                heard += 1;
            }
            (_, NodeEvent::Protocol(News::Everyone)) => everyone += 1,
            (who, NodeEvent::Suspect(peer)) => eprintln!("{who} suspects {peer}"),
            (who, NodeEvent::Refused(why)) => eprintln!("{who} refused a connection: {why}"),
            _ => {}
        }
    }
    assert_eq!(heard, n * (n - 1), "every node heard every other once");
    println!("backend: {}; {heard} greetings", cluster.backend_name());
    cluster.shutdown()?;
    Ok(())
}
