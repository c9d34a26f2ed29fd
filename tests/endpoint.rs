//! The endpoint as a runtime uses it, on real nodes: every send ends in `Delivered` or
//! `Failed`, a killed rank is suspected (with the detector that fired), every survivor installs
//! the view without it and hears that it left, and sends go on around it.

use std::collections::BTreeSet;
use std::time::Duration;
use weft::prelude::*;

const WAIT: Duration = Duration::from_secs(20);

/// Wait at `ep` for the event `pick` takes; the transport's news is ignored.
fn wait<T>(ep: &Endpoint, what: &str, pick: impl FnMut(EndpointEvent) -> Option<T>) -> T {
    ep.wait_for(WAIT, pick, |_| {})
        .unwrap_or_else(|s| panic!("rank {}: {what}: {s}", ep.rank().0))
}

#[test]
fn sends_complete_and_a_killed_rank_leaves_every_view() {
    const N: u32 = 6;
    let mut job = Endpoint::on_loopback(N as usize, &EndpointConfig::default()).unwrap();
    // Rank 0 sends each other rank its number; each gets exactly that, and 0 hears each
    // arrived.
    let tags: Vec<u64> = (1..N)
        .map(|r| job[0].send(Rank(r), r.to_le_bytes().to_vec()))
        .collect();
    let mut delivered = BTreeSet::new();
    while delivered.len() < tags.len() {
        let (to, tag) = wait(&job[0], "delivery", |e| match e {
            EndpointEvent::Delivered { to, tag, .. } => Some((to, tag)),
            EndpointEvent::Failed { to, why, .. } => panic!("send to {to:?} failed: {why:?}"),
            _ => None,
        });
        assert_eq!(
            tags[to.0 as usize - 1],
            tag,
            "the tag of the send to {to:?}"
        );
        delivered.insert(to);
    }
    for r in 1..N {
        let (from, data) = wait(&job[r as usize], "the message", |e| match e {
            EndpointEvent::Received { from, data, .. } => Some((from, data)),
            _ => None,
        });
        assert_eq!((from, &data[..]), (Rank(0), &r.to_le_bytes()[..]));
    }

    // Rank 4 dies: its sockets close as when its process is killed.
    let dead = Rank(4);
    job.remove(dead.0 as usize).stop().unwrap();
    let live: Vec<Rank> = (0..N).map(Rank).filter(|&r| r != dead).collect();
    let mut suspected = Vec::new();
    for ep in &job {
        // Each survivor installs a view of exactly the others and hears rank 4 left; any
        // suspicion it reports on the way names rank 4, by itself, and a detector.
        let mut left = false;
        let mut view = None;
        while !(left && view.is_some()) {
            match wait(ep, "the view without rank 4", Some) {
                EndpointEvent::ViewInstalled { members, .. } => view = Some(members),
                EndpointEvent::Left { who } => {
                    assert_eq!(who, dead);
                    left = true;
                }
                EndpointEvent::Suspected { who, by, why, .. } => {
                    assert_eq!((who, by), (dead, ep.rank()));
                    suspected.push(why);
                }
                _ => {}
            }
        }
        assert_eq!(&view.unwrap()[..], &live[..], "rank {}", ep.rank().0);
    }
    // Its tree neighbours saw its connections drop.
    assert!(
        suspected.contains(&Suspicion::Lost),
        "no survivor suspected rank 4 of a lost connection: {suspected:?}"
    );

    // A send to the dead rank fails; one to a live rank still arrives, around it.
    let to_dead = job[0].send(dead, b"anyone?".to_vec());
    let outcome = wait(&job[0], "the send to the dead rank", |e| match e {
        EndpointEvent::Failed { tag, to, why } if tag == to_dead => Some((to, why)),
        EndpointEvent::Delivered { tag, .. } if tag == to_dead => panic!("delivered to the dead"),
        _ => None,
    });
    assert_eq!(outcome, (dead, RouteFailure::Dead));
    let last = job.len() - 1;
    let tag = job[last].send(Rank(3), b"around".to_vec());
    wait(&job[last], "the send around the dead rank", |e| match e {
        EndpointEvent::Delivered { tag: t, to, .. } if t == tag => Some(to),
        EndpointEvent::Failed { tag: t, why, .. } if t == tag => panic!("failed: {why:?}"),
        _ => None,
    });
    for ep in job {
        ep.stop().unwrap();
    }
}

#[test]
fn a_rank_that_leaves_is_gone_from_every_view_and_knows_it() {
    const N: u32 = 4;
    let job = Endpoint::on_loopback(N as usize, &EndpointConfig::default()).unwrap();
    job[2].leave();
    for ep in &job {
        let who = wait(ep, "the leave", |e| match e {
            EndpointEvent::Left { who } => Some(who),
            _ => None,
        });
        assert_eq!(who, Rank(2), "rank {}", ep.rank().0);
    }
    let tag = job[1].send(Rank(2), b"still there?".to_vec());
    wait(&job[1], "the send to the rank that left", |e| match e {
        EndpointEvent::Failed { tag: t, why, .. } if t == tag => Some(why),
        EndpointEvent::Delivered { tag: t, .. } if t == tag => panic!("delivered after leaving"),
        _ => None,
    });
}

#[test]
fn a_rank_outside_the_job_fails_at_once() {
    let job = Endpoint::on_loopback(2, &EndpointConfig::default()).unwrap();
    let tag = job[0].send(Rank(7), b"nobody".to_vec());
    let why = wait(&job[0], "the send to rank 7", |e| match e {
        EndpointEvent::Failed { tag: t, why, .. } if t == tag => Some(why),
        _ => None,
    });
    assert_eq!(why, RouteFailure::NoSuchRank);
}

#[test]
fn survivors_agree_once_and_alike_when_the_root_dies_during_the_call() {
    const N: u32 = 6;
    let mut job = Endpoint::on_loopback(N as usize, &EndpointConfig::default()).unwrap();
    for ep in &job {
        assert_eq!(ep.agree(1 << ep.rank().0, AgreeOp::Or), 0);
    }
    // Rank 0, the membership's root and so the agreement's, dies during the call.
    job.remove(0).stop().unwrap();
    let decided = |ep: &Endpoint, k: u64| {
        wait(ep, "the agreement", |e| match e {
            EndpointEvent::Agreed {
                k: got,
                value,
                failed,
            } => {
                assert_eq!(got, k, "rank {}: instances in order", ep.rank().0);
                Some((value, failed))
            }
            _ => None,
        })
    };
    let first: Vec<(u64, Vec<Rank>)> = job.iter().map(|ep| decided(ep, 0)).collect();
    let (value, failed) = &first[0];
    assert!(
        first.iter().all(|d| d == &first[0]),
        "one decision: {first:?}"
    );
    // Decided before rank 0 died (with its bit, nobody failed) or after (without it).
    let expected = (0..N)
        .filter(|&r| !failed.contains(&Rank(r)))
        .fold(0, |acc, r| acc | 1 << r);
    assert_eq!(*value, expected, "{first:?}");
    assert!(failed.is_empty() || failed == &[Rank(0)], "{first:?}");
    // The next agreement is among the survivors, and names the dead.
    for ep in &job {
        assert_eq!(ep.agree(u64::MAX, AgreeOp::And), 1);
    }
    for ep in &job {
        assert_eq!(decided(ep, 1), (u64::MAX, vec![Rank(0)]));
    }
}

#[test]
fn a_revocation_reaches_every_survivor() {
    const N: u32 = 6;
    let mut job = Endpoint::on_loopback(N as usize, &EndpointConfig::default()).unwrap();
    job.remove(3).stop().unwrap();
    // Once every survivor's view is without rank 3, rank 1 revokes.
    for ep in &job {
        wait(ep, "the view without rank 3", |e| match e {
            EndpointEvent::Left { who: Rank(3) } => Some(()),
            _ => None,
        });
    }
    job[1].revoke();
    for ep in &job {
        let by = wait(ep, "the revocation", |e| match e {
            EndpointEvent::Revoked { by } => Some(by),
            _ => None,
        });
        assert_eq!(by, Rank(1), "rank {}", ep.rank().0);
    }
}
