//! A node's shared-memory links against peers that misbehave or die: bytes that are not
//! frames, a frame cut short, a ring position that cannot be, a peer that stops reading, a
//! peer process killed. Each ends that one link (its peer suspected, the reason reported, as
//! a lost connection's), and the node goes on serving its other links. The misbehaving peer
//! is this test holding the raw end of a link (`engine::link::shm`), or this test binary run
//! again as a child (`linked_child`) for the killed process.

mod common;

use common::events::collect;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use weft::buf::Payload;
use weft::engine::link::shm::blocking::{Ended, Wait};
use weft::engine::link::shm::{self, Link, RING_BYTES};
use weft::engine::reactor::{ConnError, NodeEvent, Refusal};
use weft::engine::{Backend, ReactorOptions, WaitMode};
use weft::proto::ping::{PingMsg, PingPong};
use weft::transport::{Cluster, NodeOptions, Transport};
use weft::wire::handshake::{Identity, JobKey};
use weft::wire::{FrameDecoder, Framed, SendQueue};
use weft::NodeId;

const T: Duration = Duration::from_secs(10);

/// A job id no other test of this run uses (link addresses are per network namespace; the
/// key keeps jobs apart anyway).
fn job() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    (std::process::id() as u64) << 16 | NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One echoing node (node 0) on links only.
struct Node {
    cluster: Cluster<PingPong>,
    job: u64,
    key: JobKey,
}

fn node(backend: Backend, wait: WaitMode, max_queued: usize) -> Node {
    let (job, key) = (job(), JobKey::generate().expect("key"));
    let opts = NodeOptions {
        job_id: job,
        key: Some(key.clone()),
        backend: Some(backend),
        transport: Some(Transport::Shm),
        pin: false,
        reactor: ReactorOptions {
            wait,
            max_queued,
            ..Default::default()
        },
        ..Default::default()
    };
    let cluster = Cluster::start(1, opts, |_, _| PingPong::ponger()).expect("start");
    Node { cluster, job, key }
}

impl Node {
    /// The raw end of a link to node 0 as peer `id`, once node 0 has taken it in.
    fn link(&self, id: u64) -> Link {
        let me = Identity::new(self.job, NodeId(id), self.key.clone());
        let link = shm::dial(&me, NodeId(0), RING_BYTES, T).expect("dial node 0");
        self.wait_for(|e| *e == NodeEvent::Authenticated(NodeId(id)));
        link
    }

    /// Wait for node 0 to report an event that `want` picks; every event until then.
    fn wait_for(&self, want: impl Fn(&NodeEvent) -> bool) -> Vec<(NodeId, NodeEvent)> {
        let seen = collect(&self.cluster.events, 10, |s| s.iter().any(|(_, e)| want(e)));
        assert!(seen.iter().any(|(_, e)| want(e)), "{seen:?}");
        seen
    }

    /// Node 0 suspects `id` and says why, with a reason that `why` accepts.
    fn drops(&self, id: u64, why: impl Fn(&ConnError) -> bool) {
        let peer = Some(NodeId(id));
        let seen = self.wait_for(
            |e| matches!(e, NodeEvent::Refused(Refusal { peer: p, why: w }) if *p == peer && why(w)),
        );
        assert!(
            seen.iter()
                .any(|(_, e)| *e == NodeEvent::Suspect(NodeId(id))),
            "{seen:?}"
        );
    }
}

fn ping(seq: u64, len: usize) -> Vec<u8> {
    let mut q = SendQueue::new();
    let payload = Payload::from(vec![seq as u8; len]);
    q.push_msg(&PingMsg::Ping { seq, payload }, None)
        .expect("frame");
    q.to_vec()
}

/// Read `link` until the echo of ping `seq` comes, whole.
fn pong(link: &mut Link, seq: u64, len: usize) {
    let mut decoder = FrameDecoder::default();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = link.recv_some(&mut buf, Wait::Sleep, T).expect("an echo");
        decoder.push(&buf[..n]);
        while let Some(frame) = decoder.next_frame().expect("a frame") {
            let PingMsg::Pong { seq: s, payload } = PingMsg::read(&frame).expect("a pong") else {
                panic!("not a pong");
            };
            if s == seq {
                assert_eq!(&payload[..], &vec![seq as u8; len][..]);
                return;
            }
        }
    }
}

fn on_every_engine(test: impl Fn(Backend, WaitMode)) {
    for backend in Backend::ALL {
        if backend == Backend::Uring && weft::engine::uring_unavailable().is_some() {
            common::skip::skip("io_uring unavailable");
            continue;
        }
        for wait in [WaitMode::Block, WaitMode::Busy] {
            test(backend, wait);
        }
    }
}

#[test]
fn a_link_carries_messages_both_ways() {
    on_every_engine(|backend, wait| {
        let n = node(backend, wait, weft::transport::MAX_QUEUED);
        let mut a = n.link(1);
        for (seq, len) in [(1, 8), (2, 70_000), (3, 1 << 20)] {
            a.send_all(&ping(seq, len), Wait::Sleep, T).expect("send");
            pong(&mut a, seq, len);
        }
    });
}

#[test]
fn bytes_that_are_not_frames_end_that_link_alone() {
    on_every_engine(|backend, wait| {
        let n = node(backend, wait, weft::transport::MAX_QUEUED);
        let (mut a, mut b) = (n.link(1), n.link(2));
        a.send_all(b"this is not a weft frame, not at all", Wait::Sleep, T)
            .expect("send");
        n.drops(1, |w| matches!(w, ConnError::Wire(_)));
        assert!(matches!(
            a.recv_some(&mut [0u8; 64], Wait::Sleep, T),
            Err(Ended::PeerGone)
        ));
        // The other link is served as before.
        b.send_all(&ping(7, 100), Wait::Sleep, T).expect("send");
        pong(&mut b, 7, 100);
    });
}

#[test]
fn a_frame_cut_short_is_never_delivered() {
    on_every_engine(|backend, wait| {
        let n = node(backend, wait, weft::transport::MAX_QUEUED);
        let mut a = n.link(1);
        // Half a ping, then a whole one: the first one's length swallows the second's start,
        // and what that body holds is no message (its last bytes, the second's payload of 4s,
        // are no variant of a ping message).
        let (cut, next) = (ping(3, 1000), ping(4, 1000));
        let mut bytes = cut[..cut.len() / 2].to_vec();
        bytes.extend_from_slice(&next);
        a.send_all(&bytes, Wait::Sleep, T).expect("send");
        n.drops(1, |w| matches!(w, ConnError::Wire(_)));
        let mut buf = [0u8; 64];
        assert!(
            matches!(a.recv_some(&mut buf, Wait::Sleep, T), Err(Ended::PeerGone)),
            "no echo of either"
        );
    });
}

#[test]
fn a_position_past_the_ring_ends_the_link() {
    on_every_engine(|backend, wait| {
        let n = node(backend, wait, weft::transport::MAX_QUEUED);
        let a = n.link(1);
        // We dialed: direction 1 is ours to write. Its writer's position says more bytes wait
        // than the ring holds.
        let head = a.segment().at(shm::pipe::CONTROL).cast::<u64>();
        // SAFETY: the control block's first word, 8-aligned, in our own mapping; the node
        // reads it atomically, and a plain store is what a hostile peer would do.
        unsafe { head.write_volatile(3 * RING_BYTES as u64) };
        a.peer_bell.ring();
        n.drops(1, |w| matches!(w, ConnError::Shm(_)));
    });
}

#[test]
fn a_peer_that_stops_reading_is_dropped_not_waited_for() {
    on_every_engine(|backend, wait| {
        // Its echoes fill our ring (256 KiB), then the node's queue, up to 512 KiB.
        let n = node(backend, wait, 512 << 10);
        let mut a = n.link(1);
        // The node may drop us before our last ping is written: a link it ended reads as
        // gone, and that is the outcome under test, reported below with its reason.
        for seq in 0..16 {
            match a.send_all(&ping(seq, 64 << 10), Wait::Sleep, T) {
                Ok(()) => {}
                Err(Ended::PeerGone) => break,
                Err(other) => panic!("ping {seq}: {other:?}"),
            }
        }
        n.drops(1, |w| matches!(w, ConnError::Stalled(_)));
    });
}

/// The child side of `a_killed_peer_process_is_suspected`: link to the node named by
/// `WEFT_SHM_NODE` (job, key) as peer 1, say so, and wait to be killed.
#[test]
fn linked_child() {
    let Ok(spec) = std::env::var("WEFT_SHM_NODE") else {
        return; // Run as a test of its own: nothing to do.
    };
    let (job, key) = spec.split_once(',').expect("job,key");
    let me = Identity::new(
        job.parse().expect("job"),
        NodeId(1),
        JobKey::from_hex(key).expect("key"),
    );
    let _link = shm::dial(&me, NodeId(0), RING_BYTES, T).expect("dial node 0");
    println!("linked");
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_killed_peer_process_is_suspected() {
    on_every_engine(|backend, wait| {
        let n = node(backend, wait, weft::transport::MAX_QUEUED);
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "linked_child", "--nocapture", "--test-threads=1"])
            .env("WEFT_SHM_NODE", format!("{},{}", n.job, n.key.to_hex()))
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        while !line.trim().ends_with("linked") {
            line.clear();
            assert!(
                out.read_line(&mut line).expect("child output") > 0,
                "child ended"
            );
        }
        n.wait_for(|e| *e == NodeEvent::Authenticated(NodeId(1)));
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        n.wait_for(|e| *e == NodeEvent::Suspect(NodeId(1)));
    });
}
