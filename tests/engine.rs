//! The engine on real sockets (127.0.0.1): protocols run unchanged, failures are reported, and
//! bad input closes one connection while the node keeps serving the others.

mod common;

use common::events::{collect, refusals, wait_done};
use common::handshake::shake_hands;
use common::serving::still_serves;
use common::ticking::Ticking;
use std::collections::HashSet;
use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::time::Duration;
use weft::engine::reactor::NodeEvent;
use weft::engine::{Backend, WaitMode};
use weft::proto::ping::PingPong;
use weft::proto::Event;
use weft::transport::{Cluster, NodeOptions, Transport};
use weft::wire::frame::{write_frame, FrameHeader, Kind};
use weft::wire::handshake::{Identity, JobKey};
use weft::NodeId;

// Every engine test runs on both backends (the monoio habit): `Backend::ALL`.

/// These tests are the TCP engine's: nodes of one process talk over loopback connections too
/// (in-process delivery has its own, `tests/inproc.rs`).
fn opts_for(backend: Backend) -> NodeOptions {
    NodeOptions {
        // tests share 2 cores with many reactors: no spinning
        pin: false,
        backend: Some(backend),
        transport: Some(Transport::Tcp),
        reactor: weft::engine::ReactorOptions {
            wait: WaitMode::Block,
            ..Default::default()
        },
        ..NodeOptions::default()
    }
}

#[test]
fn ping_pong_over_loopback_all_sizes() {
    for backend in Backend::ALL {
        ping_pong_over_loopback_all_sizes_on(backend);
    }
}

/// Nodes on IPv6 (`[::1]`) dial, authenticate and exchange every size, on both backends: a
/// cluster's hosts may be addressed by IPv6 alone.
#[test]
fn ping_pong_over_ipv6_loopback() {
    let Ok(probe) = std::net::TcpListener::bind("[::1]:0") else {
        eprintln!("no IPv6 loopback here: skipped");
        return;
    };
    drop(probe);
    for backend in Backend::ALL {
        let key = JobKey::from_bytes([11; 32]);
        let o = NodeOptions {
            key: Some(key.clone()),
            ..opts_for(backend)
        };
        let bind = || weft::transport::bind("[::1]:0".parse().unwrap()).unwrap();
        let (l0, l1) = (bind(), bind());
        let (a0, a1) = (l0.local_addr().unwrap(), l1.local_addr().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        let spec = |id, listener, peer: (NodeId, std::net::SocketAddr)| weft::transport::NodeSpec {
            id,
            listener,
            peers: [peer].into_iter().collect(),
            key: key.clone(),
            core: None,
        };
        let sizes = vec![0, 32, 4096, 65536, 1 << 20];
        let _ponger = weft::transport::spawn(
            spec(NodeId(1), l1, (NodeId(0), a0)),
            &o,
            PingPong::ponger(),
            tx.clone(),
        )
        .unwrap();
        let mut pinger = weft::transport::spawn(
            spec(NodeId(0), l0, (NodeId(1), a1)),
            &o,
            PingPong::pinger(NodeId(1), sizes.clone(), 20, 0).verifying(),
            tx,
        )
        .unwrap();
        wait_done(&rx, 20, &format!("{backend}: ping over IPv6"));
        let pinger = pinger.stop().unwrap();
        assert_eq!(pinger.samples().len(), 20 * sizes.len(), "{backend}");
        assert_eq!(pinger.mismatches(), 0, "{backend}: an echo differed");
    }
}

/// io_uring zero-copy sends (every send, from the handshake on) deliver the same bytes.
#[test]
fn ping_pong_with_zero_copy_sends() {
    if weft::engine::uring_unavailable().is_some() {
        eprintln!("io_uring unavailable here: skipped");
        return;
    }
    ping_pong_over_loopback_all_sizes_with(NodeOptions {
        reactor: weft::engine::ReactorOptions {
            zerocopy_min: 0,
            ..Default::default()
        },
        ..opts_for(Backend::Uring)
    });
}

/// Spinning reactors (the poll backend then reads its active connections directly, without
/// epoll) deliver the same bytes, on both backends.
#[test]
fn ping_pong_with_spinning_reactors() {
    for backend in Backend::ALL {
        ping_pong_over_loopback_all_sizes_with(NodeOptions {
            reactor: weft::engine::ReactorOptions {
                wait: WaitMode::Busy,
                ..Default::default()
            },
            ..opts_for(backend)
        });
    }
}

fn ping_pong_over_loopback_all_sizes_on(backend: Backend) {
    ping_pong_over_loopback_all_sizes_with(opts_for(backend))
}

fn ping_pong_over_loopback_all_sizes_with(opts: NodeOptions) {
    // 1 and 4 MiB frames are longer than a write the kernel builds without stopping for
    // ACKs, so each is written in two parts; io_uring sends 4 MiB through the ring.
    let sizes = vec![8, 4096, 100_000, 1 << 20, 4 << 20];
    let plan = sizes.clone();
    let c = Cluster::start(2, opts, move |i, ids| {
        if i == 0 {
            PingPong::pinger(ids[1], plan.clone(), 50, 5).verifying()
        } else {
            PingPong::ponger()
        }
    })
    .unwrap();
    wait_done(&c.events, 30, "ping-pong");
    let pinger = c.stop_all().unwrap().into_iter().next().unwrap();
    let trips: Vec<usize> = pinger.samples().iter().map(|&(size, _)| size).collect();
    assert_eq!(trips.len(), 50 * sizes.len());
    assert_eq!(
        pinger.mismatches(),
        0,
        "every echo carried the ping's bytes"
    );
    for s in &sizes {
        assert_eq!(trips.iter().filter(|&&t| t == *s).count(), 50);
    }
}

#[test]
fn overlay_builds_the_bmg_on_real_sockets() {
    for backend in Backend::ALL {
        overlay_builds_the_bmg_on_real_sockets_on(backend);
    }
}

fn overlay_builds_the_bmg_on_real_sockets_on(backend: Backend) {
    common::overlay::builds_the_bmg(3, opts_for(backend));
}

/// Blocking and spinning reactors alike (a spinning io_uring reactor reads its commands
/// without epoll, and must still hear the order to stop a node).
#[test]
fn a_stopped_peer_is_reported_not_hung_on() {
    for backend in Backend::ALL {
        for wait in [WaitMode::Block, WaitMode::Busy] {
            a_stopped_peer_is_reported_not_hung_on_with(NodeOptions {
                reactor: weft::engine::ReactorOptions {
                    wait,
                    ..Default::default()
                },
                ..opts_for(backend)
            });
        }
    }
}

fn a_stopped_peer_is_reported_not_hung_on_with(opts: NodeOptions) {
    let mut c = Cluster::start(2, opts, move |i, ids| {
        if i == 0 {
            PingPong::pinger(ids[1], vec![64], 1_000_000, 0)
        } else {
            PingPong::ponger()
        }
    })
    .unwrap();
    // Let traffic flow, then kill the ponger mid-stream.
    collect(&c.events, 5, |s| {
        s.iter()
            .any(|(_, e)| matches!(e, NodeEvent::Authenticated(_)))
    });
    std::thread::sleep(Duration::from_millis(100));
    let mut ponger = c.nodes.pop().unwrap();
    ponger.stop().unwrap();
    let seen = collect(&c.events, 5, |s| {
        s.iter()
            .any(|(who, e)| *who == NodeId(0) && *e == NodeEvent::Suspect(NodeId(1)))
    });
    assert!(
        seen.iter()
            .any(|(who, e)| *who == NodeId(0) && *e == NodeEvent::Suspect(NodeId(1))),
        "node 0 never suspected node 1"
    );
}

#[test]
fn bad_input_closes_one_connection_and_the_node_serves_on() {
    for backend in Backend::ALL {
        bad_input_closes_one_connection_and_the_node_serves_on_on(backend);
    }
}

fn bad_input_closes_one_connection_and_the_node_serves_on_on(backend: Backend) {
    let key = JobKey::from_bytes([3; 32]);
    let o = NodeOptions {
        key: Some(key.clone()),
        reactor: weft::engine::ReactorOptions {
            max_body: 1 << 20,
            ..Default::default()
        },
        ..opts_for(backend)
    };
    let c = Cluster::start(2, o, move |_, _| PingPong::ponger()).unwrap();
    let target = c.nodes[1].addr;
    let refused = |seen: &[(NodeId, NodeEvent)]| {
        seen.iter()
            .filter(|(_, e)| matches!(e, NodeEvent::Refused(_)))
            .count()
    };

    // 1. Garbage bytes.
    let mut s = TcpStream::connect(target).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: weft\r\n\r\n")
        .unwrap();
    let seen = collect(&c.events, 5, |s| refused(s) >= 1);
    assert!(refused(&seen) >= 1, "garbage not refused: {seen:?}");
    // ... and the socket does close (the reactor shuts lost connections once idle).
    assert_closed(&mut s, "the refused connection");

    // 2. An oversized length, refused from the header alone.
    let mut s2 = TcpStream::connect(target).unwrap();
    let mut f = Vec::new();
    f.extend_from_slice(&FrameHeader::encode(Kind::Hello, 0, false, 1 << 30));
    s2.write_all(&f).unwrap();
    let seen = collect(&c.events, 5, |s| refused(s) >= 1);
    assert!(refusals(&seen, None, "exceeds") >= 1, "{seen:?}");

    // 2b. A length any authenticated peer may send (512 KiB, under `max_body`), from a
    // stranger: refused from the header too, before the node sets room aside for it.
    let mut s2b = TcpStream::connect(target).unwrap();
    let mut f = Vec::new();
    f.extend_from_slice(&FrameHeader::encode(Kind::Hello, 0, false, 512 << 10));
    s2b.write_all(&f).unwrap();
    let seen = collect(&c.events, 5, |s| refused(s) >= 1);
    assert!(
        refusals(&seen, None, "exceeds the maximum of 1024") >= 1,
        "a stranger's large frame was waited for: {seen:?}"
    );
    assert_closed(&mut s2b, "the stranger announcing a large frame");

    // 3. A truncated frame, then the connection ends.
    let mut s3 = TcpStream::connect(target).unwrap();
    let mut f = Vec::new();
    write_frame(Kind::Hello, &[0u8; 64], &mut f).unwrap();
    s3.write_all(&f[..40]).unwrap();
    drop(s3);
    let seen = collect(&c.events, 5, |s| refused(s) >= 1);
    assert!(refused(&seen) >= 1, "truncated frame not refused: {seen:?}");

    // 4. A handshake with the wrong key.
    let stranger = Identity::new(1, NodeId(99), JobKey::from_bytes([4; 32]));
    let mut s4 = TcpStream::connect(target).unwrap();
    // Our Auth (with the wrong key) goes out on the node's Hello; the node's proof fails ours.
    let ours = shake_hands(&mut s4, stranger, Duration::from_secs(5));
    assert!(ours.is_err(), "a node proved the wrong key: {ours:?}");
    let seen = collect(&c.events, 5, |s| refusals(s, None, "job key") >= 1);
    assert!(refusals(&seen, None, "job key") >= 1, "{seen:?}");
    assert!(!seen
        .iter()
        .any(|(_, e)| *e == NodeEvent::Authenticated(NodeId(99))));

    // Through all of it node 1 still serves a legitimate peer.
    still_serves(c, key, opts_for(backend));
}

/// The node closed `s` (an orderly end or a reset) within 5 s; `what` names it if not.
fn assert_closed(s: &mut TcpStream, what: &str) {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rest = Vec::new();
    let closed = std::io::Read::read_to_end(s, &mut rest);
    assert!(
        closed.is_ok()
            || closed
                .as_ref()
                .is_err_and(|e| e.kind() == ErrorKind::ConnectionReset),
        "{what} was not closed: {closed:?}"
    );
}

/// A reactor that cannot set up (here: io_uring receive buffers that are not a power of two,
/// or no submission queue) fails the cluster's start with its reason, instead of handing out
/// nodes that never ran.
#[test]
fn a_reactor_that_cannot_start_fails_the_start() {
    let bad = [
        (
            NodeOptions {
                reactor: weft::engine::ReactorOptions {
                    recv_buffers: (3, 4096),
                    ..Default::default()
                },
                ..opts_for(Backend::Uring)
            },
            "power of two",
        ),
        (
            NodeOptions {
                reactor: weft::engine::ReactorOptions {
                    ring_entries: 0,
                    ..Default::default()
                },
                ..opts_for(Backend::Uring)
            },
            "submission queue entries",
        ),
    ];
    for (o, why) in bad {
        match Cluster::start(2, o, move |_, _| PingPong::ponger()) {
            Ok(_) => panic!("a cluster with reactors that cannot start started ({why})"),
            Err(e) => assert!(e.to_string().contains(why), "{e}"),
        }
    }
}

/// A stranger that connects and says nothing, or half a frame, is closed and refused once
/// the handshake deadline passes; so is a node's own dial to a port that accepts but never
/// answers, and that peer is suspected. The node serves a real peer afterwards.
#[test]
fn a_silent_stranger_is_closed_at_the_handshake_deadline() {
    for backend in Backend::ALL {
        a_silent_stranger_is_closed_at_the_handshake_deadline_on(backend);
    }
}

fn a_silent_stranger_is_closed_at_the_handshake_deadline_on(backend: Backend) {
    let deadline = Duration::from_millis(300);
    let key = JobKey::from_bytes([5; 32]);
    let o = NodeOptions {
        key: Some(key.clone()),
        reactor: weft::engine::ReactorOptions {
            handshake_timeout: deadline,
            ..Default::default()
        },
        ..opts_for(backend)
    };
    let c = Cluster::start(2, o.clone(), move |_, _| PingPong::ponger()).unwrap();
    let target = c.nodes[1].addr;
    let overdue = |seen: &[(NodeId, NodeEvent)]| {
        refusals(seen, Some(NodeId(1)), "no handshake within 300 ms")
    };
    let started = std::time::Instant::now();
    let mut silent = TcpStream::connect(target).unwrap();
    let mut halting = TcpStream::connect(target).unwrap();
    let mut f = Vec::new();
    f.extend_from_slice(&FrameHeader::encode(Kind::Hello, 0, false, 64));
    halting.write_all(&f[..5]).unwrap();
    let seen = collect(&c.events, 5, |s| overdue(s) >= 2);
    assert_eq!(
        overdue(&seen),
        2,
        "{backend}: strangers not refused: {seen:?}"
    );
    assert!(
        started.elapsed() >= deadline,
        "{backend}: refused before the deadline"
    );
    assert_closed(&mut silent, &format!("{backend}: the silent stranger"));
    assert_closed(
        &mut halting,
        &format!("{backend}: the stranger with half a header"),
    );

    // Our own dial: node 7's port accepts (the kernel completes the connect) and never speaks.
    let mute = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let spec = weft::transport::NodeSpec {
        id: NodeId(5),
        listener: weft::transport::bind("127.0.0.1:0".parse().unwrap()).unwrap(),
        peers: [(NodeId(7), mute.local_addr().unwrap())]
            .into_iter()
            .collect(),
        key: key.clone(),
        core: None,
    };
    let _dialer =
        weft::transport::spawn(spec, &o, PingPong::pinger(NodeId(7), vec![32], 10, 0), tx).unwrap();
    let suspected =
        |s: &[(NodeId, NodeEvent)]| s.iter().any(|(_, e)| *e == NodeEvent::Suspect(NodeId(7)));
    let seen = collect(&rx, 5, suspected);
    assert!(
        suspected(&seen),
        "{backend}: a mute peer was never suspected: {seen:?}"
    );
    assert!(refusals(&seen, None, "no handshake") >= 1, "{seen:?}");
    drop(mute);

    still_serves(c, key, opts_for(backend));
}

/// Past `max_strangers`, the strangers that have waited longest (a tenth of the handshake
/// deadline or more) are closed down to the bound, long before their deadline, when they
/// reach that grace, with no new connection needed; a burst of young ones over the bound is
/// let be until then, and a newcomer over the bound closes the oldest at once.
#[test]
fn strangers_past_the_bound_are_crowded_out_oldest_first() {
    for backend in Backend::ALL {
        strangers_past_the_bound_are_crowded_out_on(backend);
    }
}

fn strangers_past_the_bound_are_crowded_out_on(backend: Backend) {
    // Grace: 400 ms, a tenth of the deadline.
    let deadline = Duration::from_secs(4);
    let grace = deadline / 10;
    let key = JobKey::from_bytes([7; 32]);
    let o = NodeOptions {
        key: Some(key.clone()),
        reactor: weft::engine::ReactorOptions {
            handshake_timeout: deadline,
            max_strangers: 4,
            ..Default::default()
        },
        ..opts_for(backend)
    };
    let c = Cluster::start(2, o, move |_, _| PingPong::ponger()).unwrap();
    let target = c.nodes[1].addr;
    let crowded = |seen: &[(NodeId, NodeEvent)]| refusals(seen, Some(NodeId(1)), "crowded out");
    let started = std::time::Instant::now();
    // A burst of 8, twice the bound, all younger than the grace: none is closed for it yet.
    let mut strangers: Vec<TcpStream> = (0..8)
        .map(|_| TcpStream::connect(target).unwrap())
        .collect();
    let seen = collect(&c.events, 5, |s| crowded(s) >= 1);
    assert!(
        started.elapsed() >= grace,
        "{backend}: a young burst was cut: {seen:?}"
    );
    // At the grace the 4 oldest go by themselves, leaving the bound.
    let mut seen = seen;
    seen.extend(collect(&c.events, 2, |s| crowded(s) >= 3));
    assert_eq!(crowded(&seen), 4, "{backend}: {seen:?}");
    // One more: over the bound, the oldest (past the grace) goes at once.
    strangers.push(TcpStream::connect(target).unwrap());
    let seen = collect(&c.events, 2, |s| crowded(s) >= 1);
    assert_eq!(crowded(&seen), 1, "{backend}: {seen:?}");
    assert!(
        started.elapsed() < deadline,
        "{backend}: the strangers were closed no earlier than their deadline"
    );
    for (i, s) in strangers.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut b = [0u8; 256];
        // The node's Hello comes first on every accepted connection; then the end, or nothing.
        let ended = loop {
            match std::io::Read::read(s, &mut b) {
                Ok(0) => break true,
                Ok(_) => {}
                Err(e) => break e.kind() == ErrorKind::ConnectionReset,
            }
        };
        assert_eq!(ended, i < 5, "{backend}: stranger {i} closed: {ended}");
    }
    still_serves(c, key, opts_for(backend));
}

/// A spinning reactor whose every turn has work (here a protocol timer due each turn, as under
/// a steady stream of messages) still closes the sockets of the connections it dropped: a
/// refused stranger sees its connection end, instead of waiting for a turn without work that
/// never comes.
#[test]
fn a_reactor_that_never_idles_still_closes_dropped_connections() {
    for backend in Backend::ALL {
        let o = NodeOptions {
            reactor: weft::engine::ReactorOptions {
                wait: WaitMode::Busy,
                ..Default::default()
            },
            ..opts_for(backend)
        };
        // A timer for no time at all, set again whenever it fires: work on every turn.
        let c = Cluster::start(1, o, |_, _| Ticking::new(Duration::ZERO, || {})).unwrap();
        let mut s = TcpStream::connect(c.nodes[0].addr).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let seen = collect(&c.events, 5, |s| refusals(s, None, "") >= 1);
        assert!(
            refusals(&seen, None, "") >= 1,
            "{backend}: garbage not refused: {seen:?}"
        );
        assert_closed(
            &mut s,
            &format!("{backend}: a stranger refused by a busy reactor"),
        );
        c.shutdown().unwrap();
    }
}

#[test]
fn a_stopped_node_refuses_new_connections_on_both_backends() {
    for backend in Backend::ALL {
        let mut c = Cluster::start(2, opts_for(backend), move |_, _| PingPong::ponger()).unwrap();
        let addr = c.nodes[1].addr;
        // While it runs, it accepts (on io_uring through the ring's multishot accept).
        assert!(TcpStream::connect(addr).is_ok(), "{backend}: not accepting");
        c.nodes[1].stop().unwrap();
        let refused = TcpStream::connect(addr);
        assert!(
            refused.is_err(),
            "{backend}: a stopped node still accepted a connection"
        );
    }
}

/// TCP sockets in TIME_WAIT (state 06 in /proc/net/tcp) with a local or remote port in
/// `ports`, as (local, remote) addresses.
fn time_wait_on(ports: &HashSet<u16>) -> HashSet<(String, String)> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let port = |addr: &str| {
        addr.rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let ours = f.len() > 3
                && f[3] == "06"
                && [f[1], f[2]]
                    .iter()
                    .any(|a| port(a).is_some_and(|p| ports.contains(&p)));
            ours.then(|| (f[1].to_string(), f[2].to_string()))
        })
        .collect()
}

/// A finished job resets its connections instead of closing them in order: a benchmark that
/// starts hundreds of jobs must not fill the port space with TIME_WAIT. (With io_uring's
/// deferred task work a close with SO_LINGER 0 came too late, after the FINs had crossed.)
#[test]
fn a_finished_job_leaves_nothing_in_time_wait_on_both_backends() {
    use weft::proto::relay::Relay;
    // Whether the FINs cross before the last close depends on timing: a few jobs each.
    for backend in Backend::ALL.into_iter().flat_map(|b| [b; 4]) {
        let n = 8;
        let c = Cluster::start(n, opts_for(backend), move |i, _| {
            Relay::new(i as u64, n as u64, 2, 3)
        })
        .unwrap();
        let ports: HashSet<u16> = c.nodes.iter().map(|h| h.addr.port()).collect();
        let seen = collect(&c.events, 30, |s| {
            s.iter()
                .filter(|(_, e)| *e == NodeEvent::Protocol(Event::Done))
                .count()
                >= 2
        });
        let done = seen
            .iter()
            .filter(|(_, e)| *e == NodeEvent::Protocol(Event::Done))
            .count();
        assert!(done >= 2, "{backend}: the relay did not finish: {seen:?}");
        // Other tests of this binary kill nodes (FIN, TIME_WAIT) whose ports can be reused by
        // these listeners: only entries that appear now count.
        let before = time_wait_on(&ports);
        c.stop_all().unwrap();
        let new: Vec<_> = time_wait_on(&ports).difference(&before).cloned().collect();
        assert!(
            new.is_empty(),
            "{backend}: {} connections of a finished job in TIME_WAIT: {new:?}",
            new.len()
        );
    }
}

#[test]
fn each_protocol_is_built_on_the_reactor_thread_that_runs_it() {
    // A node's state must come from its reactor's allocator arena: freed on another
    // thread's arena, every new view costs the reactor fresh pages.
    for backend in Backend::ALL {
        let (tx, rx) = std::sync::mpsc::channel();
        let c = Cluster::start(4, opts_for(backend), move |i, _| {
            let name = std::thread::current().name().map(str::to_owned);
            tx.send((i, name)).unwrap();
            PingPong::ponger()
        })
        .unwrap();
        let mut built: Vec<(usize, Option<String>)> = (0..4)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        built.sort();
        assert_eq!(built.len(), 4, "{backend:?}: {built:?}");
        assert!(
            built
                .iter()
                .all(|(_, t)| t.as_deref().is_some_and(|t| t.starts_with("weft-r"))),
            "{backend:?}: built on {built:?}"
        );
        c.shutdown().unwrap();
    }
}

/// Echoes with pauses: node 0 sends a ping, waits `PAUSE` after each echo, and sends the next,
/// `ROUNDS` times. With adaptive reactors each pause is long enough for them to stop spinning
/// and block, after the connection was hot (read directly, out of epoll on the poll backend):
/// a reactor that blocked without epoll watching the connection again would never see the
/// next ping.
struct Pauser {
    peer: Option<NodeId>,
    left: u32,
}

const PAUSE: Duration = Duration::from_millis(5);
const ROUNDS: u32 = 20;

impl weft::proto::Protocol for Pauser {
    type Msg = weft::proto::ping::PingMsg;
    type Event = weft::proto::Event;
    type Request = weft::proto::NoRequest;

    fn on_start(&mut self, _now: weft::proto::Time, out: &mut weft::proto::Outbox<Self::Msg>) {
        if self.peer.is_some() {
            out.set_timer(weft::proto::TimerId(1), PAUSE);
        }
    }

    fn on_message(
        &mut self,
        _now: weft::proto::Time,
        from: NodeId,
        msg: Self::Msg,
        out: &mut weft::proto::Outbox<Self::Msg>,
    ) {
        use weft::proto::ping::PingMsg;
        match msg {
            PingMsg::Ping { seq, payload } => out.send(from, PingMsg::Pong { seq, payload }),
            PingMsg::Pong { .. } => {
                self.left -= 1;
                if self.left == 0 {
                    out.report(Event::Done);
                } else {
                    out.set_timer(weft::proto::TimerId(1), PAUSE);
                }
            }
        }
    }

    fn on_timer(
        &mut self,
        _now: weft::proto::Time,
        _timer: weft::proto::TimerId,
        out: &mut weft::proto::Outbox<Self::Msg>,
    ) {
        if let Some(peer) = self.peer {
            out.send(
                peer,
                weft::proto::ping::PingMsg::Ping {
                    seq: u64::from(self.left),
                    payload: vec![1; 64].into(),
                },
            );
        }
    }
}

#[test]
fn adaptive_reactors_see_messages_after_blocking() {
    for backend in Backend::ALL {
        let c = Cluster::start(
            2,
            NodeOptions {
                reactor: weft::engine::ReactorOptions {
                    wait: WaitMode::Adaptive,
                    ..Default::default()
                },
                ..opts_for(backend)
            },
            move |i, ids| Pauser {
                peer: (i == 0).then(|| ids[1]),
                left: ROUNDS,
            },
        )
        .unwrap();
        wait_done(&c.events, 20, &format!("{backend:?}"));
        c.shutdown().unwrap();
    }
}

/// Every connection of a node runs the congestion control weft asks for (CUBIC, or Reno where
/// CUBIC is not allowed), whatever the machine's default is (BBR on the test host, whose
/// pacing cost a 1 MiB message 3x over loopback). Read from the kernel with `ss`.
#[test]
fn connections_use_the_congestion_control_weft_asks_for() {
    let Ok(probe) = std::process::Command::new("ss").arg("-V").output() else {
        common::skip::skip("no `ss` here to read the sockets' congestion control (iproute2)");
        return;
    };
    assert!(probe.status.success());
    let want = weft::engine::congestion::resolve(Some(weft::engine::congestion::PREFERRED))
        .expect("a probe socket");
    for backend in Backend::ALL {
        let cluster = Cluster::start(2, opts_for(backend), |i, ids| {
            if i == 0 {
                PingPong::pinger(ids[1], vec![32], u64::MAX / 2, 1)
            } else {
                PingPong::ponger()
            }
        })
        .unwrap();
        let authenticated = |s: &[(NodeId, NodeEvent)]| {
            s.iter()
                .filter(|(_, e)| matches!(e, NodeEvent::Authenticated(_)))
                .count()
                >= 2
        };
        assert!(authenticated(&collect(&cluster.events, 10, authenticated)));
        let port = cluster.nodes[1].addr.port();
        let filter = format!("( sport = :{port} or dport = :{port} )");
        let out = std::process::Command::new("ss")
            .args(["-tinH", "state", "established", &filter])
            .output()
            .expect("ss");
        let text = String::from_utf8_lossy(&out.stdout);
        // `ss -i` prints each socket's address line, then its details: TCP options in use
        // (ts, sack, ecn, ...), then the algorithm's name.
        let options = ["ts", "sack", "ecn", "ecnseen", "fastopen"];
        let algorithms: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(char::is_whitespace))
            .filter_map(|l| l.split_whitespace().find(|t| !options.contains(t)))
            .collect();
        assert!(
            !algorithms.is_empty() && algorithms.iter().all(|&a| a == want),
            "{backend:?}: want {want} on every connection to node 1: {text}"
        );
        cluster.shutdown().unwrap();
    }
}

/// A peer whose process stalls (its kernel still acknowledges and answers probes) while this
/// node keeps sending is suspected once what waits for it passes `max_queued`; without the
/// cap the node would queue for it without bound and say nothing.
#[test]
fn a_peer_that_stops_reading_is_suspected_at_the_queue_cap() {
    for backend in Backend::ALL {
        a_peer_that_stops_reading_is_suspected_at_the_queue_cap_on(backend);
    }
}

fn a_peer_that_stops_reading_is_suspected_at_the_queue_cap_on(backend: Backend) {
    let o = NodeOptions {
        reactor: weft::engine::ReactorOptions {
            max_queued: 4 << 20,
            dead_after: None,
            ..Default::default()
        },
        ..opts_for(backend)
    };
    let c = Cluster::start(2, o, move |i, ids| Flood {
        to: (i == 0).then(|| ids[1]),
        stalled: false,
    })
    .unwrap();
    // Suspected, and for that reason (the reason follows the suspicion).
    let why = |s: &[(NodeId, NodeEvent)]| {
        s.iter().any(|(who, e)| {
            *who == NodeId(0)
                && matches!(e, NodeEvent::Refused(r)
                    if r.peer == Some(NodeId(1))
                        && matches!(r.why, weft::engine::reactor::ConnError::Stalled(_)))
        })
    };
    let seen = collect(&c.events, 3, why);
    assert!(
        seen.iter()
            .any(|(who, e)| *who == NodeId(0) && *e == NodeEvent::Suspect(NodeId(1))),
        "{backend}: a peer that stopped reading was not suspected: {seen:?}"
    );
    assert!(why(&seen), "{backend}: no reason given: {seen:?}");
}

/// Node 0 pings node 1 with a small payload and, once node 1 answered (the connection is up
/// and authenticated), sends it `FLOOD` pings of 1 MiB. Node 1 echoes small pings and sleeps
/// for `STALL` on the first large one, which stalls its reactor: the connection stays up and
/// nothing reads it.
struct Flood {
    to: Option<NodeId>,
    stalled: bool,
}

const FLOOD: u64 = 32;
const STALL: Duration = Duration::from_secs(3);

impl weft::proto::Protocol for Flood {
    type Msg = weft::proto::ping::PingMsg;
    type Event = weft::proto::Event;
    type Request = weft::proto::NoRequest;

    fn on_start(&mut self, _now: weft::proto::Time, out: &mut weft::proto::Outbox<Self::Msg>) {
        if let Some(to) = self.to {
            let payload = vec![7u8; 8].into();
            out.send(to, weft::proto::ping::PingMsg::Ping { seq: 0, payload });
        }
    }

    fn on_message(
        &mut self,
        _now: weft::proto::Time,
        from: NodeId,
        msg: Self::Msg,
        out: &mut weft::proto::Outbox<Self::Msg>,
    ) {
        use weft::proto::ping::PingMsg;
        match msg {
            PingMsg::Ping { seq, payload } if payload.len() < 1024 => {
                out.send(from, PingMsg::Pong { seq, payload });
            }
            PingMsg::Ping { .. } => {
                if !std::mem::replace(&mut self.stalled, true) {
                    std::thread::sleep(STALL);
                }
            }
            PingMsg::Pong { .. } => {
                for seq in 1..=FLOOD {
                    let payload = vec![7u8; 1 << 20].into();
                    out.send(from, PingMsg::Ping { seq, payload });
                }
            }
        }
    }

    fn on_timer(
        &mut self,
        _now: weft::proto::Time,
        _timer: weft::proto::TimerId,
        _out: &mut weft::proto::Outbox<Self::Msg>,
    ) {
    }
}

/// A socket the node accepted is close-on-exec on both backends: a process the embedding
/// program starts (a launcher's node process, a test's child) does not inherit it.
#[test]
fn accepted_sockets_are_not_inherited_by_child_processes() {
    for backend in Backend::ALL {
        let key = JobKey::from_bytes([12; 32]);
        let c = Cluster::start(
            1,
            NodeOptions {
                key: Some(key),
                ..opts_for(backend)
            },
            |_, _| PingPong::ponger(),
        )
        .unwrap();
        let mut s = TcpStream::connect(c.nodes[0].addr).unwrap();
        // The node's Hello comes once it accepted the connection.
        let mut hello = [0u8; 16];
        std::io::Read::read_exact(&mut s, &mut hello).unwrap();
        let out = std::process::Command::new("sh")
            .args(["-c", "ls -l /proc/$$/fd"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let listing = String::from_utf8_lossy(&out.stdout);
        assert!(
            !listing.contains("socket:"),
            "{backend}: the child inherited sockets:\n{listing}"
        );
        drop(c);
    }
}
