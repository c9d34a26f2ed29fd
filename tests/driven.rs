//! A driven endpoint as an application's own event loop uses it: progress until no work,
//! arm, wait on the descriptor. The descriptor turns readable when a message comes, when a
//! timer is due and when another thread signals; an armed endpoint with nothing pending
//! leaves it quiet; a peer's death reaches the loop as a view without it.

use std::os::fd::RawFd;
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};
use weft::prelude::*;

const WAIT: Duration = Duration::from_secs(20);

/// Whether `fd` turns readable within `within`.
fn readable(fd: RawFd, within: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, within.as_millis() as i32) };
    assert!(r >= 0, "poll: {}", std::io::Error::last_os_error());
    r == 1
}

/// Progress `ep` until a turn finds no work; the events it gave.
fn drain(ep: &DrivenEndpoint) -> Vec<NodeEvent<EndpointEvent>> {
    let mut out = Vec::new();
    loop {
        let worked = ep.progress().expect("progress");
        out.extend(std::iter::from_fn(|| ep.try_next()));
        if !worked {
            return out;
        }
    }
}

/// Drive `ep` as an event loop does, until `pick` takes one of its events.
fn event_loop<T>(ep: &DrivenEndpoint, mut pick: impl FnMut(EndpointEvent) -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        for e in drain(ep) {
            if let NodeEvent::Protocol(e) = e {
                if let Some(t) = pick(e) {
                    return t;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "rank {}: no such event",
            ep.rank().0
        );
        if ep.arm().expect("arm") {
            readable(ep.fd().expect("fd"), Duration::from_millis(500));
        }
    }
}

/// A job of `n` driven endpoints on loopback, each on a thread of its own running `run`.
fn job<T: Send + 'static>(
    n: usize,
    run: impl Fn(DrivenEndpoint) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let cfg = EndpointConfig {
        guard: false,
        ..EndpointConfig::default()
    };
    let ring: std::sync::Arc<[NodeId]> = (0..n as u64).map(NodeId).collect();
    let specs = loopback_specs(n, &cfg.node).unwrap();
    let threads: Vec<_> = specs
        .into_iter()
        .enumerate()
        .map(|(i, spec)| {
            let (run, ring, cfg) = (run.clone(), ring.clone(), cfg.clone());
            std::thread::spawn(move || {
                run(DrivenEndpoint::spawn(spec, Rank(i as u32), ring, &cfg).unwrap())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn the_descriptor_wakes_a_waiter_for_a_message_and_stays_quiet_without_one() {
    let (go_tx, go_rx) = channel::<()>();
    let go_rx = std::sync::Arc::new(std::sync::Mutex::new(go_rx));
    let out = job(2, move |ep| {
        if ep.rank() == Rank(1) {
            // The receiver: once its membership is up and nothing is pending, an armed
            // endpoint's descriptor stays quiet...
            event_loop(&ep, |e| {
                matches!(e, EndpointEvent::ViewInstalled { .. }).then_some(())
            });
            let quiet = loop {
                drain(&ep);
                if ep.arm().unwrap() {
                    break !readable(ep.fd().unwrap(), Duration::from_millis(0));
                }
            };
            go_tx.send(()).unwrap();
            // ...and turns readable when the message comes.
            let woke = loop {
                drain(&ep);
                if ep.arm().unwrap() {
                    break readable(ep.fd().unwrap(), WAIT);
                }
            };
            let got = event_loop(&ep, |e| match e {
                EndpointEvent::Received { data, .. } => Some(data.to_vec()),
                _ => None,
            });
            (quiet, woke, got)
        } else {
            go_rx.lock().unwrap().recv().unwrap();
            let tag = ep.send(Rank(1), b"wake up".to_vec());
            let done = event_loop(&ep, |e| match e {
                EndpointEvent::Delivered { tag: t, .. } | EndpointEvent::Failed { tag: t, .. } => {
                    Some(t)
                }
                _ => None,
            });
            // Delivered: rank 1's application has it, whatever this rank does now.
            assert_eq!(done, tag);
            (true, true, Vec::new())
        }
    });
    let (quiet, woke, got) = &out[1];
    assert!(
        quiet,
        "an armed endpoint with nothing pending left its descriptor readable"
    );
    assert!(woke, "the message did not make the descriptor readable");
    assert_eq!(got, b"wake up");
}

#[test]
fn a_signal_from_another_thread_wakes_the_waiter() {
    let cfg = EndpointConfig {
        guard: false,
        ..EndpointConfig::default()
    };
    let ring: std::sync::Arc<[NodeId]> = [NodeId(0)].into();
    let spec = loopback_specs(1, &cfg.node).unwrap().pop().unwrap();
    let ep = DrivenEndpoint::spawn(spec, Rank(0), ring, &cfg).unwrap();
    let signal = ep.signal();
    let armed = loop {
        drain(&ep);
        if ep.arm().unwrap() {
            break true;
        }
    };
    assert!(armed);
    let fd = ep.fd().unwrap();
    assert!(!readable(fd, Duration::ZERO), "readable before the signal");
    let t = std::thread::spawn(move || signal.raise().unwrap());
    assert!(readable(fd, WAIT), "the signal did not wake the wait");
    t.join().unwrap();
    // The turn takes the signal: armed again, the descriptor is quiet.
    let quiet = loop {
        drain(&ep);
        if ep.arm().unwrap() {
            break !readable(fd, Duration::ZERO);
        }
    };
    assert!(
        quiet,
        "the descriptor stayed readable after the signal was taken"
    );
    ep.stop().unwrap();
}

#[test]
fn a_killed_rank_reaches_the_survivors_event_loops_as_a_view_without_it() {
    const N: usize = 4;
    // The survivors leave together, once each has its view: one that left earlier would be
    // one more failure in the others' views.
    let all_seen = std::sync::Arc::new(std::sync::Barrier::new(N - 1));
    let views = job(N, move |ep| {
        // Every rank reaches every other first: a rank never reached is only late, not dead,
        // until the start-up grace ends.
        for r in (0..N as u32).map(Rank).filter(|&r| r != ep.rank()) {
            ep.send(r, vec![ep.rank().0 as u8]);
        }
        let (mut got, mut acked) = (0, 0);
        event_loop(&ep, |e| {
            match e {
                EndpointEvent::Received { .. } => got += 1,
                EndpointEvent::Delivered { .. } => acked += 1,
                EndpointEvent::Failed { to, why, .. } => panic!("a send to {to:?} failed: {why:?}"),
                _ => {}
            }
            (got == N - 1 && acked == N - 1).then_some(())
        });
        if ep.rank() == Rank(2) {
            // Its sockets close as when its process is killed.
            ep.stop().unwrap();
            return None;
        }
        let members = event_loop(&ep, |e| match e {
            EndpointEvent::ViewInstalled { members, .. } if members.len() < N => Some(members),
            _ => None,
        });
        all_seen.wait();
        Some(members)
    });
    for (r, v) in views.iter().enumerate() {
        if r != 2 {
            assert_eq!(
                v.as_deref(),
                Some(&[Rank(0), Rank(1), Rank(3)][..]),
                "rank {r}'s view"
            );
        }
    }
}
