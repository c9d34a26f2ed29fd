//! A node that runs out of file descriptors keeps running: the connections it cannot accept
//! wait in its listener's backlog, it says so once, and it accepts again once descriptors are
//! free; silent strangers holding every descriptor do not keep a real peer out until their
//! deadline; and connections that just ended give their descriptors to the next one at once. A test file of its own, because it lowers this process's RLIMIT_NOFILE and
//! fills its descriptor table (so the two run in turn, in one test).

mod common;

use common::events::{collect, refusals};
use common::handshake::shake_hands;
use common::serving::still_serves;
use common::ticking::Ticking;
use weft::engine::reactor::NodeEvent;
use weft::engine::{Backend, WaitMode};
use weft::proto::ping::PingPong;
use weft::transport::{Cluster, NodeOptions, Transport};
use weft::wire::handshake::{Identity, JobKey};
use weft::NodeId;

fn open_descriptors() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

/// Set this process's soft limit on open descriptors; returns the old (soft, hard) pair.
fn limit_descriptors(soft: u64) -> (u64, u64) {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on a local struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut old), 0);
        let new = libc::rlimit {
            rlim_cur: soft.min(old.rlim_max),
            rlim_max: old.rlim_max,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &new), 0);
    }
    (old.rlim_cur, old.rlim_max)
}

#[test]
fn running_out_of_descriptors_pauses_accepting_not_the_node() {
    for backend in Backend::ALL {
        running_out_of_descriptors_on(backend);
        strangers_holding_every_descriptor_make_room_on(backend);
        ended_connections_make_room_first_on(backend);
    }
}

/// A blocking, unpinned node on `backend` with job key `key` and handshake deadline
/// `handshake_timeout`.
fn node_options(
    key: &JobKey,
    backend: Backend,
    handshake_timeout: std::time::Duration,
) -> NodeOptions {
    NodeOptions {
        key: Some(key.clone()),
        pin: false,
        backend: Some(backend),
        // Descriptors are connections': the nodes talk over loopback TCP.
        transport: Some(Transport::Tcp),
        reactor: weft::engine::ReactorOptions {
            wait: WaitMode::Block,
            handshake_timeout,
            ..Default::default()
        },
        ..NodeOptions::default()
    }
}

/// Dial `target` from `peer` (a socket opened before the table filled) as node 9 of the job
/// with `key`, and shake hands by hand, within `patience`: whom the node proved to be.
fn dial_as_peer(
    peer: socket2::Socket,
    target: std::net::SocketAddr,
    key: JobKey,
    patience: std::time::Duration,
) -> Result<NodeId, String> {
    peer.connect(&target.into()).unwrap();
    let mut peer: std::net::TcpStream = peer.into();
    let me = Identity::new(1, NodeId(9), key);
    shake_hands(&mut peer, me, patience)
}

/// This process's descriptor table, filled up to its limit but for `room` (the copies hold
/// the table until dropped).
fn fill_descriptors_but(room: usize) -> Vec<std::os::fd::OwnedFd> {
    let null: std::os::fd::OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
    let mut filler = Vec::new();
    while let Ok(fd) = std::os::fd::AsFd::as_fd(&null).try_clone_to_owned() {
        filler.push(fd);
    }
    // The original counts too: dropped here, it would leave one more free than asked.
    filler.push(null);
    filler.truncate(filler.len() - room);
    filler
}

fn running_out_of_descriptors_on(backend: Backend) {
    let key = JobKey::from_bytes([6; 32]);
    let o = node_options(
        &key,
        backend,
        NodeOptions::default().reactor.handshake_timeout,
    );
    // A modest limit before the node starts: an io_uring accept takes the limit in force when
    // it was armed, not when it runs.
    let (soft, _) = limit_descriptors(open_descriptors() + 512);
    let c = Cluster::start(2, o.clone(), move |_, _| PingPong::ponger()).unwrap();
    let target = c.nodes[1].addr;
    let accept_refusals = |seen: &[(NodeId, NodeEvent)]| refusals(seen, Some(NodeId(1)), "accept:");
    // The strangers' sockets first, then the rest of the table filled (copies of one
    // descriptor, up to the limit), then 4 given back: the node can accept 4 of the 64.
    let strangers: Vec<socket2::Socket> = (0..64)
        .map(|_| socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap())
        .collect();
    let filler = fill_descriptors_but(4);
    for s in &strangers {
        s.connect(&target.into()).unwrap();
    }
    let seen = collect(&c.events, 3, |s| accept_refusals(s) >= 1);
    // Some time out of descriptors: the node must not report (or retry) without pause.
    let mut seen_later = collect(&c.events, 1, |_| false);
    assert!(
        accept_refusals(&seen) >= 1,
        "{backend}: running out of descriptors was not reported: {seen:?}"
    );
    seen_later.extend(seen);
    let reports = accept_refusals(&seen_later);
    // Once per shortage, not once per retry (20 retries a second), let alone per turn.
    assert!(
        reports <= 3,
        "{backend}: {reports} reports of one shortage in about a second"
    );
    // The connections it did accept started their handshakes: a nonce needs no descriptor.
    assert_eq!(
        refusals(&seen_later, None, "randomness"),
        0,
        "{backend}: {seen_later:?}"
    );
    drop(filler);
    drop(strangers);
    limit_descriptors(soft);
    still_serves(c, key, o);
}

/// The node has room for 4 connections and 4 silent strangers take it. A real peer that dials
/// next is accepted once the oldest stranger has waited its grace (a tenth of the handshake
/// deadline) and is closed for it, not when the strangers' deadline passes.
fn strangers_holding_every_descriptor_make_room_on(backend: Backend) {
    let key = JobKey::from_bytes([8; 32]);
    let deadline = std::time::Duration::from_secs(30);
    let o = node_options(&key, backend, deadline);
    let (soft, _) = limit_descriptors(open_descriptors() + 512);
    let c = Cluster::start(1, o, move |_, _| PingPong::ponger()).unwrap();
    let target = c.nodes[0].addr;
    let socket = || socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None);
    let strangers: Vec<socket2::Socket> = (0..4).map(|_| socket().unwrap()).collect();
    let peer = socket().unwrap();
    let filler = fill_descriptors_but(4);
    for s in &strangers {
        s.connect(&target.into()).unwrap();
    }
    // Let the node take them: its table is then full.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let dialed = std::time::Instant::now();
    let shaken = dial_as_peer(peer, target, key, deadline / 2);
    let waited = dialed.elapsed();
    let seen = collect(&c.events, 1, |_| false);
    drop(filler);
    limit_descriptors(soft);
    assert_eq!(
        shaken,
        Ok(NodeId(0)),
        "{backend}: after {waited:?}: {seen:?}"
    );
    // It did wait: the table was full, and a stranger had to reach its grace (3 s).
    assert!(
        waited >= std::time::Duration::from_secs(2),
        "{backend}: the real peer got in after {waited:?}: was the node out of descriptors? {seen:?}"
    );
    assert!(
        refusals(&seen, None, "crowded out") >= 1,
        "{backend}: {seen:?}"
    );
    drop(strangers);
}

/// The node's last descriptors go to 4 strangers (and the test takes the one left). While its
/// reactor stalls, the strangers send garbage and a real peer dials: in the turn after, the
/// strangers' connections end and the accept finds no descriptor. The ended connections'
/// sockets are closed then and there, and the peer is accepted: the listener does not rest
/// (no "accept:" report).
fn ended_connections_make_room_first_on(backend: Backend) {
    let key = JobKey::from_bytes([9; 32]);
    // No stranger reaches its grace in this test: crowding out is not what makes room.
    let o = node_options(&key, backend, std::time::Duration::from_secs(30));
    let (soft, _) = limit_descriptors(open_descriptors() + 512);
    let (tell, gate) = std::sync::mpsc::channel();
    let (stalled, told) = std::sync::mpsc::channel();
    let ends = std::sync::Mutex::new(Some((gate, stalled)));
    // The node's protocol stalls its reactor for the time the test sends through `gate`,
    // after saying so on `stalled`.
    let c = Cluster::start(1, o, move |_, _| {
        let (gate, stalled) = ends.lock().unwrap().take().expect("one node");
        Ticking::new(std::time::Duration::from_millis(5), move || {
            if let Ok(d) = gate.try_recv() {
                let _ = stalled.send(());
                std::thread::sleep(d);
            }
        })
    })
    .unwrap();
    let target = c.nodes[0].addr;
    let socket = || socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None);
    let strangers: Vec<socket2::Socket> = (0..4).map(|_| socket().unwrap()).collect();
    let peer = socket().unwrap();
    let mut filler = fill_descriptors_but(5);
    for s in &strangers {
        s.connect(&target.into()).unwrap();
    }
    // Once the node has taken them (each hears its Hello), take the one descriptor left: the
    // table is full, and the node has not yet tried to accept into a full table (`accept`
    // takes a descriptor before it looks at the backlog, so one more try would have failed).
    for s in &strangers {
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut hello = [0u8; 16];
        let heard = std::io::Read::read(&mut &*s, &mut hello);
        assert!(matches!(heard, Ok(n) if n > 0), "{backend}: {heard:?}");
    }
    // The poll reactor's accept loop tries once more after the last Hello went out.
    std::thread::sleep(std::time::Duration::from_millis(50));
    filler.push(std::fs::File::open("/dev/null").unwrap().into());
    tell.send(std::time::Duration::from_millis(300)).unwrap();
    told.recv_timeout(std::time::Duration::from_secs(5))
        .expect("the reactor stalls");
    for s in &strangers {
        s.send(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    }
    let shaken = dial_as_peer(peer, target, key, std::time::Duration::from_secs(5));
    let seen = collect(&c.events, 1, |_| false);
    drop(filler);
    limit_descriptors(soft);
    assert_eq!(shaken, Ok(NodeId(0)), "{backend}: {seen:?}");
    assert!(
        refusals(&seen, None, "") >= 4,
        "{backend}: the strangers' garbage was not refused: {seen:?}"
    );
    assert_eq!(
        refusals(&seen, None, "accept:"),
        0,
        "{backend}: the listener rested while ended connections held descriptors: {seen:?}"
    );
    drop(strangers);
}
