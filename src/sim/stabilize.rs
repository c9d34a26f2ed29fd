//! The stabilization experiment of ICS'06 in the simulator: N processes run the membership
//! protocol over the timed network, some are killed at t = 0, a neighbor of each notices at once,
//! and Ts is the time until the root has every acknowledgment of the final epoch.

use super::timed::{Net, TimedConfig, TimedWorld};
use crate::proto::membership::{IdTree, MemberEvent, Membership, MembershipConfig, TreeMode};
use crate::proto::views::SharedViews;
use crate::proto::Event;
use crate::topology::torus::Torus;
use crate::NodeId;
use serde::Serialize;
use std::time::Duration;

/// The latency model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NetKind {
    /// Base model: every message takes L.
    Constant,
    /// Distance model: hops on a BG/L torus partition (XYZ order) × L.
    Torus,
    /// Contention: constant L plus `send` CPU per message sent, so a parent's k-th child
    /// hears k × send later.
    Contention,
}

/// Parameters of one run.
#[derive(Clone, Debug)]
pub struct StabilizeConfig {
    /// Processes.
    pub nodes: u32,
    /// Children per process.
    pub radix: u32,
    /// Patch or rebalance.
    pub mode: TreeMode,
    /// The processes killed, in order.
    pub victims: Vec<NodeId>,
    /// Time between two kills (`ZERO`: all at t = 0, as the paper's simultaneous failures).
    pub kill_gap: Duration,
    /// What the failure case is called in the report (`inner`, `root+1`, `n0,n1`).
    pub label: String,
    /// Latency model.
    pub net: NetKind,
    /// The torus of [`NetKind::Torus`] (`None`: the smallest BG/L partition holding the
    /// processes, [`Torus::partition`]).
    pub torus: Option<Torus>,
    /// L.
    pub latency: Duration,
    /// Ocp: CPU per handled message.
    pub ocp: Duration,
    /// CPU per message sent (contention model only).
    pub send: Duration,
    /// Seed (of the victims' choice; the run itself is deterministic).
    pub seed: u64,
    /// `None`: a neighbor of each victim notices at its kill. `Some((period, timeout))`: only the
    /// `HowAreYou` probes detect.
    pub probe: Option<(Duration, Duration)>,
    /// The root's batching window ([`MembershipConfig::batch`]).
    pub batch: Duration,
    /// How long a failed process's children leave the report to its parent
    /// ([`MembershipConfig::orphan_hold`]).
    pub orphan_hold: Duration,
    /// The root collects failures found during an epoch ([`MembershipConfig::collect`]).
    pub collect: bool,
}

/// The measures of one run (`weft sim stabilize --json`).
#[derive(Clone, Debug, Serialize)]
pub struct StabilizeRun {
    /// Processes.
    pub nodes: u32,
    /// Radix.
    pub radix: u32,
    /// Tree mode.
    pub mode: TreeMode,
    /// Failure case.
    pub fail: String,
    /// Latency model.
    pub net: NetKind,
    /// The torus shape of the distance model (`XxYxZ`), when it is the model.
    pub torus: Option<String>,
    /// L in µs.
    pub latency_us: f64,
    /// Ocp in µs.
    pub ocp_us: f64,
    /// Height H of the initial tree.
    pub height: u32,
    /// Ts: first detection to the root's stabilization of the final epoch, µs.
    pub ts_us: f64,
    /// The base model's prediction 2·L·(H−1) + Ocp·H, µs.
    pub base_model_us: f64,
    /// Messages sent.
    pub msgs: u64,
    /// Epochs until the final view.
    pub epochs: u64,
    /// Every survivor installed the same view, which is exactly the survivors.
    pub views_agree: bool,
    /// The root stabilized the final epoch.
    pub stabilized: bool,
    /// No two processes installed one epoch (its number and root, which name a view) with
    /// different views, at any time of the run.
    pub views_named_once: bool,
    /// Seed.
    pub seed: u64,
}

/// Whether two views are equal: at once when they are the same shared slice (processes of one
/// simulation share their views), by content otherwise. Comparing by content alone made the
/// checks N² at 2^20 processes.
fn same(a: &[NodeId], b: &[NodeId]) -> bool {
    std::ptr::eq(a, b) || a == b
}

/// Run one stabilization.
pub fn run(cfg: &StabilizeConfig) -> Result<StabilizeRun, String> {
    if cfg.nodes < 2 {
        return Err("need at least 2 processes".into());
    }
    if cfg.radix < 2 || !cfg.radix.is_power_of_two() {
        return Err(format!("radix {} is not a power of two >= 2", cfg.radix));
    }
    let n = cfg.nodes;
    let ids: Vec<NodeId> = (0..n as u64).map(NodeId).collect();
    let mcfg = MembershipConfig {
        radix: cfg.radix,
        mode: cfg.mode,
        probe: cfg.probe,
        // No connections to warm in the simulator.
        warm: false,
        batch: cfg.batch,
        collect: cfg.collect,
        orphan_hold: cfg.orphan_hold,
        heartbeat: None,
    };
    // One copy of each view for the whole simulation, not one per process (N² bytes).
    let views = SharedViews::new(ids.clone());
    let nodes: Vec<Membership> = ids
        .iter()
        .map(|&id| Membership::new(id, &views, mcfg))
        .collect();
    let tree = IdTree::radix(&ids, cfg.radix);
    let height = tree.height();
    if let Some(bad) = cfg.victims.iter().find(|v| v.0 >= n as u64) {
        return Err(format!("victim {bad} is not in a job of {n}"));
    }
    if cfg.victims.len() >= n as usize {
        return Err("every process fails: nobody is left to stabilize".into());
    }
    let shape = cfg.torus.unwrap_or_else(|| Torus::partition(n as u64));
    if cfg.net == NetKind::Torus && !shape.holds(n as u64) {
        return Err(format!("{n} processes do not fit on a {shape} torus"));
    }
    let net = match cfg.net {
        NetKind::Constant | NetKind::Contention => Net::Constant { l: cfg.latency },
        NetKind::Torus => Net::Torus {
            l: cfg.latency,
            torus: shape,
        },
    };
    let send = if cfg.net == NetKind::Contention {
        cfg.send
    } else {
        Duration::ZERO
    };
    let mut world = TimedWorld::new(
        nodes,
        TimedConfig {
            net,
            ocp: cfg.ocp,
            send,
            detect: Duration::ZERO,
        },
    );
    let victims: Vec<u32> = cfg.victims.iter().map(|v| v.0 as u32).collect();
    let gap = cfg.kill_gap.as_nanos() as u64;
    if std::env::var("WEFT_DEBUG_SIM").is_ok() {
        world.on_send(Box::new(|t, f, to, m| eprintln!("{t} n{f} -> n{to} {m:?}")));
    }
    world.start();
    let survives = |c: u32| !victims.contains(&c);
    for (i, &v) in victims.iter().enumerate() {
        let at = gap * i as u64;
        world.kill_at(at, v);
        // Detection at the kill by a neighbor that survives (the parent, or for the root its
        // first child), unless the probes are to find the failures themselves.
        if cfg.probe.is_none() {
            let id = NodeId(v as u64);
            let candidates = tree
                .parent(id)
                .into_iter()
                .chain(tree.children(id).iter().copied());
            let detector = candidates
                .map(|c| c.0 as u32)
                .find(|&c| survives(c))
                .or_else(|| (0..n).find(|&c| survives(c)))
                .ok_or("every process failed")?;
            world.suspect_at(at, detector, v);
        }
    }
    // With probes the run never goes idle: stop well after detection could have happened.
    let horizon = cfg
        .probe
        .map_or(u64::MAX, |(p, t)| 20 * (p + t).as_nanos() as u64);
    let mut last_stable: Option<((u64, NodeId), u64)> = None; // ((epoch, root), time)
    let mut detected: Option<u64> = None;
    let mut named = std::collections::HashMap::new();
    let mut views_named_once = true;
    while world.now() <= horizon {
        if world.step().is_none() {
            break;
        }
        for (who, t, e) in world.take_reports() {
            if std::env::var("WEFT_DEBUG_SIM").is_ok() {
                eprintln!("{t} n{who} {e:?}");
            }
            match e {
                Event::Member(MemberEvent::Stabilized { epoch, .. }) => {
                    last_stable = Some(((epoch, NodeId(who as u64)), t));
                }
                Event::Member(MemberEvent::Detected { at, .. }) => {
                    detected.get_or_insert(at.0);
                }
                Event::Member(MemberEvent::ViewChanged {
                    epoch, root, view, ..
                }) => {
                    let first = named.entry((epoch, root)).or_insert_with(|| view.clone());
                    views_named_once &= same(first, &view);
                }
                _ => {}
            }
        }
    }
    let survivors: Vec<NodeId> = (0..n)
        .filter(|&i| world.is_alive(i))
        .map(|i| NodeId(i as u64))
        .collect();
    let live: Vec<&Membership> = survivors
        .iter()
        .map(|id| &world.nodes()[id.0 as usize])
        .collect();
    let last = live.first().map(|m| (m.epoch(), m.root()));
    let views_agree = live
        .first()
        .is_some_and(|m| m.view() == survivors.as_slice())
        && live
            .iter()
            .all(|m| same(m.view(), live[0].view()) && Some((m.epoch(), m.root())) == last);
    let final_epoch = last.map_or(0, |l| l.0);
    let stabilized = last_stable.is_some_and(|(named, _)| Some(named) == last);
    let ts = last_stable.map_or(0, |(_, t)| t.saturating_sub(detected.unwrap_or(0)));
    let (l, ocp) = (cfg.latency.as_secs_f64() * 1e6, cfg.ocp.as_secs_f64() * 1e6);
    Ok(StabilizeRun {
        nodes: n,
        radix: cfg.radix,
        mode: cfg.mode,
        fail: cfg.label.clone(),
        net: cfg.net,
        torus: (cfg.net == NetKind::Torus).then(|| shape.to_string()),
        latency_us: l,
        ocp_us: ocp,
        height,
        ts_us: ts as f64 / 1e3,
        base_model_us: 2.0 * l * (height as f64 - 1.0) + ocp * height as f64,
        msgs: world.sent,
        epochs: final_epoch,
        views_agree,
        stabilized,
        views_named_once,
        seed: cfg.seed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A radix-4 job of `nodes` with the given victims killed at once, BG/L-like costs.
    pub(crate) fn cfg(nodes: u32, radix: u32, victims: &[u64], mode: TreeMode) -> StabilizeConfig {
        StabilizeConfig {
            nodes,
            radix,
            mode,
            victims: victims.iter().map(|&v| NodeId(v)).collect(),
            kill_gap: Duration::ZERO,
            label: "test".into(),
            net: NetKind::Constant,
            torus: None,
            latency: Duration::from_micros(5),
            ocp: Duration::from_micros(2),
            send: Duration::from_micros(1),
            seed: 0,
            probe: None,
            batch: Duration::ZERO,
            orphan_hold: crate::proto::membership::ORPHAN_HOLD,
            collect: false,
        }
    }

    #[test]
    fn children_of_a_failed_process_leave_the_report_to_its_parent() {
        // Probes find the failure from both sides: its parent and its children time out on it.
        for victim in [1, 2, 5, 9] {
            let probed = StabilizeConfig {
                probe: Some((Duration::from_micros(200), Duration::from_micros(100))),
                ..cfg(85, 4, &[victim], TreeMode::Patch)
            };
            let paper = run(&StabilizeConfig {
                orphan_hold: Duration::ZERO,
                ..probed.clone()
            })
            .unwrap();
            let held = run(&probed).unwrap();
            assert!(paper.views_agree && held.views_agree, "victim {victim}");
            assert!(paper.stabilized && held.stabilized, "victim {victim}");
            assert_eq!(held.epochs, 1, "victim {victim}: {held:?}");
            // Each child's NodeFailure and the root's FailureDetAck are saved (the probes'
            // own messages are the same in both runs).
            assert!(
                held.msgs + 2 <= paper.msgs,
                "victim {victim}: {} messages held, {} at once",
                held.msgs,
                paper.msgs
            );
        }
    }

    /// Six processes, four killed 9 µs apart (n4, the root n0, n1, n3): n2 ends as the root
    /// of its own epoch, then takes a late message of the dead n1's epoch for a lower root's
    /// view and leaves its own to rejoin through n1. Its request reaches n5, whose root it
    /// was, only after n3 died too: n5 took it for a root failure, chased the dead n3 and
    /// became a root alone, and the request was dropped, so n2 gave up asking and founded a
    /// view of its own: two views of one process each, for good (found by the property
    /// test below, 2026-11-29). n5 now admits the asker once its own epoch is stable.
    #[test]
    fn a_root_that_left_its_view_is_admitted_by_whoever_takes_over_later() {
        let r = run(&StabilizeConfig {
            kill_gap: Duration::from_micros(9),
            send: Duration::ZERO,
            orphan_hold: Duration::ZERO,
            ..cfg(6, 2, &[4, 0, 1, 3], TreeMode::Patch)
        })
        .unwrap();
        assert!(r.views_agree && r.stabilized && r.views_named_once, "{r:?}");
    }

    /// 1024 processes lie on two midplanes (8×8×16), not folded onto one: ranks 512 and up
    /// are a midplane away, so Ts grows; a torus too small for the job is refused.
    #[test]
    fn a_job_past_one_midplane_spans_two() {
        let on = |torus| StabilizeConfig {
            net: NetKind::Torus,
            torus,
            ..cfg(1024, 4, &[5], TreeMode::Patch)
        };
        let two = run(&on(None)).unwrap();
        assert_eq!(two.torus.as_deref(), Some("8x8x16"));
        assert!(two.views_agree && two.stabilized);
        let named = run(&on(Some(Torus::new(8, 8, 16).unwrap()))).unwrap();
        assert_eq!(named.ts_us, two.ts_us);
        let line = run(&on(Some(Torus::new(1024, 1, 1).unwrap()))).unwrap();
        assert!(line.ts_us > two.ts_us, "{} vs {}", line.ts_us, two.ts_us);
        let err = run(&on(Some(Torus::MIDPLANE))).unwrap_err();
        assert!(err.contains("do not fit on a 8x8x8 torus"), "{err}");
    }

    #[test]
    fn single_failure_matches_the_base_model_shape() {
        // One failure, one epoch: Ts grows with the tree height, never below 2·L·(H−1).
        let mut prev = 0.0;
        for n in [16u32, 64, 256, 1024] {
            let r = run(&cfg(n, 2, &[n as u64 - 1], TreeMode::Patch)).unwrap();
            assert_eq!(r.epochs, 1);
            assert!(
                r.ts_us >= 2.0 * r.latency_us * (r.height as f64 - 1.0),
                "{r:?}"
            );
            assert!(r.ts_us > prev, "Ts must grow with N: {r:?}");
            prev = r.ts_us;
        }
    }

    /// The root's failover when the process next in line is dead too (the root, then the
    /// next, then the next...): someone always takes over, and every survivor agrees.
    #[test]
    fn root_failover_skips_dead_successors() {
        for mode in [TreeMode::Patch, TreeMode::Rebalance] {
            for n in [3u32, 4, 5, 16, 64] {
                for k in 1..(n as u64).min(6) {
                    let victims: Vec<u64> = (0..=k).filter(|&v| v < n as u64 - 1).collect();
                    let r = run(&cfg(n, 4, &victims, mode)).unwrap();
                    assert!(
                        r.views_agree && r.stabilized,
                        "{mode:?} n={n} victims {victims:?}: {r:?}"
                    );
                }
            }
        }
    }

    /// Everyone but one process fails (the root among them): the lone survivor installs a
    /// view of itself and stabilizes it.
    #[test]
    fn a_lone_survivor_installs_its_own_view() {
        for n in [2u32, 3, 16] {
            for alone in [0, 1, n as u64 - 1] {
                let victims: Vec<u64> = (0..n as u64).filter(|&v| v != alone).collect();
                let r = run(&cfg(n, 4, &victims, TreeMode::Patch)).unwrap();
                assert!(r.views_agree && r.stabilized, "n={n} alone {alone}: {r:?}");
            }
        }
    }

    /// The root installs an epoch for one failure and dies while sending it down: survivors
    /// holding that epoch and survivors without it end in one view all the same, and no two
    /// processes ever hold one epoch with two views.
    #[test]
    fn a_root_that_dies_mid_epoch_leaves_no_split() {
        for gap_ns in [0u64, 500, 2_000, 5_000, 9_000, 20_000] {
            for (n, victims) in [(4u32, vec![1u64, 0]), (16, vec![5, 0]), (16, vec![1, 0, 2])] {
                let c = StabilizeConfig {
                    kill_gap: Duration::from_nanos(gap_ns),
                    ..cfg(n, 4, &victims, TreeMode::Patch)
                };
                let r = run(&c).unwrap();
                assert!(
                    r.views_agree && r.stabilized,
                    "n={n} victims {victims:?} {gap_ns} ns apart: {r:?}"
                );
                assert!(r.views_named_once, "n={n} {victims:?} {gap_ns} ns: {r:?}");
            }
        }
    }
}
