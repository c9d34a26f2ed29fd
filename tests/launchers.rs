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
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The lines of every rank's `--log` file so far, parsed.
fn logs(dir: &Path, n: u32) -> Vec<Vec<serde_json::Value>> {
    (0..n)
        .map(|r| {
            std::fs::read_to_string(dir.join(format!("node-{r}.jsonl")))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        })
        .collect()
}

/// Wait (reading the logs as they grow) until `done` holds; the logs then.
fn until(
    dir: &Path,
    n: u32,
    within: Duration,
    what: &str,
    done: impl Fn(&[Vec<serde_json::Value>]) -> bool,
) -> Vec<Vec<serde_json::Value>> {
    let deadline = Instant::now() + within;
    loop {
        let l = logs(dir, n);
        if done(&l) {
            return l;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {within:?}: {l:#?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

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

/// One launcher's run: start 8 ranks, wait for the tree, kill rank 5, check the survivors'
/// views, stop the launcher, and check that no rank outlives it.
fn eight_ranks_survive_a_kill(launcher: &str, mut cmd: Command, extra: &[&str]) {
    let n = 8u32;
    let dir: PathBuf =
        std::env::temp_dir().join(format!("weft-launch-{launcher}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let started = Instant::now();
    let mut child: Child = cmd
        .arg(env!("CARGO_BIN_EXE_weft"))
        .args(["node", "--log"])
        .arg(dir.join("node-{rank}.jsonl"))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {launcher}: {e}"));
    // Every rank connected to its parent in the radix-4 tree (rank r's parent is (r-1)/4).
    let l = until(&dir, n, Duration::from_secs(60), "tree connected", |l| {
        (1..n as usize).all(|r| {
            let parent = ((r - 1) / 4) as u64;
            l[r].iter()
                .any(|v| v["kind"] == "authenticated" && v["peer"] == parent)
        })
    });
    eprintln!(
        "{launcher}: {n} ranks up and connected in {:?}",
        started.elapsed()
    );
    let pid = |r: usize| -> i32 {
        l[r].iter()
            .find(|v| v["kind"] == "bootstrap")
            .and_then(|v| v["pid"].as_i64())
            .expect("a bootstrap line with the pid") as i32
    };
    for (r, lines) in l.iter().enumerate() {
        let b = lines.iter().find(|v| v["kind"] == "bootstrap").unwrap();
        assert_eq!(
            (b["rank"].as_u64(), b["size"].as_u64()),
            (Some(r as u64), Some(8))
        );
    }
    let pids: Vec<i32> = (0..n as usize).map(pid).collect();
    // SIGKILL rank 5: a crash, no goodbye.
    let killed_at = Instant::now();
    // SAFETY: kill with a pid this test read from the rank's own report.
    assert_eq!(unsafe { libc::kill(pids[5], libc::SIGKILL) }, 0);
    let want: Vec<u64> = (0..n as u64).filter(|&r| r != 5).collect();
    let want = serde_json::json!(want);
    until(&dir, n, Duration::from_secs(30), "survivors agree", |l| {
        (0..n as usize).filter(|&r| r != 5).all(|r| {
            l[r].iter()
                .any(|v| v["kind"] == "view" && v["view"] == want)
        }) && l[0].iter().any(|v| v["kind"] == "stabilized")
    });
    eprintln!(
        "{launcher}: survivors agreed {:?} after the kill",
        killed_at.elapsed()
    );
    // The launcher ends: so do its ranks.
    // SAFETY: the launcher is our child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    let gone = Instant::now() + Duration::from_secs(20);
    for (r, &p) in pids.iter().enumerate() {
        // SAFETY: signal 0 only asks whether the process exists.
        while unsafe { libc::kill(p, 0) } == 0 {
            assert!(Instant::now() < gone, "rank {r} outlived its launcher");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
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
    eight_ranks_survive_a_kill("mpirun", cmd, &[]);
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
    eight_ranks_survive_a_kill("mpiexec.hydra", cmd, &["--supervised"]);
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

/// `weft bench stabilize --bootstrap auto` as the issue runs it: every rank a node, rank 0
/// driving three trials (fresh jobs) and printing one JSON line whose views agree.
fn bench_under(launcher: &str, mut cmd: Command) -> serde_json::Value {
    let out = cmd
        .arg(env!("CARGO_BIN_EXE_weft"))
        .args([
            "bench",
            "stabilize",
            "--bootstrap",
            "auto",
            "--repeat",
            "3",
            "--json",
        ])
        .args(["--timeout-s", "30"])
        .output()
        .unwrap_or_else(|e| panic!("start {launcher}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{launcher}: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(lines.len(), 1, "one report, from rank 0: {stdout}");
    let r = lines[0].clone();
    assert_eq!(r["views_agree"], true, "{r}");
    assert_eq!(
        (r["ranks"].as_u64(), r["repeat"].as_u64()),
        (Some(8), Some(3)),
        "{r}"
    );
    assert!(r["ts_p50_us"].as_f64().unwrap() > 0.0, "{r}");
    eprintln!("{launcher}: {r}");
    r
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
    let r = bench_under("mpirun", cmd);
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
    let r = bench_under("mpiexec.hydra", cmd);
    assert_eq!(r["launcher"], "pmi");
    let err = r["clock_err_us"].as_f64().unwrap();
    assert!(
        err > 0.0 && err < 10_000.0,
        "a round trip's half over loopback: {r}"
    );
}
