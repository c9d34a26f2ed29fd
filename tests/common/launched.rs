//! A job under a real launcher, as the launcher tests run it: `weft node` ranks that log their
//! events to a file each, or `weft bench stabilize --bootstrap auto` printing rank 0's report.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The lines of every rank's `--log` file so far, parsed.
pub fn logs(dir: &Path, n: u32) -> Vec<Vec<serde_json::Value>> {
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
pub fn until(
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

/// One launcher's run of `n` ranks (`cmd` starts them): wait for the tree, kill rank 5, check
/// the survivors' views, stop the launcher, and check that no rank outlives it.
pub fn ranks_survive_a_kill(launcher: &str, n: u32, mut cmd: Command, extra: &[&str]) {
    assert!(n > 5, "rank 5 is the victim");
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
            (Some(r as u64), Some(u64::from(n)))
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

/// `weft bench stabilize --bootstrap auto` as the issue runs it: every rank of the `n` that
/// `cmd` starts a node, rank 0 driving three trials (fresh jobs) and printing one JSON line
/// whose views agree. `extra`: more arguments of the benchmark.
pub fn bench_under(launcher: &str, n: u32, mut cmd: Command, extra: &[&str]) -> serde_json::Value {
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
        .args(extra)
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
        (Some(u64::from(n)), Some(3)),
        "{r}"
    );
    assert!(r["ts_p50_us"].as_f64().unwrap() > 0.0, "{r}");
    eprintln!("{launcher}: {r}");
    r
}
