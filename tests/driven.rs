//! A driven endpoint as an application's own event loop uses it: progress until no work,
//! arm, wait on the descriptor. An event loop that waits only on the descriptor gets its
//! messages; another thread's signal wakes it; an armed endpoint with nothing pending
//! leaves it quiet.

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

/// Drive `ep` as an event loop does, until `pick` takes one of its events. Events are taken
/// one at a time: those after the one picked stay queued for the next loop (a batch taken
/// whole would lose them).
fn event_loop<T>(
    ep: &DrivenEndpoint,
    what: &str,
    mut pick: impl FnMut(EndpointEvent) -> Option<T>,
) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        let worked = ep.progress().expect("progress");
        while let Some(e) = ep.try_next() {
            if let NodeEvent::Protocol(e) = e {
                if let Some(t) = pick(e) {
                    return t;
                }
            }
        }
        if worked {
            continue;
        }
        assert!(Instant::now() < deadline, "rank {}: no {what}", ep.rank().0);
        if ep.arm().expect("arm") {
            readable(ep.fd().expect("fd"), Duration::from_millis(500));
        }
    }
}

/// Drive `ep` as an event loop does while `waiting` says so (a driven endpoint that is not
/// driven falls silent, and its peers come to suspect it hangs).
fn drive_while(ep: &DrivenEndpoint, mut waiting: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while waiting() {
        assert!(
            Instant::now() < deadline,
            "rank {}: waited too long",
            ep.rank().0
        );
        drain(ep);
        if ep.arm().expect("arm") {
            readable(ep.fd().expect("fd"), Duration::from_millis(10));
        }
    }
}

/// Send `ep`'s rank to every other rank and drive it until each send is delivered and each
/// other rank's came: every connection is up (a rank never reached is only late, not dead,
/// until the start-up grace ends). The last view installed meanwhile, if any.
fn greet_all(ep: &DrivenEndpoint) -> Option<std::sync::Arc<[Rank]>> {
    let others: Vec<Rank> = (0..ep.size())
        .map(Rank)
        .filter(|&r| r != ep.rank())
        .collect();
    for &r in &others {
        ep.send(r, vec![ep.rank().0 as u8]);
    }
    let (mut got, mut acked, mut view) = (0, 0, None);
    event_loop(ep, "greeting from every rank", |e| {
        match e {
            EndpointEvent::ViewInstalled { members, .. } => view = Some(members),
            EndpointEvent::Received { .. } => got += 1,
            EndpointEvent::Delivered { .. } => acked += 1,
            // A rank that stops at once may take its acknowledgement with it: the send is
            // then not confirmed, and says so, which is all a sender learns of a crash too.
            EndpointEvent::Failed {
                why: RouteFailure::Dead,
                ..
            } => acked += 1,
            EndpointEvent::Failed { to, why, .. } => panic!("a send to {to:?} failed: {why:?}"),
            _ => {}
        }
        (got == others.len() && acked == others.len()).then_some(())
    });
    view
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
fn an_event_loop_that_waits_on_the_descriptor_gets_its_message() {
    let (go_tx, go_rx) = channel::<()>();
    let go_rx = std::sync::Arc::new(std::sync::Mutex::new(go_rx));
    let out = job(2, move |ep| {
        let _ = greet_all(&ep);
        if ep.rank() == Rank(1) {
            // The receiver: an event loop that only ever waits on the descriptor.
            go_tx.send(()).unwrap();
            event_loop(&ep, "message", |e| match e {
                EndpointEvent::Received { data, .. } => Some(data.to_vec()),
                _ => None,
            })
        } else {
            let go = go_rx.lock().unwrap();
            drive_while(&ep, || go.try_recv().is_err());
            let tag = ep.send(Rank(1), b"wake up".to_vec());
            let done = event_loop(&ep, "completion", |e| match e {
                EndpointEvent::Delivered { tag: t, .. } | EndpointEvent::Failed { tag: t, .. } => {
                    Some(t)
                }
                _ => None,
            });
            // Delivered: rank 1's application has it, whatever this rank does now.
            assert_eq!(done, tag);
            Vec::new()
        }
    });
    assert_eq!(out[1], b"wake up");
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
    const KILLED: Rank = Rank(2);
    // Survivors that have their view keep driving until every survivor has its own: one
    // that stopped driving (or left) would fall silent, and be one more failure in the
    // others' views.
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let views = job(N, move |ep| {
        // A rank may still be greeting when the others' greetings are done and the killed
        // rank goes: its view can come while it greets.
        let early = greet_all(&ep);
        if ep.rank() == KILLED {
            // Its sockets close as when its process is killed.
            ep.stop().unwrap();
            return None;
        }
        let members = match early {
            Some(m) if m.len() < N => m,
            _ => event_loop(&ep, "view without the killed rank", |e| match e {
                EndpointEvent::ViewInstalled { members, .. } if members.len() < N => Some(members),
                _ => None,
            }),
        };
        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        drive_while(&ep, || {
            seen.load(std::sync::atomic::Ordering::SeqCst) < N - 1
        });
        Some(members)
    });
    for (r, v) in views.iter().enumerate() {
        if r != KILLED.0 as usize {
            assert_eq!(
                v.as_deref(),
                Some(&[Rank(0), Rank(1), Rank(3)][..]),
                "rank {r}'s first view with fewer than {N} ranks"
            );
        }
    }
}
