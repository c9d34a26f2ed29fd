//! The kernel's own limits on io_uring, met for real: `kernel.io_uring_disabled` (2: off for
//! everyone; 1: off for processes outside `kernel.io_uring_group` without CAP_SYS_ADMIN) and a
//! locked-memory limit too low for the ring's buffers, as an unprivileged job under a batch
//! system may have. Each time the automatic choice says why, once, and the node works on poll;
//! beside each, the same process without the limit picks io_uring, so the limit is the cause.
//! (`tests/backend_fallback.rs` covers seccomp's refusal.)
//!
//! A test file of its own and root only: it changes a system-wide sysctl for a moment (and
//! puts it back, also on failure), so nothing else of weft's may run beside it; its tests take
//! turns ([`ONE_AT_A_TIME`]).

mod common;

use common::unprivileged::{as_nobody, can_switch_user};
use common::weft_command;
use std::process::Output;
use std::sync::{Mutex, MutexGuard};

const PING: &[&str] = &[
    "ping", "--sizes", "32", "--iters", "50", "--wait", "block", "--json",
];

const SYSCTL: &str = "/proc/sys/kernel/io_uring_disabled";

/// The tests of this file change what every process may do with io_uring: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Puts `kernel.io_uring_disabled` back when dropped.
struct Disabled(String);

impl Disabled {
    /// Set the sysctl to `value`; `None`, said as a skip, if it cannot be (a kernel before
    /// 6.6 has no such sysctl).
    fn set(value: &str) -> Option<Self> {
        let set = std::fs::read_to_string(SYSCTL)
            .and_then(|old| std::fs::write(SYSCTL, value).map(|()| Disabled(old)));
        if let Err(e) = &set {
            common::skip::skip(&format!("io_uring_disabled = {value}: {SYSCTL}: {e}"));
        }
        set.ok()
    }
}

impl Drop for Disabled {
    fn drop(&mut self) {
        std::fs::write(SYSCTL, self.0.trim()).expect("restore kernel.io_uring_disabled");
    }
}

/// `weft ping`, as root or (`nobody`) as the unprivileged user with `memlock` bytes of
/// `RLIMIT_MEMLOCK` if given.
fn ping(nobody: bool, memlock: Option<u64>) -> Output {
    run(PING, nobody, memlock)
}

/// `weft` with `args`, as [`ping`] runs it.
fn run(args: &[&str], nobody: bool, memlock: Option<u64>) -> Output {
    let mut c = weft_command(&[], args);
    if nobody {
        as_nobody(&mut c, memlock);
    }
    c.output().expect("run weft")
}

/// `out` ran on `backend`; if poll, it said once why, in words containing `why`.
fn ran_on(out: &Output, backend: &str, why: &str, case: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{case}: {err}");
    let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(row["backend"], backend, "{case}: {err}");
    assert_eq!(row["iters"], 50, "{case}");
    let said = err.matches("io_uring unavailable").count();
    if backend == "poll" {
        assert_eq!(said, 1, "{case}: the fallback was not said once: {err}");
        assert!(
            err.contains(why),
            "{case}: the reason is not {why:?}: {err}"
        );
    } else {
        assert_eq!(said, 0, "{case}: {err}");
    }
}

/// This test's turn ([`ONE_AT_A_TIME`]), if this machine can run it: root, and io_uring
/// usable to begin with; `None`, said as a skip of `what`, if not.
fn my_turn(what: &str) -> Option<MutexGuard<'static, ()>> {
    let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !can_switch_user() {
        common::skip::skip(&format!("{what}: needs root"));
        return None;
    }
    if let Some(why) = weft::engine::uring::unavailable() {
        common::skip::skip(&format!(
            "{what}: io_uring is unavailable here already ({why})"
        ));
        return None;
    }
    Some(turn)
}

#[test]
fn io_uring_disabled_for_everyone_falls_back_to_poll() {
    let Some(_turn) = my_turn("io_uring_disabled = 2") else {
        return;
    };
    let Some(back) = Disabled::set("2") else {
        return;
    };
    ran_on(
        &ping(false, None),
        "poll",
        "kernel.io_uring_disabled = 2",
        "root, disabled = 2",
    );
    // Forcing io_uring where the kernel will not have it is an error, not a fallback.
    let forced = weft_command(&[("WEFT_BACKEND", "uring")], PING)
        .output()
        .unwrap();
    assert!(!forced.status.success(), "ran on a disabled io_uring");
    drop(back);
    ran_on(&ping(false, None), "uring", "", "root, disabled = 0");
}

#[test]
fn io_uring_for_privileged_processes_only_falls_back_for_a_job() {
    let Some(_turn) = my_turn("io_uring_disabled = 1") else {
        return;
    };
    let Some(back) = Disabled::set("1") else {
        return;
    };
    ran_on(
        &ping(true, None),
        "poll",
        "kernel.io_uring_disabled = 1",
        "nobody, disabled = 1",
    );
    // Root holds CAP_SYS_ADMIN: allowed.
    ran_on(&ping(false, None), "uring", "", "root, disabled = 1");
    drop(back);
    ran_on(&ping(true, None), "uring", "", "nobody, disabled = 0");
}

#[test]
fn too_little_locked_memory_falls_back_to_poll() {
    let Some(_turn) = my_turn("RLIMIT_MEMLOCK") else {
        return;
    };
    // None at all: the probe's small ring is refused, and the choice is poll. A little: the
    // probe's ring fits and a reactor's full-sized one may not (before, that start failed with
    // a bare ENOMEM); each reactor refused then runs on poll, said once.
    for kib in [0u64, 32, 64] {
        let out = ping(true, Some(kib << 10));
        let case = format!("nobody, memlock {kib} KiB");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{case}: {err}");
        let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            row["backend"] == "poll" || row["backend"] == "uring+poll",
            "{case}: ran on {}: {err}",
            row["backend"]
        );
        assert_eq!(
            err.matches("io_uring unavailable").count(),
            1,
            "{case}: {err}"
        );
        assert!(err.contains("RLIMIT_MEMLOCK too low"), "{case}: {err}");
    }
    // A stabilization benchmark's nodes fall back alike, in-process or each a `weft node`
    // process (which the limit counts together: one user), and its row says so.
    let stabilize = [
        "bench",
        "stabilize",
        "--nodes",
        "16",
        "--repeat",
        "2",
        "--json",
    ];
    for procs in [false, true] {
        let extra: &[&str] = if procs { &["--procs"] } else { &[] };
        let args = [&stabilize[..], extra].concat();
        let case = format!("stabilize, procs {procs}, memlock 32 KiB");
        let out = run(&args, true, Some(32 << 10));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{case}: {err}");
        let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            row["backend"] == "poll" || row["backend"] == "uring+poll",
            "{case}: ran on {}",
            row["backend"]
        );
        assert_eq!(row["views_agree"], true, "{case}");
    }
    // The same user with the limit it inherits (Debian's default is 8 MiB) uses io_uring.
    ran_on(&ping(true, None), "uring", "", "nobody, memlock inherited");
}
