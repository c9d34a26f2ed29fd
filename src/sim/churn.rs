//! Random fault schedules for membership: failures, joins and recoveries interleaved in time,
//! detected by the `HowAreYou` probes alone, in the timed simulator. The judge is external:
//! at the end every live process must hold the same view, exactly the live processes (joiners
//! included), and the root must have stabilized that view.

use super::timed::{Net, TimedConfig, TimedWorld};
use crate::proto::membership::{MemberEvent, Membership, MembershipConfig, TreeMode};
use crate::proto::views::SharedViews;
use crate::proto::Event;
use crate::rng::SimRng;
use crate::NodeId;
use std::time::Duration;

/// A churn experiment.
#[derive(Clone, Debug)]
pub struct ChurnConfig {
    /// Initial members (ids `0..nodes`).
    pub nodes: u32,
    /// Children per process.
    pub radix: u32,
    /// Patch or rebalance.
    pub mode: TreeMode,
    /// Events (a failure, a join or a recovery each) spread over the first `span`.
    pub events: u32,
    /// Time over which the events happen.
    pub span: Duration,
    /// Seed.
    pub seed: u64,
}

/// What a churn run ended with.
#[derive(Clone, Debug)]
pub struct ChurnResult {
    /// Processes alive at the end, sorted.
    pub live: Vec<NodeId>,
    /// Failures, joins and recoveries applied.
    pub failures: u32,
    /// Joins applied.
    pub joins: u32,
    /// Recoveries applied.
    pub recoveries: u32,
    /// Every live process holds the view `live`, in one epoch, and none is still joining.
    pub views_agree: bool,
    /// The root reported the stabilization of that epoch.
    pub stabilized: bool,
    /// The final epoch.
    pub epoch: u64,
}

/// Run a random schedule, then let the job settle and judge it.
pub fn run(cfg: &ChurnConfig) -> ChurnResult {
    let n = cfg.nodes;
    let joiners = cfg.events; // at most one fresh id per event
    let total = n + joiners;
    let initial: Vec<NodeId> = (0..n as u64).map(NodeId).collect();
    let probe = (Duration::from_micros(200), Duration::from_micros(100));
    let mcfg = MembershipConfig {
        radix: cfg.radix,
        mode: cfg.mode,
        probe: Some(probe),
        warm: false,
        batch: std::time::Duration::ZERO,
        collect: false,
        // On the scale of the probes, so held reports do run out in these schedules.
        orphan_hold: Duration::from_millis(1),
        heartbeat: None,
    };
    let retry = Duration::from_millis(1);
    // One copy of each view for the whole simulation, not one per process.
    let views = SharedViews::new(initial.clone());
    let nodes: Vec<Membership> = (0..total as u64)
        .map(|i| Membership::new(NodeId(i), &views, mcfg))
        .collect();
    let mut world = TimedWorld::new(
        nodes,
        TimedConfig {
            net: Net::Constant {
                l: Duration::from_micros(5),
            },
            ocp: Duration::from_micros(2),
            send: Duration::ZERO,
            detect: Duration::from_micros(50),
        },
    );
    for j in n..total {
        world.kill(j); // slots of the joiners, idle until they join
    }
    world.start();
    let mut rng = SimRng::new(cfg.seed);
    let mut alive: Vec<bool> = (0..total).map(|i| i < n).collect();
    let (mut failures, mut joins, mut recoveries) = (0, 0, 0);
    let mut next_joiner = n;
    let mut times: Vec<u64> = (0..cfg.events)
        .map(|_| rng.below(cfg.span.as_nanos().max(1) as u64))
        .collect();
    times.sort_unstable();
    let mut reports = Vec::new();
    let run_until = |world: &mut TimedWorld<Membership>, t: u64, reports: &mut Vec<_>| {
        while world.now() < t {
            if world.step().is_none() {
                break;
            }
            reports.extend(world.take_reports());
        }
    };
    for t in times {
        run_until(&mut world, t, &mut reports);
        let live: Vec<u32> = (0..total).filter(|&i| alive[i as usize]).collect();
        let dead: Vec<u32> = (0..n).filter(|&i| !alive[i as usize]).collect();
        match rng.below(3) {
            // Fail someone, keeping at least half of the initial size alive.
            0 if live.len() as u32 > n / 2 + 1 => {
                let v = live[rng.below(live.len() as u64) as usize];
                world.kill(v);
                alive[v as usize] = false;
                failures += 1;
            }
            1 if !dead.is_empty() => {
                let r = dead[rng.below(dead.len() as u64) as usize];
                let p = Membership::recovering(NodeId(r as u64), &views, mcfg, retry);
                world.spawn_at(world.now(), r, p);
                alive[r as usize] = true;
                recoveries += 1;
            }
            _ if next_joiner < total => {
                let j = next_joiner;
                next_joiner += 1;
                let p = Membership::joiner(NodeId(j as u64), &views, mcfg, retry);
                world.spawn_at(world.now(), j, p);
                alive[j as usize] = true;
                joins += 1;
            }
            _ => {}
        }
    }
    // Settle: long enough for every detection, retry and stabilization to finish.
    let end = cfg.span.as_nanos() as u64 + 40_000_000;
    run_until(&mut world, end, &mut reports);
    let live: Vec<NodeId> = (0..total)
        .filter(|&i| alive[i as usize])
        .map(|i| NodeId(i as u64))
        .collect();
    let members: Vec<&Membership> = live
        .iter()
        .map(|id| &world.nodes()[id.0 as usize])
        .collect();
    let epoch = members.iter().map(|m| m.epoch()).max().unwrap_or(0);
    let views_agree = members
        .iter()
        .all(|m| m.view() == live.as_slice() && m.epoch() == epoch && !m.is_joining());
    let stabilized = reports.iter().any(|(_, _, e)| {
        matches!(e, Event::Member(MemberEvent::Stabilized { epoch: x, .. }) if *x == epoch)
    });
    ChurnResult {
        live,
        failures,
        joins,
        recoveries,
        views_agree,
        stabilized,
        epoch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_joins_and_recoveries_interleaved_end_in_one_view() {
        let (mut f, mut j, mut r) = (0, 0, 0);
        for mode in [TreeMode::Patch, TreeMode::Rebalance] {
            for seed in 0..16 {
                let cfg = ChurnConfig {
                    nodes: 40,
                    radix: 4,
                    mode,
                    events: 12,
                    span: Duration::from_millis(10),
                    seed,
                };
                let res = run(&cfg);
                assert!(
                    res.views_agree,
                    "{mode:?} seed {seed}: views differ ({res:?})"
                );
                assert!(
                    res.stabilized,
                    "{mode:?} seed {seed}: not stabilized ({res:?})"
                );
                f += res.failures;
                j += res.joins;
                r += res.recoveries;
            }
        }
        // The schedules did exercise all three kinds of change.
        assert!(
            f > 20 && j > 20 && r > 10,
            "{f} failures, {j} joins, {r} recoveries"
        );
    }
}
