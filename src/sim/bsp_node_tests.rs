//! Robust-BSP processors (`crate::bsp::node`) in the timed simulator: kills at any moment (in
//! a checkpoint, in the exchange, during the survivors' agreement or a rebuild), checked
//! against a fault-free run.

use super::timed::{TimedConfig, TimedWorld};
use crate::bsp::app::{self, Jacobi, PrefixSum};
use crate::bsp::event::BspEvent;
use crate::bsp::node::{gather, BspConfig, BspNode};
use crate::bsp::Program;
use crate::rng::SimRng;
use crate::storage::StorageConfig;
use crate::NodeId;
use std::collections::BTreeMap;
use std::time::Duration;

/// What one simulated run ended with.
struct Run {
    /// The merged final states, or why there are none.
    result: Result<Vec<u64>, String>,
    rollbacks: usize,
    /// BACKTRACKs to a SafeState (the most any processor reported).
    backtracks: u32,
    adopted: usize,
    /// Rollbacks to the initial states (no checkpoint complete).
    from_start: usize,
    /// When the last processor finished, in simulated ns.
    end: u64,
}

/// A processor's last `Finished`: its epoch, its states, when.
type Finished = (u32, Vec<(u64, u64)>, u64);

fn world(
    program: &'static dyn Program,
    n: u64,
    virt: u64,
    supersteps: u32,
    seed: u64,
    safe: Safe,
) -> TimedWorld<BspNode> {
    let all: Vec<NodeId> = (0..n).map(NodeId).collect();
    let cfg = BspConfig {
        virt,
        supersteps,
        safe_every: safe.every,
        alpha: safe.alpha,
        storage: StorageConfig {
            stripe: 4096,
            seed,
            ..StorageConfig::default()
        },
    };
    let nodes = all
        .iter()
        .map(|&id| BspNode::new(id, &all, program, cfg.clone()))
        .collect();
    TimedWorld::new(nodes, TimedConfig::jittered(seed, Duration::from_micros(1)))
}

fn run(
    program: &'static dyn Program,
    n: u64,
    virt: u64,
    supersteps: u32,
    kills: &[(u64, u32)],
    seed: u64,
) -> Run {
    run_safe(program, n, virt, supersteps, kills, seed, Safe::default())
}

/// How often SafeStates are taken and for which `α` their replicas are sized.
#[derive(Clone, Copy)]
struct Safe {
    every: u32,
    alpha: f64,
}

impl Default for Safe {
    fn default() -> Self {
        Self {
            every: 4,
            alpha: 0.25,
        }
    }
}

/// [`run`] with these SafeStates.
fn run_safe(
    program: &'static dyn Program,
    n: u64,
    virt: u64,
    supersteps: u32,
    kills: &[(u64, u32)],
    seed: u64,
    safe: Safe,
) -> Run {
    let mut w = world(program, n, virt, supersteps, seed, safe);
    for &(t, i) in kills {
        w.kill_at(t, i);
    }
    w.start();
    let mut finished: BTreeMap<u32, Finished> = BTreeMap::new();
    let mut failed = Vec::new();
    let (mut rollbacks, mut adopted, mut from_start) = (0, 0, 0);
    let mut backtracks = 0;
    let mut steps = 0u64;
    while w.step().is_some() {
        steps += 1;
        assert!(steps < 50_000_000, "the run does not end");
        for (i, t, e) in w.take_reports() {
            match e {
                BspEvent::Finished { epoch, states } => {
                    finished.insert(i, (epoch, states, t));
                }
                BspEvent::Failed { why } => failed.push(format!("{i}: {why}")),
                BspEvent::Excluded => failed.push(format!("{i} excluded")),
                BspEvent::Rollback {
                    adopted: a,
                    to,
                    backtracks: b,
                    ..
                } => {
                    backtracks = backtracks.max(b);
                    rollbacks += 1;
                    from_start += usize::from(to.is_none());
                    adopted += a;
                }
                _ => {}
            }
        }
    }
    let live: Vec<u32> = (0..n as u32).filter(|&i| w.is_alive(i)).collect();
    let epoch = (n as usize - live.len()) as u32 + backtracks;
    let end = finished.values().map(|f| f.2).max().unwrap_or(0);
    let result = if !failed.is_empty() {
        Err(failed.join("; "))
    } else {
        let mut reports = Vec::new();
        let mut why = None;
        for i in &live {
            match finished.remove(i) {
                Some((e, s, _)) if e == epoch => reports.push(s),
                other => why = Some(format!("{i} ended with {other:?}, epoch {epoch} expected")),
            }
        }
        match why {
            Some(w) => Err(w),
            None => gather(virt, reports),
        }
    };
    Run {
        result,
        rollbacks,
        backtracks,
        adopted,
        from_start,
        end,
    }
}

#[test]
fn a_fault_free_run_gives_the_reference_result() {
    for (p, s) in [(&PrefixSum as &dyn Program, 8), (&Jacobi, 12)] {
        let r = run(p, 8, 60, s, &[], 1);
        assert_eq!(r.result, Ok(app::reference(p, 60, s)), "{}", p.name());
        assert_eq!(r.rollbacks, 0);
    }
}

#[test]
fn kills_at_any_moment_leave_the_result_exact() {
    // Kill times spread over the whole run, the end included: a processor killed in its
    // checkpoint, in the exchange, while the others agree or rebuild, or after it finished.
    let (n, virt, s) = (8, 40, 10);
    let span = run(&Jacobi, n, virt, s, &[], 3).end;
    let mut seen_adoptions = 0;
    for seed in 0..3000u64 {
        let mut rng = SimRng::new(seed);
        let a = rng.below(n) as u32;
        let b = (a + 1 + rng.below(n - 1) as u32) % n as u32;
        let kills = [
            (rng.below(span + span / 4), a),
            (rng.below(span + span / 4), b),
        ];
        let p: &'static dyn Program = if seed % 2 == 0 { &Jacobi } else { &PrefixSum };
        let r = run(p, n, virt, s, &kills, seed);
        assert_eq!(
            r.result,
            Ok(app::reference(p, virt, s)),
            "seed {seed}, kills {kills:?}"
        );
        assert!(r.rollbacks > 0, "seed {seed}: the survivors rolled back");
        seen_adoptions += r.adopted;
    }
    assert!(seen_adoptions > 0, "some states were rebuilt from pieces");
}

#[test]
fn kills_at_one_moment_up_to_what_neighborhoods_tolerate_are_survived() {
    // 16 processors: neighborhoods of log2 16 = 4, two losses each tolerated. Four die at
    // once, a quarter of the job.
    let span = run(&PrefixSum, 16, 64, 8, &[], 5).end;
    let kills: Vec<(u64, u32)> = [3, 6, 9, 12].iter().map(|&i| (span / 2, i)).collect();
    for seed in 5..15 {
        let r = run(&PrefixSum, 16, 64, 8, &kills, seed);
        let tolerated = {
            let all: Vec<NodeId> = (0..16).map(NodeId).collect();
            let p = crate::storage::Placement::new(crate::storage::Scheme::Ida, &all, seed, 0);
            p.groups()
                .iter()
                .all(|g| 2 * g.iter().filter(|x| [3, 6, 9, 12].contains(&x.0)).count() <= g.len())
        };
        match r.result {
            Ok(v) => assert_eq!(v, app::reference(&PrefixSum, 64, 8), "seed {seed}"),
            Err(why) => assert!(!tolerated, "seed {seed}: tolerated, yet {why}"),
        }
    }
}

/// A neighborhood (chosen by `seed`) of the first checkpoints of `n` processors: the ones a
/// burst kills so that only a SafeState's replicas hold their states.
fn first_neighborhood(n: u64, seed: u64) -> Vec<u32> {
    let all: Vec<NodeId> = (0..n).map(NodeId).collect();
    let p = crate::storage::Placement::new(crate::storage::Scheme::Ida, &all, seed, 0);
    let g = &p.groups()[seed as usize % p.groups().len()];
    g.iter().map(|x| x.0 as u32).collect()
}

#[test]
fn a_corrupted_neighborhood_backtracks_to_the_safe_state_and_the_result_holds() {
    // 16 processors, neighborhoods of four: one of them dies whole at one moment, so its
    // states survive only in the SafeState's replicas (Λ = ⌈2 · 0.25 · 16 / 6⌉ = 2).
    let span = run(&Jacobi, 16, 64, 12, &[], 6).end;
    let mut backtracked = 0;
    for seed in 6..26u64 {
        let g = first_neighborhood(16, seed);
        let at = SimRng::new(seed).below(span);
        let kills: Vec<(u64, u32)> = g.iter().map(|&x| (at, x)).collect();
        let r = run(&Jacobi, 16, 64, 12, &kills, seed);
        assert_eq!(
            r.result,
            Ok(app::reference(&Jacobi, 64, 12)),
            "seed {seed}, kills {kills:?}"
        );
        backtracked += usize::from(r.backtracks > 0);
    }
    // A kill before the first checkpoint completes, or between a checkpoint and the next
    // one's being placed anew, needs no BACKTRACK; most do.
    assert!(backtracked >= 10, "{backtracked} of 20 runs backtracked");
}

#[test]
fn beyond_what_the_safe_states_hold_the_run_stops_with_an_error_never_a_wrong_result() {
    // 8 processors, SafeStates without replicas (α = 0): five dying at once leave a
    // neighborhood with fewer pieces than a rebuild needs, of the last checkpoint and of the
    // SafeState alike.
    let span = run(&Jacobi, 8, 40, 10, &[], 2).end;
    let kills: Vec<(u64, u32)> = (0..5).map(|i| (span / 2, i)).collect();
    let no_replicas = Safe {
        alpha: 0.0,
        ..Safe::default()
    };
    let r = run_safe(&Jacobi, 8, 40, 10, &kills, 2, no_replicas);
    match r.result {
        Err(why) => assert!(why.contains("SafeState too"), "{why}"),
        Ok(v) => panic!("five of eight dead, yet a result: {v:?}"),
    }
    assert_eq!(
        r.backtracks, 1,
        "it went back once, and found the SafeState lost too"
    );
}

#[test]
fn a_quarter_of_the_job_dying_close_together_is_survived() {
    // 32 processors, 8 of them killed within a tenth of the run, at a seeded moment: α =
    // 0.25, so the SafeStates' replicas hold whatever neighborhoods the kills corrupt.
    let (n, virt, s) = (32, 256, 20);
    let span = run(&Jacobi, n, virt, s, &[], 3).end;
    let mut backtracked = 0;
    for seed in 0..30u64 {
        let mut rng = SimRng::new(seed);
        let mut victims: Vec<u32> = Vec::new();
        while victims.len() < 8 {
            let v = rng.below(n) as u32;
            if !victims.contains(&v) {
                victims.push(v);
            }
        }
        let base = rng.below(span);
        let kills: Vec<(u64, u32)> = victims
            .iter()
            .map(|&v| (base + rng.below(span / 10), v))
            .collect();
        let r = run(&Jacobi, n, virt, s, &kills, seed);
        assert_eq!(
            r.result,
            Ok(app::reference(&Jacobi, virt, s)),
            "seed {seed}"
        );
        backtracked += usize::from(r.backtracks > 0);
    }
    // Before SafeStates, kills this close together often left a neighborhood of five with
    // two, and those runs stopped.
    assert!(backtracked > 0, "no run needed a BACKTRACK");
}

#[test]
fn a_neighborhood_dying_a_little_apart_backtracks_and_keeps_the_result() {
    // A SafeState every third superstep, and a whole neighborhood killed one by one a
    // seeded gap apart: some deaths are agreed separately (each rollback begins another
    // SafeState), and a rebuild that finds the rest of the neighborhood gone goes back to the
    // newest SafeState complete everywhere.
    let (n, virt, s) = (32, 128, 16);
    let every_third = Safe {
        every: 3,
        ..Safe::default()
    };
    let span = run_safe(&PrefixSum, n, virt, s, &[], 9, every_third).end;
    let mut backtracked = 0;
    for seed in 0..20u64 {
        let g = first_neighborhood(n, seed);
        let mut rng = SimRng::new(seed);
        let (at, gap) = (span / 4 + rng.below(span / 2), 1 + rng.below(span / 40));
        let kills: Vec<(u64, u32)> = g
            .iter()
            .enumerate()
            .map(|(i, &x)| (at + i as u64 * gap, x))
            .collect();
        let r = run_safe(&PrefixSum, n, virt, s, &kills, seed, every_third);
        assert_eq!(
            r.result,
            Ok(app::reference(&PrefixSum, virt, s)),
            "seed {seed}, kills {kills:?}"
        );
        backtracked += usize::from(r.backtracks > 0);
    }
    assert!(backtracked > 0, "no run needed a BACKTRACK");
}

#[test]
fn a_kill_during_the_first_checkpoint_restarts_from_the_initial_states() {
    // No checkpoint is complete yet: the survivors start over, and the dispersal that was
    // under way when the kill came is dropped, or the next checkpoint would be refused.
    let span = run(&PrefixSum, 8, 40, 6, &[], 4).end;
    let mut from_start = 0;
    for seed in 0..200u64 {
        let mut rng = SimRng::new(seed);
        let kill = (rng.below(span / 12), rng.below(8) as u32);
        let r = run(&PrefixSum, 8, 40, 6, &[kill], seed);
        assert_eq!(
            r.result,
            Ok(app::reference(&PrefixSum, 40, 6)),
            "seed {seed}"
        );
        from_start += r.from_start;
    }
    assert!(
        from_start > 0,
        "some runs restarted from the initial states"
    );
}
