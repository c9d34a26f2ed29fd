//! `weft model validate`: measure the models' parameters on this machine, run the real
//! stabilization sweep, and compare every model with the measurement at every N.
//!
//! Parameters: `L` is the engine's one-way latency (ping-pong, 32 B, same backend and wait
//! mode as the sweep); `L(N)` is ICS'06 Figure 7's latency under contention (every process in
//! a group of a parent and its children, all pinging at once, [`super::contention`]); `Ocp`
//! is the local recalculation time (the sans-IO protocol handling a `FailedNode` for every
//! process of a job of N, timed); `c` is the per-message CPU cost on the engine under load
//! (the relay ring at the same N); `M`, the messages of a stabilization, is counted by the
//! simulator for the same failures.
//!
//! On a launched job (`--bootstrap`, and the namespace hosts of `--hosts`), `L` is the
//! ping-pong between rank 0 and the last rank (on another host when there are several) and
//! `L(N)` is measured on the job's own ranks, where they run; `Ocp`, `c` and `M` stay local.

use super::stabilize::{self as bench, BenchConfig, BenchError};
use super::{ping, relay};
use crate::engine::EngineError;
use crate::model::latency;
use crate::proto::membership::{MemberMsg, Membership, MembershipConfig, Regroup, TreeMode};
use crate::proto::{Outbox, Protocol, Time};
use crate::sim::stabilize::{self as sim, NetKind, StabilizeConfig};
use crate::topology::radix::RadixTree;
use crate::topology::torus::Torus;
use crate::transport::NodeOptions;
use crate::NodeId;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// One N of the validation (a JSON line of `weft model validate --json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ValidateRow {
    /// Nodes.
    pub nodes: u32,
    /// Radix.
    pub radix: u32,
    /// Tree height H.
    pub height: u32,
    /// Backend of the real runs.
    pub backend: String,
    /// Trials.
    pub repeat: u32,
    /// Measured Ts: mean, µs.
    pub ts_mean_us: f64,
    /// Half-width of its 99% confidence interval, µs.
    pub ci99_us: Option<f64>,
    /// Measured Ts: median, µs.
    pub ts_p50_us: f64,
    /// Measured Ts: 99th percentile, µs.
    pub ts_p99_us: f64,
    /// L: one-way latency, µs (on an emulated torus, one hop's: the line through
    /// `l_at_hops_us` at h = 1).
    pub l_us: f64,
    /// Ocp: local recalculation, µs.
    pub ocp_us: f64,
    /// c: CPU per message under load, µs.
    pub c_us: f64,
    /// Cores the nodes share.
    pub cores: u32,
    /// M: messages of one stabilization (simulator count, mean over the trials' failures).
    pub messages: f64,
    /// CPU the process spent on one stabilization (kill to observed stabilization), mean, µs.
    pub stab_cpu_us: Option<f64>,
    /// That CPU per message, `stab_cpu / M`, µs: the `c` the stabilization really paid.
    pub c_stab_us: Option<f64>,
    /// Base model, µs.
    pub base_us: f64,
    /// The torus of the distance model, `XxYxZ`.
    pub torus: String,
    /// Distance model (that torus, ranks in XYZ order), µs.
    pub distance_us: f64,
    /// `L(N)` with the tree's own fan-out (a parent and `radix` children), µs: what the
    /// contention model puts in place of `L`.
    pub l_n_us: f64,
    /// `L(N)` of pairs (Figure 7 (a)), µs.
    pub l_n_pairs_us: f64,
    /// `L(N)` of a parent with two children (Figure 7 (b)), µs.
    pub l_n_fan2_us: f64,
    /// `L(N)` of a parent with four children (Figure 7 (c)), µs.
    pub l_n_fan4_us: f64,
    /// ICS'06's contention model: the base model with `L(N)` for `L`, µs.
    pub contention_us: f64,
    /// CPU-sharing model: the base model plus the stabilization's CPU over the cores, µs.
    pub cpu_sharing_us: f64,
    /// |base − mean| / mean.
    pub base_err: f64,
    /// |distance − mean| / mean.
    pub distance_err: f64,
    /// |contention − mean| / mean.
    pub contention_err: f64,
    /// |CPU sharing − mean| / mean.
    pub cpu_sharing_err: f64,
    /// The same models fed cold latencies (receivers idle before each ping).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold: Option<ColdModels>,
    /// On an emulated torus (`--torus`): `L(h)`, the one-way latency between rank 0 and a
    /// rank `h` hops away, for h = 1, 2, … up to the farthest rank, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l_at_hops_us: Option<Vec<f64>>,
    /// On an emulated torus: what each hop beyond the first adds to `L(h)`, the slope of the
    /// repeated-median line through them, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l_hop_us: Option<f64>,
    /// Hop-latency model (weft's own: each level charged `L(h)` at its hop count, not `h·L`),
    /// µs; on an emulated torus only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hop_latency_us: Option<f64>,
    /// |hop latency − mean| / mean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hop_latency_err: Option<f64>,
    /// Namespace hosts the ranks ran on (`--hosts`, or the torus's).
    pub hosts: Option<u32>,
    /// The emulated torus the hosts were linked as (`--torus`), `XxYxZ`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub testbed_torus: Option<String>,
    /// Their links' rate (`--shape`).
    pub shape: Option<String>,
    /// The launcher, on a launched job.
    pub launcher: Option<String>,
    /// CPU time the hypervisor took during the sweep point, % of all CPUs' time.
    pub steal_pct: Option<f64>,
    /// Every trial's survivors agreed on one view.
    pub views_agree: bool,
}

/// Every model again, fed the latencies of *cold* rounds: a ping that finds its receiver idle
/// ([`super::contention::COLD_GAP`] after the last round, its reactor blocked), as a
/// stabilization's first message finds the processes that were idle before the failure. The
/// models are the paper's; only the latencies they are fed are measured differently, and are
/// named so.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ColdModels {
    /// Cold `L`: one-way latency of a ping whose receiver was idle (its round trip less the
    /// warm one-way of the echo), µs.
    pub l_cold_us: f64,
    /// Cold `L(N)` at the tree's fan-out, the same way, µs.
    pub l_n_cold_us: f64,
    /// Base model with the cold `L`, µs.
    pub base_us: f64,
    /// Distance model with the cold `L`, µs.
    pub distance_us: f64,
    /// Contention model with the cold `L(N)`, µs.
    pub contention_us: f64,
    /// CPU-sharing model on the cold base, µs.
    pub cpu_sharing_us: f64,
    /// |base − mean| / mean.
    pub base_err: f64,
    /// |distance − mean| / mean.
    pub distance_err: f64,
    /// |contention − mean| / mean.
    pub contention_err: f64,
    /// |CPU sharing − mean| / mean.
    pub cpu_sharing_err: f64,
}

/// Ocp: mean time for one process of a job of `n` to handle the `FailedNode` of a single inner
/// failure (recalculate its neighbors, install the view, queue its messages), µs.
pub fn measure_ocp(n: u32, radix: u32, mode: TreeMode) -> f64 {
    let ids: Vec<NodeId> = (0..n as u64).map(NodeId).collect();
    let cfg = MembershipConfig {
        radix,
        mode,
        probe: None,
        warm: false,
        batch: std::time::Duration::ZERO,
        collect: false,
        orphan_hold: crate::proto::membership::ORPHAN_HOLD,
        heartbeat: None,
    };
    // The victim: the last inner node (a leaf in a job too small to have one).
    let victim = RadixTree::new(n, radix)
        .ok()
        .and_then(|t| {
            (1..n)
                .rev()
                .find(|&r| t.children(crate::Rank(r)).next().is_some())
        })
        .unwrap_or(n.saturating_sub(1));
    // Ids are 0..n, so the victim's id is its position.
    let dead = vec![victim];
    let mut out: Outbox<MemberMsg> = Outbox::new();
    let mut total = Duration::ZERO;
    let mut count = 0u32;
    // At least ~2000 recalculations, so small jobs are timed over many.
    let rounds = (2000 / n.max(1)).max(1);
    for _ in 0..rounds {
        let mut nodes: Vec<Membership> = ids
            .iter()
            .filter(|id| id.0 != victim as u64)
            .map(|&id| Membership::new(id, ids.clone(), cfg))
            .collect();
        let t0 = Instant::now();
        for m in nodes.iter_mut() {
            let msg = MemberMsg::FailedNode(Regroup {
                epoch: 1,
                dead: dead.clone(),
                appended: Vec::new(),
                root: NodeId(0),
            });
            m.on_message(Time::ZERO, NodeId(0), msg, &mut out);
            out.drain().for_each(drop);
        }
        total += t0.elapsed();
        count += nodes.len() as u32;
    }
    total.as_secs_f64() * 1e6 / count.max(1) as f64
}

/// Messages of a stabilization for the failures trials `0..repeat` draw, counted by the
/// simulator (the same victims: trial `r` uses seed `seed + r`).
pub fn count_messages(cfg: &BenchConfig, repeat: u32) -> Result<f64, String> {
    let mut total = 0u64;
    for r in 0..repeat.max(1) {
        let plan = super::scenario::plan(cfg.nodes, cfg.radix, Some(&cfg.fail), cfg.seed, r)?;
        let run = sim::run(&StabilizeConfig {
            nodes: cfg.nodes,
            radix: cfg.radix,
            mode: cfg.mode,
            victims: plan.victims,
            kill_gap: Duration::ZERO,
            label: cfg.fail.to_string(),
            net: NetKind::Constant,
            torus: None,
            latency: Duration::from_micros(1),
            ocp: Duration::ZERO,
            send: Duration::ZERO,
            seed: cfg.seed.wrapping_add(r as u64),
            probe: None,
            batch: Duration::ZERO,
            orphan_hold: cfg.orphan_hold,
            collect: false,
        })?;
        total += run.msgs;
    }
    Ok(total as f64 / repeat.max(1) as f64)
}

/// The engine's parameters for one N: L (ping) and c (relay).
pub fn measure_engine(cfg: &BenchConfig) -> Result<(f64, f64, u32), EngineError> {
    measure_engine_at(cfg.nodes, &cfg.opts)
}

/// L (32 B ping-pong, one-way median, µs), c (µs per message of a relay ring of `nodes`
/// in-process nodes) and the reactors the ring ran on.
pub fn measure_engine_at(nodes: u32, opts: &NodeOptions) -> Result<(f64, f64, u32), EngineError> {
    let rows = ping::engine(&[32], 2000, opts.clone())?;
    let l = rows.first().map_or(f64::NAN, |r| r.p50_us);
    let tokens = nodes.min(64);
    let laps = (50_000 / (tokens as u64 * nodes as u64)).max(3);
    let r = relay::per_message_cost(nodes, tokens, laps, opts)?;
    Ok((l, r.c_us, r.reactors))
}

/// The fan-outs whose `L(N)` a validation measures: Figure 7's three (pairs, 2, 4) and the
/// tree's own.
pub fn fanouts(radix: u32) -> Vec<u32> {
    let mut f = vec![1, 2, 4];
    if !f.contains(&radix) {
        f.push(radix);
    }
    f
}

/// Timed rounds per parent of each `L(N)` measurement.
pub const CONTENTION_ROUNDS: u64 = 200;

/// The torus of the distance model for `cfg`'s job (`None`: the smallest BG/L partition that
/// holds it, [`Torus::partition`]), or why it cannot hold it.
fn torus_for(cfg: &BenchConfig, torus: Option<Torus>) -> Result<Torus, BenchError> {
    let torus = torus.unwrap_or_else(|| Torus::partition(cfg.nodes as u64));
    if !torus.holds(cfg.nodes as u64) {
        return Err(BenchError::Config(format!(
            "{} nodes do not fit on a {torus} torus",
            cfg.nodes
        )));
    }
    Ok(torus)
}

/// Validate at one N on in-process nodes: parameters, the real sweep point, the models.
/// The distance model lays the ranks on `torus` (`None`: the smallest BG/L partition that
/// holds them, [`Torus::partition`]).
pub fn validate(
    cfg: &BenchConfig,
    repeat: u32,
    torus: Option<Torus>,
) -> Result<ValidateRow, BenchError> {
    let torus = torus_for(cfg, torus)?;
    let (l, c, cores) = measure_engine(cfg)?;
    use super::contention::{measure, COLD_GAP, COLD_ROUNDS};
    let loaded = fanouts(cfg.radix)
        .into_iter()
        .map(|f| {
            let rounds = CONTENTION_ROUNDS;
            measure(
                cfg.nodes,
                f,
                rounds,
                rounds / 10,
                Duration::ZERO,
                &cfg.opts,
                cfg.timeout,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Cold: a pair of nodes alone, and the tree's fan-out at N, each round after an idle gap.
    let cold_pair = measure(2, 1, COLD_ROUNDS, 2, COLD_GAP, &cfg.opts, cfg.timeout)?;
    let warm_pair = measure(
        2,
        1,
        CONTENTION_ROUNDS,
        20,
        Duration::ZERO,
        &cfg.opts,
        cfg.timeout,
    )?;
    let cold_loaded = measure(
        cfg.nodes,
        cfg.radix,
        COLD_ROUNDS,
        2,
        COLD_GAP,
        &cfg.opts,
        cfg.timeout,
    )?;
    let cold = Cold {
        l: cold_pair.cold_one_way(warm_pair.l_us),
        l_n: cold_loaded.cold_one_way(l_n_of(&loaded, cfg.radix)),
    };
    let report = bench::run(cfg, repeat, |_, _| {})?;
    row(
        cfg,
        repeat,
        torus,
        l,
        &loaded,
        Some(cold),
        (c, cores),
        &report,
    )
}

/// Validate at one N as this rank of a launched job (`want`: which launcher): `L` and `L(N)`
/// on the job's ranks, then its trials ([`super::launched::measure`]). Rank 0 returns the row;
/// the others `None`.
pub fn validate_launched(
    cfg: &BenchConfig,
    want: crate::bootstrap::Want,
    repeat: u32,
    torus: Option<Torus>,
) -> Result<Option<ValidateRow>, BenchError> {
    // On an emulated torus the distance model's torus is the one the ranks run on, and `L`
    // is measured at every hop count.
    let testbed = std::env::var(super::hosts::CLUSTER_VAR)
        .ok()
        .and_then(|v| super::hosts::Cluster::attach(&v).ok())
        .and_then(|c| c.torus_shape());
    let probes = |n: u32| testbed.map_or_else(Vec::new, |t| one_rank_per_hop_count(t, n));
    let Some(m) = super::launched::measure(
        cfg,
        want,
        repeat,
        &fanouts(cfg.radix),
        &probes,
        CONTENTION_ROUNDS,
    )?
    else {
        return Ok(None);
    };
    let cfg = BenchConfig {
        nodes: m.report.nodes,
        ..cfg.clone()
    };
    let torus = torus_for(&cfg, testbed.or(torus))?;
    let at_hops: Vec<f64> = m.probes.iter().map(|p| p.l_us).collect();
    // The CPU-sharing model's per-message cost, on this host's cores.
    let (_, c, cores) = measure_engine(&cfg)?;
    // The paper's `L` is a single hop's: on the torus, the line through every hop count's
    // latency at one hop (robust to the one ping that shared a core with its peer).
    let points: Vec<(u32, f64)> = (1..).zip(at_hops.iter().copied()).collect();
    let (l1, l_hop) = latency::fit_hops(&points);
    let l = if at_hops.is_empty() { m.pair.l_us } else { l1 };
    let cold = Cold {
        l: m.cold_pair
            .cold_one_way(at_hops.first().copied().unwrap_or(m.pair.l_us)),
        l_n: m.cold_loaded.cold_one_way(l_n_of(&m.loaded, cfg.radix)),
    };
    let mut r = row(
        &cfg,
        repeat,
        torus,
        l,
        &m.loaded,
        Some(cold),
        (c, cores * m.machines.max(1)),
        &m.report,
    )?;
    r.launcher = m.report.launcher.clone();
    if testbed.is_some() && !at_hops.is_empty() {
        let model = latency::hop_latency(l1, l_hop, r.ocp_us, cfg.nodes, cfg.radix, torus);
        r.l_at_hops_us = Some(at_hops);
        r.l_hop_us = Some(l_hop);
        r.hop_latency_us = Some(model);
        r.hop_latency_err = Some(latency::relative_error(model, r.ts_mean_us));
    }
    Ok(Some(r))
}

/// For a job of `n` ranks on `torus` (rank r on node r mod its size), the first rank at each
/// hop count from rank 0, 1 up to the farthest any rank is.
pub fn one_rank_per_hop_count(torus: Torus, n: u32) -> Vec<u32> {
    let size = torus.size().max(1);
    let on = |r: u32| crate::Rank((u64::from(r) % size) as u32);
    let far = (1..n).map(|r| torus.hops(on(0), on(r))).max().unwrap_or(0);
    (1..=far)
        .filter_map(|h| (1..n).find(|&r| torus.hops(on(0), on(r)) == h))
        .collect()
}

/// Cold one-way latencies: a pair's `L` and the tree's fan-out's `L(N)`, µs.
#[derive(Clone, Copy, Debug)]
struct Cold {
    l: f64,
    l_n: f64,
}

/// The warm `L(N)` of fan-out `f` among `loaded` (NaN if it was not measured).
fn l_n_of(loaded: &[super::contention::Contention], f: u32) -> f64 {
    loaded
        .iter()
        .find(|x| x.fanout == f)
        .map_or(f64::NAN, |x| x.l_us)
}

/// The row of one N: the models from the parameters, beside the measured Ts in `report`.
/// `cold`: the cold latencies, for the models' second row. `cpu`: the per-message cost `c` and
/// the cores the processes share.
#[allow(clippy::too_many_arguments)]
fn row(
    cfg: &BenchConfig,
    repeat: u32,
    torus: Torus,
    l: f64,
    loaded: &[super::contention::Contention],
    cold: Option<Cold>,
    (c, cores): (f64, u32),
    report: &super::stabilize::BenchReport,
) -> Result<ValidateRow, BenchError> {
    let ocp = measure_ocp(cfg.nodes, cfg.radix, cfg.mode);
    let messages = count_messages(cfg, repeat).map_err(BenchError::Config)?;
    let h = report.height;
    let l_n = |f: u32| l_n_of(loaded, f);
    let base = latency::base(l, ocp, h);
    let distance = latency::distance(l, ocp, cfg.nodes, cfg.radix, torus);
    let contention = latency::contention(l_n(cfg.radix), ocp, h);
    let load = latency::Load {
        messages: messages.round() as u64,
        c_us: c,
        processes: cfg.nodes.saturating_sub(cfg.fail.killed() as u32),
        ocp_us: ocp,
    };
    let cpu_sharing = latency::cpu_sharing(base, load, cores);
    let m = report.ts_mean_us;
    let err = |model: f64| latency::relative_error(model, m);
    let cold = cold.map(|k| {
        let base = latency::base(k.l, ocp, h);
        let distance = latency::distance(k.l, ocp, cfg.nodes, cfg.radix, torus);
        let contention = latency::contention(k.l_n, ocp, h);
        let cpu_sharing = latency::cpu_sharing(base, load, cores);
        ColdModels {
            l_cold_us: k.l,
            l_n_cold_us: k.l_n,
            base_us: base,
            distance_us: distance,
            contention_us: contention,
            cpu_sharing_us: cpu_sharing,
            base_err: err(base),
            distance_err: err(distance),
            contention_err: err(contention),
            cpu_sharing_err: err(cpu_sharing),
        }
    });
    Ok(ValidateRow {
        nodes: cfg.nodes,
        radix: cfg.radix,
        height: h,
        backend: report.backend.clone(),
        repeat,
        ts_mean_us: m,
        ci99_us: report.ci99_us,
        ts_p50_us: report.ts_p50_us,
        ts_p99_us: report.ts_p99_us,
        l_us: l,
        ocp_us: ocp,
        c_us: c,
        cores,
        messages,
        stab_cpu_us: report.cpu_mean_us,
        c_stab_us: report.cpu_mean_us.map(|c| c / messages.max(1.0)),
        base_us: base,
        torus: torus.to_string(),
        distance_us: distance,
        l_n_us: l_n(cfg.radix),
        l_n_pairs_us: l_n(1),
        l_n_fan2_us: l_n(2),
        l_n_fan4_us: l_n(4),
        contention_us: contention,
        cpu_sharing_us: cpu_sharing,
        base_err: latency::relative_error(base, m),
        distance_err: latency::relative_error(distance, m),
        contention_err: latency::relative_error(contention, m),
        cpu_sharing_err: latency::relative_error(cpu_sharing, m),
        cold,
        l_at_hops_us: None,
        l_hop_us: None,
        hop_latency_us: None,
        hop_latency_err: None,
        hosts: None,
        testbed_torus: None,
        shape: None,
        launcher: None,
        steal_pct: report.steal_pct,
        views_agree: report.views_agree,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::scenario::Fail;

    #[test]
    fn ocp_is_measured_and_grows_with_the_view() {
        let small = measure_ocp(16, 4, TreeMode::Patch);
        let large = measure_ocp(4096, 4, TreeMode::Patch);
        assert!(small > 0.0 && small.is_finite());
        // Installing a view copies it: a 256x larger view cannot be cheaper to install.
        assert!(large > small, "{small} vs {large}");
    }

    #[test]
    fn messages_of_a_single_failure_are_about_two_per_survivor() {
        let cfg = BenchConfig {
            timeout: Duration::from_secs(1),
            ..BenchConfig::new(64, 4, TreeMode::Patch, Fail::Leaf, 3, Default::default())
        };
        let m = count_messages(&cfg, 4).unwrap();
        // FailedNode down and FailureAck up each of the 62 edges of the new tree, plus the
        // detector's NodeFailure and the root's FailureDetAck (no leaf of a 64-node radix-4
        // tree hangs off the root, so the detector is never the root itself).
        assert_eq!(m, 2.0 * 62.0 + 2.0, "{m}");
    }

    #[test]
    fn the_hop_probes_are_one_rank_at_each_distance_from_rank_0() {
        let t = Torus::new(4, 4, 4).unwrap();
        let probes = one_rank_per_hop_count(t, 64);
        assert_eq!(probes.len() as u32, t.diameter());
        for (h, &r) in (1..).zip(&probes) {
            assert_eq!(t.hops(crate::Rank(0), crate::Rank(r)), h, "rank {r}");
        }
        // Eight ranks of a 4x4x4 torus are its rows y = 0 and 1 of z = 0: rank 6, at (2, 1, 0),
        // is the farthest, three hops away.
        assert_eq!(one_rank_per_hop_count(t, 8), vec![1, 2, 6]);
        assert!(one_rank_per_hop_count(t, 1).is_empty());
    }
}
