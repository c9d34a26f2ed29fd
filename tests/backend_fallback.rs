//! Backend choice in a real process: when io_uring is refused (simulated with
//! WEFT_URING_UNAVAILABLE, as a seccomp EPERM or io_uring_disabled would), the automatic choice
//! says why on stderr and the node works on poll; forcing io_uring then is an error.

mod common;

use common::weft_env as weft;

const PING: &[&str] = &[
    "ping", "--sizes", "32", "--iters", "50", "--wait", "block", "--json",
];

#[test]
fn refused_uring_falls_back_to_poll_and_says_why() {
    let out = weft(&[("WEFT_URING_UNAVAILABLE", "EPERM from seccomp")], PING);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("io_uring unavailable") && err.contains("EPERM from seccomp"),
        "{err}"
    );
    let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(row["backend"], "poll");
    assert_eq!(row["iters"], 50);
}

#[test]
fn forced_uring_that_cannot_run_is_an_error() {
    let out = weft(
        &[
            ("WEFT_URING_UNAVAILABLE", "EPERM"),
            ("WEFT_BACKEND", "uring"),
        ],
        PING,
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("backend uring"));
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
