//! Self-stabilization: from arbitrary configurations (random `Succ`, `Pred`, `CW`, `CCW`, random
//! quiet flags and garbage messages in the channels) Algorithms 1 and 2 must reach the oracle's
//! ring and BMG on every launch-tree shape, under both schedulers and every asynchronous
//! policy (random interleavings and message delays among them), and then stay silent.

use weft::sim::bmg::{run, BmgSimConfig, Init, Refresh};
use weft::sim::tree::TreeKind;
use weft::sim::{AsyncPolicy, Scheduler};

fn check(tree: TreeKind, depth: u32, scheduler: Scheduler, seeds: std::ops::Range<u64>) {
    check_with(tree, depth, scheduler, AsyncPolicy::MsgFirst, seeds)
}

fn check_with(
    tree: TreeKind,
    depth: u32,
    scheduler: Scheduler,
    policy: AsyncPolicy,
    seeds: std::ops::Range<u64>,
) {
    for seed in seeds {
        let cfg = BmgSimConfig {
            tree,
            depth,
            degree: 4,
            scheduler,
            policy,
            init: Init::Random,
            seed,
            refresh: Refresh::Auto,
            max_rounds: 50_000,
            garbage_per_node: 3,
            silence_rounds: 64,
            ..BmgSimConfig::default()
        };
        let r = run(&cfg).unwrap();
        assert!(
            r.converged,
            "{tree} depth {depth} {scheduler} {policy} seed {seed}: no convergence"
        );
        assert_eq!(
            r.changes_after, 0,
            "{tree} depth {depth} {scheduler} {policy} seed {seed}: state changed after convergence"
        );
    }
}

#[test]
fn binary_trees_sync() {
    check(TreeKind::Binary, 6, Scheduler::Sync, 0..40);
}

#[test]
fn binary_trees_async() {
    check(TreeKind::Binary, 6, Scheduler::Async, 0..40);
}

#[test]
fn binomial_trees_sync() {
    check(TreeKind::Binomial, 7, Scheduler::Sync, 0..40);
}

#[test]
fn binomial_trees_async() {
    check(TreeKind::Binomial, 7, Scheduler::Async, 0..40);
}

#[test]
fn random_trees_sync() {
    for depth in 1..=6 {
        check(TreeKind::Random, depth, Scheduler::Sync, 0..20);
    }
}

#[test]
fn random_trees_async() {
    for depth in 1..=6 {
        check(TreeKind::Random, depth, Scheduler::Async, 0..20);
    }
}

#[test]
fn without_refresh_a_clean_start_still_converges() {
    // The paper's setting: quiet nodes never re-fire. Fine from a clean start.
    for tree in [TreeKind::Binary, TreeKind::Binomial, TreeKind::Random] {
        let cfg = BmgSimConfig {
            tree,
            depth: 7,
            init: Init::Empty,
            refresh: Refresh::Never,
            silence_rounds: 32,
            ..BmgSimConfig::default()
        };
        let r = run(&cfg).unwrap();
        assert!(r.converged && r.changes_after == 0, "{tree}");
    }
}

#[test]
fn every_tree_under_random_interleavings_and_delays() {
    for (tree, depth) in [
        (TreeKind::Binary, 5),
        (TreeKind::Binomial, 6),
        (TreeKind::Random, 4),
    ] {
        for max_delay in [0, 3, 8] {
            let policy = AsyncPolicy::Random { max_delay };
            check_with(tree, depth, Scheduler::Async, policy, 0..12);
        }
    }
}

#[test]
fn every_tree_when_rules_and_messages_alternate() {
    for (tree, depth) in [
        (TreeKind::Binary, 6),
        (TreeKind::Binomial, 7),
        (TreeKind::Random, 5),
    ] {
        check_with(tree, depth, Scheduler::Async, AsyncPolicy::Alternate, 0..12);
    }
}
