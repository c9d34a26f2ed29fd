//! The token-ring example (`examples/embed_ring.rs`) as its users run it: in one process with
//! a rank stopped while it holds the token, and under Open MPI's `mpirun` with a rank that
//! SIGKILLs itself while it holds the token. Either way every survivor finishes the laps with a
//! view that excludes the dead rank, and says so.

mod common;

#[path = "../examples/embed_ring.rs"]
#[allow(dead_code)]
mod embed_ring;

use embed_ring::{Outcome, Ring};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use weft::prelude::*;

/// Run the ring over `n` in-process ranks; each rank's outcome.
fn in_process(n: usize, ring: Ring) -> Vec<(Rank, Outcome)> {
    let job = Endpoint::on_loopback(n, &EndpointConfig::default()).unwrap();
    let runs: Vec<_> = job
        .into_iter()
        .map(|ep| std::thread::spawn(move || (ep.rank(), embed_ring::run(&ep, ring))))
        .collect();
    runs.into_iter()
        .map(|t| {
            let (rank, outcome) = t.join().unwrap();
            (
                rank,
                outcome.unwrap_or_else(|e| panic!("rank {}: {e}", rank.0)),
            )
        })
        .collect()
}

#[test]
fn the_ring_goes_on_when_its_holder_dies() {
    // 6 ranks, 5 laps; rank 0 (the membership's root) takes counts 1, 7, 13: it dies with
    // the token on its third turn, and its successor takes over as root.
    for dead in [0u32, 3] {
        let ring = Ring {
            laps: 5,
            hold: Duration::from_millis(1),
            die: Some((dead, 13 + u64::from(dead))),
        };
        let outcomes = in_process(6, ring);
        let live: Vec<Rank> = (0..6).filter(|&r| r != dead).map(Rank).collect();
        for (rank, o) in &outcomes {
            match o {
                Outcome::Died => assert_eq!(rank.0, dead, "only rank {dead} dies"),
                Outcome::Done { count, view, left } => {
                    // The dead rank left first; ranks that finished before this one heard the
                    // announcement may have left after it.
                    assert_eq!(left.first(), Some(&Rank(dead)), "rank {}", rank.0);
                    assert_eq!(left.iter().filter(|&&r| r == Rank(dead)).count(), 1);
                    // Its last view: live ranks, none of them reported gone (a rank may end
                    // between a view and the last of the departures it names).
                    assert!(
                        view.iter().all(|r| live.contains(r) && !left.contains(r)),
                        "rank {}: view {view:?}, left {left:?}",
                        rank.0
                    );
                    assert!(view.contains(rank), "rank {}: view {view:?}", rank.0);
                    // The laps ran past the death: the last count is within a lap of the end.
                    assert!(*count > 24, "rank {} stopped at {count}", rank.0);
                }
            }
        }
        assert_eq!(
            outcomes
                .iter()
                .filter(|(_, o)| matches!(o, Outcome::Died))
                .count(),
            1
        );
    }
}

/// The example's binary, built beside this test by `cargo test` (or built now).
fn example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|d| d.parent()).unwrap();
    let bin = dir.join("examples").join("embed_ring");
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let profile = dir.file_name().unwrap().to_str().unwrap();
        let mut build = Command::new(cargo);
        build.args(["build", "--example", "embed_ring"]);
        if profile == "release" {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo");
        assert!(status.success(), "cargo build --example embed_ring");
    }
    bin
}

#[test]
fn the_ring_goes_on_under_mpirun_when_a_rank_is_killed() {
    if Command::new("mpirun").arg("--version").output().is_err() {
        common::skip::skip("mpirun not installed (Debian's openmpi-bin)");
        return;
    }
    // Rank 2 SIGKILLs itself on taking count 9 (its second turn of six ranks).
    let out = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe"])
        .args(["--mca", "orte_enable_recovery", "true"])
        .args(["--mca", "orte_abort_on_non_zero_status", "0"])
        .args(["-np", "6", "-x", "WEFT_JOB_SECRET", "-x", "WEFT_RING_DIE"])
        .args(["-x", "WEFT_RING_LAPS"])
        .arg(example())
        .env("WEFT_JOB_SECRET", "embed-ring-test")
        .env("WEFT_RING_DIE", "2:9")
        .env("WEFT_RING_LAPS", "5")
        .env_remove("WEFT_JOB_KEY")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let done: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(": done at "))
        .collect();
    assert_eq!(done.len(), 5, "five survivors finish:\n{stdout}\n{stderr}");
    for line in &done {
        // `rank R: done at C; view [..]; left [2, ..]`: the killed rank out of the view, named
        // first among those that left (the first to finish may follow it).
        assert!(!line.starts_with("rank 2:"), "{line}");
        let (view, left) = line
            .split_once("; view [")
            .and_then(|(_, rest)| rest.split_once("]; left ["))
            .unwrap_or_else(|| panic!("{line}"));
        assert!(!view.split(", ").any(|r| r == "2"), "{line}\n{stderr}");
        assert!(left == "2]" || left.starts_with("2, "), "{line}\n{stderr}");
    }
}
