//! Real launchers start `weft node --bootstrap auto`: Open MPI's `mpirun` (ranks from
//! `OMPI_COMM_WORLD_*`, addresses at rank 0's rendezvous, the key from `WEFT_JOB_SECRET`) and
//! MPICH's `mpiexec.hydra` (PMI-1 over `PMI_FD`, addresses and a fresh key through its
//! key-value space). Eight processes find each other, connect their membership tree, survive
//! one rank killed with SIGKILL (every survivor installs the same view without it), and end
//! with their launcher.
//!
//! Needs Debian's `openmpi-bin` and `mpich` (`.ci/run` installs them). Without them the test
//! says SKIPPED; under `CI=true` it fails instead.

mod common;

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Whether `tool` runs here. Under CI it must.
fn have(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !ok {
        common::skip::skip(&format!(
            "{tool} not installed (Debian's openmpi-bin and mpich)"
        ));
    }
    ok
}

#[test]
fn open_mpi_starts_a_job_that_survives_a_kill() {
    if !have("mpirun") {
        return;
    }
    let mut cmd = Command::new("mpirun");
    // Root in CI containers; several ranks per core; a killed rank must not end the job
    // (Open MPI 4.1: recovery on, and a non-zero status not an abort).
    cmd.args(["--allow-run-as-root", "--oversubscribe"])
        .args(["--mca", "orte_enable_recovery", "true"])
        .args(["--mca", "orte_abort_on_non_zero_status", "0"])
        .args(["-np", "8", "-x", "WEFT_JOB_SECRET"])
        .env("WEFT_JOB_SECRET", "launchers-test")
        .env_remove("WEFT_JOB_KEY");
    common::launched::ranks_survive_a_kill("mpirun", 8, cmd, &[]);
}

#[test]
fn mpich_hydra_starts_a_job_that_survives_a_kill() {
    if !have("mpiexec.hydra") {
        return;
    }
    let mut cmd = Command::new("mpiexec.hydra");
    // Hydra (MPICH 4.0) ends the whole job when any process dies of a signal, whatever its
    // flags; with -disable-auto-cleanup it keeps the others when one exits with an error.
    // `--supervised` turns a node's SIGKILL into its process's exit status 137.
    cmd.args(["-disable-auto-cleanup", "-n", "8"])
        .env_remove("WEFT_JOB_KEY")
        .env_remove("WEFT_JOB_SECRET");
    common::launched::ranks_survive_a_kill("mpiexec.hydra", 8, cmd, &["--supervised"]);
}

/// A malformed launcher environment is an error naming the variable, not a hang.
#[test]
fn a_malformed_launcher_environment_names_the_variable() {
    let cases: HashMap<&str, Vec<(&str, &str)>> = HashMap::from([
        (
            "SLURM_PROCID",
            vec![("SLURM_PROCID", "9"), ("SLURM_NTASKS", "4")],
        ),
        (
            "SLURM_JOB_NODELIST",
            vec![
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "4"),
                ("SLURM_JOB_ID", "7"),
                ("SLURM_JOB_NODELIST", "n[1-"),
            ],
        ),
        (
            "PMI_FD",
            vec![("PMI_RANK", "0"), ("PMI_SIZE", "2"), ("PMI_FD", "x")],
        ),
        (
            "WEFT_RENDEZVOUS",
            vec![("WEFT_RANK", "1"), ("WEFT_SIZE", "2")],
        ),
    ]);
    let mut seen = HashSet::new();
    for (var, env) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_weft"))
            .args([
                "node",
                "--bootstrap",
                "auto",
                "--startup-timeout-ms",
                "2000",
            ])
            .env_clear()
            .envs(env)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{var}: {err}");
        assert!(err.contains(var), "{var} not named: {err}");
        seen.insert(var);
    }
    assert_eq!(seen.len(), 4);
}

#[test]
fn the_benchmark_runs_under_mpirun() {
    if !have("mpirun") {
        return;
    }
    let mut cmd = Command::new("mpirun");
    // No key or secret in the environment: the ranks derive the job key from the user's
    // secret file (here a fresh one of the test's, created by whichever rank comes first).
    let secret = std::env::temp_dir().join(format!("weft-secret-{}", std::process::id()));
    let _ = std::fs::remove_file(&secret);
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-np", "8"])
        .env_remove("WEFT_JOB_KEY")
        .env_remove("WEFT_JOB_SECRET")
        .env("WEFT_SECRET_FILE", &secret);
    let r = common::launched::bench_under("mpirun", 8, cmd, &[]);
    let _ = std::fs::remove_file(&secret);
    assert_eq!(r["launcher"], "ompi");
    // One host: every rank shares rank 0's clock.
    assert_eq!(r["clock_err_us"].as_f64(), Some(0.0), "{r}");
}

#[test]
fn the_benchmark_runs_under_hydra_with_estimated_clocks() {
    if !have("mpiexec.hydra") {
        return;
    }
    let mut cmd = Command::new("mpiexec.hydra");
    // Estimate every offset as for other hosts: the true ones are zero here, so the bound
    // must hold them, and the trials must still agree.
    cmd.args(["-n", "8"]).env("WEFT_CLOCK_SYNC", "always");
    let r = common::launched::bench_under("mpiexec.hydra", 8, cmd, &[]);
    assert_eq!(r["launcher"], "pmi");
    let err = r["clock_err_us"].as_f64().unwrap();
    assert!(
        err > 0.0 && err < 10_000.0,
        "a round trip's half over loopback: {r}"
    );
}

/// A rank that really dies (SIGKILL of its process) during a launched `bench stabilize`:
/// rank 0 names the rank whose control channel closed, keeps the trials already done (its JSON
/// line carries them with `error`), and every rank exits non-zero. Before, rank 0 waited 30 s,
/// printed "2 tree connections between ranks missing" and nothing else, and ranks 1 and 2
/// exited 0.
#[test]
fn a_rank_killed_during_a_launched_benchmark_is_named_and_the_trials_done_are_kept() {
    let n = 6;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut ranks: Vec<std::process::Child> = (0..n)
        .map(|r| {
            Command::new(env!("CARGO_BIN_EXE_weft"))
                .args([
                    "bench",
                    "stabilize",
                    "--bootstrap",
                    "env",
                    "--repeat",
                    "100000",
                ])
                .args(["--json", "--timeout-s", "20"])
                .env("WEFT_RANK", r.to_string())
                .env("WEFT_SIZE", n.to_string())
                .env("WEFT_RENDEZVOUS", format!("127.0.0.1:{port}"))
                .env("WEFT_JOB_KEY", "cd".repeat(32))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // Trials run until the kill: there is no end to wait for, only a moment well inside.
    std::thread::sleep(Duration::from_millis(2500));
    ranks[3].kill().unwrap();
    let mut outs = Vec::new();
    for c in ranks {
        outs.push(c.wait_with_output().unwrap());
    }
    let err0 = String::from_utf8_lossy(&outs[0].stderr);
    assert!(!outs[0].status.success(), "rank 0: {err0}");
    assert!(
        err0.contains("rank 3"),
        "rank 0 does not name rank 3: {err0}"
    );
    let line = String::from_utf8_lossy(&outs[0].stdout);
    if let Some(l) = line.lines().find(|l| l.starts_with('{')) {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(
            v["error"].as_str().is_some_and(|e| e.contains("rank 3")),
            "{v}"
        );
        assert!(v["repeat"].as_u64().unwrap_or(0) >= 1, "{v}");
    }
    for (r, o) in outs.iter().enumerate().skip(1) {
        assert!(!o.status.success(), "rank {r} exited 0");
    }
}
