//! Routing over the BMG on real sockets: routers on loopback, two of them stopped before any
//! message, no one told. Every message to a live rank is delivered once, within ⌈log2 N⌉ + 2
//! hops; a message to a stopped one fails at its sender; a broadcast reaches every live node.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use weft::engine::reactor::NodeEvent;
use weft::proto::route::{RouteConfig, RouteEvent, RouteFailure};
use weft::transport::route::RouteNode;
use weft::{NodeId, Rank};

const N: usize = 16;
const DEAD: [usize; 2] = [5, 11];

/// Read every live node's events until `done` holds of them, or fail after 30 s.
fn gather(
    nodes: &[Option<RouteNode>],
    seen: &mut Vec<(usize, RouteEvent)>,
    done: impl Fn(&[(usize, RouteEvent)]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done(seen) {
        assert!(Instant::now() < deadline, "not done in 30 s: {seen:?}");
        for (i, n) in nodes.iter().enumerate() {
            if let Some(n) = n {
                while let Ok(e) = n.next_event(Duration::from_micros(100)) {
                    if let NodeEvent::Protocol(e) = e {
                        seen.push((i, e));
                    }
                }
            }
        }
    }
}

#[test]
fn routes_around_stopped_nodes_and_broadcasts() {
    let cfg = RouteConfig::default();
    let mut nodes: Vec<Option<RouteNode>> = RouteNode::on_loopback(N, &Default::default(), cfg)
        .unwrap()
        .into_iter()
        .map(Some)
        .collect();
    for d in DEAD {
        nodes[d].take().unwrap().stop().unwrap();
    }
    let live: Vec<usize> = (0..N).filter(|i| !DEAD.contains(i)).collect();

    // Every live node to every other live rank.
    let mut expected: HashMap<(usize, u64), usize> = HashMap::new();
    for &s in &live {
        for &d in &live {
            if d != s {
                let tag = nodes[s]
                    .as_ref()
                    .unwrap()
                    .send_to(Rank(d as u32), format!("{s}->{d}").into_bytes());
                expected.insert((s, tag), d);
            }
        }
    }
    let mut seen = Vec::new();
    let answers = |seen: &[(usize, RouteEvent)]| {
        seen.iter()
            .filter(|(_, e)| matches!(e, RouteEvent::Delivered { .. } | RouteEvent::Failed { .. }))
            .count()
    };
    gather(&nodes, &mut seen, |s| answers(s) == expected.len());
    let bound = 4 + 2;
    let mut received = HashSet::new();
    for (at, e) in &seen {
        match e {
            RouteEvent::Delivered { to, tag, there, .. } => {
                assert_eq!(expected[&(*at, *tag)] as u64, to.0, "tag {tag} of {at}");
                assert!(*there <= bound, "{there} hops from {at} to {to}");
            }
            RouteEvent::Received {
                from, tag, data, ..
            } => {
                assert_eq!(expected[&(from.0 as usize, *tag)], *at);
                assert_eq!(data.as_ref(), format!("{}->{at}", from.0).as_bytes());
                assert!(received.insert((from.0, *tag)), "{from} {tag} twice");
            }
            other => panic!("unexpected {other:?} at {at}"),
        }
    }
    // Every message arrived at its destination, once.
    assert_eq!(received.len(), expected.len());

    // A message to a stopped node fails at its sender.
    let to_dead = nodes[0]
        .as_ref()
        .unwrap()
        .send_to(Rank(5), b"lost".to_vec());
    let mut seen = Vec::new();
    gather(&nodes, &mut seen, |s| {
        s.iter()
            .any(|(at, e)| *at == 0 && matches!(e, RouteEvent::Failed { .. }))
    });
    assert!(
        seen.iter().any(|(at, e)| *at == 0
            && *e
                == RouteEvent::Failed {
                    to: NodeId(5),
                    tag: to_dead,
                    why: RouteFailure::Dead
                }),
        "{seen:?}"
    );

    // A broadcast reaches every live node, once.
    nodes[3].as_ref().unwrap().broadcast(b"all".to_vec());
    let mut seen = Vec::new();
    let reached = |s: &[(usize, RouteEvent)]| {
        s.iter()
            .filter(|(_, e)| matches!(e, RouteEvent::Broadcast { .. }))
            .map(|(at, _)| *at)
            .collect::<Vec<_>>()
    };
    gather(&nodes, &mut seen, |s| reached(s).len() >= live.len());
    // Late copies would show up now.
    for n in nodes.iter().flatten() {
        while let Ok(e) = n.next_event(Duration::from_millis(20)) {
            if let NodeEvent::Protocol(e) = e {
                seen.push((usize::MAX, e));
            }
        }
    }
    let mut got = reached(&seen);
    got.sort_unstable();
    assert_eq!(got, live, "{seen:?}");
}
