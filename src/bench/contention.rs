//! ICS'06 Figure 7: the latency between neighbors while many communicate at once, which the
//! paper's contention model puts in place of `L` in the base model (equation 1).
//!
//! The job's N processes form disjoint groups of consecutive ranks, as the paper's
//! "neighboring nodes communicating along a localized structure": (a) pairs, (b) a parent
//! with two children, (c) a parent with four (`fanout` 1, 2, 4). Every group runs its
//! ping-pong at the same time ([`PingPong::fan_out`]). A round is the parent's ping to all its
//! children and their echoes, which is what one level of a stabilization wave costs a parent
//! (down, and the acknowledgments up), so half a round is the `L` of that level. `L(N)` is the
//! median half-round over every parent's rounds.
//!
//! The groups follow the ranks, and ranks follow the job's placement: in-process nodes share
//! the machine's cores, and on the hosts of `--hosts` (blocks of ranks) the groups at a
//! block's edge cross hosts. [`super::launched`] runs the same groups over a launched job.

use crate::engine::reactor::NodeEvent;
use crate::engine::EngineError;
use crate::metrics::summarize_exact;
use crate::proto::ping::PingPong;
use crate::proto::Event;
use crate::transport::{Cluster, NodeOptions};
use crate::NodeId;
use serde::Serialize;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// Payload of every ping: a small control message, as the stabilization's.
pub const PING_BYTES: usize = 32;

/// The groups of a job of `n` under `fanout` children per parent: consecutive ranks, the
/// parent first. A remainder of two or more forms one smaller group; a last lone rank sits
/// out (it has nobody to talk to).
pub fn groups(n: u32, fanout: u32) -> Vec<Vec<NodeId>> {
    let size = fanout.max(1) + 1;
    let mut out = Vec::new();
    let mut r = 0;
    while n.saturating_sub(r) >= 2 {
        let end = (r + size).min(n);
        out.push((r..end).map(|i| NodeId(u64::from(i))).collect());
        r = end;
    }
    out
}

/// `L(N)` for one group shape (a JSON line's part, a point of Figure 7).
#[derive(Clone, Debug, Serialize)]
pub struct Contention {
    /// Processes of the job (all of them, grouped).
    pub nodes: u32,
    /// Children per parent (1: pairs).
    pub fanout: u32,
    /// Groups that ran at once.
    pub groups: u32,
    /// Timed rounds, over every parent.
    pub rounds: u64,
    /// Half a round: median, µs. The `L(N)` of the model.
    pub l_us: f64,
    /// Half a round: mean, µs.
    pub l_mean_us: f64,
    /// Half a round: 99th percentile, µs.
    pub l_p99_us: f64,
}

impl Contention {
    /// The figures of round trips `rtt_ns` (every parent's timed rounds).
    pub fn of(nodes: u32, fanout: u32, groups: u32, rtt_ns: &[u64]) -> Self {
        let half: Vec<f64> = rtt_ns.iter().map(|&r| r as f64 / 2e3).collect();
        let s = summarize_exact(&half);
        Contention {
            nodes,
            fanout,
            groups,
            rounds: s.count,
            l_us: s.p50_us,
            l_mean_us: s.mean_us,
            l_p99_us: s.p99_us,
        }
    }
}

/// Each group's protocol: the parent pings its children `iters` timed rounds (after
/// `warmup`), `gap` idle between rounds (zero: back to back), the others echo.
pub fn protocol(
    groups: &[Vec<NodeId>],
    me: NodeId,
    iters: u64,
    warmup: u64,
    gap: Duration,
) -> PingPong {
    match groups.iter().find(|g| g.first() == Some(&me)) {
        Some(g) => {
            PingPong::fan_out(g[1..].to_vec(), vec![PING_BYTES], iters, warmup).with_gap(gap)
        }
        None => PingPong::ponger(),
    }
}

/// The idle time before each round of a *cold* ping: ten times the adaptive reactor's spin,
/// so every ping finds its receiver blocked, as a stabilization's first message finds the
/// processes that were idle before the failure.
pub const COLD_GAP: Duration = Duration::from_micros(crate::engine::SPIN.as_micros() as u64 * 10);

/// Timed rounds of a cold ping (each waits [`COLD_GAP`] first).
pub const COLD_ROUNDS: u64 = 60;

impl Contention {
    /// The one-way latency of a cold round: its round trip less the warm one-way `warm_us`
    /// (the echo comes back to a pinger that has just sent, and spins), µs; never less than
    /// half the round trip, since the cold leg cannot be the cheaper one (a warm figure that
    /// a scheduling accident inflated would otherwise make it small, or negative).
    pub fn cold_one_way(&self, warm_us: f64) -> f64 {
        let rtt = 2.0 * self.l_us;
        (rtt - warm_us).max(rtt / 2.0)
    }
}

/// Measure `L(N)` on `n` in-process engine nodes (loopback, sharing the cores): `iters` timed
/// rounds per parent, after `warmup`, `gap` idle before each.
pub fn measure(
    n: u32,
    fanout: u32,
    iters: u64,
    warmup: u64,
    gap: Duration,
    opts: &NodeOptions,
    timeout: Duration,
) -> Result<Contention, EngineError> {
    let g = groups(n, fanout);
    let parents: HashSet<NodeId> = g.iter().filter_map(|g| g.first().copied()).collect();
    let shared = g.clone();
    let cluster = Cluster::start(n as usize, opts.clone(), move |i, ids| {
        protocol(&shared, ids[i], iters, warmup, gap)
    })?;
    let deadline = Instant::now() + timeout;
    let mut done = HashSet::new();
    while done.len() < parents.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        match cluster.events.recv_timeout(left) {
            Ok((who, NodeEvent::Protocol(Event::Done))) => {
                done.insert(who);
            }
            Ok(_) => {}
            Err(_) => {
                return Err(EngineError::Io(std::io::Error::other(format!(
                    "contention at {n} nodes, fan-out {fanout}: {} of {} parents done \
                     within {timeout:?}",
                    done.len(),
                    parents.len()
                ))))
            }
        }
    }
    let protos = cluster.stop_all()?;
    let rtts: Vec<u64> = protos
        .iter()
        .flat_map(|p| p.samples().iter().map(|&(_, ns)| ns))
        .collect();
    Ok(Contention::of(n, fanout, g.len() as u32, &rtts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_consecutive_parents_first_and_cover_all_but_a_lone_rank() {
        let ids = |g: &[Vec<NodeId>]| -> Vec<Vec<u64>> {
            g.iter().map(|g| g.iter().map(|i| i.0).collect()).collect()
        };
        assert_eq!(ids(&groups(6, 1)), [[0, 1], [2, 3], [4, 5]]);
        assert_eq!(ids(&groups(7, 1)), [vec![0, 1], vec![2, 3], vec![4, 5]]);
        assert_eq!(
            ids(&groups(8, 2)),
            [vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]
        );
        assert_eq!(
            ids(&groups(12, 4)),
            [vec![0, 1, 2, 3, 4], vec![5, 6, 7, 8, 9], vec![10, 11]]
        );
        assert_eq!(ids(&groups(3, 4)), [vec![0, 1, 2]]);
        assert!(groups(1, 4).is_empty());
    }

    #[test]
    fn only_parents_ping() {
        let g = groups(10, 4);
        let (parent, child) = (
            protocol(&g, NodeId(5), 3, 0, Duration::ZERO),
            protocol(&g, NodeId(6), 3, 0, Duration::ZERO),
        );
        assert!(parent.is_pinger() && !child.is_pinger());
    }

    #[test]
    fn half_rounds_make_the_latency() {
        let c = Contention::of(4, 1, 2, &[2_000, 4_000, 6_000]);
        assert_eq!((c.rounds, c.l_us, c.l_mean_us), (3, 2.0, 2.0));
    }

    #[test]
    fn loaded_neighbors_are_measured_on_real_nodes() {
        let c = measure(
            6,
            2,
            20,
            2,
            Duration::ZERO,
            &NodeOptions::default(),
            Duration::from_secs(20),
        )
        .unwrap();
        assert_eq!((c.nodes, c.groups, c.rounds), (6, 2, 40));
        assert!(c.l_us > 0.0 && c.l_p99_us >= c.l_us, "{c:?}");
    }

    #[test]
    fn a_cold_leg_is_its_round_trip_less_the_warm_leg_and_never_the_cheaper_half() {
        let c = Contention::of(2, 1, 1, &[60_000, 60_000, 60_000]);
        assert_eq!(c.l_us, 30.0);
        assert_eq!(c.cold_one_way(10.0), 50.0);
        // A warm figure larger than the cold round trip's half says nothing of the legs.
        assert_eq!(c.cold_one_way(45.0), 30.0);
        assert_eq!(c.cold_one_way(90.0), 30.0);
    }
}
