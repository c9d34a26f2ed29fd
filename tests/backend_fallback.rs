//! Backend choice in a real process. Where the kernel refuses io_uring (a seccomp filter on
//! the child, as Docker's default profile has, or a kernel without it), the automatic choice
//! says why on stderr and the node works on poll; forcing io_uring there is an error.

mod common;

use common::seccomp::refuse_io_uring;
use common::{weft_command, weft_env as weft};
use std::process::Output;

const PING: &[&str] = &[
    "ping", "--sizes", "32", "--iters", "50", "--wait", "block", "--json",
];

/// `weft` with `args` (and `env`) in a process where `io_uring_setup` fails with `errno`.
fn weft_refused(errno: i32, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = weft_command(env, args);
    refuse_io_uring(&mut c, errno).output().expect("run weft")
}

#[test]
fn refused_uring_falls_back_to_poll_and_says_why() {
    for (errno, why) in [(libc::EPERM, "EPERM"), (libc::ENOSYS, "ENOSYS")] {
        let out = weft_refused(errno, &[], PING);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{why}: {err}");
        assert!(
            err.contains("io_uring unavailable") && err.contains(why),
            "{why}: the fallback was not explained: {err}"
        );
        assert_eq!(
            err.matches("io_uring unavailable").count(),
            1,
            "{why}: said more than once: {err}"
        );
        let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(row["backend"], "poll", "{why}");
        assert_eq!(row["iters"], 50, "{why}");
    }
}

#[test]
fn forced_uring_that_cannot_run_is_an_error() {
    let out = weft_refused(libc::EPERM, &[("WEFT_BACKEND", "uring")], PING);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "ran without io_uring: {err}");
    assert!(
        err.contains("backend uring") && err.contains("EPERM"),
        "{err}"
    );
    let out = weft_refused(libc::EPERM, &[], &[&["--backend", "uring"], PING].concat());
    assert!(!out.status.success());
}

#[test]
fn automatic_choice_is_uring_where_the_kernel_allows_it() {
    if weft::engine::uring::unavailable().is_some() {
        // This machine refuses io_uring: the automatic choice must then be poll.
        let out = weft(&[], PING);
        let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(row["backend"], "poll");
        return;
    }
    let out = weft(&[], PING);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(row["backend"], "uring");
    assert!(
        String::from_utf8_lossy(&out.stderr).is_empty(),
        "no notice when io_uring is used"
    );
}
