//! The `weft` binary end to end: JSON fields, sweep outputs, and clear errors on bad input.

mod common;

use common::{scratch, weft};

/// Run `weft args`, which must succeed (its stderr is the failure message).
fn succeed(args: &[&str]) -> std::process::Output {
    let out = weft(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `v` has every one of `fields`.
fn has_fields(v: &serde_json::Value, fields: &[&str]) {
    for field in fields {
        assert!(v.get(field).is_some(), "missing {field} in {v}");
    }
}

/// The one JSON object a `--json` run printed.
/// One JSON object per line of `out`'s stdout.
fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

fn one_json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn sim_bmg_json_has_the_documented_fields() {
    let out = succeed(&[
        "sim", "bmg", "--tree", "binomial", "--depth", "8", "--seed", "7", "--json",
    ]);
    let v = one_json(&out);
    has_fields(
        &v,
        &[
            "nodes",
            "tree",
            "depth",
            "scheduler",
            "ring_phases",
            "bmg_phases",
            "total_phases",
            "projected_s",
            "max_msgs_per_proc",
            "total_msgs",
            "converged",
            "seed",
            "wall_s",
        ],
    );
    assert_eq!(v["nodes"], 256);
    assert_eq!(v["tree"], "binomial");
    assert_eq!(v["seed"], 7);
    assert_eq!(v["ring_phases"], 4);
    assert_eq!(v["converged"], true);
    let (ring, bmg, total) = (
        v["ring_phases"].as_u64().unwrap(),
        v["bmg_phases"].as_u64().unwrap(),
        v["total_phases"].as_u64().unwrap(),
    );
    assert_eq!(ring + bmg, total);
    let projected = v["projected_s"].as_f64().unwrap();
    assert!((projected - total as f64 * 50e-6).abs() < 1e-12);
}

/// `--async-policy` reaches the run and its JSON; on a binomial tree taking messages first
/// is faster than alternating (the leaves' repeated Info messages queue at the root).
#[test]
fn sim_bmg_async_policies_are_named_and_differ() {
    let steps = |policy: &str| {
        let v = one_json(&succeed(&[
            "sim",
            "bmg",
            "--tree",
            "binomial",
            "--depth",
            "10",
            "--scheduler",
            "async",
            "--async-policy",
            policy,
            "--seed",
            "3",
            "--json",
        ]));
        assert_eq!(v["converged"], true, "{policy}");
        let name = v["policy"].as_str().unwrap().to_string();
        (name, v["total_phases"].as_u64().unwrap())
    };
    let (first, alternate, random) = (steps("msg-first"), steps("alternate"), steps("random"));
    assert_eq!(first.0, "msg-first");
    assert_eq!(alternate.0, "alternate");
    assert!(random.0.starts_with("random"), "{}", random.0);
    assert!(first.1 < alternate.1, "{first:?} {alternate:?}");
    let sync = one_json(&succeed(&["sim", "bmg", "--depth", "4", "--json"]));
    assert!(
        sync["policy"].is_null(),
        "no policy under the sync scheduler"
    );
}

#[test]
fn sim_bmg_random_init_is_reproducible_from_its_seed() {
    let args = [
        "sim",
        "bmg",
        "--tree",
        "random",
        "--depth",
        "5",
        "--degree",
        "3",
        "--init",
        "random",
        "--scheduler",
        "async",
        "--seed",
        "11",
        "--json",
    ];
    let strip = |o: std::process::Output| {
        let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v.as_object_mut().unwrap().remove("wall_s");
        v
    };
    let (a, b) = (strip(weft(&args)), strip(weft(&args)));
    assert_eq!(a, b);
    assert_eq!(a["converged"], true);
}

#[test]
fn sweep_writes_csv_and_svg() {
    let dir = scratch("sweep");
    let (csv, svg) = (dir.join("sweep.csv"), dir.join("sweep.svg"));
    let out = succeed(&[
        "sim",
        "bmg",
        "--sweep",
        "--tree",
        "binary",
        "--scheduler",
        "sync",
        "--max-depth",
        "6",
        "--seed",
        "1",
        "--csv",
        csv.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("nodes") && table.contains("127"), "{table}");
    let csv = std::fs::read_to_string(csv).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("nodes,tree,depth"));
    assert_eq!(lines.len(), 1 + 6, "header and depths 1..=6");
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(
        svg.starts_with("<svg") || svg.contains("<svg "),
        "not an SVG"
    );
    assert!(
        svg.contains("ring") && svg.contains("BMG"),
        "legend missing"
    );
}

#[test]
fn bad_arguments_are_refused_clearly() {
    let out = weft(&[
        "sim",
        "bmg",
        "--tree",
        "binary",
        "--depth",
        "40",
        "--max-nodes",
        "1000",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("more than 1000 processes"), "{err}");
    let out = weft(&["sim", "bmg", "--latency-us", "-3"]);
    assert!(!out.status.success());
    let out = weft(&["sim", "bmg", "--tree", "random", "--degree", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("degree"));
}

#[test]
fn bench_stabilize_json_has_the_documented_fields() {
    let out = succeed(&[
        "bench",
        "stabilize",
        "--nodes",
        "16",
        "--repeat",
        "3",
        "--seed",
        "5",
        "--backend",
        "poll",
        "--json",
    ]);
    let v = one_json(&out);
    has_fields(
        &v,
        &[
            "nodes",
            "radix",
            "fail",
            "backend",
            "repeat",
            "ts_p50_us",
            "ts_p99_us",
            "ts_mean_us",
            "ci99_us",
            "views_agree",
        ],
    );
    assert_eq!(v["nodes"], 16);
    assert_eq!(v["radix"], 4);
    assert_eq!(v["fail"], "inner");
    assert_eq!(v["backend"], "poll");
    assert_eq!(v["repeat"], 3);
    assert_eq!(v["views_agree"], true);
    assert!(v["ts_p50_us"].as_f64().unwrap() > 0.0);
    // Linux reports steal time (0 on bare metal): a share of the CPUs' time.
    let steal = v["steal_pct"].as_f64().expect("steal_pct is a number here");
    assert!((0.0..=100.0).contains(&steal), "steal {steal}%");
}

/// A shell's default soft limit on descriptors (1024 on Debian) must not stop an in-process
/// job: 256 nodes hold more descriptors than that, and the binary raises its soft limit to
/// the hard one before it starts them.
#[test]
fn a_256_node_job_runs_under_the_default_descriptor_limit() {
    use std::os::unix::process::CommandExt;
    let mut hard = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut hard) },
        0
    );
    if hard.rlim_max < 8192 {
        common::skip::skip(&format!(
            "the hard limit on descriptors, {}, is too low",
            hard.rlim_max
        ));
        return;
    }
    let mut c = common::weft_command(
        &[],
        &[
            "bench",
            "stabilize",
            "--nodes",
            "256",
            "--repeat",
            "1",
            "--json",
        ],
    );
    let debian = libc::rlimit {
        rlim_cur: 1024,
        rlim_max: hard.rlim_max,
    };
    // SAFETY: the child only calls setrlimit (async-signal-safe) before exec.
    unsafe {
        c.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &debian) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let out = c.output().expect("run weft");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
            .chars()
            .take(2000)
            .collect::<String>()
    );
    assert_eq!(one_json(&out)["views_agree"], true);
}

#[test]
fn bench_stabilize_refuses_a_bad_radix() {
    let out = weft(&["bench", "stabilize", "--nodes", "8", "--radix", "3"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("radix 3"), "{err}");
}

#[test]
fn model_validate_compares_every_model_and_plots() {
    let dir = scratch("validate");
    let svg = dir.join("v.svg");
    let out = succeed(&[
        "model",
        "validate",
        "--nodes-list",
        "4,8",
        "--repeat",
        "2",
        "--seed",
        "1",
        "--json",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 2);
    for v in &lines {
        for field in [
            "l_us",
            "ocp_us",
            "c_us",
            "base_us",
            "distance_us",
            "l_n_us",
            "l_n_pairs_us",
            "l_n_fan2_us",
            "l_n_fan4_us",
            "contention_us",
            "cpu_sharing_us",
        ] {
            let x = v[field].as_f64().unwrap_or(f64::NAN);
            assert!(x > 0.0 && x.is_finite(), "{field} = {x}");
        }
        // The CPU-sharing model adds CPU to the base model; it is never below it.
        assert!(v["cpu_sharing_us"].as_f64() >= v["base_us"].as_f64());
        // The paper's contention model is the base model at the loaded latency of the
        // tree's own fan-out (radix 4 by default).
        let f = |k: &str| v[k].as_f64().unwrap();
        let h = f("height");
        let want = 2.0 * f("l_n_us") * (h - 1.0) + f("ocp_us") * h;
        assert!((f("contention_us") - want).abs() < 1e-6 * want, "{v}");
        assert_eq!(f("l_n_us"), f("l_n_fan4_us"), "{v}");
        // The cold row: the same models fed the cold latencies, which are the cold legs of
        // round trips and so never below the warm ones' halves.
        let cold = &v["cold"];
        let c = |k: &str| cold[k].as_f64().unwrap_or(f64::NAN);
        assert!(c("l_cold_us") > 0.0 && c("l_n_cold_us") > 0.0, "{v}");
        let want = 2.0 * c("l_n_cold_us") * (h - 1.0) + f("ocp_us") * h;
        assert!((c("contention_us") - want).abs() < 1e-6 * want, "{v}");
        let want = 2.0 * c("l_cold_us") * (h - 1.0) + f("ocp_us") * h;
        assert!((c("base_us") - want).abs() < 1e-6 * want, "{v}");
    }
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("contention model (L(N))") && svg.contains("CPU-sharing model"));
}

#[test]
fn bench_stabilize_runs_one_process_per_node() {
    let out = succeed(&[
        "bench",
        "stabilize",
        "--procs",
        "--nodes",
        "8",
        "--repeat",
        "2",
        "--seed",
        "3",
        "--backend",
        "poll",
        "--json",
    ]);
    let v = one_json(&out);
    assert_eq!(v["nodes"], 8);
    assert_eq!(v["views_agree"], true);
    assert!(v["ts_p50_us"].as_f64().unwrap() > 0.0);
}

/// A reader that goes away (`weft ... | head -1`) ends the program quietly and successfully:
/// no panic about a broken pipe.
#[test]
fn a_closed_stdout_pipe_ends_the_run_quietly() {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["sim", "bmg", "--depth", "6", "--seed", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run weft");
    // Close the only read end before the child prints anything.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait for weft");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "status {:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// In-process, `weft ping --compare` puts weft beside Open MPI's shared-memory BTL, built and
/// run for the comparison, with per-round ratios, and leaves nothing of the build behind.
#[test]
fn ping_in_process_is_compared_with_open_mpis_vader() {
    if !weft::bench::ping::Peer::vader_available() {
        common::skip::skip("Open MPI's mpicc and mpirun (libopenmpi-dev, openmpi-bin)");
        return;
    }
    let out = succeed(&[
        "ping",
        "--sizes",
        "32,70000",
        "--iters",
        "300",
        "--wait",
        "block",
        "--transport",
        "inproc",
        "--compare",
        "--peer",
        "vader",
        "--rounds",
        "3",
        "--json",
    ]);
    let rows = json_lines(&out);
    let who: Vec<(&str, &str, u64)> = rows
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap();
            (s("transport"), s("backend"), r["size"].as_u64().unwrap())
        })
        .collect();
    let weft_backend = who[0].1;
    assert_eq!(
        who,
        [
            ("inproc", weft_backend, 32),
            ("inproc", weft_backend, 70000),
            ("shm", "openmpi-vader", 32),
            ("shm", "openmpi-vader", 70000)
        ]
    );
    for r in &rows {
        assert_eq!(r["iters"], 300, "{r}");
        assert!(r["p50_us"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert_eq!(
        rows[0]["p50_ratio"]["n"], 3,
        "a ratio per round: {}",
        rows[0]
    );
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("weft-vader-"))
        .collect();
    assert!(
        left.is_empty(),
        "the peer's build was left behind: {left:?}"
    );
}

#[test]
fn ping_json_has_the_documented_fields_for_weft_and_its_peer() {
    let out = succeed(&[
        "ping",
        "--sizes",
        "32,4096",
        "--iters",
        "200",
        "--backend",
        "poll",
        "--wait",
        "block",
        "--transport",
        "tcp",
        "--compare",
        "--rounds",
        "3",
        "--json",
    ]);
    let rows = json_lines(&out);
    let who: Vec<(&str, u64)> = rows
        .iter()
        .map(|r| (r["backend"].as_str().unwrap(), r["size"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        who,
        [
            ("poll", 32),
            ("poll", 4096),
            ("std-busy", 32),
            ("std-busy", 4096)
        ]
    );
    for r in &rows {
        has_fields(
            r,
            &[
                "wait",
                "p50_us",
                "p99_us",
                "p999_us",
                "mb_per_s",
                "iters",
                "steal_pct",
            ],
        );
        assert_eq!(r["iters"], 200);
        // weft's connections use CUBIC (or Reno where CUBIC is not allowed), and so does the
        // peer unless told otherwise: the engines are compared, not congestion controls.
        let cc = r["congestion"].as_str().unwrap_or_default();
        assert!(cc == "cubic" || cc == "reno", "{r}");
        assert_eq!(r["congestion"], rows[0]["congestion"], "{r}");
        assert!(r["p50_us"].as_f64().unwrap() > 0.0);
        assert!(r["p50_us"].as_f64() <= r["p99_us"].as_f64(), "{r}");
        let api = if r["backend"] == "std-busy" {
            "peer"
        } else {
            "protocol"
        };
        assert_eq!(r["api"], api, "{r}");
        // weft's rows carry the per-round ratios (one per round); the peer's do not.
        for key in ["p50_ratio", "mb_ratio"] {
            if r["backend"] == "std-busy" {
                assert!(r.get(key).is_none(), "{r}");
                continue;
            }
            let m = &r[key];
            assert_eq!(m["n"], 3, "{r}");
            let at = |k: &str| m[k].as_f64().unwrap();
            assert!(at("lo") <= at("median") && at("median") <= at("hi"), "{r}");
            assert!(at("lo") > 0.0 && at("confidence") > 0.7, "{r}");
        }
    }
}

#[test]
fn bench_stabilize_plots_ts_against_n() {
    let dir = scratch("stabilize-plot");
    let svg = dir.join("ts.svg");
    let path = svg.to_str().unwrap();
    succeed(&[
        "bench",
        "stabilize",
        "--nodes-list",
        "8,16",
        "--repeat",
        "2",
        "--seed",
        "3",
        "--backend",
        "poll",
        "--plot",
        path,
    ]);
    let text = std::fs::read_to_string(&svg).expect("the plot was written");
    assert!(text.starts_with("<svg"), "not an SVG");
    for label in [
        "mean (99% CI)",
        "median",
        "99th percentile",
        "Ts after failure (inner)",
    ] {
        assert!(text.contains(label), "no {label:?} in the plot");
    }
}

#[test]
fn bench_stabilize_compares_with_the_bare_tcp_floor_in_the_same_run() {
    let out = succeed(&[
        "bench",
        "stabilize",
        "--nodes-list",
        "8,16",
        "--repeat",
        "3",
        "--seed",
        "2",
        "--backend",
        "poll",
        "--compare",
        "--json",
    ]);
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    // weft's line, then its floor's, for each size.
    assert_eq!(lines.len(), 4, "{lines:?}");
    for (pair, n) in lines.chunks(2).zip([8, 16]) {
        let (weft, floor) = (&pair[0], &pair[1]);
        assert_eq!(weft["backend"], "poll");
        assert_eq!(floor["backend"], "bare-tcp");
        for v in [weft, floor] {
            assert_eq!(v["nodes"], n);
            assert_eq!(v["repeat"], 3);
            assert!(v["ts_p50_us"].as_f64().unwrap() > 0.0, "{v}");
        }
        has_fields(
            floor,
            &["wait", "height", "ts_p99_us", "ci99_us", "cpu_mean_us"],
        );
        // One wave over the n - 1 survivors: a message down and one up each edge.
        assert_eq!(floor["messages"], 2 * (n - 2));
    }
    // The table ends with the ratios.
    let text = succeed(&[
        "bench",
        "stabilize",
        "--nodes",
        "8",
        "--repeat",
        "2",
        "--seed",
        "2",
        "--compare",
    ]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("bare-tcp") && text.contains("weft / bare-tcp"),
        "{text}"
    );
}

/// `weft sim broadcast` runs random Process Order schedules, checks each, and says so in
/// its JSON; a system of one process is refused by name.
#[test]
fn sim_broadcast_checks_its_schedules() {
    let out = succeed(&[
        "sim",
        "broadcast",
        "--schedules",
        "200",
        "--seed",
        "7",
        "--json",
    ]);
    let v = one_json(&out);
    has_fields(
        &v,
        &[
            "schedules",
            "broadcasts",
            "deliveries",
            "kills",
            "root_kills",
            "joins",
            "recoveries",
            "hangs",
            "lost_tail",
            "violations",
            "wall_ms",
        ],
    );
    assert_eq!(v["schedules"], 200);
    assert_eq!(v["violations"], 0, "{v}");
    assert!(v["root_kills"].as_u64().unwrap() > 0, "{v}");
    let out = weft(&["sim", "broadcast", "--max-nodes", "1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-nodes"));
}

#[test]
fn bench_checkpoint_rebuilds_killed_states_exactly_and_never_wrongly() {
    // 8 nodes: IDA neighborhoods of 4 (m = 2), XOR sets of 4. Two kills, several seeds: IDA
    // always tolerates them; partner and XOR rebuild exactly when their placement tolerates
    // the victims and report an error (never wrong data) when it does not.
    for seed in ["1", "2", "3"] {
        let out = succeed(&[
            "bench",
            "checkpoint",
            "--nodes",
            "8",
            "--state-mib",
            "1.5",
            "--fail",
            "2",
            "--repeat",
            "1",
            "--xor-set",
            "4",
            "--seed",
            seed,
            "--json",
        ]);
        let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON row"))
            .collect();
        assert_eq!(rows.len(), 3, "one row per scheme");
        for r in &rows {
            has_fields(
                r,
                &[
                    "scheme",
                    "nodes",
                    "state_mib",
                    "fail",
                    "encode_gb_s",
                    "checkpoint_ms",
                    "recover_ms",
                    "tolerated",
                    "recovered_exact",
                ],
            );
            assert_eq!(r["recovered_exact"], r["tolerated"], "seed {seed}: {r}");
            assert_eq!(r["wrong"], 0, "never wrong data: {r}");
            assert!(r["checkpoint_ms"].as_f64().unwrap() > 0.0, "{r}");
        }
        assert_eq!(rows[0]["scheme"], "ida");
        assert_eq!(rows[0]["recovered_exact"], true, "seed {seed}: {}", rows[0]);
    }
    let out = weft(&["bench", "checkpoint", "--fail", "16"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--fail 16"));
}

#[test]
fn sim_bsp_keeps_the_fault_free_result_at_ten_thousand_virtual_processors() {
    let out = succeed(&[
        "sim",
        "bsp",
        "--app",
        "prefix-sum",
        "--real",
        "1000",
        "--virtual",
        "10000",
        "--supersteps",
        "16",
        "--fail-rate",
        "0.02",
        "--runs",
        "3",
        "--json",
    ]);
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON row"))
        .collect();
    assert_eq!(rows.len(), 3);
    for r in &rows {
        has_fields(
            r,
            &[
                "result_ok",
                "deaths",
                "backtracks",
                "max_secondary_jobs",
                "work_ratio",
            ],
        );
        assert_eq!(r["result_ok"], true, "{r}");
        assert!(r["deaths"].as_u64().unwrap() > 0, "{r}");
    }
    let out = weft(&["sim", "bsp", "--app", "sort"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--app"));
}

#[test]
fn bench_route_delivers_every_message_around_an_eighth_killed() {
    // 64 nodes, 8 killed and no one told: every message to a live rank is delivered within
    // ceil(log2 N) + 2 hops, the broadcast reaches every live node, and a hop is timed beside
    // a direct message to a finger in the same cluster.
    let out = succeed(&[
        "bench", "route", "--nodes", "64", "--fail", "8", "--probes", "50", "--seed", "4", "--json",
    ]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    has_fields(
        &r,
        &[
            "nodes",
            "dead",
            "sent",
            "delivered",
            "max_hops",
            "mean_hops",
            "hop_us",
            "direct_us",
            "hop_over_direct",
            "l_us",
        ],
    );
    assert_eq!(r["nodes"], 64);
    assert_eq!(r["dead"], 8);
    assert_eq!(r["sent"], 56 * 4, "{r}");
    assert_eq!(r["delivered"], r["sent"], "{r}");
    assert_eq!(r["failed"], 0, "{r}");
    assert!(r["max_hops"].as_u64().unwrap() <= 6 + 2, "{r}");
    assert_eq!(r["broadcast_reached"], r["live"], "{r}");
    assert!(r["hop_us"].as_f64().unwrap() > 0.0, "{r}");
    let out = weft(&["bench", "route", "--nodes", "8", "--fail", "7"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--fail 7"));
}

/// The Process Order experiment's three schemes on 7 processes beside the grid: every run
/// keeps the total order with nobody suspected, and the reconnecting ones really open a
/// connection per message (the kept one opens one per tree edge).
#[test]
fn bench_broadcast_runs_the_three_schemes_in_total_order() {
    let out = succeed(&[
        "bench",
        "broadcast",
        "--nodes-list",
        "7",
        "--broadcasts",
        "20",
        "--json",
    ]);
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON row"))
        .collect();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["protocol"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["C", "H1", "H2"]);
    for r in &rows {
        has_fields(
            r,
            &[
                "nodes",
                "protocol",
                "broadcasts",
                "total_ms",
                "per_broadcast_us",
                "p50_us",
                "p99_us",
                "order_ok",
            ],
        );
        assert_eq!(r["order_ok"], true, "{r}");
        assert_eq!(r["broadcasts"], 20, "{r}");
        assert_eq!(r["suspicions"], 0, "{r}");
        assert!(r["grid_rounds"].as_u64().unwrap() > 0, "{r}");
        let connections = r["connections"].as_u64().unwrap();
        if r["protocol"] == "H2" {
            assert!(connections <= 2 * 7, "{r}");
        } else {
            // Each of the 6 others gets the broadcast and answers, 20 times: 2 connections
            // each way, each authenticated at both ends.
            assert!(connections >= 20 * 6 * 2 * 2, "{r}");
        }
    }
}

/// A root failed in the middle of the stream: the stream goes on under a new root, and no
/// broadcast is lost, doubled or reordered at any survivor.
#[test]
fn bench_broadcast_survives_the_root_failing_halfway() {
    for scheme in ["H1", "H2"] {
        let out = succeed(&[
            "bench",
            "broadcast",
            "--nodes-list",
            "7",
            "--protocols",
            scheme,
            "--broadcasts",
            "20",
            "--fail",
            "root",
            "--no-background",
            "--json",
        ]);
        let r = one_json(&out);
        assert_eq!(r["order_ok"], true, "{r}");
        assert_eq!(r["broadcasts"], 20, "{r}");
        assert_eq!(r["victim"], 0, "{r}");
        assert_eq!(r["background"], false, "{r}");
    }
}

/// Hung processes (sockets up, nothing handled) are found by the ring heartbeats, each after
/// its watcher's deadline (1.5 to 2.5 periods of silence) and not before it.
#[test]
fn bench_heartbeat_finds_every_hung_process_after_its_deadline() {
    let out = succeed(&[
        "bench",
        "heartbeat",
        "--nodes",
        "6",
        "--heartbeat-us",
        "50000",
        "--trials",
        "3",
        "--quiet-periods",
        "4",
        "--json",
    ]);
    let r = one_json(&out);
    has_fields(
        &r,
        &[
            "nodes",
            "heartbeat_us",
            "trials",
            "detect_us_p50",
            "detect_us_max",
            "periods",
            "false_suspicions",
        ],
    );
    assert_eq!(r["trials"], 3, "{r}");
    assert!(
        r["detect_us_p50"].as_f64().unwrap() >= 1.5 * 50_000.0 * 0.99,
        "{r}"
    );
    assert!(r["periods"].as_u64().unwrap() >= 6 * 4, "{r}");
    let out = weft(&["bench", "heartbeat", "--nodes", "4", "--trials", "3"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--trials 3"));
}

/// The same with `weft node` processes: the radix membership's ring heartbeats find each
/// SIGSTOPped process (a detection cannot come before the silence has lasted 1.5 periods).
#[test]
fn bench_heartbeat_finds_every_stopped_node_process() {
    let out = succeed(&[
        "bench",
        "heartbeat",
        "--procs",
        "--nodes",
        "6",
        "--heartbeat-us",
        "50000",
        "--trials",
        "3",
        "--quiet-periods",
        "4",
        "--json",
    ]);
    let r = one_json(&out);
    assert_eq!(
        (
            r["trials"].as_u64(),
            r["protocol"].as_str(),
            r["procs"].as_bool()
        ),
        (Some(3), Some("membership"), Some(true)),
        "{r}"
    );
    assert!(
        r["detect_us_p50"].as_f64().unwrap() >= 1.5 * 50_000.0 * 0.99,
        "{r}"
    );
}

/// `--procs`: one `weft bench bmg-node` process per node, each building the launch tree from
/// the launcher's arguments (a random tree's seed included: a process with another tree ends
/// with wrong fingers). The run ends only when no message is in flight (two rounds of
/// counters agree), so at 256 processes, where a report can wait hundreds of ms for its
/// process to be scheduled, every finger is still right.
#[test]
fn bench_bmg_procs_runs_a_process_per_node_and_every_finger_is_right() {
    let out = succeed(&[
        "bench",
        "bmg",
        "--procs",
        "--tree",
        "random",
        "--degree",
        "3",
        "--seed",
        "11",
        "--nodes-list",
        "40",
        "--repeat",
        "2",
        "--json",
    ]);
    let r = one_json(&out);
    assert_eq!(
        (r["procs"].clone(), r["nodes"].clone()),
        (true.into(), 40.into()),
        "{r}"
    );
    assert_eq!(
        (r["converged"].clone(), r["wrong"].clone()),
        (true.into(), 0.into()),
        "{r}"
    );
    assert!(r["msgs"].as_u64().unwrap() > 0, "{r}");
    // The nodes' CPU, summed over their processes.
    assert!(r["real_cpu_ms"].as_f64().unwrap() > 0.0, "{r}");
    // Their leaves' firings are: every leaf fires at least once (its first `Info`).
    assert!(r["leaf_fires"].as_f64().unwrap() >= 1.0, "{r}");
    // Each process says when its state last changed, on the host's clock: the BMG built.
    assert!(r["built_ms"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["conns"].is_null(), "{r}");
    let r = one_json(&succeed(&[
        "bench",
        "bmg",
        "--procs",
        "--nodes-list",
        "256",
        "--repeat",
        "1",
        "--json",
    ]));
    assert_eq!(
        (r["converged"].clone(), r["wrong"].clone()),
        (true.into(), 0.into()),
        "{r}"
    );
}

/// A node process refuses what is not its launcher's exchange, naming what it expected.
#[test]
fn a_bmg_node_process_refuses_a_bad_exchange() {
    use std::io::{BufRead, BufReader, Write};
    let args = [
        "bench",
        "bmg-node",
        "--id",
        "0",
        "--nodes",
        "4",
        "--tree",
        "binomial",
        "--degree",
        "1",
        "--seed",
        "0",
        "--period-us",
        "1000",
    ];
    let out = weft(&args);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("WEFT_JOB_KEY"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = "11".repeat(32);
    let talk = |stdin_text: &str| {
        let mut child = common::weft_command(&[("WEFT_JOB_KEY", &key)], &args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        // Kept open until the process ends: it reports `ready` before reading `go`.
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut first).unwrap();
        assert!(first.contains("listening"), "{first}");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin_text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        drop(stdout);
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = talk("1=127.0.0.1:1,2=127.0.0.1:2\n");
    assert!(err.contains("3"), "a missing peer is named: {err}");
    let peers = "1=127.0.0.1:1,2=127.0.0.1:2,3=127.0.0.1:3\n";
    // `go` must come with its start time.
    for bad in ["start\n", "go\n", "go soon\n"] {
        let err = talk(&format!("{peers}{bad}"));
        assert!(
            err.contains("\"go\"") && err.contains("start time"),
            "{bad:?}: {err}"
        );
    }
}

#[test]
fn bench_bmg_builds_every_finger_on_real_nodes_beside_the_projection() {
    let out = succeed(&[
        "bench",
        "bmg",
        "--nodes-list",
        "16,64",
        "--repeat",
        "3",
        "--json",
    ]);
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON row"))
        .collect();
    assert_eq!(rows.len(), 2);
    for (r, n) in rows.iter().zip([16, 64]) {
        has_fields(
            r,
            &[
                "nodes",
                "tree",
                "real_ms",
                "sim_ms",
                "ratio",
                "msgs",
                "converged",
                "l_us",
                "c_us",
            ],
        );
        assert_eq!(r["nodes"], n);
        assert_eq!(r["tree"], "binomial");
        // One projection is the model, named in the row, and `ratio` is its ratio.
        assert_eq!(r["model"], "turns", "{r}");
        assert_eq!(r["ratio"], r["ratio_built"], "{r}");
        // Both runs back off alike, by default as a real node does.
        assert_eq!(r["backoff"], 5, "{r}");
        // The middle of three real runs, within their range.
        assert_eq!(r["repeat"], 3, "{r}");
        let real = |k: &str| r[k].as_f64().unwrap();
        assert!(
            real("real_ms_min") <= real("real_ms") && real("real_ms") <= real("real_ms_max"),
            "{r}"
        );
        // Each run against the projection from its own storm: the middle ratio in their range.
        assert!(
            real("ratio_turns_min") <= real("ratio_turns")
                && real("ratio_turns") <= real("ratio_turns_max")
                && real("ratio_turns_min") > 0.0,
            "{r}"
        );
        // The BMG is built at the last change of any process's state, after the ring went
        // quiet: measured and projected, each run against its own projections.
        assert!(
            real("built_ms_min") <= real("built_ms") && real("built_ms") <= real("built_ms_max"),
            "{r}"
        );
        for ratio in ["ratio_built", "ratio_crossing"] {
            let (lo, mid, hi) = (
                real(&format!("{ratio}_min")),
                real(ratio),
                real(&format!("{ratio}_max")),
            );
            assert!(lo <= mid && mid <= hi && lo > 0.0, "{ratio}: {r}");
        }
        assert!(real("sim_turns_built_ms") > 0.0, "{r}");
        // Every connection's two ends are counted; dials that cross open two, in the
        // crossing projection as in the engine.
        assert!(r["conns"].as_u64().unwrap() > 0, "{r}");
        assert!(real("real_counts_cpu_ms") > 0.0, "{r}");
        assert!(
            r["sim_crossing_conns"].as_u64().unwrap() >= r["sim_turns_conns"].as_u64().unwrap(),
            "{r}"
        );
        // The CPU a connection costs is measured once the round starts, not racing it; the
        // in-process nodes of the default have links instead, which cost about nothing.
        match r["transport"].as_str() {
            Some("tcp") => assert!(real("connect_cpu_us") > 0.0, "{r}"),
            Some("inproc") => assert!(real("connect_cpu_us") >= 0.0, "{r}"),
            t => panic!("transport {t:?}: {r}"),
        }
        assert_eq!(r["converged"], true, "{r}");
        assert_eq!(r["wrong"], 0, "{r}");
        assert!(r["real_ms"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["sim_ms"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["msgs"].as_u64().unwrap() > 0, "{r}");
        // In-process, the job's CPU over the construction is measured.
        assert!(r["real_cpu_ms"].as_f64().unwrap() > 0.0, "{r}");
        // Every leaf fires at least once (its first `Info`), for real and projected.
        for fires in ["leaf_fires", "sim_turns_leaf_fires"] {
            assert!(r[fires].as_f64().unwrap() >= 1.0, "{fires}: {r}");
        }
        // From a clean start every process's rule 1 of Algorithm 2 fires once, with its final
        // ring neighbors: the BMG's messages are the tree's, in the real run as projected;
        // only the ring's re-firings differ.
        let bmg = |all: &str, ring: &str| r[all].as_u64().unwrap() - r[ring].as_u64().unwrap();
        assert_eq!(
            bmg("msgs", "ring_msgs"),
            bmg("sim_msgs", "sim_ring_msgs"),
            "{r}"
        );
        for projection in ["split", "storm", "queued", "turns"] {
            assert_eq!(
                bmg("msgs", "ring_msgs"),
                bmg(
                    &format!("sim_{projection}_msgs"),
                    &format!("sim_{projection}_ring_msgs")
                ),
                "{projection}: {r}"
            );
        }
    }
    let out = weft(&["bench", "bmg", "--nodes-list", "16,100"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("power of two"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "refused before any run");
    for (flag, bad) in [("--backoff", "17"), ("--repeat", "0")] {
        let out = weft(&["bench", "bmg", flag, bad]);
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(flag),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A random launch tree of any size, and the plot of both times.
    let dir = scratch("bench-bmg");
    let svg = dir.join("bmg.svg");
    let out = succeed(&[
        "bench",
        "bmg",
        "--tree",
        "random",
        "--degree",
        "3",
        "--seed",
        "5",
        "--nodes-list",
        "50",
        "--repeat",
        "1",
        "--json",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let r = one_json(&out);
    assert_eq!(
        (r["nodes"].clone(), r["tree"].clone()),
        (50.into(), "random".into())
    );
    assert_eq!(r["converged"], true, "{r}");
    assert!(
        r["depth"].as_u64().unwrap() >= 4,
        "50 processes, 3 children at most: {r}"
    );
    // Connections charged as CPU make the projection longer, never shorter. In-process (the
    // default) a first message has no dial to wait for, and may come as fast as the rest.
    match r["transport"].as_str() {
        Some("tcp") => assert!(r["connect_us"].as_f64().unwrap() > 0.0, "{r}"),
        Some("inproc") => assert!(r["connect_us"].as_f64().unwrap() >= 0.0, "{r}"),
        t => panic!("transport {t:?}: {r}"),
    }
    assert!(
        r["sim_connect_ms"].as_f64().unwrap() >= r["sim_ms"].as_f64().unwrap(),
        "{r}"
    );
    // The plot shows the real run beside the model alone (`--projections all` for the rest).
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(
        plot.contains("real nodes, BMG built") && plot.contains("model: turns projection"),
        "{plot}"
    );
    assert!(!plot.contains("connections free"), "{plot}");
}

/// `weft sim faults` runs fault schedules for membership and the overlay, checks each, and
/// says so in its JSON; a schedule that fails is replayed from its JSON and fails again, with
/// the reason; an unknown protocol is refused by name.
#[test]
fn sim_faults_checks_replays_and_refuses() {
    for protocol in ["membership", "bmg"] {
        let out = succeed(&[
            "sim",
            "faults",
            "--protocol",
            protocol,
            "--schedules",
            "100",
            "--seed",
            "1",
            "--json",
        ]);
        let v = one_json(&out);
        has_fields(
            &v,
            &[
                "protocol",
                "schedules",
                "events",
                "messages",
                "net",
                "applied",
                "violations",
                "wall_ms",
            ],
        );
        assert_eq!(v["protocol"], protocol);
        assert_eq!(v["violations"], 0, "{v}");
        assert!(v["net"]["lost"].as_u64().unwrap() > 0, "{v}");
        assert!(v["applied"]["partitions"].as_u64().unwrap() > 0, "{v}");
    }
    // A partition that outlasts the check: two views at the end, a violation.
    let dir = scratch("sim-faults");
    let path = dir.join("split.json");
    let sides: Vec<String> = (0..6).map(|i| (i % 2).to_string()).collect();
    std::fs::write(
        &path,
        format!(
            r#"{{"protocol":"membership","seed":3,"nodes":6,"spare":0,"radix":2,"tree_depth":0,
               "rebalance":false,"net":{{"loss":0.0,"dup":0.0,"reorder":0.0,"tail":0.0,
               "tail_max_us":0}},"faults":[{{"kind":"partition","at_us":500,
               "sides":[{}],"for_us":100000000}}]}}"#,
            sides.join(",")
        ),
    )
    .unwrap();
    let out = weft(&["sim", "faults", "--replay", path.to_str().unwrap()]);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no agreement"), "{text}");
    // A hand-edited file names its wrong field instead of panicking.
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace(r#""radix":2"#, r#""radix":3"#)).unwrap();
    let out = weft(&["sim", "faults", "--replay", path.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("radix 3"), "{err}");
    let out = weft(&["sim", "faults", "--protocol", "gossip"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("gossip"));
}

#[test]
fn bsp_run_keeps_the_fault_free_result_through_kills_on_real_nodes() {
    // 16 engine nodes, a quarter of them killed at seeded moments of the run.
    for (app, seed) in [("jacobi", "11"), ("prefix-sum", "12")] {
        let out = succeed(&[
            "bsp",
            "run",
            "--app",
            app,
            "--nodes",
            "16",
            "--supersteps",
            "12",
            "--fail",
            "4",
            "--seed",
            seed,
            "--json",
        ]);
        let r = one_json(&out);
        has_fields(
            &r,
            &[
                "app",
                "nodes",
                "virt",
                "supersteps",
                "fail",
                "kills",
                "result_ok",
                "total_ms",
                "per_superstep_ms",
                "baseline_ms",
                "overhead",
                "rollbacks",
                "rebuilt_states",
            ],
        );
        assert_eq!(r["result_ok"], true, "{r}");
        assert_eq!(r["kills"].as_array().map(Vec::len), Some(4), "{r}");
        let backtracks = r["backtracks"].as_u64().expect("backtracks");
        assert_eq!(r["rollbacks"], 4 + backtracks, "{r}");
        assert!(r["rebuilt_states"].as_u64().unwrap() > 0, "{r}");
        assert!(r["baseline_ms"].as_f64().unwrap() > 0.0, "{r}");
    }
    // A whole neighborhood killed at one moment: its states survive in the SafeState's
    // replicas only, and the survivors BACKTRACK to it.
    let mut backtracked = 0;
    for seed in ["2", "5"] {
        let out = succeed(&[
            "bsp",
            "run",
            "--nodes",
            "16",
            "--supersteps",
            "12",
            "--fail",
            "4",
            "--burst",
            "--seed",
            seed,
            "--json",
        ]);
        let r = one_json(&out);
        assert_eq!(r["result_ok"], true, "{r}");
        assert_eq!(r["burst"], true, "{r}");
        let b = r["backtracks"].as_u64().expect("backtracks");
        assert_eq!(r["rollbacks"], 4 + b, "{r}");
        backtracked += b;
    }
    assert!(backtracked > 0, "no run went back to a SafeState");
    for (args, named) in [
        (vec!["--app", "sort"], "--app"),
        (vec!["--nodes", "4", "--fail", "4"], "--fail 4"),
        (vec!["--supersteps", "0"], "--supersteps 0"),
        (vec!["--alpha", "1"], "--alpha 1"),
        (vec!["--safe-every", "0"], "--safe-every 0"),
    ] {
        let mut all = vec!["bsp", "run"];
        all.extend(args);
        let out = weft(&all);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(named), "{err}");
    }
}

#[test]
fn bench_agree_decides_alike_with_the_root_killed_during_the_call() {
    let out = succeed(&[
        "bench",
        "agree",
        "--nodes",
        "8,32",
        "--fail-during",
        "1",
        "--repeat",
        "3",
        "--seed",
        "5",
        "--json",
    ]);
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 2);
    for r in &rows {
        has_fields(
            r,
            &[
                "nodes",
                "fail_during",
                "victims",
                "trials",
                "agreed",
                "agree",
                "ts",
                "failed_named",
            ],
        );
        assert_eq!(r["agreed"], true, "{r}");
        assert_eq!(r["victims"], "root");
        assert!(r["agree"]["p50_us"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["ts"]["p50_us"].as_f64().unwrap() > 0.0, "{r}");
    }
    let out = weft(&["bench", "agree", "--nodes", "4", "--fail-during", "4"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--fail-during 4"));
}

#[test]
fn ping_compares_the_endpoint_with_a_hand_written_protocol() {
    let out = succeed(&[
        "ping",
        "--sizes",
        "32,65536",
        "--iters",
        "200",
        "--transport",
        "tcp",
        "--compare-api",
        "--rounds",
        "2",
        "--json",
    ]);
    let rows = json_lines(&out);
    let apis: Vec<(&str, u64)> = rows
        .iter()
        .map(|r| (r["api"].as_str().unwrap(), r["size"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        apis,
        [
            ("protocol", 32),
            ("protocol", 65536),
            ("endpoint", 32),
            ("endpoint", 65536)
        ]
    );
    for r in &rows {
        assert_eq!(r["iters"], 200, "{r}");
        assert!(r["p50_us"].as_f64().unwrap() > 0.0, "{r}");
        // The endpoint's rows carry its ratios over the protocol's, one per round.
        let rated = r["api"] == "endpoint";
        assert_eq!(r.get("p50_ratio").is_some(), rated, "{r}");
        if rated {
            assert_eq!(r["p50_ratio"]["n"], 2, "{r}");
        }
    }
    let out = weft(&["ping", "--api", "endpoint", "--compare"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--compare-api"));
}
