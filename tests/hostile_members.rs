//! Peers that hold the job key and misbehave once authenticated, over real sockets on both
//! backends: garbage after the handshake, a frame of another protocol, a frame of an older
//! wire version, a frame larger than any message, a recorded handshake replayed, a recorded
//! session's frame replayed on a new connection, and a flood of pings never read back. Each
//! is refused with its reason (that one connection closes, nothing else does), and the node
//! then still serves a legitimate peer.
//!
//! What `tests/hostile.rs` does for peers without the key, this does for members: the key
//! proves who may speak, not that what they say is well formed.

mod common;

use common::events::{collect, refusals};
use common::handshake::authenticate;
use common::serving::still_serves;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
use weft::engine::reactor::NodeEvent;
use weft::engine::{Backend, ReactorOptions, WaitMode};
use weft::proto::membership::MemberMsg;
use weft::proto::ping::{PingMsg, PingPong};
use weft::transport::{Cluster, JobKey, NodeOptions};
use weft::wire::frame::FrameHeader;
use weft::wire::handshake::{Identity, Role};
use weft::wire::{write_frame, write_sealed_frame, Kind};
use weft::NodeId;

/// What a peer that stops reading may leave queued before it is dropped: small, so the flood
/// reaches it fast.
const MAX_QUEUED: usize = 1 << 20;

fn opts(backend: Backend, key: &JobKey) -> NodeOptions {
    NodeOptions {
        pin: false,
        backend: Some(backend),
        key: Some(key.clone()),
        reactor: ReactorOptions {
            wait: WaitMode::Block,
            max_queued: MAX_QUEUED,
            ..Default::default()
        },
        ..NodeOptions::default()
    }
}

/// A member of the job (id `id`, the cluster's job and empty parameters), authenticated on a
/// new connection to `to`; the socket and the session it holds, and every byte it sent.
fn member(to: SocketAddr, key: &JobKey, id: u64) -> (TcpStream, weft::wire::mac::Session, Vec<u8>) {
    let mut s = TcpStream::connect(to).unwrap();
    let mut sent = Vec::new();
    let (_, session) = authenticate(
        Role::Initiator,
        &mut s,
        Identity::new(1, NodeId(id), key.clone()),
        Duration::from_secs(5),
        &mut sent,
    )
    .expect("a member of the job authenticates");
    (s, session, sent)
}

/// The node closed `s` (an orderly end or a reset) within 5 s.
fn closed(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut sink = [0u8; 64 << 10];
    loop {
        match s.read(&mut sink) {
            Ok(0) => return true,
            Ok(_) => {}
            // Stopped and continued (signal(7)): not an end of the connection.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )
            }
        }
    }
}

/// `s`'s node refuses it saying `why` (within 5 s), and closes it.
fn refused_for(c: &Cluster<PingPong>, s: &mut TcpStream, why: &str, what: &str, backend: Backend) {
    let seen = collect(&c.events, 5, |e| refusals(e, None, why) >= 1);
    assert!(
        refusals(&seen, None, why) >= 1,
        "{backend}: {what}: no refusal saying {why:?}: {seen:?}"
    );
    assert!(closed(s), "{backend}: {what}: the connection stayed open");
}

#[test]
fn members_that_misbehave_are_refused_one_connection_at_a_time() {
    for backend in Backend::ALL {
        if backend == Backend::Uring && weft::engine::uring_unavailable().is_some() {
            common::skip::skip("io_uring unavailable");
            continue;
        }
        misbehave_on(backend);
    }
}

fn misbehave_on(backend: Backend) {
    let key = JobKey::generate().unwrap();
    let o = opts(backend, &key);
    let c = Cluster::start(2, o.clone(), |_, _| PingPong::ponger()).unwrap();
    let target = c.nodes[1].addr;

    // 1. Garbage once authenticated.
    let (mut s, _, _) = member(target, &key, 7);
    s.write_all(b"GET / HTTP/1.1\r\nHost: weft\r\n\r\n\0\0")
        .unwrap();
    refused_for(&c, &mut s, "magic", "garbage after the handshake", backend);

    // 2. A well-sealed frame of another protocol (membership, to a ping node).
    let (mut s, mut session, _) = member(target, &key, 7);
    let mut f = Vec::new();
    write_sealed_frame(
        &MemberMsg::NodeFailure { failed: NodeId(0) },
        &mut session.send,
        &mut f,
    )
    .unwrap();
    s.write_all(&f).unwrap();
    refused_for(
        &c,
        &mut s,
        "protocol tag 4 on a ping",
        "a frame of another protocol",
        backend,
    );

    // 3. A frame of an older wire version (the header's version byte one less).
    let (mut s, _, _) = member(target, &key, 7);
    let mut f = Vec::new();
    write_frame(
        &PingMsg::Ping {
            seq: 1,
            payload: vec![1u8; 32].into(),
        },
        &mut f,
    )
    .unwrap();
    f[4] -= 1;
    s.write_all(&f).unwrap();
    refused_for(&c, &mut s, "version", "an older wire version", backend);

    // 4. A frame larger than any message may be, refused from its header.
    let (mut s, _, _) = member(target, &key, 7);
    s.write_all(&FrameHeader::encode(Kind::Msg, 1, false, u32::MAX - 64))
        .unwrap();
    refused_for(&c, &mut s, "exceeds", "an oversized frame", backend);

    // 5. A recorded handshake replayed on a new connection: the node's Hello carries a fresh
    //    nonce, which the recorded proof does not cover.
    let (_, _, recording) = member(target, &key, 8);
    let mut replay = TcpStream::connect(target).unwrap();
    replay.write_all(&recording).unwrap();
    refused_for(&c, &mut replay, "job key", "a replayed handshake", backend);
    let replayed = collect(&c.events, 1, |_| false);
    assert!(
        !replayed
            .iter()
            .any(|(_, e)| *e == NodeEvent::Authenticated(NodeId(8))),
        "{backend}: the replay authenticated: {replayed:?}"
    );

    // 6. A sealed frame recorded on one connection, replayed on another of the same member:
    //    each connection's keys are its own.
    let (_, mut old, _) = member(target, &key, 9);
    let mut f = Vec::new();
    write_sealed_frame(
        &MemberMsg::NodeFailure { failed: NodeId(0) },
        &mut old.send,
        &mut f,
    )
    .unwrap();
    let (mut s, _, _) = member(target, &key, 9);
    s.write_all(&f).unwrap();
    refused_for(&c, &mut s, "MAC", "a frame of another connection", backend);

    // 7. A flood of pings whose echoes are never read: once the echoes waiting for this peer
    //    pass `max_queued`, it is dropped as a peer that does not read.
    let (mut s, _, _) = member(target, &key, 10);
    let mut pings = Vec::new();
    for seq in 0..64 {
        write_frame(
            &PingMsg::Ping {
                seq,
                payload: vec![7u8; 60 << 10].into(),
            },
            &mut pings,
        )
        .unwrap();
    }
    s.set_write_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let stalled = |e: &[(NodeId, NodeEvent)]| refusals(e, None, "does not read") >= 1;
    let mut seen = Vec::new();
    for _ in 0..200 {
        if s.write_all(&pings).is_err() {
            break; // the node stopped reading us, or closed
        }
        seen.extend(collect(&c.events, 0, |_| false));
        if stalled(&seen) {
            break;
        }
    }
    seen.extend(collect(&c.events, 5, |e| stalled(e)));
    assert!(
        stalled(&seen),
        "{backend}: a flood never read back was not dropped: {seen:?}"
    );

    // Through all of it the node serves a legitimate peer.
    still_serves(c, key, o);
}
