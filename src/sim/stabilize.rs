//! The stabilization experiment of ICS'06 in the simulator: N processes run the membership
//! protocol over the timed network, some are killed at t = 0, a neighbor of each notices at once,
//! and Ts is the time until the root has every acknowledgment of the final epoch.

use super::rng::SimRng;
use super::timed::{pick, Net, TimedConfig, TimedWorld};
use crate::proto::membership::{IdTree, MemberEvent, Membership, MembershipConfig, TreeMode};
use crate::proto::Event;
use crate::topology::torus::Torus;
use crate::NodeId;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Which processes fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fail {
    /// A random leaf.
    Leaf,
    /// A random inner process (not the root).
    Inner,
    /// The root.
    Root,
    /// K random non-root processes.
    Multi(usize),
    /// The root and K random others.
    RootPlus(usize),
}

impl Fail {
    /// How many processes this failure kills.
    pub fn killed(self) -> usize {
        match self {
            Fail::Leaf | Fail::Inner | Fail::Root => 1,
            Fail::Multi(k) => k,
            Fail::RootPlus(k) => k + 1,
        }
    }
}

impl FromStr for Fail {
    type Err = String;
    fn from_str(s: &str) -> Result<Fail, String> {
        let bad = || format!("--fail {s:?}: expected leaf, inner, root, multi:K or root+K");
        Ok(match s {
            "leaf" => Fail::Leaf,
            "inner" => Fail::Inner,
            "root" => Fail::Root,
            _ if s.starts_with("multi:") => Fail::Multi(s[6..].parse().map_err(|_| bad())?),
            _ if s.starts_with("root+") => Fail::RootPlus(s[5..].parse().map_err(|_| bad())?),
            _ => return Err(bad()),
        })
    }
}

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fail::Leaf => f.write_str("leaf"),
            Fail::Inner => f.write_str("inner"),
            Fail::Root => f.write_str("root"),
            Fail::Multi(k) => write!(f, "multi:{k}"),
            Fail::RootPlus(k) => write!(f, "root+{k}"),
        }
    }
}

/// The latency model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum NetKind {
    /// Base model: every message takes L.
    Constant,
    /// Distance model: hops on 8×8×8 BG/L midplanes (XYZ order) × L.
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
    /// Failures.
    pub fail: Fail,
    /// Latency model.
    pub net: NetKind,
    /// L.
    pub latency: Duration,
    /// Ocp: CPU per handled message.
    pub ocp: Duration,
    /// CPU per message sent (contention model only).
    pub send: Duration,
    /// Seed.
    pub seed: u64,
    /// `None`: a neighbor of each victim notices at t = 0. `Some((period, timeout))`: only the
    /// `HowAreYou` probes detect.
    pub probe: Option<(Duration, Duration)>,
    /// The root's batching window ([`MembershipConfig::batch`]).
    pub batch: Duration,
    /// How long a failed process's children leave the report to its parent
    /// ([`MembershipConfig::orphan_hold`]).
    pub orphan_hold: Duration,
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
    /// Seed.
    pub seed: u64,
}

/// The processes that `fail` kills in a job of `n` (ids `0..n`) over the initial `tree`,
/// drawn with `rng`. Shared by the simulator and the real runs, so both kill alike.
pub fn victims(tree: &IdTree, n: u32, fail: Fail, rng: &mut SimRng) -> Result<Vec<u32>, String> {
    let leaves: Vec<u32> = (1..n)
        .filter(|&i| tree.children(NodeId(i as u64)).is_empty())
        .collect();
    let inner: Vec<u32> = (1..n)
        .filter(|&i| !tree.children(NodeId(i as u64)).is_empty())
        .collect();
    let one = |rng: &mut SimRng, v: &[u32]| -> Result<u32, String> {
        if v.is_empty() {
            return Err(format!("no process of that kind in a tree of {n}"));
        }
        Ok(v[rng.below(v.len() as u64) as usize])
    };
    Ok(match fail {
        Fail::Leaf => vec![one(rng, &leaves)?],
        Fail::Inner => vec![one(rng, &inner)?],
        Fail::Root => vec![0],
        Fail::Multi(k) => pick(rng, n, k.min(n as usize - 1), &[0]),
        Fail::RootPlus(k) => {
            let mut v = vec![0];
            v.extend(pick(rng, n, k.min(n as usize - 2), &[0]));
            v
        }
    })
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
        orphan_hold: cfg.orphan_hold,
    };
    let nodes: Vec<Membership> = ids
        .iter()
        .map(|&id| Membership::new(id, ids.clone(), mcfg))
        .collect();
    let tree = IdTree::radix(&ids, cfg.radix);
    let height = tree.height();
    let net = match cfg.net {
        NetKind::Constant | NetKind::Contention => Net::Constant { l: cfg.latency },
        NetKind::Torus => Net::Torus {
            l: cfg.latency,
            torus: Torus::MIDPLANE,
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
    let mut rng = SimRng::new(cfg.seed);
    let victims = victims(&tree, n, cfg.fail, &mut rng)?;
    world.start();
    for &v in &victims {
        world.kill(v);
    }
    // Detection at t = 0 by a live neighbor (the parent, or for the root its first live
    // child), unless the probes are to find the failures themselves.
    if cfg.probe.is_none() {
        for &v in &victims {
            let id = NodeId(v as u64);
            let candidates = tree
                .parent(id)
                .into_iter()
                .chain(tree.children(id).iter().copied());
            let detector = candidates
                .map(|c| c.0 as u32)
                .find(|&c| world.is_alive(c))
                .or_else(|| (0..n).find(|&c| world.is_alive(c)))
                .ok_or("every process failed")?;
            world.suspect_at(0, detector, v);
        }
    }
    // With probes the run never goes idle: stop well after detection could have happened.
    let horizon = cfg
        .probe
        .map_or(u64::MAX, |(p, t)| 20 * (p + t).as_nanos() as u64);
    let mut last_stable: Option<(u64, u64)> = None; // (epoch, time)
    let mut detected: Option<u64> = None;
    while world.now() <= horizon {
        if world.step().is_none() {
            break;
        }
        for (_, t, e) in world.take_reports() {
            match e {
                Event::Member(MemberEvent::Stabilized { epoch, .. })
                    if last_stable.is_none_or(|(ep, _)| epoch >= ep) =>
                {
                    last_stable = Some((epoch, t));
                }
                Event::Member(MemberEvent::Detected { at, .. }) => {
                    detected.get_or_insert(at.0);
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
    let final_epoch = live.iter().map(|m| m.epoch()).max().unwrap_or(0);
    let views_agree = live
        .iter()
        .all(|m| m.view() == survivors.as_slice() && m.epoch() == final_epoch);
    let stabilized = last_stable.is_some_and(|(ep, _)| ep == final_epoch);
    let ts = last_stable.map_or(0, |(_, t)| t.saturating_sub(detected.unwrap_or(0)));
    let (l, ocp) = (cfg.latency.as_secs_f64() * 1e6, cfg.ocp.as_secs_f64() * 1e6);
    Ok(StabilizeRun {
        nodes: n,
        radix: cfg.radix,
        mode: cfg.mode,
        fail: cfg.fail.to_string(),
        net: cfg.net,
        latency_us: l,
        ocp_us: ocp,
        height,
        ts_us: ts as f64 / 1e3,
        base_model_us: 2.0 * l * (height as f64 - 1.0) + ocp * height as f64,
        msgs: world.sent,
        epochs: final_epoch,
        views_agree,
        stabilized,
        seed: cfg.seed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(nodes: u32, radix: u32, fail: Fail, mode: TreeMode, seed: u64) -> StabilizeConfig {
        StabilizeConfig {
            nodes,
            radix,
            mode,
            fail,
            net: NetKind::Constant,
            latency: Duration::from_micros(5),
            ocp: Duration::from_micros(2),
            send: Duration::from_micros(1),
            seed,
            probe: None,
            batch: Duration::ZERO,
            orphan_hold: crate::proto::membership::ORPHAN_HOLD,
        }
    }

    #[test]
    fn children_of_a_failed_process_leave_the_report_to_its_parent() {
        // Probes find the failure from both sides: its parent and its children time out on it.
        for seed in 0..4 {
            let probed = StabilizeConfig {
                probe: Some((Duration::from_micros(200), Duration::from_micros(100))),
                ..cfg(85, 4, Fail::Inner, TreeMode::Patch, seed)
            };
            let paper = run(&StabilizeConfig {
                orphan_hold: Duration::ZERO,
                ..probed.clone()
            })
            .unwrap();
            let held = run(&probed).unwrap();
            assert!(paper.views_agree && held.views_agree, "seed {seed}");
            assert!(paper.stabilized && held.stabilized, "seed {seed}");
            assert_eq!(held.epochs, 1, "seed {seed}: {held:?}");
            // Each child's NodeFailure and the root's FailureDetAck are saved (the probes'
            // own messages are the same in both runs).
            assert!(
                held.msgs + 2 <= paper.msgs,
                "seed {seed}: {} messages held, {} at once",
                held.msgs,
                paper.msgs
            );
        }
    }

    #[test]
    fn probes_alone_detect_every_failure() {
        for fail in [
            Fail::Leaf,
            Fail::Inner,
            Fail::Root,
            Fail::Multi(5),
            Fail::RootPlus(3),
        ] {
            for seed in 0..4 {
                let c = StabilizeConfig {
                    probe: Some((Duration::from_micros(200), Duration::from_micros(100))),
                    ..cfg(100, 4, fail, TreeMode::Patch, seed)
                };
                let r = run(&c).unwrap();
                assert!(r.views_agree && r.stabilized, "{fail} seed {seed}: {r:?}");
            }
        }
    }

    #[test]
    fn every_failure_case_ends_in_one_agreed_view() {
        for mode in [TreeMode::Patch, TreeMode::Rebalance] {
            for fail in [
                Fail::Leaf,
                Fail::Inner,
                Fail::Root,
                Fail::Multi(3),
                Fail::Multi(12),
                Fail::RootPlus(4),
            ] {
                for (n, a) in [(16, 2), (64, 4), (200, 8), (256, 2)] {
                    for seed in 0..5 {
                        let r = run(&cfg(n, a, fail, mode, seed)).unwrap();
                        assert!(
                            r.views_agree,
                            "{mode:?} {fail} n={n} a={a} seed={seed}: views differ"
                        );
                        assert!(
                            r.stabilized,
                            "{mode:?} {fail} n={n} a={a} seed={seed}: root never stabilized"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn single_failure_matches_the_base_model_shape() {
        // One failure, one epoch: Ts grows with the tree height, never below 2·L·(H−1).
        let mut prev = 0.0;
        for n in [16, 64, 256, 1024] {
            let r = run(&cfg(n, 2, Fail::Leaf, TreeMode::Patch, 1)).unwrap();
            assert_eq!(r.epochs, 1);
            assert!(
                r.ts_us >= 2.0 * r.latency_us * (r.height as f64 - 1.0),
                "{r:?}"
            );
            assert!(r.ts_us > prev, "Ts must grow with N: {r:?}");
            prev = r.ts_us;
        }
    }

    #[test]
    fn a_batching_root_stabilizes_simultaneous_failures_in_one_epoch() {
        for mode in [TreeMode::Patch, TreeMode::Rebalance] {
            for fail in [Fail::Multi(3), Fail::Multi(30), Fail::RootPlus(5)] {
                let unbatched = run(&cfg(512, 4, fail, mode, 4)).unwrap();
                let c = StabilizeConfig {
                    batch: Duration::from_micros(20),
                    ..cfg(512, 4, fail, mode, 4)
                };
                let r = run(&c).unwrap();
                assert!(r.views_agree && r.stabilized, "{mode:?} {fail}: {r:?}");
                // Every detection lands in the window: one epoch (two when the root itself
                // failed: the new root's own epoch, then the reports it batched).
                assert!(r.epochs <= 2, "{mode:?} {fail}: {} epochs", r.epochs);
                assert!(
                    r.msgs < unbatched.msgs || unbatched.epochs <= 2,
                    "{mode:?} {fail}"
                );
            }
        }
    }

    #[test]
    fn failure_case_names_parse() {
        assert_eq!("multi:3".parse::<Fail>(), Ok(Fail::Multi(3)));
        assert_eq!("root+2".parse::<Fail>(), Ok(Fail::RootPlus(2)));
        assert!("sideways".parse::<Fail>().is_err());
    }
}
