//! What a stabilization experiment does, whichever way it runs (simulated, in-process nodes,
//! node processes): which processes fail, in what order, and what must be true before and
//! after. One definition, so the simulator and the real runs kill alike.

use crate::proto::membership::IdTree;
use crate::rng::SimRng;
use crate::topology::recalc;
use crate::NodeId;
use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

/// Which processes fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fail {
    /// A random leaf.
    Leaf,
    /// A random inner process (not the root).
    Inner,
    /// The root.
    Root,
    /// K random non-root processes (K >= 1).
    Multi(usize),
    /// The root and K random others.
    RootPlus(usize),
    /// These processes, killed in this order (`n0,n1`: the root, then the next in line).
    Named(Vec<NodeId>),
    /// Every process of a random host other than the root's, in one of the ways a host
    /// fails ([`HostFailure`]). Only a job whose ranks say which host they are on can draw it
    /// ([`super::launched`]).
    Host(HostFailure),
}

/// How a host fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostFailure {
    /// Its processes crash together (`host`).
    Crash,
    /// Its link goes down (`host-down`): nothing says goodbye, nothing gets through.
    Down,
    /// The link between it and the root's host carries nothing, silently (`link`), while
    /// both hosts live on and reach every other host. Its processes cannot reach the root's
    /// side, and ICS'06 treats a process that times out as failed (its footnote 1): the
    /// root's view must settle without them, as for `host-down`. With ranks in blocks every
    /// tree edge between hosts leaves the root's host, so this is the link the tree uses.
    Link,
}

impl Fail {
    /// How many processes this failure kills.
    pub fn killed(&self) -> usize {
        match self {
            Fail::Leaf | Fail::Inner | Fail::Root => 1,
            Fail::Multi(k) => *k,
            Fail::RootPlus(k) => k + 1,
            Fail::Named(v) => v.len(),
            // At least one; how many is known once the ranks have said where they are.
            Fail::Host(_) => 1,
        }
    }

    /// Whether a job of `n` processes can run this failure and keep at least one survivor;
    /// the reason if not. Checked before anything runs.
    pub fn check(&self, n: u32) -> Result<(), String> {
        let n = n as usize;
        let k = self.killed();
        if k == 0 {
            return Err(format!("--fail {self}: kills nobody"));
        }
        if k >= n {
            return Err(format!(
                "--fail {self} kills {k} of {n} processes: at least one must survive"
            ));
        }
        if let Fail::Named(v) = self {
            if let Some(bad) = v.iter().find(|id| id.0 >= n as u64) {
                return Err(format!("--victims: {bad} is not in a job of {n}"));
            }
            let distinct: HashSet<_> = v.iter().collect();
            if distinct.len() != v.len() {
                return Err("--victims names a process twice".into());
            }
        }
        Ok(())
    }
}

impl FromStr for Fail {
    type Err = String;
    fn from_str(s: &str) -> Result<Fail, String> {
        let bad = || {
            format!(
                "--fail {s:?}: expected leaf, inner, root, multi:K, root+K, host, host-down or \
                 link"
            )
        };
        let count = |k: &str| k.parse::<usize>().map_err(|_| bad());
        Ok(match s {
            "leaf" => Fail::Leaf,
            "inner" => Fail::Inner,
            "root" => Fail::Root,
            "host" => Fail::Host(HostFailure::Crash),
            "host-down" => Fail::Host(HostFailure::Down),
            "link" => Fail::Host(HostFailure::Link),
            _ if s.starts_with("multi:") => match count(&s[6..])? {
                0 => return Err(format!("--fail {s:?}: multi:K kills K >= 1 processes")),
                k => Fail::Multi(k),
            },
            _ if s.starts_with("root+") => Fail::RootPlus(count(&s[5..])?),
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
            Fail::Host(HostFailure::Crash) => f.write_str("host"),
            Fail::Host(HostFailure::Down) => f.write_str("host-down"),
            Fail::Host(HostFailure::Link) => f.write_str("link"),
            Fail::Named(v) => {
                let names: Vec<String> = v.iter().map(|id| id.to_string()).collect();
                f.write_str(&names.join(","))
            }
        }
    }
}

/// A `--victims` list: `n0,n1` or `0,1`.
pub fn parse_victims(s: &str) -> Result<Vec<NodeId>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.strip_prefix('n')
                .unwrap_or(p)
                .parse::<u64>()
                .map(NodeId)
                .map_err(|_| format!("--victims: {p:?} is not a process id (n3 or 3)"))
        })
        .collect()
}

/// The processes that `fail` kills in a job of `n` (ids `0..n`) over the initial `tree`,
/// drawn with `rng`, in the order they are killed. Shared by the simulator and the real runs,
/// so both kill alike. `fail` must pass [`Fail::check`] for `n`.
pub fn victims(
    tree: &IdTree,
    n: u32,
    fail: &Fail,
    rng: &mut SimRng,
) -> Result<Vec<NodeId>, String> {
    fail.check(n)?;
    let leaves: Vec<u32> = (1..n)
        .filter(|&i| tree.children(NodeId(i as u64)).is_empty())
        .collect();
    let inner: Vec<u32> = (1..n)
        .filter(|&i| !tree.children(NodeId(i as u64)).is_empty())
        .collect();
    let one = |rng: &mut SimRng, v: &[u32], kind: &str| -> Result<u32, String> {
        if v.is_empty() {
            return Err(format!(
                "--fail {kind}: a tree of {n} has no {kind} process"
            ));
        }
        Ok(v[rng.below(v.len() as u64) as usize])
    };
    let ids = |v: Vec<u32>| v.into_iter().map(|i| NodeId(i as u64)).collect();
    Ok(match fail {
        Fail::Leaf => ids(vec![one(rng, &leaves, "leaf")?]),
        Fail::Inner => ids(vec![one(rng, &inner, "inner")?]),
        Fail::Root => vec![NodeId(0)],
        Fail::Multi(k) => ids(pick(rng, n, *k, &[0])),
        Fail::RootPlus(k) => {
            let mut v = vec![0];
            v.extend(pick(rng, n, *k, &[0]));
            ids(v)
        }
        Fail::Named(v) => v.clone(),
        Fail::Host(_) => {
            return Err(format!(
                "--fail {fail}: needs processes on several hosts (--hosts K, or a launcher)"
            ))
        }
    })
}

/// Pick `k` distinct processes among `0..n` excluding `except` (fewer if there are not so
/// many).
pub fn pick(rng: &mut SimRng, n: u32, k: usize, except: &[u32]) -> Vec<u32> {
    let mut out = Vec::new();
    while out.len() < k && out.len() + except.len() < n as usize {
        let c = rng.below(n as u64) as u32;
        if !out.contains(&c) && !except.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// What a trial does, whichever way its nodes run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The job's ids, `0..N`.
    pub ids: Vec<NodeId>,
    /// The nodes to kill, in order (none for a join).
    pub victims: Vec<NodeId>,
    /// The connections that must be up (both ends authenticated) before the kill: every tree
    /// edge and every standby pair, both ways.
    pub missing: HashSet<(NodeId, NodeId)>,
}

impl Plan {
    /// The processes that survive, in id order.
    pub fn survivors(&self) -> Vec<NodeId> {
        let dead: HashSet<NodeId> = self.victims.iter().copied().collect();
        self.ids
            .iter()
            .copied()
            .filter(|i| !dead.contains(i))
            .collect()
    }
}

/// Plan trial `rep` of a job of `n` with radix `radix`: victims drawn from `seed + rep` (none
/// when `fail` is `None`, a join), and the connections to wait for.
pub fn plan(n: u32, radix: u32, fail: Option<&Fail>, seed: u64, rep: u32) -> Result<Plan, String> {
    if n < 2 {
        return Err("need at least 2 nodes".into());
    }
    if radix < 2 || !radix.is_power_of_two() {
        return Err(format!("radix {radix} is not a power of two >= 2"));
    }
    let ids: Vec<NodeId> = (0..n as u64).map(NodeId).collect();
    let tree = IdTree::radix(&ids, radix);
    let victims = match fail {
        Some(fail) => {
            let mut rng = SimRng::new(seed.wrapping_add(rep as u64));
            victims(&tree, n, fail, &mut rng)?
        }
        None => Vec::new(),
    };
    let mut missing = HashSet::new();
    for &id in &ids {
        let warm = recalc::standby(&ids, id, radix);
        for &c in tree.children(id).iter().chain(&warm) {
            missing.insert((id, c));
            missing.insert((c, id));
        }
    }
    Ok(Plan {
        ids,
        victims,
        missing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_case_names_parse_and_nonsense_is_refused() {
        assert_eq!("multi:3".parse::<Fail>(), Ok(Fail::Multi(3)));
        assert_eq!("root+2".parse::<Fail>(), Ok(Fail::RootPlus(2)));
        assert!("sideways".parse::<Fail>().is_err());
        for s in ["host", "host-down", "link", "multi:3", "root+2", "leaf"] {
            assert_eq!(s.parse::<Fail>().map(|f| f.to_string()), Ok(s.to_string()));
        }
        assert!("multi:0".parse::<Fail>().is_err(), "kills nobody");
        assert!("multi:-1".parse::<Fail>().is_err());
        assert_eq!(
            parse_victims("n0, 1,n7"),
            Ok(vec![NodeId(0), NodeId(1), NodeId(7)])
        );
        assert!(parse_victims("n0,x").is_err());
    }

    /// K at or past N is refused before anything runs, not capped behind the caller's back.
    #[test]
    fn a_failure_that_leaves_nobody_is_refused() {
        assert!(Fail::Multi(15).check(16).is_ok());
        assert!(Fail::Multi(16).check(16).is_err());
        assert!(Fail::Multi(100).check(16).is_err());
        assert!(Fail::RootPlus(15).check(16).is_err());
        assert!(Fail::RootPlus(14).check(16).is_ok());
        assert!(Fail::Leaf.check(2).is_ok());
        assert!(Fail::Named(vec![NodeId(0), NodeId(0)]).check(4).is_err());
        assert!(Fail::Named(vec![NodeId(9)]).check(4).is_err());
        // What the JSON says is what runs.
        let ids: Vec<NodeId> = (0..16).map(NodeId).collect();
        let tree = IdTree::radix(&ids, 4);
        let v = victims(&tree, 16, &Fail::Multi(15), &mut SimRng::new(1)).unwrap();
        assert_eq!(v.len(), 15);
        assert!(!v.contains(&NodeId(0)));
    }

    /// A join draws no victims, so a tree with no process of the default kind still runs one.
    #[test]
    fn a_join_plan_has_no_victims() {
        let p = plan(2, 2, None, 1, 0).unwrap();
        assert!(p.victims.is_empty());
        assert_eq!(p.survivors().len(), 2);
        assert!(
            plan(2, 2, Some(&Fail::Inner), 1, 0).is_err(),
            "no inner process"
        );
        assert!(plan(16, 16, None, 1, 0).is_ok());
    }

    use crate::proto::membership::TreeMode;
    use crate::sim::stabilize::{run, NetKind, StabilizeConfig, StabilizeRun};
    use proptest::prelude::*;
    use std::time::Duration;

    /// The simulated stabilization of failure `fail` in a job of `n` with radix `a`.
    fn simulate(n: u32, a: u32, fail: &Fail, mode: TreeMode, seed: u64) -> StabilizeRun {
        run(&sim_config(n, a, fail, mode, seed)).unwrap()
    }

    /// The simulator's settings for [`simulate`]: detection at the kill, no batching.
    fn sim_config(n: u32, a: u32, fail: &Fail, mode: TreeMode, seed: u64) -> StabilizeConfig {
        let p = plan(n, a, Some(fail), seed, 0).unwrap();
        StabilizeConfig {
            nodes: n,
            radix: a,
            mode,
            victims: p.victims,
            kill_gap: Duration::ZERO,
            label: fail.to_string(),
            net: NetKind::Constant,
            torus: None,
            latency: Duration::from_micros(5),
            ocp: Duration::from_micros(2),
            send: Duration::from_micros(1),
            seed,
            probe: None,
            batch: Duration::ZERO,
            orphan_hold: crate::proto::membership::ORPHAN_HOLD,
            collect: false,
        }
    }

    /// Three roots die 9 µs apart, each as it takes over from the last: the fourth in line
    /// takes over too, and then hears the third's takeover, which was on its way when it died
    /// and names the same epoch under a lower root. It leaves for that view (the merge rule
    /// of a split), asks the dead root in, then the others; the one that now counts it as its
    /// root must admit it as the next root, or the two survivors end in two views (a
    /// proptest case; it failed so).
    #[test]
    fn a_chain_of_roots_dying_as_they_take_over_ends_in_one_view() {
        let r = run(&StabilizeConfig {
            victims: vec![NodeId(0), NodeId(1), NodeId(2)],
            kill_gap: Duration::from_nanos(9001),
            orphan_hold: Duration::ZERO,
            send: Duration::ZERO,
            ..sim_config(5, 2, &Fail::Leaf, TreeMode::Patch, 0)
        })
        .unwrap();
        assert!(r.views_agree && r.stabilized, "{r:?}");
    }

    /// With probes and no detection handed to the experiment, every failure case is found and
    /// healed all the same.
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
                    ..sim_config(100, 4, &fail, TreeMode::Patch, seed)
                };
                let r = run(&c).unwrap();
                assert!(r.views_agree && r.stabilized, "{fail} seed {seed}: {r:?}");
            }
        }
    }

    /// A batching root gathers simultaneous failures into one epoch (two when the root itself
    /// failed: the new root's own epoch, then the reports it batched), with fewer messages than
    /// the paper's restart per report.
    #[test]
    fn a_batching_root_stabilizes_simultaneous_failures_in_few_epochs() {
        for mode in [TreeMode::Patch, TreeMode::Rebalance] {
            for fail in [Fail::Multi(3), Fail::Multi(30), Fail::RootPlus(5)] {
                let unbatched = StabilizeConfig {
                    orphan_hold: Duration::ZERO,
                    ..sim_config(512, 4, &fail, mode, 4)
                };
                let batched = StabilizeConfig {
                    batch: Duration::from_micros(20),
                    ..unbatched.clone()
                };
                let (u, r) = (run(&unbatched).unwrap(), run(&batched).unwrap());
                assert!(r.views_agree && r.stabilized, "{mode:?} {fail}: {r:?}");
                assert!(r.epochs <= 2, "{mode:?} {fail}: {} epochs", r.epochs);
                assert!(r.msgs < u.msgs || u.epochs <= 2, "{mode:?} {fail}");
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
                        let r = simulate(n, a, &fail, mode, seed);
                        assert!(
                            r.views_agree && r.stabilized && r.views_named_once,
                            "{mode:?} {fail} n={n} a={a} seed={seed}: {r:?}"
                        );
                    }
                }
            }
        }
    }

    /// The failing cases: the root and the next in line, the root and all but one.
    #[test]
    fn root_failures_with_dead_successors_stabilize() {
        for (n, fail) in [
            (3, Fail::RootPlus(1)),
            (4, Fail::RootPlus(1)),
            (5, Fail::RootPlus(2)),
            (16, Fail::RootPlus(1)),
            (64, Fail::RootPlus(1)),
            (16, Fail::RootPlus(14)),
        ] {
            for seed in 0..40 {
                for mode in [TreeMode::Patch, TreeMode::Rebalance] {
                    let r = simulate(n, 4, &fail, mode, seed);
                    assert!(
                        r.views_agree && r.stabilized,
                        "{mode:?} {fail} n={n} seed={seed}: {r:?}"
                    );
                }
            }
        }
    }

    /// The root and the next in line among four victims killed 4.334 µs apart (the case
    /// a fresh run found): the new root took the dead root's last epoch, still on its
    /// way, for a split and left its own view for the dead root's.
    #[test]
    fn the_new_root_keeps_its_view_when_the_dead_roots_last_epochs_arrive() {
        let victims = vec![NodeId(3), NodeId(4), NodeId(1), NodeId(0)];
        let cfg = StabilizeConfig {
            kill_gap: Duration::from_nanos(4334),
            ..paced(67, 2, TreeMode::Patch, victims)
        };
        let r = run(&cfg).unwrap();
        assert!(r.views_agree && r.stabilized && r.views_named_once, "{r:?}");
    }

    /// `victims` of `n` processes killed at once on a 5 µs network without probes, no hold
    /// and no batching: the property's runs, and the cases it found.
    fn paced(n: u32, radix: u32, mode: TreeMode, victims: Vec<NodeId>) -> StabilizeConfig {
        StabilizeConfig {
            nodes: n,
            radix,
            mode,
            victims,
            kill_gap: Duration::ZERO,
            label: "paced".into(),
            net: NetKind::Constant,
            torus: None,
            latency: Duration::from_micros(5),
            ocp: Duration::from_micros(2),
            send: Duration::ZERO,
            seed: 0,
            probe: None,
            batch: Duration::ZERO,
            orphan_hold: Duration::ZERO,
            collect: false,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Any victims (the root among them or not), killed at once or one after another at
        /// any pace: every survivor ends in one view, stabilized, and no epoch ever names two
        /// views.
        #[test]
        fn any_victims_at_any_pace_end_in_one_view(
            n in 2u32..80,
            log_a in 1u32..4,
            picks in proptest::collection::vec(0u64..80, 1..10),
            gap_ns in prop_oneof![Just(0u64), 100u64..30_000],
            rebalance in any::<bool>(),
            hold_us in prop_oneof![Just(0u64), Just(20_000u64)],
            batch_us in prop_oneof![Just(0u64), 1u64..50],
        ) {
            let mut victims: Vec<NodeId> = Vec::new();
            for p in picks {
                let v = NodeId(p % n as u64);
                if !victims.contains(&v) && victims.len() + 1 < n as usize {
                    victims.push(v);
                }
            }
            let mode = if rebalance { TreeMode::Rebalance } else { TreeMode::Patch };
            let r = run(&StabilizeConfig {
                kill_gap: Duration::from_nanos(gap_ns),
                batch: Duration::from_micros(batch_us),
                orphan_hold: Duration::from_micros(hold_us),
                ..paced(n, 1 << log_a, mode, victims.clone())
            }).unwrap();
            prop_assert!(r.views_named_once, "{:?} {} ns: {:?}", victims, gap_ns, r);
            prop_assert!(r.views_agree && r.stabilized, "{:?} {} ns: {:?}", victims, gap_ns, r);
        }
    }
}
