//! What a new user types by mistake, and what a command must then do: refuse it before any
//! work, naming the flag, never panic, never run something else than what it says, and never
//! print numbers that mean nothing.

mod common;

use common::{scratch, weft};
use std::time::Instant;

/// Run `weft args`: it must fail, quickly (before any measurement), without a panic and
/// without anything on stdout; its stderr must mention `what`.
fn refused(args: &[&str], what: &str) {
    let started = Instant::now();
    let out = weft(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} ran: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert!(err.contains(what), "{args:?}: {err}");
    assert!(
        out.stdout.is_empty(),
        "{args:?} printed before refusing: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        started.elapsed().as_secs() < 10,
        "{args:?} was refused only after {:?}",
        started.elapsed()
    );
}

#[test]
fn numbers_too_large_are_refused_not_panics_or_wraps() {
    refused(
        &["bench", "stabilize", "--timeout-s", "1e20"],
        "--timeout-s",
    );
    refused(
        &["sim", "stabilize", "--latency-us", "1e30"],
        "--latency-us",
    );
    refused(&["sim", "stabilize", "--ocp-us", "1e30"], "--ocp-us");
    refused(&["sim", "bmg", "--latency-us", "1e26"], "--latency-us");
    refused(
        &["sim", "stabilize", "--orphan-hold-us", "18446744073709551"],
        "--orphan-hold-us",
    );
    refused(&["ping", "--iters", "18446744073709551615"], "--iters");
    refused(&["bench", "route", "--size", "4294967296"], "--size");
    refused(&["bench", "route", "--retry-ms", "0"], "--retry-ms");
    refused(&["bench", "route", "--nodes", "1"], "--nodes");
    refused(&["bench", "bmg", "--nodes-list", "16,0"], "--nodes-list");
    refused(
        &["bench", "broadcast", "--nodes-list", "1"],
        "--nodes-list 1",
    );
    refused(&["bench", "broadcast", "--broadcasts", "1"], "--broadcasts");
    refused(
        &[
            "bench",
            "broadcast",
            "--protocols",
            "C",
            "--fail",
            "coordinator",
        ],
        "no coordinator",
    );
    refused(
        &["bench", "bmg", "--tree", "binary", "--nodes-list", "16"],
        "2^k - 1",
    );
}

#[test]
fn failures_that_leave_nobody_or_kill_nobody_are_refused() {
    refused(&["sim", "stabilize", "--fail", "multi:0"], "multi:0");
    refused(
        &["sim", "stabilize", "--nodes", "16", "--fail", "multi:16"],
        "at least one must survive",
    );
    refused(
        &["bench", "stabilize", "--nodes", "16", "--fail", "multi:100"],
        "at least one must survive",
    );
    refused(
        &["bench", "stabilize", "--nodes", "16", "--fail", "root+15"],
        "at least one must survive",
    );
    refused(&["sim", "stabilize", "--victims", "n0,x"], "--victims");
}

#[test]
fn settings_are_checked_before_the_run_and_before_any_output() {
    // The second size is wrong: the first must not run.
    refused(
        &[
            "bench",
            "stabilize",
            "--nodes-list",
            "16,1,64",
            "--repeat",
            "1",
        ],
        "need at least 2 nodes",
    );
    refused(
        &[
            "bench",
            "stabilize",
            "--nodes",
            "16",
            "--plot",
            "/nonexistent/x.svg",
        ],
        "--plot",
    );
    refused(
        &[
            "sim",
            "bmg",
            "--sweep",
            "--max-depth",
            "3",
            "--csv",
            "/nonexistent/x.csv",
        ],
        "--csv",
    );
    refused(&["model", "validate", "--repeat", "0"], "--repeat");
    refused(&["model", "validate", "--radix", "3"], "--radix 3");
    refused(
        &["model", "validate", "--nodes-list", "2"],
        "leaves one process",
    );
    refused(
        &["node", "--id", "0", "--nodes", "2", "--peers", "1=nonsense"],
        "the address is not IP:PORT",
    );
}

#[test]
fn weft_node_refuses_settings_that_would_break_it() {
    let key = ("WEFT_JOB_KEY", "ab".repeat(32));
    let node = |extra: &[&str]| {
        let mut args = vec!["node", "--id", "0", "--nodes", "3", "--peers"];
        args.push("1=127.0.0.1:9,2=127.0.0.1:10");
        args.extend_from_slice(extra);
        common::weft_env(&[(key.0, key.1.as_str())], &args)
    };
    for (extra, what) in [
        (&["--radix", "0"][..], "--radix 0"),
        (&["--radix", "1"][..], "--radix 1"),
        (&["--radix", "3"][..], "--radix 3"),
        (&["--dead-after-ms", "100000000"][..], "dead-after"),
    ] {
        let out = node(extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(what),
            "{extra:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{extra:?}: listened before refusing");
    }
    // A list that leaves a member out, or names one twice.
    for (peers, what) in [
        ("1=127.0.0.1:9", "no address for [n2]"),
        (
            "1=127.0.0.1:9,1=127.0.0.1:10,2=127.0.0.1:11",
            "n1 is listed twice",
        ),
    ] {
        let out = common::weft_env(
            &[(key.0, key.1.as_str())],
            &["node", "--id", "0", "--nodes", "3", "--peers", peers],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(what),
            "{peers}: {err}"
        );
    }
    // A key file that never ends, and a key with a sign for a digit.
    let out = common::weft_env(
        &[],
        &[
            "node",
            "--id",
            "0",
            "--nodes",
            "1",
            "--peers",
            "",
            "--key-file",
            "/dev/zero",
        ],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("more than 256 bytes"));
    let plus = format!("+f{}", "00".repeat(31));
    let out = common::weft_env(
        &[("WEFT_JOB_KEY", &plus)],
        &["node", "--id", "0", "--nodes", "1", "--peers", ""],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("64 hex digits"));
}

#[test]
fn flags_that_would_be_ignored_are_refused() {
    refused(&["sim", "bmg", "--csv", "x.csv"], "--sweep");
    refused(&["sim", "bmg", "--runs", "3"], "--sweep");
    refused(&["sim", "bmg", "--max-depth", "3"], "--sweep");
    // A scheduling policy under the synchronous scheduler, a delay under a fixed policy.
    refused(
        &["sim", "bmg", "--async-policy", "random"],
        "needs --scheduler async",
    );
    refused(
        &[
            "sim",
            "bmg",
            "--scheduler",
            "async",
            "--async-policy",
            "alternate",
            "--max-delay",
            "3",
        ],
        "--async-policy random only",
    );
    refused(&["ping", "--compare", "--rounds", "0"], "--rounds 0");
    refused(&["ping", "--rounds", "3"], "--compare");
    refused(&["ping", "--sizes", "8,8"], "8 is listed twice");
    refused(
        &["ping", "--backend", "poll", "--zerocopy-min", "4096"],
        "--zerocopy-min",
    );
    // A tree that cannot fit in this machine's memory is refused, not an abort.
    refused(
        &["sim", "bmg", "--tree", "binary", "--depth", "30"],
        "more than",
    );
    // A refresh the asynchronous scheduler cannot carry.
    refused(
        &[
            "sim",
            "bmg",
            "--tree",
            "binomial",
            "--depth",
            "8",
            "--scheduler",
            "async",
            "--refresh",
            "1",
        ],
        "--refresh 1",
    );
}

/// A BMG run cut short says it did not converge (and exits non-zero): no invented phase count.
#[test]
fn a_run_that_does_not_converge_says_so() {
    let out = weft(&["sim", "bmg", "--depth", "4", "--max-rounds", "5", "--json"]);
    assert!(!out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the run's JSON");
    assert_eq!(v["converged"], false);
    assert!(v["ring_phases"].is_null(), "{v}");
    assert!(
        v["total_phases"].is_null() && v["projected_s"].is_null(),
        "{v}"
    );
    assert_eq!(v["rounds_run"], 5);
    let out = weft(&["sim", "bmg", "--depth", "4", "--max-rounds", "5"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("NOT CONVERGED"));
}

/// One trial has no confidence interval (null, not ± 0.0) and its mean is its sample; node
/// processes' CPU is null, not 0.0; a join needs no victim of the default kind; a floor with
/// no wave says n/a.
#[test]
fn numbers_that_would_mean_nothing_are_absent() {
    let json = |args: &[&str]| -> Vec<serde_json::Value> {
        let out = weft(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let one = &json(&[
        "bench",
        "stabilize",
        "--nodes",
        "8",
        "--repeat",
        "1",
        "--json",
    ])[0];
    assert!(one["ci99_us"].is_null(), "{one}");
    assert_eq!(
        one["ts_mean_us"], one["ts_max_us"],
        "the mean of one sample is it: {one}"
    );
    assert_eq!(one["ts_p50_us"], one["ts_max_us"], "{one}");
    let procs = &json(&[
        "bench",
        "stabilize",
        "--procs",
        "--nodes",
        "6",
        "--repeat",
        "1",
        "--backend",
        "poll",
        "--json",
    ])[0];
    assert!(procs["cpu_mean_us"].is_null(), "{procs}");
    for nodes in [["--nodes", "2"], ["--nodes", "16"]] {
        let mut args = vec!["bench", "stabilize", "--join", "--repeat", "1", "--json"];
        args.extend_from_slice(&nodes);
        if nodes[1] == "16" {
            args.extend_from_slice(&["--radix", "16"]);
        }
        assert_eq!(json(&args)[0]["fail"], "join");
    }
    let out = weft(&[
        "bench",
        "stabilize",
        "--nodes",
        "2",
        "--fail",
        "leaf",
        "--compare",
        "--repeat",
        "2",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("n/a") && !text.contains("0.00x"), "{text}");
}

/// The floor of `--compare` times the survivors' tree, as large as the failure leaves it.
#[test]
fn the_floor_times_the_survivors_tree() {
    let dir = scratch("floor");
    let _ = &dir;
    let out = weft(&[
        "bench",
        "stabilize",
        "--nodes",
        "8",
        "--fail",
        "multi:3",
        "--compare",
        "--repeat",
        "2",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let floor = rows
        .iter()
        .find(|r| r["backend"] == "bare-tcp")
        .expect("a floor row");
    // A wave over 5 processes: 4 edges down and 4 acks up.
    assert_eq!(floor["messages"], 8, "{floor}");
}

/// Sizes past what weft runs are refused before anything is sized by them (a job of 2^32 - 1
/// once aborted on a 32 GiB allocation), a short peer list is named before the member list
/// is made, and errors name the variable and show big numbers as numbers.
#[test]
fn huge_job_sizes_and_odd_values_are_refused_by_name() {
    let key = ("WEFT_JOB_KEY", "ab".repeat(32));
    let env = |extra: &[(&'static str, &'static str)]| {
        let mut v: Vec<(&str, &str)> = vec![(key.0, key.1.as_str())];
        v.extend_from_slice(extra);
        v
    };
    type Case<'a> = (Vec<(&'a str, &'a str)>, Vec<&'a str>, &'a str);
    let cases: [Case; 7] = [
        (
            env(&[]),
            vec![
                "node",
                "--id",
                "0",
                "--nodes",
                "4294967295",
                "--peers",
                "1=127.0.0.1:1",
            ],
            "--nodes 4294967295: at most 1048576",
        ),
        (
            env(&[]),
            vec![
                "node",
                "--id",
                "0",
                "--nodes",
                "1000",
                "--peers",
                "1=127.0.0.1:1",
            ],
            "no address for [n2, n3, n4, n5, n6, n7, n8, n9, and 990 more]",
        ),
        (
            env(&[("WEFT_RANK", "0"), ("WEFT_SIZE", "4294967295")]),
            vec!["node", "--bootstrap", "env"],
            "WEFT_SIZE: 4294967295 is above the largest job",
        ),
        (
            env(&[("WEFT_RANK", "0"), ("WEFT_SIZE", "99999999999")]),
            vec!["node", "--bootstrap", "env"],
            "WEFT_SIZE: 99999999999 is above the largest job",
        ),
        (
            env(&[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "4294967295"),
                ("SLURM_JOB_ID", "3"),
            ]),
            vec!["node", "--bootstrap", "slurm"],
            "SLURM_NTASKS: 4294967295 is above",
        ),
        (
            env(&[]),
            vec![
                "node",
                "--id",
                "0",
                "--nodes",
                "2",
                "--peers",
                "1=127.0.0.1:1",
                "--suspect-after",
                "1e308",
            ],
            "suspect after 1e308 periods",
        ),
        (
            vec![("WEFT_JOB_KEY", "xyz")],
            vec![
                "node",
                "--id",
                "0",
                "--nodes",
                "2",
                "--peers",
                "1=127.0.0.1:1",
            ],
            "WEFT_JOB_KEY: expected 64 hex digits",
        ),
    ];
    for (env, args, what) in cases {
        let started = Instant::now();
        let out = common::weft_env(&env, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(what),
            "{args:?}: {err}"
        );
        assert!(
            !err.contains("panicked") && err.len() < 1000,
            "{args:?}: {err}"
        );
        assert!(started.elapsed().as_secs() < 10, "{args:?}: slow to refuse");
    }
}

/// Defaults scale with the sizes given (they once refused `--nodes 2`, `--nodes 3` and
/// `--iters 5` by naming flags the user never typed), and a draw of victims that cuts the
/// survivors apart is refused at once with the parts, instead of a broadcast that waits
/// 120 s and then says "timed out after 0ns".
#[test]
fn small_sizes_run_on_their_defaults_and_a_cut_draw_is_refused() {
    for args in [
        &["bench", "route", "--nodes", "2", "--probes", "5", "--json"][..],
        &["ping", "--iters", "5", "--sizes", "8", "--json"][..],
        &[
            "bench",
            "heartbeat",
            "--nodes",
            "3",
            "--quiet-periods",
            "3",
            "--heartbeat-us",
            "10000",
            "--json",
        ][..],
    ] {
        let out = weft(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    refused(
        &[
            "bench", "route", "--nodes", "6", "--fail", "4", "--seed", "3",
        ],
        "parts the BMG's live fingers do not connect ([2], [5])",
    );
    refused(
        &[
            "bench", "route", "--nodes", "16", "--fail", "14", "--seed", "1",
        ],
        "do not connect",
    );
    refused(
        &["bench", "route", "--nodes", "2", "--fail", "1"],
        "--fail 1: at most",
    );
}
