//! A connection the kernel will not let epoll watch (past `fs.epoll.max_user_watches`) is
//! refused alone: the `weft node` process keeps serving, and a real peer authenticates once
//! watches are free again.
//!
//! A test file of its own and root only: it lowers the system-wide sysctl for a moment (and
//! puts it back, also on failure), so nothing else of weft's may run beside it.

mod common;

use common::handshake::shake_hands;
use common::node_process::start_node;
use std::net::TcpStream;
use std::time::{Duration, Instant};
use weft::wire::handshake::{Identity, JobKey};
use weft::NodeId;

const SYSCTL: &str = "/proc/sys/fs/epoll/max_user_watches";

/// Puts `fs.epoll.max_user_watches` back when dropped.
struct Watches(String);

impl Watches {
    /// Allow `room` watches beyond every one in use on the machine now (an upper bound on
    /// this user's); `None` if the sysctl cannot be written here (not root).
    fn limit_to_in_use_plus(room: u64) -> Option<Self> {
        let old = std::fs::read_to_string(SYSCTL).ok()?;
        let in_use = watches_in_use();
        std::fs::write(SYSCTL, (in_use + room).to_string()).ok()?;
        Some(Watches(old))
    }
}

impl Drop for Watches {
    fn drop(&mut self) {
        std::fs::write(SYSCTL, self.0.trim()).expect("restore fs.epoll.max_user_watches");
    }
}

/// Every epoll watch of every process: one `tfd:` line per watched descriptor in fdinfo.
fn watches_in_use() -> u64 {
    let mut n = 0;
    for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        for fd in std::fs::read_dir(p.path().join("fdinfo"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(info) = std::fs::read_to_string(fd.path()) {
                n += info.lines().filter(|l| l.starts_with("tfd:")).count() as u64;
            }
        }
    }
    n
}

#[test]
fn a_connection_epoll_cannot_watch_is_refused_alone() {
    let key = JobKey::from_bytes([9; 32]);
    let (mut child, addr, reports) = start_node(&key, Some("poll"));
    let Some(limit) = Watches::limit_to_in_use_plus(32) else {
        let _ = child.kill();
        common::skip::skip(&format!("{SYSCTL} cannot be written here (not root)"));
        return;
    };
    // More strangers than watches are left: some cannot be watched.
    // (A node that ended on the way refuses the rest; the checks below say so.)
    let strangers: Vec<TcpStream> = (0..64)
        .filter_map(|_| TcpStream::connect(addr).ok())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut seen = Vec::new();
    while Instant::now() < deadline && !seen.iter().any(|l: &String| l.contains("watch")) {
        if let Ok(l) = reports.recv_timeout(Duration::from_millis(20)) {
            seen.push(l);
        }
    }
    drop(limit);
    drop(strangers);
    let refusals = seen
        .iter()
        .filter(|l| l.contains("watch the connection"))
        .count();
    assert!(
        refusals >= 1,
        "no connection was refused for want of a watch: {seen:?}"
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "the node ended: {seen:?}"
    );
    // A peer of the node's job: its parameters are those of a one-node membership job with
    // `weft node`'s defaults (radix 4, patched tree, ring heartbeats).
    let beats = weft::proto::heartbeat::HeartbeatConfig::default().params();
    let me = Identity {
        params: format!("membership nodes=1 radix=4 mode=patch {beats}"),
        ..Identity::new(1, NodeId(5), key)
    };
    let mut peer = TcpStream::connect(addr).expect("the node still listens");
    let shaken = shake_hands(&mut peer, me, Duration::from_secs(5));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(shaken, Ok(NodeId(0)), "{seen:?}");
}
