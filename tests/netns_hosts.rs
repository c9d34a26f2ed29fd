//! `weft bench stabilize --hosts K`: ranks on network-namespace hosts of this machine, every
//! failure kind a host adds (its processes crash together, its link goes down and nothing
//! says goodbye, or the link between it and the root's host is cut), the views agreeing, the clock offsets estimated, and the hosts gone
//! afterwards — also when the harness itself is SIGKILLed mid-run.
//!
//! Needs root (namespaces, a bridge) and iproute2; under `CI=true` their absence fails.

mod common;

use common::skip::skip;
use common::unprivileged::{as_nobody, can_switch_user};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether `ip netns` works here; skips (or fails under CI) if not.
fn can_make_hosts() -> bool {
    let ok = can_switch_user()
        && Command::new("ip")
            .args(["netns", "list"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok {
        skip("needs root and iproute2 for network namespaces");
    }
    ok
}

/// The namespaces a harness process `pid` made that still exist.
fn hosts_of(pid: u32) -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("weft-{pid}-h")))
        .map(str::to_owned)
        .collect()
}

fn bench(args: &[&str]) -> (serde_json::Value, u32) {
    let mut c = common::weft_command(&[], &["bench", "stabilize", "--json"]);
    c.args(args);
    let child = c.stdout(Stdio::piped()).spawn().expect("weft starts");
    let pid = child.id();
    let out = child.wait_with_output().expect("weft runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "weft {args:?} failed: {text}");
    let line = text.lines().next().expect("one report");
    (serde_json::from_str(line).expect("JSON"), pid)
}

#[test]
fn a_host_whose_processes_crash_together_is_agreed_on_and_the_hosts_go_afterwards() {
    if !can_make_hosts() {
        return;
    }
    let (r, pid) = bench(&[
        "--hosts", "3", "--nodes", "9", "--fail", "host", "--repeat", "2",
    ]);
    assert_eq!(r["hosts"], 3);
    assert_eq!(r["ranks"], 9);
    assert_eq!(r["views_agree"], true, "{r}");
    // Three ranks crash at once: more than one epoch may be needed, never none.
    assert!(r["epochs_max"].as_u64().unwrap_or(0) >= 1, "{r}");
    // Every rank on another host had its offset estimated: a bound exists and is a round
    // trip's half on one machine, not a guess.
    let err = r["clock_err_us"].as_f64().expect("clock_err_us");
    assert!(err > 0.0 && err < 100_000.0, "{r}");
    assert!(hosts_of(pid).is_empty(), "left behind: {:?}", hosts_of(pid));
}

#[test]
fn a_host_whose_link_goes_down_is_suspected_in_silence_and_agreed_on() {
    if !can_make_hosts() {
        return;
    }
    let (r, _) = bench(&[
        "--hosts",
        "3",
        "--nodes",
        "6",
        "--fail",
        "host-down",
        "--dead-after-ms",
        "1000",
        "--repeat",
        "1",
    ]);
    assert_eq!(r["views_agree"], true, "{r}");
    // Nothing said goodbye: the survivors waited for the silence to last.
    let detect = r["detect_p50_us"].as_f64().expect("detect");
    assert!(
        detect >= 900_000.0,
        "suspected after {detect} µs: something reset"
    );
}

#[test]
fn a_host_cut_off_from_the_roots_host_is_excluded_and_agreed_on() {
    if !can_make_hosts() {
        return;
    }
    // The link between host 0 and a host drawn per trial carries nothing; both hosts live
    // on, and the third still reaches both.
    let (r, pid) = bench(&[
        "--hosts",
        "3",
        "--nodes",
        "9",
        "--fail",
        "link",
        "--dead-after-ms",
        "1000",
        "--repeat",
        "2",
    ]);
    assert_eq!(
        (r["fail"].as_str(), r["repeat"].as_u64()),
        (Some("link"), Some(2))
    );
    assert_eq!(r["views_agree"], true, "{r}");
    let detect = r["detect_p50_us"].as_f64().expect("detect");
    assert!(
        detect >= 900_000.0,
        "suspected after {detect} µs: the cut was not silent"
    );
    assert!(hosts_of(pid).is_empty(), "left behind: {:?}", hosts_of(pid));
}

#[test]
fn the_models_are_validated_across_shaped_hosts() {
    if !can_make_hosts() {
        return;
    }
    let mut c = common::weft_command(&[], &["model", "validate", "--json"]);
    c.args([
        "--hosts",
        "2",
        "--shape",
        "1gbit",
        "--nodes-list",
        "4,6",
        "--radix",
        "2",
        "--repeat",
        "2",
        "--seed",
        "5",
    ]);
    let out = c.output().expect("weft runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON row"))
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    for (r, n) in rows.iter().zip([4, 6]) {
        assert_eq!(
            (
                r["nodes"].as_u64(),
                r["hosts"].as_u64(),
                r["shape"].as_str()
            ),
            (Some(n), Some(2), Some("1gbit")),
            "{r}"
        );
        assert_eq!(r["launcher"], "env", "{r}");
        assert_eq!(r["views_agree"], true, "{r}");
        // L(N) measured on the ranks for the tree's fan-out (radix 2), and the paper's
        // contention model built on it.
        let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        assert!(f("l_us") > 0.0 && f("l_n_us") > 0.0, "{r}");
        assert_eq!(f("l_n_us"), f("l_n_fan2_us"), "{r}");
        let h = f("height");
        let want = 2.0 * f("l_n_us") * (h - 1.0) + f("ocp_us") * h;
        assert!((f("contention_us") - want).abs() < 1e-6 * want, "{r}");
    }
}

#[test]
fn a_killed_harness_leaves_no_hosts_behind() {
    if !can_make_hosts() {
        return;
    }
    // A long run, killed once its hosts exist.
    let mut c = common::weft_command(&[], &["bench", "stabilize", "--hosts", "2"]);
    c.args([
        "--nodes",
        "4",
        "--fail",
        "host-down",
        "--dead-after-ms",
        "20000",
    ]);
    let mut child = c
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts");
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while hosts_of(pid).len() < 2 {
        assert!(Instant::now() < deadline, "the hosts never appeared");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !hosts_of(pid).is_empty() {
        assert!(
            Instant::now() < deadline,
            "left behind: {:?}",
            hosts_of(pid)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn hosts_refuse_clearly_without_root_and_host_failures_without_hosts() {
    if !can_make_hosts() {
        return;
    }
    let mut c = common::weft_command(&[], &["bench", "stabilize", "--hosts", "2"]);
    let out = as_nobody(&mut c, None).output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("need root"), "{err}");

    let out = common::weft_command(&[], &["bench", "stabilize", "--fail", "host"])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("several hosts"),
        "{err}"
    );
    for (args, says) in [
        (
            &["--hosts", "5", "--nodes", "4", "--fail", "leaf"][..],
            "leaves a host empty",
        ),
        (
            &["--hosts", "1", "--nodes", "4", "--fail", "host"][..],
            "--hosts 2 or more",
        ),
    ] {
        let out = common::weft_command(&[], &["bench", "stabilize"])
            .args(args)
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{args:?}: {err}"
        );
    }
    let out = common::weft_command(
        &[],
        &["bench", "stabilize", "--hosts", "2", "--shape", "fast"],
    )
    .output()
    .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("1gbit"), "{err}");
}
