//! A node that runs out of file descriptors keeps running: the connections it cannot accept
//! wait in its listener's backlog, it says so once, and it accepts again once descriptors are
//! free. A test file of its own, because it lowers this process's RLIMIT_NOFILE and fills its
//! descriptor table.

mod common;

use common::events::collect;
use common::serving::still_serves;
use weft::engine::reactor::NodeEvent;
use weft::engine::{Backend, WaitMode};
use weft::proto::ping::PingPong;
use weft::transport::{Cluster, NodeOptions};
use weft::wire::handshake::JobKey;
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
    for backend in [Backend::Poll, Backend::Uring] {
        running_out_of_descriptors_on(backend);
    }
}

fn running_out_of_descriptors_on(backend: Backend) {
    let key = JobKey::from_bytes([6; 32]);
    let o = NodeOptions {
        key: Some(key.clone()),
        wait: WaitMode::Block,
        pin: false,
        backend: Some(backend),
        ..NodeOptions::default()
    };
    // A modest limit before the node starts: an io_uring accept takes the limit in force when
    // it was armed, not when it runs.
    let (soft, _) = limit_descriptors(open_descriptors() + 512);
    let c = Cluster::start(2, o.clone(), move |_, _| PingPong::ponger()).unwrap();
    let target = c.nodes[1].addr;
    let accept_refusals = |seen: &[(NodeId, NodeEvent)]| {
        seen.iter()
            .filter(|(who, e)| {
                *who == NodeId(1) && matches!(e, NodeEvent::Refused(r) if r.starts_with("accept"))
            })
            .count()
    };
    // The strangers' sockets first, then the rest of the table filled (copies of one
    // descriptor, up to the limit), then 4 given back: the node can accept 4 of the 64.
    let strangers: Vec<socket2::Socket> = (0..64)
        .map(|_| socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap())
        .collect();
    let mut filler: Vec<std::os::fd::OwnedFd> = Vec::new();
    let null = std::fs::File::open("/dev/null").unwrap();
    while let Ok(fd) = std::os::fd::AsFd::as_fd(&null).try_clone_to_owned() {
        filler.push(fd);
    }
    filler.truncate(filler.len() - 4);
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
    assert!(
        !seen_later
            .iter()
            .any(|(_, e)| matches!(e, NodeEvent::Refused(r) if r.contains("randomness"))),
        "{backend}: {seen_later:?}"
    );
    drop(filler);
    drop(strangers);
    limit_descriptors(soft);
    still_serves(c, key, o);
}
