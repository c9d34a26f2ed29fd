//! Robust-BSP in the simulator (Kontogiannis et al., Figures 3, 5, 6 and section 4): `V`
//! virtual processors on `n` real ones that die at a rate per superstep, up to a fraction `α`.
//! The program's threads are executed for real, so the run ends with a result to compare
//! with a fault-free run, beside the counts the paper bounds: SECONDARYJOBs per superstep and
//! BACKTRACKs (at most `log log n` with high probability, Lemmas 3.9 and 3.11), the largest
//! PrimaryJobQueue against `V / A_k` (`Θ(log log n)`, Theorem 4.1), the work against the
//! fault-free `V · S`.
//!
//! Storage is decided by weft's own placement (`crate::storage::Placement`): a thread whose
//! state must be fetched (its processor died) is lost when more than half of the neighborhood
//! of its physical destination is dead, which is a corruption and BACKTRACKs the epoch.
//! Departures: a processor that dies in a job completes none of that job's threads (the paper
//! lets it die anywhere; this is the worse case); SECONDARYJOBs continue past `log log n`
//! until no thread is pending (the paper's rare failed superstep), and the count says how many
//! it took; SDOU's indirect deliveries are not simulated (every message reaches its thread).

use crate::bsp::{alb, Program};
use crate::rng::SimRng;
use crate::storage::placement::Placement;
use crate::storage::Scheme;
use crate::NodeId;

/// A run's setting.
#[derive(Clone, Debug)]
pub struct BspSim {
    /// Real processors `n`.
    pub real: usize,
    /// Virtual processors `V`.
    pub virt: u64,
    /// Virtual supersteps of the program.
    pub supersteps: u32,
    /// Probability that a live real processor dies during a superstep.
    pub fail_rate: f64,
    /// At most `α · n` real processors die in the whole run.
    pub alpha: f64,
    /// Supersteps per epoch `K_0`.
    pub epoch: u32,
    /// Discarding keeps at most `c_1 · V / A_k` threads per queue.
    pub c1: f64,
    /// Threads each live processor contests for per SECONDARYJOB: `g · V / A_k`.
    pub g: f64,
    /// Seeds every draw.
    pub seed: u64,
}

/// What a run did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BspReport {
    /// The program.
    pub app: &'static str,
    /// Real processors.
    pub real: usize,
    /// Virtual processors.
    pub virt: u64,
    /// Program supersteps.
    pub supersteps: u32,
    /// The final states equal a fault-free run's.
    pub result_ok: bool,
    /// Real processors that died.
    pub deaths: usize,
    /// Supersteps run, re-executions after BACKTRACKs included.
    pub supersteps_run: u64,
    /// BACKTRACKs (Lemma 3.11's bound: `log log n`).
    pub backtracks: u32,
    /// Most SECONDARYJOBs one superstep needed (Lemma 3.9's `y`: `log log n`).
    pub max_secondary_jobs: u32,
    /// `log2 log2 n`, the bound both are set beside.
    pub log_log_n: f64,
    /// Largest PrimaryJobQueue over `V / A_k`, any superstep (Theorem 4.1: `Θ(log log n)`).
    pub max_load_ratio: f64,
    /// Thread executions (wasted ones of dying processors included) over `V · S`.
    pub work_ratio: f64,
    /// Final neighborhood size `N_u`.
    pub n_u: usize,
    /// SafeStates made (GLOBALSTORAGE at the end of each clean epoch).
    pub safe_states: u32,
    /// LOCALSTORAGE pieces written (`N_u` per completed thread).
    pub pieces: u64,
    /// Program messages, and BSPAGREEMENT's (`A_k · log n` per round, `⌈log n / log log n⌉`
    /// rounds per job).
    pub messages: u64,
    /// The seed.
    pub seed: u64,
}

fn lg(x: f64) -> f64 {
    x.max(2.0).log2()
}

/// Run `p` under Robust-BSP with failures.
pub fn run(p: &dyn Program, cfg: &BspSim) -> BspReport {
    let (n, v) = (cfg.real.max(1), cfg.virt.max(1));
    let mut rng = SimRng::new(cfg.seed);
    let ids: Vec<NodeId> = (0..n as u64).map(NodeId).collect();
    let log_log_n = lg(lg(n as f64));
    let agree_rounds = (lg(n as f64) / log_log_n).ceil() as u64;
    let fanout = lg(n as f64).ceil() as u64;
    let max_dead = (cfg.alpha * n as f64).floor() as usize;

    let mut alive = vec![true; n];
    let mut dead: Vec<NodeId> = Vec::new();
    let mut pj: Vec<Vec<u32>> = vec![Vec::new(); n];
    for t in 0..v as u32 {
        pj[t as usize % n].push(t);
    }
    let mut state: Vec<u64> = (0..v).map(|i| p.init(i, v)).collect();
    let mut inbox: Vec<Vec<(u64, u64)>> = vec![Vec::new(); v as usize];
    let mut safe = (0u32, state.clone(), inbox.clone());
    let (mut u, mut hash_seed) = (0u32, rng.next_u64());
    let mut placement = Placement::new(Scheme::Ida, &ids, hash_seed, u);
    let mut r = BspReport {
        app: p.name(),
        real: n,
        virt: v,
        supersteps: cfg.supersteps,
        result_ok: false,
        deaths: 0,
        supersteps_run: 0,
        backtracks: 0,
        max_secondary_jobs: 0,
        log_log_n,
        max_load_ratio: 0.0,
        work_ratio: 0.0,
        n_u: placement.size,
        safe_states: 0,
        pieces: 0,
        messages: 0,
        seed: cfg.seed,
    };
    let mut executions = 0u64;
    let mut k = 0u32;
    while k < cfg.supersteps && dead.len() < n {
        r.supersteps_run += 1;
        let live: Vec<usize> = (0..n).filter(|&i| alive[i]).collect();
        let a_k = live.len();
        // Who dies in this superstep, and in which job (0: the PRIMARYJOB).
        let jobs = 1 + log_log_n.ceil() as u64;
        let mut dies_in: Vec<Option<u32>> = vec![None; n];
        let mut dying = 0;
        for &i in &live {
            if dead.len() + dying < max_dead && dying + 1 < a_k && rng.chance(cfg.fail_rate) {
                dies_in[i] = Some(rng.below(jobs) as u32);
                dying += 1;
            }
        }
        // DISCARDING, and the queues of processors that died earlier.
        let mu = (cfg.c1 * v as f64 / a_k as f64).ceil() as usize;
        let mut pending: Vec<u32> = Vec::new();
        for i in 0..n {
            if !alive[i] {
                pending.append(&mut pj[i]);
            }
        }
        let mut z0 = vec![0usize; n];
        for &i in &live {
            pending.extend(alb::discard(&mut pj[i], mu, &mut rng));
            z0[i] = pj[i].len();
        }
        let mut next_state = state.clone();
        let mut next_inbox: Vec<Vec<(u64, u64)>> = vec![Vec::new(); v as usize];
        let run_thread =
            |t: u32, next_state: &mut Vec<u64>, next_inbox: &mut Vec<Vec<(u64, u64)>>| {
                let (s, out) = p.step(t as u64, k, v, state[t as usize], &inbox[t as usize]);
                next_state[t as usize] = s;
                for (to, x) in out {
                    if let Some(b) = next_inbox.get_mut(to as usize) {
                        b.push((t as u64, x));
                    }
                }
            };
        let mut messages = a_k as u64 * fanout * agree_rounds;
        // PRIMARYJOB.
        for &i in &live {
            if dies_in[i] == Some(0) {
                executions += pj[i].len() as u64 / 2; // half done when it died, on average
                pending.append(&mut pj[i]);
                alive[i] = false;
                dead.push(NodeId(i as u64));
            } else {
                for &t in &pj[i] {
                    run_thread(t, &mut next_state, &mut next_inbox);
                }
                executions += pj[i].len() as u64;
            }
        }
        // SECONDARYJOBs until nothing is pending, or a corruption.
        let mut y = 0u32;
        let mut corrupt = false;
        while !pending.is_empty() {
            y += 1;
            messages += (n - dead.len()) as u64 * fanout * agree_rounds;
            // INFORMATIONGATHERING: a pending thread's state comes from its neighborhood.
            corrupt = pending
                .iter()
                .any(|&t| !placement.tolerates(t as u64 % n as u64, &dead));
            if corrupt || y > 1000 {
                break;
            }
            let contesters: Vec<usize> = (0..n).filter(|&i| alive[i]).collect();
            let b = (cfg.g * v as f64 / contesters.len() as f64).ceil().max(1.0) as usize;
            let mut contest: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
            for &i in &contesters {
                for _ in 0..b {
                    let t = pending[rng.below(pending.len() as u64) as usize];
                    contest.entry(t).or_default().push(i);
                }
            }
            let mut still = Vec::new();
            for t in pending.drain(..) {
                let Some(c) = contest.get(&t) else {
                    still.push(t);
                    continue;
                };
                let Some(w) = alb::award(c, &z0, &mut rng) else {
                    still.push(t);
                    continue;
                };
                executions += 1;
                if dies_in[w] == Some(y) {
                    still.push(t);
                } else {
                    run_thread(t, &mut next_state, &mut next_inbox);
                    pj[w].push(t);
                    z0[w] += 1;
                }
            }
            pending = still;
            for &i in &contesters {
                if dies_in[i] == Some(y) {
                    alive[i] = false;
                    dead.push(NodeId(i as u64));
                }
            }
        }
        // Processors that were to die in a later job die now: their queues wait for the
        // next superstep's SECONDARYJOBs.
        for i in 0..n {
            if alive[i] && dies_in[i].is_some_and(|j| j > y) {
                alive[i] = false;
                dead.push(NodeId(i as u64));
            }
        }
        r.max_secondary_jobs = r.max_secondary_jobs.max(y);
        let live_now = (0..n).filter(|&i| alive[i]).count().max(1);
        let biggest = (0..n)
            .filter(|&i| alive[i])
            .map(|i| pj[i].len())
            .max()
            .unwrap_or(0);
        r.max_load_ratio = r
            .max_load_ratio
            .max(biggest as f64 / (v as f64 / live_now as f64));
        if corrupt {
            // BACKTRACK to the SafeState, neighborhoods doubled and drawn again.
            r.backtracks += 1;
            (k, state, inbox) = (safe.0, safe.1.clone(), safe.2.clone());
            u += 1;
            hash_seed = rng.next_u64();
            placement = Placement::new(Scheme::Ida, &ids, hash_seed, u);
            let live: Vec<usize> = (0..n).filter(|&i| alive[i]).collect();
            pj.iter_mut().for_each(Vec::clear);
            for t in 0..v as u32 {
                pj[live[t as usize % live.len()]].push(t);
            }
            continue;
        }
        for b in &mut next_inbox {
            b.sort_unstable();
            messages += b.len() as u64;
        }
        r.messages += messages;
        r.pieces += v * placement.size as u64;
        state = next_state;
        inbox = next_inbox;
        k += 1;
        if k.is_multiple_of(cfg.epoch.max(1)) {
            safe = (k, state.clone(), inbox.clone());
            r.safe_states += 1;
        }
    }
    r.deaths = dead.len();
    r.n_u = placement.size;
    r.work_ratio = executions as f64 / (v as f64 * cfg.supersteps.max(1) as f64);
    r.result_ok = k == cfg.supersteps && state == crate::bsp::app::reference(p, v, cfg.supersteps);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bsp::app::{Jacobi, PrefixSum};

    fn cfg(seed: u64) -> BspSim {
        BspSim {
            real: 100,
            virt: 1000,
            supersteps: 12,
            fail_rate: 0.02,
            alpha: 0.25,
            epoch: 4,
            c1: 1.0,
            g: 2.0,
            seed,
        }
    }

    #[test]
    fn the_result_under_failures_is_the_fault_free_one() {
        for seed in 0..10 {
            for p in [&PrefixSum as &dyn Program, &Jacobi] {
                let r = run(p, &cfg(seed));
                assert!(r.result_ok, "{r:?}");
                assert!(r.deaths > 0, "failures happened: {r:?}");
            }
        }
    }

    #[test]
    fn a_corrupted_neighborhood_backtracks_and_the_result_still_holds() {
        // Many deaths at once: neighborhoods of N_0 = 7 lose more than half somewhere.
        let c = BspSim {
            fail_rate: 0.3,
            alpha: 0.6,
            ..cfg(3)
        };
        let r = run(&Jacobi, &c);
        assert!(r.backtracks > 0, "{r:?}");
        assert!(r.n_u > 7, "neighborhoods doubled: {r:?}");
        assert!(r.result_ok, "{r:?}");
    }

    #[test]
    fn without_failures_there_is_no_secondary_job_and_no_extra_work() {
        let r = run(
            &PrefixSum,
            &BspSim {
                fail_rate: 0.0,
                ..cfg(1)
            },
        );
        assert!(r.result_ok);
        assert_eq!((r.deaths, r.max_secondary_jobs, r.backtracks), (0, 0, 0));
        assert_eq!(r.work_ratio, 1.0);
    }
}
