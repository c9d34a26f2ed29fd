//! Embedding weft as a transport: your own messages and your own sans-IO protocol, run by the
//! engine over authenticated loopback connections.
//!
//! `cargo run --release --example embed` starts four nodes in this process (one reactor
//! thread per core, each hosting several nodes), has each greet every other with its rank and
//! a payload, and prints what each heard. The same protocol runs unchanged on nodes of
//! different processes or hosts (`weft::transport::spawn` with a `NodeSpec` naming the peers'
//! addresses) and in the simulator (`weft::sim`), since it never touches a socket or a clock.

use rkyv::{Archive, Deserialize, Serialize};
use weft::engine::reactor::NodeEvent;
use weft::proto::message::{Message, Tag, APP_TAGS};
use weft::proto::{Event, Outbox, Protocol, Time, TimerId};
use weft::transport::{Cluster, NodeOptions};
use weft::NodeId;

/// The messages of this application. Deriving the archive is all the wire needs: frames carry
/// the archived bytes, and the receiver validates them and reads them where they lie.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
enum Greeting {
    Hello { rank: u32, note: Vec<u8> },
}

impl Message for Greeting {
    /// Any tag from `APP_TAGS` (128) up: weft's own protocols take the ones below.
    const TAG: Tag = APP_TAGS + 72;
    const NAME: &'static str = "greeting";
}

/// Greet every peer once; done when every peer has greeted back.
struct Greeter {
    me: NodeId,
    peers: Vec<NodeId>,
    heard: Vec<(NodeId, u32, usize)>,
}

impl Protocol for Greeter {
    type Msg = Greeting;
    type Event = weft::proto::Event;
    type Request = weft::proto::NoRequest;

    fn on_start(&mut self, _now: Time, out: &mut Outbox<Greeting>) {
        for &p in &self.peers {
            let note = format!("hello from {} to {}", self.me, p).into_bytes();
            out.send(
                p,
                Greeting::Hello {
                    rank: self.me.0 as u32,
                    note,
                },
            );
        }
    }

    fn on_message(&mut self, _now: Time, from: NodeId, msg: Greeting, out: &mut Outbox<Greeting>) {
        let Greeting::Hello { rank, note } = msg;
        self.heard.push((from, rank, note.len()));
        if self.heard.len() == self.peers.len() {
            out.report(Event::Done);
        }
    }

    fn on_timer(&mut self, _now: Time, _timer: TimerId, _out: &mut Outbox<Greeting>) {}
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = 4;
    // A generated job key, loopback listeners, the automatic backend (io_uring where it may).
    let cluster = Cluster::start(n, NodeOptions::default(), |i, ids| Greeter {
        me: ids[i],
        peers: ids.iter().copied().filter(|&p| p != ids[i]).collect(),
        heard: Vec::new(),
    })?;
    let mut done = 0;
    while done < n {
        match cluster
            .events
            .recv_timeout(std::time::Duration::from_secs(10))?
        {
            (_, NodeEvent::Protocol(Event::Done)) => done += 1,
            (who, NodeEvent::Refused(why)) => eprintln!("{who} refused a connection: {why}"),
            _ => {}
        }
    }
    println!("backend: {}", cluster.backend_name());
    for node in cluster.stop_all()? {
        let mut heard = node.heard;
        heard.sort();
        println!("{} heard {:?}", node.me, heard);
        assert_eq!(heard.len(), n - 1);
    }
    Ok(())
}
