//! Peers that try what a stranger, a relay or a misconfigured launcher would, over real
//! sockets on both backends: each is refused (one connection closed, with its reason) and the
//! node serves on. Frames after the handshake are authenticated, so a relay without the key
//! cannot speak on a connection it carries; a stranger cannot make a node hold more than a
//! handshake's bytes; nodes that disagree on the job, or claim one live id, are refused.

mod common;

use common::events::{collect, refusals};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;
use weft::engine::reactor::{ConnError, NodeEvent};
use weft::engine::{Backend, WaitMode};
use weft::proto::membership::{MemberEvent, MemberMsg, Membership, MembershipConfig, TreeMode};
use weft::proto::Event;
use weft::transport::{bind, spawn, JobKey, NodeHandle, NodeOptions, NodeSpec};
use weft::NodeId;

fn member_cfg() -> MembershipConfig {
    let quiet = Duration::from_secs(3600);
    MembershipConfig {
        radix: 4,
        mode: TreeMode::Patch,
        probe: Some((quiet, quiet)),
        warm: false,
        batch: Duration::ZERO,
        orphan_hold: Duration::ZERO,
        collect: false,
        heartbeat: None,
    }
}

/// Over TCP: the hostile peers here sit on connections (a relay, a raw socket); a link's
/// hostile peers are `shm_peers.rs`'.
fn opts(backend: Backend, key: &JobKey) -> NodeOptions {
    NodeOptions {
        pin: false,
        transport: Some(weft::transport::Transport::Tcp),
        backend: Some(backend),
        key: Some(key.clone()),
        params: member_cfg().params(3),
        reactor: weft::engine::ReactorOptions {
            wait: WaitMode::Block,
            ..Default::default()
        },
        ..NodeOptions::default()
    }
}

/// Start membership node `id` of a job of `members`, with its listener and the peers given.
fn member(
    id: u64,
    members: u64,
    listener: TcpListener,
    peers: &[(u64, SocketAddr)],
    o: &NodeOptions,
) -> (NodeHandle<Membership>, Receiver<(NodeId, NodeEvent)>) {
    let (tx, rx) = channel();
    let ids: Vec<NodeId> = (0..members).map(NodeId).collect();
    let spec = NodeSpec {
        id: NodeId(id),
        listener,
        peers: peers.iter().map(|&(i, a)| (NodeId(i), a)).collect(),
        key: o.key.clone().unwrap(),
        core: None,
    };
    let node = spawn(spec, o, Membership::new(NodeId(id), ids, member_cfg()), tx).unwrap();
    (node, rx)
}

fn listener() -> TcpListener {
    bind("127.0.0.1:0".parse().unwrap()).unwrap()
}

/// A TCP relay from a fresh port to `to`: everything passes through, except that once the
/// dialing side has sent its two handshake frames (Hello, Auth), `inject` goes to `to` right
/// after them, as a relay that holds no key would forge a frame.
fn relay(
    to: SocketAddr,
    inject: Vec<u8>,
) -> (SocketAddr, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log2 = log.clone();
    std::thread::spawn(move || {
        let note = |s: String| log2.lock().unwrap().push(s);
        let Ok((mut inbound, _)) = l.accept() else {
            return;
        };
        let mut outbound = TcpStream::connect(to).unwrap();
        let (mut back_in, mut back_out) =
            (inbound.try_clone().unwrap(), outbound.try_clone().unwrap());
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut back_out, &mut back_in);
        });
        // Forward the dialer's frames one by one, and inject after the second.
        let mut frames = 0;
        loop {
            let mut header = [0u8; 16];
            if let Err(e) = inbound.read_exact(&mut header) {
                note(format!("header read after {frames} frames: {e}"));
                return;
            }
            note(format!(
                "frame kind {} tag {} len {}",
                header[5],
                header[6],
                u32::from_le_bytes([header[8], header[9], header[10], header[11]])
            ));
            let len = u32::from_le_bytes([header[8], header[9], header[10], header[11]]) as usize;
            let mac = if header[7] & 1 != 0 { 16 } else { 0 };
            let mut rest = vec![0u8; len.div_ceil(16) * 16 + mac];
            if let Err(e) = inbound.read_exact(&mut rest) {
                note(format!("body read: {e}"));
                return;
            }
            let _ = outbound.write_all(&header);
            let _ = outbound.write_all(&rest);
            frames += 1;
            if frames == 2 {
                note(format!("inject: {:?}", outbound.write_all(&inject)));
            }
        }
    });
    (addr, log)
}

/// A relay between two members, without the key, passes their handshake through and then
/// injects `NodeFailure { failed: n2 }` (the attack that split a job): the member refuses the
/// frame (it carries no MAC, or a MAC it cannot have computed) and closes that connection,
/// and no view ever leaves out the live node 2. The relay sits on the root's dial to node 1:
/// the two dial each other at the start, and the connection the lower id dialed is the one
/// kept (node 1's own dial yields to it, `engine/reactor/crossing.rs`).
#[test]
fn a_relay_without_the_key_cannot_speak_on_a_connection() {
    for backend in Backend::ALL {
        for forged_mac in [false, true] {
            relay_cannot_speak_on(backend, forged_mac);
        }
    }
}

fn relay_cannot_speak_on(backend: Backend, forged_mac: bool) {
    let key = JobKey::generate().unwrap();
    let o = opts(backend, &key);
    let (l0, l1, l2) = (listener(), listener(), listener());
    let (a0, a1, a2) = (
        l0.local_addr().unwrap(),
        l1.local_addr().unwrap(),
        l2.local_addr().unwrap(),
    );
    let mut forged = Vec::new();
    weft::wire::write_frame(&MemberMsg::NodeFailure { failed: NodeId(2) }, &mut forged).unwrap();
    if forged_mac {
        // The flag set and 16 bytes of a MAC the relay cannot compute.
        forged[7] = 1;
        forged.extend_from_slice(&[0x5a; 16]);
    }
    let (via, log) = relay(a1, forged);
    // The root reaches node 1 (its child) through the relay; node 2 directly.
    let (_n0, rx0) = member(0, 3, l0, &[(1, via), (2, a2)], &o);
    let (_n1, rx1) = member(1, 3, l1, &[(0, a0), (2, a2)], &o);
    let (_n2, rx2) = member(2, 3, l2, &[(0, a0), (1, a1)], &o);
    let refused_frame = |s: &[(NodeId, NodeEvent)]| {
        s.iter().any(|(_, e)| {
            matches!(e, NodeEvent::Refused(r)
                if matches!(r.why, ConnError::Wire(weft::wire::WireError::MacMissing(_))
                    | ConnError::Wire(weft::wire::WireError::BadMac(_))))
        })
    };
    let seen = collect(&rx1, 10, refused_frame);
    assert!(
        refused_frame(&seen),
        "{backend} forged MAC {forged_mac}: node 1 did not refuse the forged frame: {seen:?}; \
         the root saw {:?}; node 2 saw {:?}; the relay: {:?}",
        rx0.try_iter().collect::<Vec<_>>(),
        rx2.try_iter().collect::<Vec<_>>(),
        log.lock().unwrap()
    );
    let seen: Vec<_> = seen.into_iter().chain(rx0.try_iter()).collect();
    let without_2 = seen.iter().any(|(_, e)| {
        matches!(e, NodeEvent::Protocol(Event::Member(MemberEvent::ViewChanged { view, .. }))
            if !view.contains(&NodeId(2)))
    });
    assert!(
        !without_2,
        "{backend}: a view left out the live node 2: {seen:?}"
    );
}

/// Nodes whose job parameters differ (another radix) refuse each other, saying both.
#[test]
fn nodes_with_other_job_parameters_are_refused() {
    for backend in Backend::ALL {
        let key = JobKey::generate().unwrap();
        let o = opts(backend, &key);
        let other = NodeOptions {
            params: MembershipConfig {
                radix: 2,
                ..member_cfg()
            }
            .params(3),
            ..o.clone()
        };
        let (l0, l1) = (listener(), listener());
        let (a0, a1) = (l0.local_addr().unwrap(), l1.local_addr().unwrap());
        let (_n0, rx0) = member(0, 2, l0, &[(1, a1)], &o);
        let (_n1, _rx1) = member(1, 2, l1, &[(0, a0)], &other);
        let seen = collect(&rx0, 10, |s| refusals(s, None, "radix=2") >= 1);
        assert!(
            refusals(&seen, None, "membership nodes=3 radix=2") >= 1,
            "{backend}: {seen:?}"
        );
        assert!(
            !seen
                .iter()
                .any(|(_, e)| *e == NodeEvent::Authenticated(NodeId(1))),
            "{backend}: {seen:?}"
        );
    }
}

/// A second process started with a live member's id (another incarnation) is refused by the
/// nodes that hear the live one; the live one stays connected and unsuspected.
#[test]
fn a_second_process_with_a_live_id_is_refused() {
    for backend in Backend::ALL {
        let key = JobKey::generate().unwrap();
        let o = opts(backend, &key);
        let (l0, l1) = (listener(), listener());
        let (a0, a1) = (l0.local_addr().unwrap(), l1.local_addr().unwrap());
        let (_n0, rx0) = member(0, 2, l0, &[(1, a1)], &o);
        let (_n1, _rx1) = member(1, 2, l1, &[(0, a0)], &o);
        let up = collect(&rx0, 10, |s| {
            s.iter()
                .any(|(_, e)| *e == NodeEvent::Authenticated(NodeId(1)))
        });
        assert!(
            up.iter()
                .any(|(_, e)| *e == NodeEvent::Authenticated(NodeId(1))),
            "{backend}: {up:?}"
        );
        let impostor_opts = NodeOptions {
            incarnation: o.incarnation + 1,
            ..o.clone()
        };
        let (_impostor, _rx) = member(1, 2, listener(), &[(0, a0)], &impostor_opts);
        let refused = |s: &[(NodeId, NodeEvent)]| {
            s.iter().any(|(_, e)| {
                matches!(e, NodeEvent::Refused(r) if matches!(r.why, ConnError::Impostor { .. }))
            })
        };
        let seen = collect(&rx0, 10, refused);
        assert!(
            refused(&seen),
            "{backend}: the impostor was not refused: {seen:?}"
        );
        assert!(
            !seen
                .iter()
                .any(|(_, e)| *e == NodeEvent::Suspect(NodeId(1))),
            "{backend}: the live node 1 was suspected: {seen:?}"
        );
    }
}

/// A peer (or a stranger at its address) that answers every dial with Defer and never dials
/// back is not waited for forever: the dialer waits a second after each Defer and dials
/// again, and once the peer has deferred for a handshake timeout (2 s here) suspects it,
/// saying why; a Defer from a higher id than the dialer's is refused at once.
#[test]
fn a_peer_that_only_defers_is_suspected_after_a_bounded_wait() {
    use weft::proto::ping::PingPong;
    use weft::wire::handshake::{Handshake, HandshakeError, Identity, Role};
    use weft::wire::FrameDecoder;
    for (backend, deferrer) in [(Backend::Poll, 0), (Backend::Uring, 0), (Backend::Poll, 9)] {
        let key = JobKey::generate().unwrap();
        let mut o = opts(backend, &key);
        o.reactor.handshake_timeout = Duration::from_secs(2);
        let fake = listener();
        let fake_addr = fake.local_addr().unwrap();
        let me = Identity {
            params: o.params.clone(),
            ..Identity::new(o.job_id, NodeId(deferrer), key.clone())
        };
        // Accept dials, answer each Hello with our Hello and Defer, count them.
        let (dials_tx, dials) = channel();
        std::thread::spawn(move || {
            for s in fake.incoming() {
                let Ok(mut s) = s else { return };
                let mut out = Vec::new();
                let mut hs = Handshake::start(Role::Responder, me.clone(), None, &mut out).unwrap();
                let mut dec = FrameDecoder::default();
                let mut buf = [0u8; 4096];
                'conn: while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    dec.push(&buf[..n]);
                    while let Ok(Some(f)) = dec.next_frame() {
                        if hs.on_frame(f.kind, f.body(), &mut Vec::new()).is_ok() {
                            hs.defer(&mut out).unwrap();
                            let _ = s.write_all(&out);
                            let _ = dials_tx.send(());
                            break 'conn;
                        }
                    }
                }
                // Held open until the dialer closes it, as a deferring node does.
                let _ = s.read(&mut buf);
            }
        });
        let (tx, rx) = channel();
        let spec = NodeSpec {
            id: NodeId(5),
            listener: listener(),
            peers: [(NodeId(deferrer), fake_addr)].into_iter().collect(),
            key: key.clone(),
            core: None,
        };
        let started = std::time::Instant::now();
        let node = spawn(
            spec,
            &o,
            PingPong::pinger(NodeId(deferrer), vec![32], 1, 0),
            tx,
        )
        .unwrap();
        node.wake();
        let peer = NodeId(deferrer);
        let seen = collect(&rx, 20, |s| {
            s.iter().any(|(_, e)| *e == NodeEvent::Suspect(peer))
        });
        let waited = started.elapsed();
        assert!(
            seen.iter().any(|(_, e)| *e == NodeEvent::Suspect(peer)),
            "{backend}, deferrer {deferrer}: {seen:?}"
        );
        let (dialed, why) = if deferrer < 5 {
            (3, ConnError::Handshake(HandshakeError::Deferred(peer)))
        } else {
            (
                1,
                ConnError::Handshake(HandshakeError::Unexpected(weft::wire::Kind::Defer)),
            )
        };
        let refused: Vec<_> = seen
            .iter()
            .filter_map(|(_, e)| match e {
                NodeEvent::Refused(r) => Some(r.why.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(refused, [why], "{backend}, deferrer {deferrer}: {seen:?}");
        assert_eq!(
            dials.try_iter().count(),
            dialed,
            "{backend}, deferrer {deferrer}"
        );
        if deferrer < 5 {
            assert!(
                waited >= Duration::from_secs(2),
                "{waited:?}: two waits of a second, three dials"
            );
        }
    }
}

/// A stranger claiming a higher id whose dial the node defers (its own dial to that id is
/// under way) may send the one Auth that crosses the Defer, and no more: a second is
/// refused, so a deferred connection cannot be kept busy.
#[test]
fn a_deferred_stranger_may_not_stream_auth_frames() {
    use weft::proto::ping::PingPong;
    use weft::wire::handshake::{Handshake, HandshakeError, Identity, Role};
    use weft::wire::FrameDecoder;
    for backend in Backend::ALL {
        let key = JobKey::generate().unwrap();
        let o = opts(backend, &key);
        // Node 0 dials node 9 at an address that accepts and never answers: its dial stays
        // in its handshake.
        let silent = listener();
        let silent_addr = silent.local_addr().unwrap();
        let node_listener = listener();
        let node_addr = node_listener.local_addr().unwrap();
        let (tx, rx) = channel();
        let spec = NodeSpec {
            id: NodeId(0),
            listener: node_listener,
            peers: [(NodeId(9), silent_addr)].into_iter().collect(),
            key: key.clone(),
            core: None,
        };
        let node = spawn(spec, &o, PingPong::pinger(NodeId(9), vec![32], 1, 0), tx).unwrap();
        node.wake();
        let (_held, _) = silent.accept().unwrap();
        // The stranger, as node 9 (it knows the job id and parameters, not the key).
        let me = Identity {
            params: o.params.clone(),
            ..Identity::new(o.job_id, NodeId(9), JobKey::generate().unwrap())
        };
        let mut s = TcpStream::connect(node_addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut out = Vec::new();
        let mut hs = Handshake::start(Role::Initiator, me, Some(NodeId(0)), &mut out).unwrap();
        s.write_all(&out).unwrap();
        let (mut dec, mut buf, mut auth) = (FrameDecoder::default(), [0u8; 4096], Vec::new());
        let deferred = 'read: loop {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "{backend}: the node closed before deferring");
            dec.push(&buf[..n]);
            while let Some(f) = dec.next_frame().unwrap() {
                match hs.on_frame(f.kind, f.body(), &mut auth) {
                    Ok(None) => {}
                    other => break 'read other,
                }
            }
        };
        assert_eq!(
            deferred,
            Err(HandshakeError::Deferred(NodeId(0))),
            "{backend}"
        );
        // The Auth our Hello's answer made, twice.
        s.write_all(&auth).unwrap();
        s.write_all(&auth).unwrap();
        let refused = |seen: &[(NodeId, NodeEvent)]| {
            seen.iter().any(|(_, e)| {
                matches!(e, NodeEvent::Refused(r)
                    if r.why == ConnError::Handshake(HandshakeError::Unexpected(weft::wire::Kind::Auth)))
            })
        };
        let seen = collect(&rx, 10, refused);
        assert!(refused(&seen), "{backend}: {seen:?}");
        // And the node closed that connection (an end or a reset, not the read timing out).
        let closed = s.read_to_end(&mut Vec::new());
        assert!(
            !matches!(&closed, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
            "{backend}: {closed:?}"
        );
        assert!(
            !seen
                .iter()
                .any(|(_, e)| *e == NodeEvent::Suspect(NodeId(9))),
            "{backend}: a stranger's words are not node 9's failure: {seen:?}"
        );
    }
}

/// A crossing dial that yielded before this end read it: its Hello, then a reset. The node
/// reads what the socket holds before it judges the end, learns whose dial it was (one it
/// defers to its own, under way), and reports nothing; `tests/crossing.rs` saw it refused
/// now and then, on epoll, which reports the error before the bytes. A stranger that says
/// something wrong is still refused.
#[test]
fn a_crossing_dial_reset_before_it_was_read_is_no_refusal() {
    use weft::proto::ping::PingPong;
    use weft::wire::handshake::{Handshake, Identity, Role};
    for backend in Backend::ALL {
        let key = JobKey::generate().unwrap();
        let o = opts(backend, &key);
        // Node 0's dial to node 9 stays in its handshake: 9's address never answers.
        let silent = listener();
        let silent_addr = silent.local_addr().unwrap();
        let node_listener = listener();
        let a0 = node_listener.local_addr().unwrap();
        let (tx, rx) = channel();
        let spec = NodeSpec {
            id: NodeId(0),
            listener: node_listener,
            peers: [(NodeId(9), silent_addr)].into_iter().collect(),
            key: key.clone(),
            core: None,
        };
        let node = spawn(spec, &o, PingPong::pinger(NodeId(9), vec![32], 1, 0), tx).unwrap();
        node.wake();
        let (_held, _) = silent.accept().unwrap();
        let me = Identity {
            params: o.params.clone(),
            ..Identity::new(o.job_id, NodeId(9), key.clone())
        };
        // 9's own dials: a Hello each, then a reset.
        for _ in 0..5 {
            let mut s = TcpStream::connect(a0).unwrap();
            let mut hello = Vec::new();
            Handshake::start(Role::Initiator, me.clone(), Some(NodeId(0)), &mut hello).unwrap();
            s.write_all(&hello).unwrap();
            socket2::SockRef::from(&s)
                .set_linger(Some(Duration::ZERO))
                .unwrap();
        }
        // Then a stranger that speaks garbage: its refusal is the event to wait for.
        let mut chatty = TcpStream::connect(a0).unwrap();
        chatty.write_all(&[0xee; 64]).unwrap();
        let wire = |s: &[(NodeId, NodeEvent)]| {
            s.iter()
                .filter(|(_, e)| {
                    matches!(e, NodeEvent::Refused(r) if matches!(r.why, ConnError::Wire(_)))
                })
                .count()
        };
        let seen = collect(&rx, 10, |s| wire(s) >= 1);
        let refused = seen
            .iter()
            .filter(|(_, e)| matches!(e, NodeEvent::Refused(_)))
            .count();
        assert_eq!((wire(&seen), refused), (1, 1), "{backend}: {seen:?}");
    }
}

/// A member no address is known for is suspected (as a refused dial), not asked for forever.
#[test]
fn a_member_without_an_address_is_suspected() {
    for backend in Backend::ALL {
        let key = JobKey::generate().unwrap();
        let o = opts(backend, &key);
        let (l0, l1) = (listener(), listener());
        let a0 = l0.local_addr().unwrap();
        // Node 0 (the root) knows no address for its child 1.
        let (_n0, rx0) = member(0, 2, l0, &[], &o);
        let (_n1, _rx1) = member(1, 2, l1, &[(0, a0)], &o);
        let seen = collect(&rx0, 10, |s| {
            s.iter().any(|(_, e)| *e == NodeEvent::Suspect(NodeId(1)))
                && refusals(s, None, "no address for n1") >= 1
        });
        assert!(
            seen.iter()
                .any(|(_, e)| *e == NodeEvent::Suspect(NodeId(1))),
            "{backend}: {seen:?}"
        );
        assert!(
            refusals(&seen, None, "no address for n1") >= 1,
            "{backend}: {seen:?}"
        );
    }
}

/// A peer that closes a dial during the handshake (as one with another job key does, after
/// reading the dialer's proof) is reported as such, naming WEFT_JOB_KEY, not as a bare
/// "closed by peer" beside a view of one.
#[test]
fn a_dial_closed_during_the_handshake_names_the_likely_key_mismatch() {
    for backend in Backend::ALL {
        let key = JobKey::generate().unwrap();
        let o = opts(backend, &key);
        let (l0, fake) = (listener(), listener());
        let at = fake.local_addr().unwrap();
        // The fake n1 reads what the dialer says, then hangs up without a word.
        std::thread::spawn(move || {
            while let Ok((mut s, _)) = fake.accept() {
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf);
            }
        });
        let (_n0, rx0) = member(0, 2, l0, &[(1, at)], &o);
        let what = "closed by the peer during the handshake";
        let seen = collect(&rx0, 10, |s| refusals(s, None, what) >= 1);
        assert!(refusals(&seen, None, what) >= 1, "{backend}: {seen:?}");
        assert!(
            refusals(&seen, None, "WEFT_JOB_KEY") >= 1,
            "{backend}: {seen:?}"
        );
    }
}

/// Strangers that stream bytes without ever authenticating (padding frames, or garbage after
/// a valid first header) cannot grow a node process's memory: 50 of them, each sending up to
/// 2 MiB, on each backend and wait mode, leave its resident memory within 24 MiB of where it
/// was (it grew by 720 MB before a stranger's reads were bounded).
#[test]
fn strangers_that_stream_cannot_grow_a_nodes_memory() {
    for (backend, wait) in [("poll", "block"), ("uring", "busy"), ("uring", "adaptive")] {
        if backend == "uring" && weft::engine::uring_unavailable().is_some() {
            common::skip::skip("io_uring unavailable");
            continue;
        }
        let key = JobKey::generate().unwrap();
        let (mut child, addr, _lines) =
            common::node_process::start_node_with(&key, Some(backend), wait);
        let rss = || resident_kib(child.id());
        let before = rss();
        let mut pad = Vec::new();
        for _ in 0..64 {
            // Padding frames of 1 KiB body, a handshake's size.
            pad.extend_from_slice(&weft::wire::frame::FrameHeader::encode(
                weft::wire::Kind::Pad,
                0,
                false,
                1008,
            ));
            pad.resize(pad.len() + 1008, 0);
        }
        let mut garbage =
            weft::wire::frame::FrameHeader::encode(weft::wire::Kind::Hello, 0, false, 1000)
                .to_vec();
        garbage.resize(64 * 1024, 0xee);
        let mut strangers = Vec::new();
        for i in 0..50 {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_nonblocking(true).unwrap();
            let chunk = if i % 2 == 0 { &pad } else { &garbage };
            let mut sent = 0;
            while sent < 2 << 20 {
                match s.write(chunk) {
                    Ok(n) => sent += n,
                    Err(_) => break, // full (the node stopped reading) or closed by it
                }
            }
            strangers.push(s);
        }
        // Every stranger is closed by the node (it sent more than a handshake, or padding
        // before one): read each to its end, so the node has seen all the bytes it will.
        for s in &mut strangers {
            s.set_nonblocking(false).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
        }
        let after = rss();
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            after < before + 24 * 1024,
            "{backend}/{wait}: resident memory {before} KiB -> {after} KiB"
        );
    }
}

/// A process's resident memory, KiB (`VmRSS`).
fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap()
}
