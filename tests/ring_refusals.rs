//! A loaded kernel may refuse an `io_uring_enter` for a moment: EAGAIN when it cannot
//! allocate a request, EBUSY while completions overflow (older kernels), EINTR on a signal.
//! The requests stay queued; a reactor that meets such a refusal submits them on a later
//! turn and its nodes never notice, even when a turn queues more requests than the
//! submission queue holds. Here a seccomp supervisor refuses two in a row of every five
//! `io_uring_enter` calls of the nodes' reactors, cycling through the three errors; and a
//! blocked reactor that meets a spell of refusals pauses between its tries instead of spinning.

mod common;

use common::events::{collect, wait_done};
use common::overlay::builds_the_bmg;
use common::seccomp::EnterRefusals;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;
use weft::engine::{Backend, WaitMode};
use weft::proto::ping::PingPong;
use weft::transport::{Cluster, NodeOptions};

const TRANSIENT: &[i32] = &[libc::EAGAIN, libc::EBUSY, libc::EINTR];

/// Run `f` on a thread whose (and whose reactors') `io_uring_enter` calls are refused two in
/// a row of every five; how many were refused and let through, and what `f` returned.
fn with_refusals<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> (u64, u64, T) {
    std::thread::spawn(move || {
        let refusals = EnterRefusals::install(5, 2, TRANSIENT).expect("seccomp user notification");
        let out = f();
        (refusals.refused(), refusals.passed(), out)
    })
    .join()
    .expect("the filtered thread")
}

/// Two io_uring nodes, started on a thread whose `io_uring_enter` calls are refused
/// ([`with_refusals`]), exchange every size (dial, accept, multishot and exact receives, copied and
/// zero-copy sends) with every echo checked.
fn ping_pong_through_refusals(wait: WaitMode) {
    let opts = NodeOptions {
        pin: false,
        backend: Some(Backend::Uring),
        reactor: weft::engine::ReactorOptions {
            wait,
            zerocopy_min: 64 * 1024,
            ..Default::default()
        },
        ..NodeOptions::default()
    };
    let sizes = vec![8, 4096, 100_000, 1 << 20];
    let trips: u64 = 30;
    let plan = sizes.clone();
    let (refused, passed, pinger) = with_refusals(move || {
        let c = Cluster::start(2, opts, move |i, ids| {
            if i == 0 {
                PingPong::pinger(ids[1], plan.clone(), trips, 2).verifying()
            } else {
                PingPong::ponger()
            }
        })
        .expect("start");
        wait_done(
            &c.events,
            60,
            &format!("{wait:?}: ping-pong through refusals"),
        );
        c.stop_all().expect("stop").into_iter().next().unwrap()
    });
    assert!(
        refused > 0,
        "{wait:?}: nothing was refused ({passed} passed)"
    );
    assert_eq!(pinger.samples().len() as u64, trips * 4, "{wait:?}");
    assert_eq!(pinger.mismatches(), 0, "{wait:?}: an echo differed");
    eprintln!("{wait:?}: {refused} io_uring_enter calls refused, {passed} let through");
}

/// Run `test` for blocking and for spinning reactors, where io_uring runs at all.
fn on_both_waits(test: impl Fn(WaitMode)) {
    if let Some(why) = weft::engine::uring_unavailable() {
        common::skip::skip(&format!("io_uring unavailable here ({why})"));
        return;
    }
    for wait in [WaitMode::Block, WaitMode::Busy] {
        test(wait);
    }
}

#[test]
fn transient_io_uring_refusals_delay_but_lose_nothing() {
    on_both_waits(ping_pong_through_refusals);
}

/// Fifteen nodes on one reactor whose submission queue holds 4 requests build the BMG through
/// refusals: a turn's dials, receives and sends overflow the queue while the kernel will not
/// take it, and wait their turn in order.
#[test]
fn a_full_submission_queue_the_kernel_refuses_loses_nothing() {
    on_both_waits(|wait| {
        let opts = NodeOptions {
            pin: false,
            backend: Some(Backend::Uring),
            reactors: Some(1),
            reactor: weft::engine::ReactorOptions {
                wait,
                ring_entries: 4,
                ..Default::default()
            },
            ..NodeOptions::default()
        };
        let (refused, passed, ()) = with_refusals(move || builds_the_bmg(3, opts));
        assert!(
            refused > 0,
            "{wait:?}: nothing was refused ({passed} passed)"
        );
        eprintln!("{wait:?}: {refused} io_uring_enter calls refused, {passed} let through");
    });
}

/// A blocked reactor whose `io_uring_enter` calls the kernel refuses for a spell tries again
/// once a millisecond, not in a loop that takes a core from a machine already short of
/// memory; and when the spell ends it serves what came meanwhile (here a stranger's garbage,
/// refused).
#[test]
fn a_blocked_reactor_pauses_between_refused_enters() {
    if let Some(why) = weft::engine::uring_unavailable() {
        common::skip::skip(&format!("io_uring unavailable here ({why})"));
        return;
    }
    const SPELL: Duration = Duration::from_millis(400);
    let opts = NodeOptions {
        pin: false,
        backend: Some(Backend::Uring),
        reactor: weft::engine::ReactorOptions {
            wait: WaitMode::Block,
            ..Default::default()
        },
        ..NodeOptions::default()
    };
    let (tries, seen) = std::thread::spawn(move || {
        // No refusals (none of every 1000) until the spell.
        let refusals = EnterRefusals::install(1000, 0, &[libc::EAGAIN]).expect("seccomp");
        let c = Cluster::start(2, opts, |_, _| PingPong::ponger()).expect("start");
        std::thread::sleep(Duration::from_millis(100));
        refusals.refuse_all(true);
        let before = refusals.refused();
        // An accept and a receive complete, which the reactor cannot reap without entering.
        let mut s = TcpStream::connect(c.nodes[1].addr).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        std::thread::sleep(SPELL);
        let tries = refusals.refused() - before;
        refusals.refuse_all(false);
        let seen = collect(&c.events, 10, |s| refusals_of(s) > 0);
        c.stop_all().expect("stop");
        (tries, seen)
    })
    .join()
    .expect("the filtered thread");
    eprintln!("{tries} refused enters in {} ms", SPELL.as_millis());
    assert!(
        tries > 0,
        "the reactor never tried to enter during the spell"
    );
    // A millisecond apart, a turn's two or three enters: about 1200 at most in the spell; in a
    // loop each costs a round trip to the supervisor, tens of microseconds.
    let most = 4 * SPELL.as_millis() as u64;
    assert!(
        tries < most,
        "{tries} enters in {SPELL:?}: the reactor spun"
    );
    assert!(
        refusals_of(&seen) > 0,
        "the stranger was not served after the spell: {seen:?}"
    );
}

/// How many refusals `seen` holds.
fn refusals_of(seen: &[(weft::NodeId, weft::engine::reactor::NodeEvent)]) -> usize {
    seen.iter()
        .filter(|(_, e)| matches!(e, weft::engine::reactor::NodeEvent::Refused(_)))
        .count()
}
