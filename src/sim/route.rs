//! Routing over the BMG in the timed simulator: `dead` processes chosen by a seed are dead from
//! the start (no one knows: each finds out when a message it sends is lost, as a refused dial
//! tells it over the engine), then every live process sends messages to random live ranks and
//! one of them broadcasts. Counts every outcome; [`RouteRun::check`] holds the guarantees of
//! `proto::route`.

use super::timed::{Net, TimedConfig, TimedWorld};
use crate::proto::route::{Route, RouteConfig, RouteEvent, RouteRequest};
use crate::rng::SimRng;
use crate::topology::bmg;
use crate::{NodeId, Rank};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// One simulated routing run.
#[derive(Clone, Copy, Debug)]
pub struct RouteSimConfig {
    /// Processes.
    pub nodes: u32,
    /// Processes dead from the start (never rank 0's sender role: any rank may be dead).
    pub dead: u32,
    /// Messages each live process sends.
    pub per_node: u32,
    /// Seed of the dead set and the destinations.
    pub seed: u64,
    /// One-way latency.
    pub l: Duration,
    /// CPU per handled event.
    pub ocp: Duration,
    /// Time for a sender to notice a dead peer (a refused dial).
    pub detect: Duration,
    /// The routers' settings.
    pub route: RouteConfig,
}

impl Default for RouteSimConfig {
    fn default() -> Self {
        Self {
            nodes: 256,
            dead: 32,
            per_node: 4,
            seed: 1,
            l: Duration::from_micros(30),
            ocp: Duration::from_micros(2),
            detect: Duration::from_micros(100),
            route: RouteConfig::default(),
        }
    }
}

/// What a run counted.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RouteRun {
    /// Processes.
    pub nodes: u32,
    /// Dead ones.
    pub dead: u32,
    /// Messages sent to live ranks.
    pub sent: u64,
    /// Of those, confirmed `Delivered` at their sender.
    pub delivered: u64,
    /// Of those, reported `Failed`.
    pub failed: u64,
    /// Deliveries seen at destinations more than once (must be 0).
    pub duplicates: u64,
    /// Most hops a message made.
    pub max_hops: u32,
    /// Mean hops of the delivered messages.
    pub mean_hops: f64,
    /// `⌈log2 N⌉`.
    pub bound: u32,
    /// Live processes that delivered the broadcast.
    pub broadcast_reached: u32,
    /// Live processes.
    pub live: u32,
    /// Messages of the routers (all kinds, retransmissions included).
    pub msgs: u64,
    /// Simulated time until the last answer, µs.
    pub sim_us: f64,
}

impl RouteRun {
    /// The guarantees: every message to a live rank delivered exactly once, within
    /// `⌈log2 N⌉ + slack` hops, and the broadcast at every live process.
    pub fn check(&self, slack: u32) -> Result<(), String> {
        if self.delivered != self.sent || self.failed != 0 {
            return Err(format!(
                "{} of {} delivered, {} failed",
                self.delivered, self.sent, self.failed
            ));
        }
        if self.duplicates != 0 {
            return Err(format!("{} duplicate deliveries", self.duplicates));
        }
        if self.max_hops > self.bound + slack {
            return Err(format!(
                "{} hops, bound {} + {slack}",
                self.max_hops, self.bound
            ));
        }
        if self.broadcast_reached != self.live {
            return Err(format!(
                "broadcast reached {} of {} live",
                self.broadcast_reached, self.live
            ));
        }
        Ok(())
    }
}

/// `dead` distinct ranks of `0..n`, drawn from `rng`.
pub fn pick_dead(n: u32, dead: u32, rng: &mut SimRng) -> HashSet<u32> {
    let mut set = HashSet::new();
    while (set.len() as u32) < dead.min(n.saturating_sub(1)) {
        set.insert(rng.below(n as u64) as u32);
    }
    set
}

/// A random rank of `live` other than `me` (`me` itself when it is the only one).
pub fn other_than(me: u32, live: &[u32], rng: &mut SimRng) -> u32 {
    if live.len() < 2 {
        return me;
    }
    loop {
        let t = live[rng.below(live.len() as u64) as usize];
        if t != me {
            return t;
        }
    }
}

/// The routers of `cfg.nodes` processes (rank `i` is `NodeId(i)`) in a timed world, not
/// started.
fn routers(cfg: &RouteSimConfig) -> TimedWorld<Route> {
    let ring: Arc<[NodeId]> = (0..cfg.nodes as u64).map(NodeId).collect();
    let nodes = (0..cfg.nodes)
        .map(|r| Route::new(Rank(r), ring.clone(), cfg.route))
        .collect();
    TimedWorld::new(
        nodes,
        TimedConfig {
            net: Net::Constant { l: cfg.l },
            ocp: cfg.ocp,
            send: Duration::ZERO,
            detect: cfg.detect,
        },
    )
}

/// Run it.
pub fn run(cfg: &RouteSimConfig) -> RouteRun {
    let n = cfg.nodes;
    let mut rng = SimRng::new(cfg.seed);
    let dead = pick_dead(n, cfg.dead, &mut rng);
    let live: Vec<u32> = (0..n).filter(|r| !dead.contains(r)).collect();
    let mut w = routers(cfg);
    for &d in &dead {
        w.kill(d);
    }
    w.start();
    let mut sent = 0u64;
    for &r in &live {
        for j in 0..cfg.per_node {
            let to = other_than(r, &live, &mut rng);
            let tag = (r as u64) << 32 | j as u64;
            w.request_at(
                0,
                r,
                RouteRequest::Send {
                    to: Rank(to),
                    tag,
                    data: tag.to_le_bytes().to_vec().into(),
                },
            );
            sent += 1;
        }
    }
    let origin = live[0];
    w.request_at(
        0,
        origin,
        RouteRequest::Broadcast {
            data: b"all".to_vec().into(),
        },
    );
    let mut run = RouteRun {
        nodes: n,
        dead: dead.len() as u32,
        sent,
        bound: bmg::diameter_bound(n),
        live: live.len() as u32,
        ..Default::default()
    };
    let mut seen: HashMap<(u64, u32), u32> = HashMap::new();
    let mut reached = HashSet::new();
    let mut hops_sum = 0u64;
    let mut last = 0u64;
    while w.step().is_some() {
        for (at, t, e) in w.take_reports() {
            match e {
                RouteEvent::Received { tag, .. } => {
                    *seen.entry((tag, at)).or_insert(0) += 1;
                }
                RouteEvent::Delivered { there, .. } => {
                    run.delivered += 1;
                    run.max_hops = run.max_hops.max(there);
                    hops_sum += there as u64;
                    last = last.max(t);
                }
                RouteEvent::Failed { .. } => {
                    run.failed += 1;
                    last = last.max(t);
                }
                RouteEvent::Broadcast { .. } => {
                    reached.insert(at);
                }
            }
        }
    }
    run.duplicates = seen.values().map(|&c| c as u64 - 1).sum();
    run.mean_hops = hops_sum as f64 / run.delivered.max(1) as f64;
    run.broadcast_reached = reached.len() as u32;
    run.msgs = w.sent;
    run.sim_us = last as f64 / 1e3;
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No one dead: every message delivered within ⌈log2 N⌉ hops, none sent twice.
    #[test]
    fn routes_within_the_diameter_bound() {
        for n in [2, 3, 7, 16, 43, 100] {
            let run = run(&RouteSimConfig {
                nodes: n,
                dead: 0,
                ..Default::default()
            });
            run.check(0).unwrap_or_else(|e| panic!("n = {n}: {e}"));
            assert_eq!(run.sent, n as u64 * 4);
        }
    }

    /// With an eighth of the processes dead and unknown to everyone, seeds over: every message
    /// to a live rank arrives once, within ⌈log2 N⌉ + 2 hops, and the broadcast reaches every
    /// live process.
    #[test]
    fn routes_around_an_eighth_dead() {
        for seed in 1..=12 {
            for n in [64, 256] {
                let run = run(&RouteSimConfig {
                    nodes: n,
                    dead: n / 8,
                    seed,
                    ..Default::default()
                });
                run.check(2)
                    .unwrap_or_else(|e| panic!("n = {n}, seed {seed}: {e}"));
            }
        }
    }

    /// Processes killed while a burst is on its way (relays holding messages, destinations,
    /// senders), seeds over: every survivor's message gets exactly one answer, a `Delivered`
    /// whenever its destination survived, and no process delivers a message twice.
    #[test]
    fn kills_in_the_middle_of_a_burst() {
        for seed in 1..=8 {
            let cfg = RouteSimConfig {
                nodes: 128,
                seed,
                ..Default::default()
            };
            let mut w = routers(&cfg);
            let mut rng = SimRng::new(seed);
            let all: Vec<u32> = (0..cfg.nodes).collect();
            w.start();
            let mut dst = HashMap::new();
            for &r in &all {
                for j in 0..4u64 {
                    let to = other_than(r, &all, &mut rng);
                    let tag = (r as u64) << 32 | j;
                    dst.insert(tag, to);
                    let data = tag.to_le_bytes().to_vec().into();
                    w.request_at(
                        0,
                        r,
                        RouteRequest::Send {
                            to: Rank(to),
                            tag,
                            data,
                        },
                    );
                }
            }
            let victims = pick_dead(cfg.nodes, 16, &mut rng);
            for &v in &victims {
                w.kill_at(rng.below(300_000), v);
            }
            let (mut answers, mut received) = (HashMap::new(), HashMap::new());
            while w.step().is_some() {
                for (at, _, e) in w.take_reports() {
                    match e {
                        RouteEvent::Delivered { tag, .. } => {
                            answers.entry(tag).or_insert_with(Vec::new).push(true);
                        }
                        RouteEvent::Failed { tag, .. } => {
                            answers.entry(tag).or_insert_with(Vec::new).push(false);
                        }
                        RouteEvent::Received { tag, .. } => {
                            *received.entry((at, tag)).or_insert(0) += 1;
                        }
                        _ => {}
                    }
                }
            }
            for (&tag, &to) in &dst {
                let from = (tag >> 32) as u32;
                if victims.contains(&from) {
                    continue;
                }
                let got = answers.get(&tag).cloned().unwrap_or_default();
                let want = if victims.contains(&to) {
                    got.len() == 1
                } else {
                    got == [true]
                };
                assert!(want, "seed {seed}: {from} -> {to}: answers {got:?}");
            }
            assert!(
                received.values().all(|&c| c == 1),
                "seed {seed}: a message delivered twice"
            );
        }
    }

    /// A message to a dead rank fails at its sender (its first relay, or the sender itself,
    /// finds the destination dead), never hangs and never counts as delivered.
    #[test]
    fn a_message_to_a_dead_rank_fails() {
        let n = 32u32;
        let ring: Arc<[NodeId]> = (0..n as u64).map(NodeId).collect();
        let nodes: Vec<Route> = (0..n)
            .map(|r| Route::new(Rank(r), ring.clone(), RouteConfig::default()))
            .collect();
        let mut w = TimedWorld::new(
            nodes,
            TimedConfig {
                net: Net::Constant {
                    l: Duration::from_micros(10),
                },
                ocp: Duration::from_micros(1),
                send: Duration::ZERO,
                detect: Duration::from_micros(50),
            },
        );
        w.kill(21);
        w.start();
        w.request_at(
            0,
            0,
            RouteRequest::Send {
                to: Rank(21),
                tag: 7,
                data: vec![1].into(),
            },
        );
        let mut events = Vec::new();
        while w.step().is_some() {
            events.extend(w.take_reports());
        }
        let failed: Vec<_> = events
            .iter()
            .filter_map(|(at, _, e)| match e {
                RouteEvent::Failed { to, tag, .. } => Some((*at, *to, *tag)),
                _ => None,
            })
            .collect();
        assert_eq!(failed, vec![(0, NodeId(21), 7)], "{events:?}");
        assert!(!events
            .iter()
            .any(|(_, _, e)| matches!(e, RouteEvent::Delivered { .. })));
    }
}
