//! The overlay on real sockets: Algorithms 1 and 2 (tree -> ring -> BMG), the same code the
//! simulator runs, started from a binary launch tree and checked against the BMG formulas.

use super::events::collect;
use std::collections::HashSet;
use std::time::Duration;
use weft::engine::reactor::NodeEvent;
use weft::proto::overlay::Overlay;
use weft::proto::ring::Ring;
use weft::proto::spontaneous::SpontaneousConfig;
use weft::proto::Event;
use weft::sim::tree::Tree;
use weft::topology::bmg as formula;
use weft::transport::{Cluster, NodeOptions};
use weft::{NodeId, Rank};

/// Nodes of a binary launch tree of `depth` (2^(depth+1) - 1 of them), started with `opts`,
/// build the ring and the BMG: every node's successor and every level's CW and CCW
/// neighbours are the formulas'.
pub fn builds_the_bmg(depth: u32, opts: NodeOptions) {
    let tree = Tree::binary(depth, 1 << 10).unwrap();
    let n = tree.len();
    let spont = SpontaneousConfig {
        period: Duration::from_millis(2),
        refresh: Some(Duration::from_millis(100)),
        backoff: 0,
    };
    let launch = tree.clone();
    let c = Cluster::start(n, opts, move |i, _| {
        let p = i as u32;
        let ring = Ring::new(
            NodeId(i as u64),
            launch.parent(p).map(|q| NodeId(q as u64)),
            launch
                .children(p)
                .iter()
                .map(|&c| NodeId(c as u64))
                .collect(),
        );
        Overlay::new(ring, n as u32, spont)
    })
    .unwrap();
    // Every node reports Quiet once its own state is settled.
    let seen = collect(&c.events, 20, |s| {
        s.iter()
            .filter(|(_, e)| matches!(e, NodeEvent::Protocol(Event::Quiet { .. })))
            .map(|(id, _)| *id)
            .collect::<HashSet<_>>()
            .len()
            == n
    });
    nothing_in_flight(&c, n);
    let finals: Vec<Overlay> = c.stop_all().unwrap();
    let order = tree.preorder();
    let mut pos = vec![0u32; n];
    for (i, &p) in order.iter().enumerate() {
        pos[p as usize] = i as u32;
    }
    let at = |r: Rank| Some(NodeId(order[r.0 as usize] as u64));
    for (p, o) in finals.iter().enumerate() {
        let a = Rank(pos[p]);
        assert_eq!(
            o.ring.succ(),
            at(Rank((a.0 + 1) % n as u32)),
            "succ of {p}; events {seen:?}"
        );
        for k in 0..formula::levels(n as u32) {
            assert_eq!(
                o.bmg.cw(k as usize),
                at(formula::cw(a, k, n as u32)),
                "CW[{k}] of {p}"
            );
            assert_eq!(
                o.bmg.ccw(k as usize),
                at(formula::ccw(a, k, n as u32)),
                "CCW[{k}] of {p}"
            );
        }
    }
}

/// Wait until no message is in flight: rounds of asking every node for its counters
/// (`Event::Counters`) until two in a row agree, all quiet and as many messages received as
/// sent (Mattern's four counters), so the last BMG levels have landed before the check.
fn nothing_in_flight(c: &Cluster<Overlay>, n: usize) {
    let mut last = None;
    for _ in 0..1000 {
        c.wake_all();
        let (mut sent, mut received, mut quiet, mut left) = (0, 0, true, n);
        while left > 0 {
            let (_, e) = c
                .events
                .recv_timeout(Duration::from_secs(20))
                .expect("every node answers with its counters");
            if let NodeEvent::Protocol(Event::Counters {
                sent: s,
                received: r,
                quiet: q,
            }) = e
            {
                (sent, received, quiet, left) = (sent + s, received + r, quiet && q, left - 1);
            }
        }
        let idle = quiet && sent == received;
        if idle && last == Some((sent, received)) {
            return;
        }
        last = idle.then_some((sent, received));
    }
    panic!("messages still in flight after 1000 rounds of counters");
}
