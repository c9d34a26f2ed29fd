//! A loaded kernel may refuse an `io_uring_enter` for a moment: EAGAIN when it cannot
//! allocate a request, EBUSY while completions overflow (older kernels), EINTR on a signal.
//! The requests stay queued; a reactor that meets such a refusal submits them on a later
//! turn and its nodes never notice, even when a turn queues more requests than the
//! submission queue holds. Here a seccomp supervisor refuses two in a row of every five
//! `io_uring_enter` calls of the nodes' reactors, cycling through the three errors.

mod common;

use common::events::wait_done;
use common::overlay::builds_the_bmg;
use common::seccomp::EnterRefusals;
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
        wait,
        pin: false,
        backend: Some(Backend::Uring),
        zerocopy_min: 64 * 1024,
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
        eprintln!("io_uring unavailable here ({why}): skipped");
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
            wait,
            pin: false,
            backend: Some(Backend::Uring),
            reactors: Some(1),
            ring_entries: 4,
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
