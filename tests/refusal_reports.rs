//! A stranger that dials in a loop does not flood the node's events: the node reports a burst
//! of refusals one by one and counts the rest, every refusal is accounted for, and the node
//! serves a real peer afterwards. Both backends, and a `weft node` process's report lines.

mod common;

use common::events::collect;
use common::node_process::start_node;
use common::serving::still_serves;
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};
use weft::engine::reactor::NodeEvent;
use weft::engine::{Backend, WaitMode};
use weft::proto::ping::PingPong;
use weft::transport::{Cluster, NodeOptions};
use weft::wire::handshake::JobKey;
use weft::NodeId;

/// Strangers the test sends, each with one garbage frame.
const STRANGERS: u64 = 300;

/// Refusals a node reports one by one per second (`refusals.rs` in the reactor).
const BURST: u64 = 16;

#[test]
fn a_stranger_flood_is_counted_not_listed() {
    for backend in Backend::ALL {
        a_stranger_flood_is_counted_not_listed_on(backend);
    }
}

/// (refusals reported one by one, refusals counted in `RefusedMore`) among `seen`, by `who`.
fn tally(seen: &[(NodeId, NodeEvent)], who: NodeId) -> (u64, u64) {
    seen.iter()
        .filter(|(n, _)| *n == who)
        .fold((0, 0), |(one, more), (_, e)| match e {
            NodeEvent::Refused(_) => (one + 1, more),
            NodeEvent::RefusedMore { count, .. } => (one, more + count),
            _ => (one, more),
        })
}

fn a_stranger_flood_is_counted_not_listed_on(backend: Backend) {
    let key = JobKey::from_bytes([21; 32]);
    let opts = NodeOptions {
        key: Some(key.clone()),
        pin: false,
        backend: Some(backend),
        reactor: weft::engine::ReactorOptions {
            wait: WaitMode::Block,
            ..Default::default()
        },
        ..NodeOptions::default()
    };
    let c = Cluster::start(2, opts.clone(), move |_, _| PingPong::ponger()).unwrap();
    let (target, addr) = (c.nodes[1].id, c.nodes[1].addr);
    let started = Instant::now();
    for _ in 0..STRANGERS {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: weft\r\n\r\n")
            .unwrap();
    }
    let sum = |s: &[(NodeId, NodeEvent)]| {
        let (one, more) = tally(s, target);
        one + more
    };
    // The held ones come when the window ends: within a second of the last refusal.
    let mut seen = collect(&c.events, 10, |s| sum(s) >= STRANGERS);
    // Nothing more comes: each stranger was refused once.
    seen.extend(collect(&c.events, 2, |_| false));
    let secs = started.elapsed().as_secs();
    let (one, more) = tally(&seen, target);
    assert_eq!(
        one + more,
        STRANGERS,
        "{backend:?}: {one} refusals reported and {more} counted, for {STRANGERS} strangers: {seen:?}"
    );
    // One window per second, each with a burst and one count (the first of a window is
    // counted in it).
    assert!(
        one <= BURST * (secs + 2),
        "{backend:?}: {one} refusals reported one by one in {secs} s"
    );
    assert!(more > 0, "{backend:?}: nothing was counted");
    still_serves(c, key, opts);
}

/// The same flood at a `weft node` process: its report lines stand for every refusal (a
/// counted line says how many), and there are far fewer lines than strangers.
#[test]
fn a_node_process_prints_a_flood_as_counted_lines() {
    let key = JobKey::from_bytes([22; 32]);
    let (mut child, addr, lines) = start_node(&key, None);
    for _ in 0..STRANGERS {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: weft\r\n\r\n")
            .unwrap();
    }
    let (mut refused, mut printed) = (0u64, 0u64);
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while refused < STRANGERS && Instant::now() < deadline {
        let Ok(l) = lines.recv_timeout(Duration::from_millis(50)) else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_str(&l).expect("a JSON line");
        if v["kind"] == "refused" {
            refused += v["count"].as_u64().unwrap_or(1);
            printed += 1;
        }
        seen.push(l);
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(refused, STRANGERS, "{seen:?}");
    assert!(printed < STRANGERS / 2, "{printed} lines for {STRANGERS}");
}
