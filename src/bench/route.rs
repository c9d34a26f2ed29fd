//! `weft bench route`: messages routed over the BMG on in-process engine nodes, some of them
//! killed first, and the cost of a hop beside the engine's one-way latency in the same run.
//!
//! 1. N router nodes start; `fail` of them (drawn from the seed) are stopped: their sockets
//!    close, and no one is told. The others learn it when a dial is refused.
//! 2. Every live node sends `per_node` messages to random live ranks, all at once; the run
//!    waits for each message's `Delivered` or `Failed` at its sender and counts hops.
//! 3. One live node broadcasts; every live node must deliver it.
//! 4. One live node sends `probes` messages one after another (each waits for the previous
//!    one's acknowledgement) on the now warm connections, alternately to a random live rank
//!    and to one of its own live fingers: a hop costs the round trip over the hops there and
//!    back, and the messages to fingers (one hop each way, no relay) are the floor in the same
//!    cluster, `hop_over_direct` near 1 meaning a relay costs no more than a direct message.
//!    Two engine nodes' ping-pong of the same payload, each on its own core, is reported
//!    beside them (most BMG hops of a cluster stay on one reactor, so it is not the floor).

use super::checkpoint::draw_victims;
use super::ping;
use super::stabilize::BenchError;
use crate::engine::reactor::NodeEvent;
use crate::metrics::middle;
use crate::proto::route::{Route, RouteConfig, RouteEvent, RouteRequest};
use crate::rng::SimRng;
use crate::sim::route::other_than;
use crate::topology::bmg;
use crate::transport::{Cluster, NodeOptions};
use crate::{NodeId, Rank};
use serde::Serialize;
use std::collections::HashSet;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Clone, Debug)]
pub struct RouteBenchConfig {
    /// Nodes.
    pub nodes: usize,
    /// Nodes killed before any message.
    pub fail: usize,
    /// Messages each live node sends in step 2.
    pub per_node: u32,
    /// Sequential messages of step 4.
    pub probes: u32,
    /// Payload bytes.
    pub size: usize,
    /// Seed of the victims and destinations.
    pub seed: u64,
    /// Engine settings.
    pub opts: NodeOptions,
    /// The routers' settings.
    pub route: RouteConfig,
    /// Longest wait for any step.
    pub timeout: Duration,
}

/// The result (`weft bench route --json`).
#[derive(Clone, Debug, Serialize)]
pub struct RouteBenchRow {
    /// Nodes.
    pub nodes: usize,
    /// Killed.
    pub dead: usize,
    /// Messages sent to live ranks in step 2.
    pub sent: u64,
    /// Of those, confirmed delivered.
    pub delivered: u64,
    /// Of those, failed.
    pub failed: u64,
    /// Most hops a message made.
    pub max_hops: u32,
    /// Mean hops.
    pub mean_hops: f64,
    /// `⌈log2 N⌉`.
    pub bound: u32,
    /// Step 2 from the first send to the last answer, ms.
    pub burst_ms: f64,
    /// Messages sent again (retry or a refused first hop).
    pub resent: u64,
    /// Live nodes that delivered the broadcast, of `live`.
    pub broadcast_reached: usize,
    /// Live nodes.
    pub live: usize,
    /// The broadcast: from its start to the last delivery, ms.
    pub broadcast_ms: f64,
    /// Step 4: median per-hop latency, `rtt / (hops there + hops back)`, µs.
    pub hop_us: f64,
    /// Step 4: median round trip, µs.
    pub probe_rtt_us: f64,
    /// Step 4: mean hops there and back.
    pub probe_hops: f64,
    /// The floor: messages to the prober's own fingers, `rtt / 2`, median, µs.
    pub direct_us: f64,
    /// `hop_us / direct_us`.
    pub hop_over_direct: f64,
    /// Engine ping-pong between two nodes on two cores, one-way, median, µs.
    pub l_us: f64,
    /// What the nodes ran on.
    pub backend: String,
    /// Seed.
    pub seed: u64,
}

/// Run it.
pub fn run(cfg: &RouteBenchConfig) -> Result<RouteBenchRow, BenchError> {
    let n = cfg.nodes;
    let opts = plan_descriptors(n, &cfg.opts)?;
    let ring: Arc<[NodeId]> = (0..n as u64).map(NodeId).collect();
    let route = cfg.route;
    let ring_for = ring.clone();
    let mut c = Cluster::start(n, opts, move |i, _| {
        Route::new(Rank(i as u32), ring_for.clone(), route)
    })?;
    let victims: HashSet<u32> = draw_victims(n, cfg.fail, cfg.seed)
        .into_iter()
        .map(|v| v.0 as u32)
        .collect();
    if let Some(why) = cut_apart(n as u32, &victims) {
        return Err(BenchError::Config(format!(
            "--fail {} --seed {}: {why}; routing cannot cross a cut: choose another --seed or \
             fewer --fail",
            cfg.fail, cfg.seed
        )));
    }
    for &v in &victims {
        c.nodes[v as usize].kill();
    }
    for &v in &victims {
        c.nodes[v as usize].stop()?;
    }
    let live: Vec<u32> = (0..n as u32).filter(|r| !victims.contains(r)).collect();
    let deadline = Deadline {
        at: Instant::now() + cfg.timeout,
        total: cfg.timeout,
    };
    let mut rng = SimRng::stream(cfg.seed, 7);
    let payload = vec![0x5a; cfg.size];

    // Step 2: the burst.
    let start = Instant::now();
    let mut sent = 0u64;
    for &r in &live {
        for j in 0..cfg.per_node {
            let to = other_than(r, &live, &mut rng);
            c.nodes[r as usize].request(RouteRequest::Send {
                to: Rank(to),
                tag: j as u64,
                data: payload.clone().into(),
            });
            sent += 1;
        }
    }
    let (mut delivered, mut failed, mut max_hops, mut hops) = (0u64, 0u64, 0u32, 0u64);
    while delivered + failed < sent {
        match next(&c.events, deadline, "the burst's answers")? {
            RouteEvent::Delivered { there, .. } => {
                delivered += 1;
                max_hops = max_hops.max(there);
                hops += there as u64;
            }
            RouteEvent::Failed { .. } => failed += 1,
            _ => {}
        }
    }
    let burst = start.elapsed();

    // Step 3: a broadcast.
    let origin = live[0];
    let start = Instant::now();
    c.nodes[origin as usize].request(RouteRequest::Broadcast {
        data: payload.clone().into(),
    });
    let mut reached = HashSet::new();
    while reached.len() < live.len() {
        let (at, e) = next_from(&c.events, deadline, "the broadcast")?;
        if let RouteEvent::Broadcast { .. } = e {
            reached.insert(at);
        }
    }
    let broadcast = start.elapsed();

    // Step 4: sequential probes on warm connections.
    let prober = live[live.len() / 2];
    let fingers: Vec<u32> = bmg::neighbors(Rank(prober), n as u32)
        .into_iter()
        .map(|r| r.0)
        .filter(|r| !victims.contains(r))
        .collect();
    let (mut per_hop, mut rtts, mut probe_hops) = (Vec::new(), Vec::new(), 0u64);
    let mut direct = Vec::new();
    for j in 0..2 * cfg.probes {
        let to_finger = j % 2 == 1 && !fingers.is_empty();
        let to = if to_finger {
            fingers[rng.below(fingers.len() as u64) as usize]
        } else {
            other_than(prober, &live, &mut rng)
        };
        c.nodes[prober as usize].request(RouteRequest::Send {
            to: Rank(to),
            tag: u64::from(j),
            data: payload.clone().into(),
        });
        loop {
            match next(&c.events, deadline, "a probe's answer")? {
                RouteEvent::Delivered {
                    there, back, rtt, ..
                } => {
                    let h = (there + back).max(1);
                    let us = rtt.as_secs_f64() * 1e6;
                    if to_finger {
                        direct.push(us / h as f64);
                    } else {
                        per_hop.push(us / h as f64);
                        rtts.push(us);
                        probe_hops += h as u64;
                    }
                    break;
                }
                RouteEvent::Failed { to, why, .. } => {
                    return Err(BenchError::Config(format!(
                        "probe to {to} failed ({why:?}) on warm connections"
                    )))
                }
                _ => {}
            }
        }
    }
    let backend = c.backend_name();
    let resent = c.stop_all()?.iter().map(|r| r.stats().resent).sum::<u64>();

    // The floor, after the cluster is gone (it would share the cores).
    let floor = ping::engine(&[cfg.size], 2000, cfg.opts.clone())?;
    let l_us = floor.first().map_or(0.0, |r| r.p50_us);
    let hop_us = middle(&mut per_hop);
    let direct_us = middle(&mut direct);
    Ok(RouteBenchRow {
        nodes: n,
        dead: victims.len(),
        sent,
        delivered,
        failed,
        max_hops,
        mean_hops: hops as f64 / delivered.max(1) as f64,
        bound: bmg::diameter_bound(n as u32),
        burst_ms: burst.as_secs_f64() * 1e3,
        resent,
        broadcast_reached: reached.len(),
        live: live.len(),
        broadcast_ms: broadcast.as_secs_f64() * 1e3,
        hop_us,
        probe_rtt_us: middle(&mut rtts),
        probe_hops: probe_hops as f64 / cfg.probes.max(1) as f64,
        direct_us,
        hop_over_direct: hop_us / direct_us.max(1e-9),
        l_us,
        backend,
        seed: cfg.seed,
    })
}

/// The options to run `n` in-process BMG nodes with, or why they cannot run: their
/// connections (both ends in this process) and a listener each must fit under the descriptor
/// limit. Past it, dials and accepts fail with EMFILE and messages wait for retries that cannot
/// succeed. When the whole job does not fit and each reactor's share does, each reactor takes a
/// descriptor table of its own ([`ReactorOptions::own_descriptors`]).
///
/// [`ReactorOptions::own_descriptors`]: crate::engine::ReactorOptions::own_descriptors
pub fn plan_descriptors(n: usize, opts: &NodeOptions) -> Result<NodeOptions, BenchError> {
    let fingers = bmg::neighbors(Rank(0), n as u32).len();
    let need = |nodes: usize| (nodes * (fingers + 1) + 64) as u64;
    let reactors = opts
        .reactors
        .unwrap_or_else(crate::engine::online_cpus)
        .clamp(1, n.max(1));
    let share = need(n.div_ceil(reactors));
    let limit = crate::engine::raise_descriptor_limit_for(need(n))
        .map_err(crate::engine::EngineError::from)?;
    let mut opts = opts.clone();
    if need(n) <= limit || opts.reactor.own_descriptors {
        return Ok(opts);
    }
    if share <= limit {
        opts.reactor.own_descriptors = true;
        return Ok(opts);
    }
    Err(BenchError::Config(format!(
        "{n} in-process nodes with {fingers} BMG neighbors each need about {} open \
         descriptors, {share} on each of {reactors} reactors with a table of its own; this \
         process may open {limit} (the hard limit of `ulimit -n`, which only a process with \
         CAP_SYS_RESOURCE may raise): run fewer nodes, raise the limit, or run with \
         CAP_SYS_RESOURCE",
        need(n)
    )))
}

/// Whether the survivors of `victims` among `n` ranks fall apart over the BMG's live fingers
/// (every message would then have a rank it cannot reach, and the broadcast an end it never
/// reaches); if so, the parts.
fn cut_apart(n: u32, victims: &HashSet<u32>) -> Option<String> {
    let live: Vec<u32> = (0..n).filter(|r| !victims.contains(r)).collect();
    let mut part = vec![usize::MAX; n as usize];
    let mut parts: Vec<Vec<u32>> = Vec::new();
    for &start in &live {
        if part[start as usize] != usize::MAX {
            continue;
        }
        let (k, mut stack, mut members) = (parts.len(), vec![start], Vec::new());
        part[start as usize] = k;
        while let Some(r) = stack.pop() {
            members.push(r);
            for f in bmg::neighbors(Rank(r), n) {
                if !victims.contains(&f.0) && part[f.0 as usize] == usize::MAX {
                    part[f.0 as usize] = k;
                    stack.push(f.0);
                }
            }
        }
        members.sort_unstable();
        parts.push(members);
    }
    (parts.len() > 1).then(|| {
        let shown: Vec<String> = parts.iter().map(|p| format!("{p:?}")).collect();
        format!(
            "the {} dead leave the {} survivors in {} parts the BMG's live fingers do not \
             connect ({})",
            victims.len(),
            live.len(),
            parts.len(),
            shown.join(", ")
        )
    })
}

/// When the run gives up, and after how long (for the error).
#[derive(Clone, Copy)]
struct Deadline {
    at: Instant,
    total: Duration,
}

/// The next routing event of any node.
fn next(
    events: &Receiver<(NodeId, NodeEvent<RouteEvent>)>,
    deadline: Deadline,
    what: &str,
) -> Result<RouteEvent, BenchError> {
    next_from(events, deadline, what).map(|(_, e)| e)
}

/// The next routing event and the node that reported it; an error past `deadline`, naming
/// how long the run waited.
fn next_from(
    events: &Receiver<(NodeId, NodeEvent<RouteEvent>)>,
    deadline: Deadline,
    what: &str,
) -> Result<(NodeId, RouteEvent), BenchError> {
    loop {
        let left = deadline.at.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok((id, NodeEvent::Protocol(e))) => return Ok((id, e)),
            Ok(_) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                return Err(BenchError::Timeout(deadline.total, what.into()))
            }
            Err(_) => return Err(crate::engine::EngineError::Gone.into()),
        }
    }
}
