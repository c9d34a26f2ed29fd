//! BSPAGREEMENT in the simulator: many processes, some killed while it runs, every live
//! process's value after each round (Kontogiannis et al., Lemma 3.1: the spread shrinks to
//! nothing in `O(log n / log N)` rounds).

use super::timed::{Net, TimedConfig, TimedWorld};
use crate::proto::agreement::{Agreement, Initial, Rule};
use crate::NodeId;
use std::time::Duration;

/// One run's setting.
#[derive(Clone, Debug)]
pub struct AgreementSim {
    /// Processes.
    pub n: u64,
    /// The rule.
    pub rule: Rule,
    /// Each process's initial value (given or sampled).
    pub initial: fn(NodeId, u64) -> Initial,
    /// Rounds.
    pub rounds: u32,
    /// Processes killed, with the time of each kill (ns).
    pub kills: Vec<(u64, u32)>,
    /// Seeds the samples and the network's jitter.
    pub seed: u64,
}

/// What every live process ended with.
#[derive(Clone, Debug)]
pub struct AgreementRun {
    /// Each live process's value after each round: `values[p][r]`.
    pub values: Vec<Vec<u64>>,
    /// Messages sent.
    pub messages: u64,
}

impl AgreementRun {
    /// Largest minus smallest value among the live processes after round `r`.
    pub fn spread(&self, r: usize) -> u64 {
        let v = self.values.iter().filter_map(|p| p.get(r).copied());
        let (lo, hi) = v.fold((u64::MAX, 0), |(lo, hi), x| (lo.min(x), hi.max(x)));
        hi.saturating_sub(lo)
    }
}

/// Run BSPAGREEMENT with `log n` samples per round over a jittered network.
pub fn run(cfg: &AgreementSim) -> AgreementRun {
    let ids: Vec<NodeId> = (0..cfg.n).map(NodeId).collect();
    let fanout = Agreement::log_fanout(ids.len());
    let nodes = ids
        .iter()
        .map(|&me| {
            let initial = (cfg.initial)(me, cfg.seed);
            Agreement::new(me, &ids, cfg.rule, initial, cfg.rounds, fanout, cfg.seed)
        })
        .collect();
    let mut w = TimedWorld::new(
        nodes,
        TimedConfig {
            net: Net::Jitter {
                l: Duration::from_micros(5),
                spread: Duration::from_micros(20),
                seed: cfg.seed,
            },
            ocp: Duration::from_micros(1),
            send: Duration::from_nanos(200),
            detect: Duration::from_micros(50),
        },
    );
    for &(at, who) in &cfg.kills {
        w.kill_at(at, who);
    }
    w.start();
    while w.step().is_some() {}
    let values = (0..cfg.n as u32)
        .filter(|&i| w.is_alive(i))
        .map(|i| {
            let a = &w.nodes()[i as usize];
            (0..=cfg.rounds).map_while(|r| a.value_at(r)).collect()
        })
        .collect();
    AgreementRun {
        values,
        messages: w.sent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SimRng;

    fn own_seed(me: NodeId, seed: u64) -> Initial {
        Initial::Value(SimRng::new(seed * 1000 + me.0).next_u64())
    }

    /// BSPRANDOMCHOICE: every process draws a seed; after 8 rounds of `log n` samples under
    /// Min, every live process holds the same one, drawn by one of them, though an eighth of
    /// the processes died during the rounds.
    #[test]
    fn a_random_seed_is_agreed_by_every_live_process_despite_failures() {
        for seed in 0..20u64 {
            let n = 256;
            let kills = (0..n / 8)
                .map(|v| (1_000 * v, (v * 7 % n) as u32))
                .collect();
            let cfg = AgreementSim {
                n,
                rule: Rule::Min,
                initial: own_seed,
                rounds: 8,
                kills,
                seed,
            };
            let r = run(&cfg);
            assert!(
                r.values.iter().all(|v| v.len() == 9),
                "seed {seed}: every live process finishes"
            );
            assert_eq!(r.spread(8), 0, "seed {seed}");
            let agreed = r.values[0][8];
            let drawn = (0..n).any(|i| own_seed(NodeId(i), seed) == Initial::Value(agreed));
            assert!(drawn, "seed {seed}: the agreed seed is one a process drew");
        }
    }

    /// RANDOMSAMPLING then Median: every live process's estimate of the live count lands
    /// within 10% of the truth, and the rounds shrink the estimates' spread.
    #[test]
    fn the_live_count_estimate_converges_near_the_truth() {
        let (n, dead) = (512u64, 128u64);
        let cfg = AgreementSim {
            n,
            rule: Rule::Median,
            initial: |_, _| Initial::LiveCount { polls: 64 },
            rounds: 6,
            kills: (0..dead).map(|v| (0, (v * 4) as u32)).collect(),
            seed: 3,
        };
        let r = run(&cfg);
        let truth = n - dead;
        assert_eq!(r.values.len() as u64, truth);
        for v in &r.values {
            assert!(
                v[6].abs_diff(truth) <= truth / 10,
                "estimate {}, truth {truth}",
                v[6]
            );
        }
        assert!(
            r.spread(6) * 4 < r.spread(0),
            "spread {} -> {}",
            r.spread(0),
            r.spread(6)
        );
    }
}
