//! The endpoint's service (`crate::proto::endpoint`) in the timed simulator: sends, kills and
//! view changes, and uniform agreement with kills at every moment of the call.

use super::timed::{Net, TimedConfig, TimedWorld};
use crate::buf::Payload;
use crate::proto::endpoint::{EndpointEvent, EndpointRequest, Service, ServiceConfig};
use crate::proto::membership::MembershipConfig;
use crate::proto::route::RouteFailure;
use crate::proto::uniform::AgreeOp;
use crate::{NodeId, Rank};
use std::sync::Arc;
use std::time::Duration;

const MS: u64 = 1_000_000;

/// `n` services without heartbeats, on a network of 5 µs hops, 1 µs of CPU a message
/// handled and 1 µs a message sent (a root killed while it sends its decision gets out
/// only part of it), and 50 µs to see a lost connection.
fn world(n: u32) -> TimedWorld<Service> {
    let ring: Arc<[NodeId]> = (0..u64::from(n)).map(NodeId).collect();
    let cfg = ServiceConfig {
        membership: MembershipConfig {
            heartbeat: None,
            ..MembershipConfig::default()
        },
        ..ServiceConfig::default()
    };
    let nodes = (0..n)
        .map(|r| Service::new(Rank(r), ring.clone(), cfg, Duration::ZERO))
        .collect();
    let net = TimedConfig {
        net: Net::Constant {
            l: Duration::from_micros(5),
        },
        ocp: Duration::from_micros(1),
        send: Duration::from_micros(1),
        detect: Duration::from_micros(50),
    };
    TimedWorld::new(nodes, net)
}

/// Every rank's decisions of agreements: (rank, k, value, failed).
fn agreed(reports: &[(u32, u64, EndpointEvent)]) -> Vec<(u32, u64, u64, Vec<Rank>)> {
    reports
        .iter()
        .filter_map(|(r, _, e)| match e {
            EndpointEvent::Agreed { k, value, failed } => Some((*r, *k, *value, failed.clone())),
            _ => None,
        })
        .collect()
}

/// Uniform agreement under kills during the call: the root, the next in line, a leaf,
/// and the root with its successor, killed at every 5 µs from the call's start to past
/// its end. Every survivor decides each instance once, all decide the same value and
/// failed set, the value is the operation over exactly the ranks not in that set, and
/// the set holds only the killed. A second agreement after the view settles names them all.
#[test]
fn survivors_agree_on_one_value_and_failed_set_whatever_dies_during_the_call() {
    let n = 16u32;
    // Instances decided without the victims, and with them (before they died).
    let (mut without, mut with) = (0, 0);
    for victims in [&[0u32][..], &[1], &[11], &[0, 1]] {
        for offset_us in (0..=120).step_by(5) {
            let mut w = world(n);
            w.start();
            let agree = |value| EndpointRequest::Agree {
                value,
                op: AgreeOp::Or,
            };
            for r in 0..n {
                w.request_at(MS + u64::from(r) * 2_000, r, agree(1 << r));
            }
            for &v in victims {
                w.kill_at(MS + offset_us * 1_000, v);
            }
            let live: Vec<u32> = (0..n).filter(|r| !victims.contains(r)).collect();
            for &r in &live {
                w.request_at(50 * MS, r, agree(1 << r));
            }
            while w.peek_time().is_some_and(|t| t < 100 * MS) {
                w.step();
            }
            let got = agreed(&w.take_reports());
            let case = format!("victims {victims:?} at +{offset_us} µs: {got:?}");
            for k in 0..2 {
                let of_k: Vec<_> = got.iter().filter(|a| a.1 == k).collect();
                let ranks: Vec<u32> = of_k.iter().map(|a| a.0).collect();
                assert!(
                    live.iter()
                        .all(|r| ranks.iter().filter(|&x| x == r).count() == 1),
                    "instance {k}: every survivor decides once; {case}"
                );
                let (value, failed) = (of_k[0].2, &of_k[0].3);
                assert!(
                    of_k.iter().all(|a| a.2 == value && &a.3 == failed),
                    "instance {k}: one decision; {case}"
                );
                assert!(failed.iter().all(|r| victims.contains(&r.0)), "{case}");
                let expected = (0..n)
                    .filter(|&r| !failed.contains(&Rank(r)))
                    .fold(0, |acc, r| acc | 1 << r);
                assert_eq!(
                    value, expected,
                    "instance {k}: the OR of the others; {case}"
                );
                if k == 1 {
                    let all: Vec<Rank> = victims.iter().map(|&v| Rank(v)).collect();
                    assert_eq!(failed, &all, "{case}");
                } else if failed.is_empty() {
                    with += 1;
                } else {
                    without += 1;
                }
            }
        }
    }
    // The kills fell both before the decision and after it.
    assert!(without > 8 && with > 8, "without {without}, with {with}");
}

/// The service under the simulator: a send arrives and is confirmed, a killed rank leaves
/// every survivor's view (named once, after the view), and a send to it then fails.
#[test]
fn a_kill_is_one_view_change_everywhere_and_fails_later_sends() {
    let n = 16u32;
    let mut w = world(n);
    w.start();
    let send = |to, tag| EndpointRequest::Send {
        to: Rank(to),
        tag,
        data: Payload::from(&b"x"[..]),
    };
    w.request_at(MS, 0, send(9, 1));
    w.kill_at(2 * MS, 5);
    w.request_at(50 * MS, 0, send(5, 2));
    while w.peek_time().is_some_and(|t| t < 100 * MS) {
        w.step();
    }
    let reports = w.take_reports();
    let of = |i: u32| reports.iter().filter(move |r| r.0 == i).map(|r| &r.2);
    assert!(of(9).any(|e| matches!(
        e,
        EndpointEvent::Received {
            from: Rank(0),
            tag: 1,
            ..
        }
    )));
    assert!(of(0).any(|e| matches!(
        e,
        EndpointEvent::Delivered {
            to: Rank(9),
            tag: 1,
            ..
        }
    )));
    assert!(of(0).any(|e| matches!(
        e,
        EndpointEvent::Failed {
            to: Rank(5),
            tag: 2,
            why: RouteFailure::Dead
        }
    )));
    let live: Vec<Rank> = (0..n).filter(|&r| r != 5).map(Rank).collect();
    for r in live.iter().map(|r| r.0) {
        let news: Vec<&EndpointEvent> = of(r)
            .filter(|e| {
                matches!(
                    e,
                    EndpointEvent::ViewInstalled { .. } | EndpointEvent::Left { .. }
                )
            })
            .collect();
        assert!(
            matches!(
                news[..],
                [EndpointEvent::ViewInstalled { members, .. }, EndpointEvent::Left { who: Rank(5) }]
                    if members[..] == live[..]
            ),
            "rank {r}: {news:?}"
        );
    }
}

/// A revocation reaches every live rank exactly once, around dead fingers: 64 ranks, the
/// origin's three nearest fingers dead before it revokes, two origins at once.
#[test]
fn a_revocation_is_seen_once_by_every_live_rank_around_the_dead() {
    let n = 64u32;
    let mut w = world(n);
    w.start();
    let dead = [1u32, 2, 63];
    for &d in &dead {
        w.kill_at(MS, d);
    }
    w.request_at(20 * MS, 0, EndpointRequest::Revoke);
    w.request_at(20 * MS, 40, EndpointRequest::Revoke);
    while w.peek_time().is_some_and(|t| t < 60 * MS) {
        w.step();
    }
    let reports = w.take_reports();
    for origin in [0u32, 40] {
        for r in (0..n).filter(|r| !dead.contains(r)) {
            let seen = reports
                .iter()
                .filter(|(i, _, e)| {
                    *i == r && matches!(e, EndpointEvent::Revoked { by } if by.0 == origin)
                })
                .count();
            assert_eq!(
                seen, 1,
                "rank {r} saw rank {origin}'s revocation {seen} times"
            );
        }
    }
}
