//! An adaptive reactor stops spinning once its work is done: it spins for `SPIN` after the
//! last message, then blocks, so an idle node costs no CPU. A busy reactor, the control,
//! spins on. Measured as this process's CPU time over an idle window; the file is its own
//! test binary so that no other test's threads are counted.

mod common;

use common::events::wait_done;
use std::time::Duration;
use weft::engine::{Backend, WaitMode};
use weft::proto::ping::PingPong;
use weft::transport::{Cluster, NodeOptions};

/// CPU time this process has used so far, user and system.
fn cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "CLOCK_PROCESS_CPUTIME_ID");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU time two reactors in `wait` mode use over `window` of idleness, after a short
/// ping-pong has made their connection hot.
fn idle_cpu(backend: Backend, wait: WaitMode, window: Duration) -> Duration {
    let opts = NodeOptions {
        pin: false,
        backend: Some(backend),
        reactor: weft::engine::ReactorOptions {
            wait,
            ..Default::default()
        },
        ..NodeOptions::default()
    };
    let cluster = Cluster::start(2, opts, |i, ids| {
        if i == 0 {
            PingPong::pinger(ids[1], vec![32], 200, 10)
        } else {
            PingPong::ponger()
        }
    })
    .unwrap();
    wait_done(&cluster.events, 20, &format!("{backend:?} {wait:?}"));
    // Well past `SPIN` (200 µs), with room for a slow scheduler.
    std::thread::sleep(Duration::from_millis(50));
    let before = cpu_time();
    std::thread::sleep(window);
    let used = cpu_time() - before;
    cluster.shutdown().unwrap();
    used
}

#[test]
fn adaptive_reactors_block_when_idle_and_busy_ones_do_not() {
    let window = Duration::from_millis(400);
    for backend in Backend::ALL {
        let adaptive = idle_cpu(backend, WaitMode::Adaptive, window);
        let busy = idle_cpu(backend, WaitMode::Busy, window);
        eprintln!("{backend:?}: idle CPU over {window:?}: adaptive {adaptive:?}, busy {busy:?}");
        // Two blocked reactors use next to nothing; two spinning ones about a core each (on
        // a loaded 2-core machine, at least a share of one).
        assert!(
            adaptive < window / 10,
            "{backend:?}: adaptive reactors still spin ({adaptive:?} of CPU in {window:?})"
        );
        assert!(
            busy > window / 2,
            "{backend:?}: the busy control did not spin ({busy:?} in {window:?})"
        );
    }
}
