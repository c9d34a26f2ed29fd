//! Tree → ring → BMG (Algorithms 1 and 2) under a fault schedule: a lossy, duplicating,
//! reordering network, hangs and partitions, on a random launch tree. Crashes, joins and
//! recoveries are not drawn: the construction is defined over the processes of its launch tree
//! (the paper's self-stabilization is from transient faults: any state, any message in
//! flight). After the last fault, every process's `Succ`, `Pred` and fingers must be the
//! formulas over the tree's preorder, and stay so for three checks in a row.

use super::{apply_timing, settle, Applied, Outcome, Schedule};
use crate::proto::overlay::Overlay;
use crate::proto::spontaneous::SpontaneousConfig;
use crate::rng::SimRng;
use crate::sim::bmg::{overlay_of, wrong_fingers};
use crate::sim::timed::{TimedConfig, TimedWorld};
use crate::sim::tree::Tree;
use std::time::Duration;

/// The launch tree of a schedule: random, `1..=degree` children per process above `depth`.
pub fn tree(seed: u64, depth: u32, degree: u32) -> Tree {
    Tree::random(depth, degree.max(1), &mut SimRng::new(seed), u64::MAX)
        .expect("a degree of at least 1 and no size limit")
}

/// Run the schedule and check where it ends.
pub fn execute(s: &Schedule) -> Outcome {
    let tree = tree(s.seed, s.tree_depth, s.radix);
    let n = tree.len() as u32;
    let spont = SpontaneousConfig {
        period: Duration::from_micros(20),
        // A quiet process re-fires now and then: a message lost after it went quiet is
        // asked for again.
        refresh: Some(Duration::from_millis(2)),
        backoff: 0,
    };
    let nodes = (0..n).map(|p| overlay_of(&tree, p, spont)).collect();
    let mut w = TimedWorld::new(
        nodes,
        TimedConfig::jittered(s.seed, Duration::from_micros(1)),
    )
    .with_faults(s.net, s.seed ^ 0xfa17_5eed);
    w.start();
    let mut out = Outcome::default();
    let mut applied = Applied::default();
    for f in s.sorted_faults() {
        let t = f.at_us() * 1000;
        run_until(&mut w, t, &mut out.events);
        // The construction has no crashes, joins or recoveries (module doc): they are skipped.
        apply_timing(&mut w, &f, t, |i| i < n, &mut applied);
    }
    let calm = s.calm_ns();
    run_until(&mut w, calm, &mut out.events);
    w.calm();
    out.applied = applied;
    settle(&mut w, calm, &mut out, run_until, |w| {
        let wrong = wrong_fingers(&tree, w.nodes());
        (wrong > 0).then(|| format!("{wrong} of {n} processes with a wrong ring or finger"))
    });
    out.applied = applied;
    out
}

fn run_until(w: &mut TimedWorld<Overlay>, t: u64, events: &mut u64) {
    while w.peek_time().is_some_and(|at| at <= t) {
        w.step();
        *events += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::super::{draw, Fault, FaultProtocol};
    use super::*;
    use crate::sim::faultnet::LinkFaults;

    #[test]
    fn a_lossy_partitioned_network_still_ends_in_the_bmg() {
        let mut s = draw(FaultProtocol::Bmg, 11, 40);
        s.net = LinkFaults {
            loss: 0.05,
            dup: 0.05,
            reorder: 0.2,
            tail: 0.05,
            tail_max: Duration::from_micros(1_000),
        };
        let n = s.nodes as usize;
        s.faults = vec![Fault::Partition {
            at_us: 50,
            sides: (0..n).map(|i| (i % 2) as u8).collect(),
            for_us: 3_000,
        }];
        let out = execute(&s);
        assert!(out.violations.is_empty(), "{:?}", out.violations);
        assert!(out.net.lost > 0 && out.net.cut > 0, "{:?}", out.net);
    }

    /// The checker can fail: a partition that never heals keeps the ring apart.
    #[test]
    fn a_partition_that_never_heals_is_a_violation() {
        let mut s = draw(FaultProtocol::Bmg, 11, 40);
        s.net = LinkFaults::NONE;
        let n = s.nodes as usize;
        s.faults = vec![Fault::Partition {
            at_us: 0,
            sides: (0..n).map(|i| (i % 2) as u8).collect(),
            for_us: 10_000_000,
        }];
        assert_eq!(execute(&s).violations.len(), 1);
    }
}
