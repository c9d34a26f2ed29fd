//! `weft bench broadcast`: the Process Order paper's section 2 experiment (Gendelman et al.,
//! 2000) on in-process engine nodes: broadcasts, each acknowledged by every process before
//! the next, through a central coordinator (C), through a binary hierarchy with a new
//! connection per message (H1) and through the same hierarchy on kept connections (H2),
//! while a 2-D grid application ([`crate::proto::grid`]) keeps the same cores busy.
//!
//! All three run weft's total-order broadcast ([`crate::proto::broadcast`]); only the
//! hierarchy and the connections differ:
//! - C: the hierarchy `K >= N` (Figure 3a's central coordinator: POID 0 sends to every other
//!   process and collects every acknowledgement), connections released after every message;
//! - H1: the complete binary tree of the paper's experiment, connections released after
//!   every message (`ReactorOptions::reconnect`);
//! - H2: the same tree, connections kept.
//!
//! The origin is the last process (a leaf in every hierarchy), so that a failure of the root
//! or of a coordinator can be injected without ending the stream. A cycle is therefore the
//! origin's request to the root, the broadcast down the hierarchy, the acknowledgements up
//! and the root's confirmation to the origin, which then asks for the next. As in the paper,
//! the first cycle (which opens the kept connections) is left out of the time.
//!
//! With a failure, the victim is stopped (its sockets close, as when a process dies) as soon
//! as the origin's broadcast number `broadcasts / 2` is confirmed, and the longest cycle is
//! reported as the pause. Every surviving process must deliver all of the origin's
//! broadcasts, once, in the origin's order, with the same history as every other survivor.

use super::stabilize::BenchError;
use crate::engine::reactor::NodeEvent;
use crate::proto::broadcast::{Broadcast, BroadcastConfig, OrderEvent, Workload};
use crate::proto::grid::Grid;
use crate::proto::Event;
use crate::topology::order::Structure;
use crate::transport::{Cluster, NodeOptions};
use crate::{NodeId, Rank};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How a broadcast reaches everyone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// The central coordinator, a new connection per message.
    C,
    /// The binary hierarchy, a new connection per message.
    H1,
    /// The binary hierarchy on kept connections.
    H2,
}

impl Scheme {
    /// All three, in the paper's order.
    pub const ALL: [Scheme; 3] = [Scheme::C, Scheme::H1, Scheme::H2];

    /// The hierarchy for `n` processes.
    pub fn structure(self, n: usize) -> Structure {
        match self {
            Scheme::C => Structure::Tree {
                k: (n as u32).max(2),
            },
            Scheme::H1 | Scheme::H2 => Structure::Complete { k: 2 },
        }
    }

    /// Whether every message goes on a connection of its own.
    pub fn reconnects(self) -> bool {
        !matches!(self, Scheme::H2)
    }

    /// The paper's name.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::C => "C",
            Scheme::H1 => "H1",
            Scheme::H2 => "H2",
        }
    }
}

/// Which process fails in the middle of the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Victim {
    /// POID 0, the coordinator of everyone.
    Root,
    /// The first process below the root that coordinates others.
    Coordinator,
    /// A process that coordinates nobody (not the origin).
    Leaf,
}

impl Victim {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Victim::Root => "root",
            Victim::Coordinator => "coordinator",
            Victim::Leaf => "leaf",
        }
    }

    /// The victim's POID in `scheme`'s hierarchy of `n` processes whose origin is `n - 1`.
    pub fn pick(self, scheme: Scheme, n: usize) -> Result<usize, BenchError> {
        let s = scheme.structure(n);
        let coordinates =
            |v: usize| (1..n).any(|p| s.coordinator(Rank(p as u32)) == Some(Rank(v as u32)));
        let origin = n - 1;
        let found = match self {
            Victim::Root => Some(0),
            Victim::Coordinator => (1..origin).find(|&v| coordinates(v)),
            Victim::Leaf => (1..origin).rev().find(|&v| !coordinates(v)),
        };
        found.ok_or_else(|| {
            BenchError::Config(format!(
                "{} of {n} processes has no {} to fail besides the root and the origin",
                scheme.name(),
                self.name()
            ))
        })
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct BroadcastBenchConfig {
    /// Processes.
    pub nodes: usize,
    /// The scheme.
    pub scheme: Scheme,
    /// Broadcasts, each confirmed before the next.
    pub broadcasts: u32,
    /// Bytes of each.
    pub size: usize,
    /// Run the grid application meanwhile, exchanging this many doubles per message (`None`:
    /// the broadcasts alone).
    pub background: Option<usize>,
    /// A process to fail in the middle of the stream.
    pub fail: Option<Victim>,
    /// Engine settings (the scheme decides `reconnect`).
    pub opts: NodeOptions,
    /// Longest wait for the whole stream.
    pub timeout: Duration,
}

/// One run (a `--json` row).
#[derive(Clone, Debug, Serialize)]
pub struct BroadcastBenchRow {
    /// Processes.
    pub nodes: usize,
    /// `C`, `H1` or `H2`.
    pub protocol: &'static str,
    /// Broadcasts confirmed to the origin.
    pub broadcasts: u32,
    /// From the first broadcast's confirmation to the last's, ms (the first cycle left out).
    pub total_ms: f64,
    /// `total_ms` per cycle, µs.
    pub per_broadcast_us: f64,
    /// Median cycle, µs.
    pub p50_us: f64,
    /// 99th percentile cycle, µs.
    pub p99_us: f64,
    /// Every survivor delivered every broadcast of the origin once, in its order, with one
    /// history.
    pub order_ok: bool,
    /// Why not, when not.
    pub order_error: Option<String>,
    /// The process failed (`root`, `coordinator`, `leaf`), if any.
    pub fail: Option<&'static str>,
    /// Its POID.
    pub victim: Option<usize>,
    /// The longest cycle, ms: with a failure, the pause it caused.
    pub pause_ms: f64,
    /// Connections authenticated during the run (each end counts one).
    pub connections: u64,
    /// Suspicions reported (with no failure, any is a false one).
    pub suspicions: u64,
    /// The grid application ran meanwhile.
    pub background: bool,
    /// Its rounds, summed over its processes.
    pub grid_rounds: u64,
    /// What the nodes ran on.
    pub backend: String,
}

/// Run it.
pub fn run(cfg: &BroadcastBenchConfig) -> Result<BroadcastBenchRow, BenchError> {
    let n = cfg.nodes;
    if n < 2 || (cfg.fail.is_some() && n < 3) {
        return Err(BenchError::Config(format!(
            "{n} processes: need 2, and 3 with a failure"
        )));
    }
    if cfg.broadcasts < 2 {
        return Err(BenchError::Config(
            "need 2 broadcasts at least (the first is left out of the time)".into(),
        ));
    }
    let victim = cfg.fail.map(|v| v.pick(cfg.scheme, n)).transpose()?;
    let origin = n - 1;
    let grid = start_grid(n, cfg.background, &cfg.opts)?;
    let base = BroadcastConfig {
        structure: cfg.scheme.structure(n),
        report_deliveries: true,
        ..BroadcastConfig::default()
    };
    let mut opts = cfg.opts.clone();
    opts.reactor.reconnect = cfg.scheme.reconnects();
    opts.params = base.params(n);
    let work = Workload {
        count: cfg.broadcasts,
        window: 1,
        size: cfg.size,
        ..Workload::default()
    };
    let make = {
        let base = base.clone();
        move |i: usize, ids: &[NodeId]| {
            let mut c = base.clone();
            if i == origin {
                c.workload = work.clone();
            }
            Broadcast::new(ids[i], ids.to_vec(), c)
        }
    };
    let mut c = Cluster::start(n, opts, make)?;
    let backend = c.backend_name();
    let deadline = Instant::now() + cfg.timeout;
    let mut confirmed: BTreeMap<u64, u64> = BTreeMap::new();
    let mut delivered: Vec<Vec<(u64, u64, u64)>> = vec![Vec::new(); n];
    let (mut connections, mut suspicions) = (0u64, 0u64);
    let mut killed = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok((who, e)) = c.events.recv_timeout(left.min(Duration::from_millis(100))) else {
            if left.is_zero() {
                return Err(BenchError::Timeout(
                    cfg.timeout,
                    format!(
                        "{} of {n}: {} of {} broadcasts confirmed",
                        cfg.scheme.name(),
                        confirmed.len(),
                        cfg.broadcasts
                    ),
                ));
            }
            continue;
        };
        let i = who.0 as usize;
        match e {
            NodeEvent::Authenticated(_) => connections += 1,
            NodeEvent::Suspect(_) => suspicions += 1,
            NodeEvent::Protocol(Event::Order(ev)) => match ev {
                OrderEvent::Delivered {
                    bi, origin: o, seq, ..
                } => delivered[i].push((bi, o.0, seq)),
                OrderEvent::Confirmed { seq, at } if i == origin => {
                    // One confirmation may cover several numbers (after a takeover).
                    let from = confirmed.keys().next_back().map_or(1, |&s| s + 1);
                    for s in from..=seq {
                        confirmed.insert(s, at.0);
                    }
                    if let (Some(v), false) = (victim, killed) {
                        if seq >= u64::from(cfg.broadcasts / 2) {
                            c.nodes[v].kill();
                            killed = true;
                        }
                    }
                }
                OrderEvent::Finished { .. } if i == origin => break,
                _ => {}
            },
            _ => {}
        }
    }
    c.shutdown()?;
    let grid_rounds = stop_grid(grid)?;
    let survivors: Vec<usize> = (0..n).filter(|&i| Some(i) != victim).collect();
    let order_error = check_order(&survivors, &delivered, origin, cfg.broadcasts).err();
    let times: Vec<u64> = confirmed.values().copied().collect();
    let mut cycles: Vec<f64> = times
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]) as f64 / 1e3)
        .collect();
    let total_us = (times.last().unwrap_or(&0) - times.first().unwrap_or(&0)) as f64 / 1e3;
    cycles.sort_by(f64::total_cmp);
    let pct = |p: f64| cycles[((cycles.len() - 1) as f64 * p).round() as usize];
    Ok(BroadcastBenchRow {
        nodes: n,
        protocol: cfg.scheme.name(),
        broadcasts: confirmed.len() as u32,
        total_ms: total_us / 1e3,
        per_broadcast_us: total_us / cycles.len().max(1) as f64,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        order_ok: order_error.is_none(),
        order_error,
        fail: cfg.fail.map(Victim::name),
        victim,
        pause_ms: cycles.last().copied().unwrap_or(0.0) / 1e3,
        connections,
        suspicions,
        background: cfg.background.is_some(),
        grid_rounds,
        backend,
    })
}

/// One cell of the paper's Figure 1 table beside the simulator's projection (a `--json` row
/// of `weft bench broadcast --paper`).
#[derive(Clone, Debug, Serialize)]
pub struct ProjectionRow {
    /// Always true: tells these rows from the real runs' in one stream of JSON lines.
    pub projection: bool,
    /// Processes (PEs).
    pub nodes: usize,
    /// `C`, `H1` or `H2`.
    pub protocol: &'static str,
    /// The paper's time for 100 broadcasts, s.
    pub paper_s: f64,
    /// The simulator's, on the calibrated network, s.
    pub sim_s: f64,
    /// `sim_s / paper_s`.
    pub sim_over_paper: f64,
    /// The paper's time over its H2 at the same size.
    pub paper_ratio_to_h2: f64,
    /// The simulator's time over its H2 at the same size.
    pub sim_ratio_to_h2: f64,
    /// One-way message time of the network, µs.
    pub latency_us: f64,
    /// What a new connection adds, µs (0 for H2).
    pub connect_us: f64,
    /// The costs were read off this many PEs (the paper's smallest column).
    pub calibrated_at: usize,
}

/// The paper's table and the simulator's projection of it ([`crate::sim::section2`]): the
/// network's costs read off the 15-PE column, the 16- and 63-PE columns projected from the
/// hierarchies alone.
pub fn projection() -> Result<Vec<ProjectionRow>, BenchError> {
    use crate::sim::section2::{calibrate, cycle, Costs, BROADCASTS, PAPER};
    let structure = |n: usize, central: bool| {
        if central {
            Scheme::C.structure(n)
        } else {
            Scheme::H2.structure(n)
        }
    };
    let cal = calibrate(structure)
        .ok_or_else(|| BenchError::Config("the projection's calibration did not settle".into()))?;
    let mut rows = Vec::new();
    for &(n, c, h1, h2) in &PAPER {
        let mut cells = Vec::new();
        for (scheme, paper_s, connect_us) in [
            (Scheme::C, c, cal.c_connect_us),
            (Scheme::H1, h1, cal.h1_connect_us),
            (Scheme::H2, h2, 0.0),
        ] {
            let costs = Costs {
                latency_us: cal.latency_us,
                connect_us,
            };
            let t = cycle(n, scheme.structure(n), costs).ok_or_else(|| {
                BenchError::Config(format!(
                    "the projection of {} at {n} did not finish",
                    scheme.name()
                ))
            })?;
            cells.push((
                scheme,
                paper_s,
                t.as_secs_f64() * f64::from(BROADCASTS),
                connect_us,
            ));
        }
        let (paper_h2, sim_h2) = (cells[2].1, cells[2].2);
        for (scheme, paper_s, sim_s, connect_us) in cells {
            rows.push(ProjectionRow {
                projection: true,
                nodes: n,
                protocol: scheme.name(),
                paper_s,
                sim_s,
                sim_over_paper: sim_s / paper_s,
                paper_ratio_to_h2: paper_s / paper_h2,
                sim_ratio_to_h2: sim_s / sim_h2,
                latency_us: cal.latency_us,
                connect_us,
                calibrated_at: PAPER[2].0,
            });
        }
    }
    Ok(rows)
}

/// The grid application on `n` in-process nodes of their own, exchanging `doubles` values a
/// round, beside an experiment on the same cores (`None`: not asked for).
pub(super) fn start_grid(
    n: usize,
    doubles: Option<usize>,
    opts: &NodeOptions,
) -> Result<Option<Cluster<Grid>>, BenchError> {
    let Some(doubles) = doubles else {
        return Ok(None);
    };
    let opts = NodeOptions {
        params: format!("grid nodes={n} doubles={doubles}"),
        ..opts.clone()
    };
    Ok(Some(Cluster::start(n, opts, move |i, ids| {
        Grid::new(i, ids, doubles)
    })?))
}

/// Stop the grid; its rounds, summed over its processes.
pub(super) fn stop_grid(grid: Option<Cluster<Grid>>) -> Result<u64, BenchError> {
    Ok(match grid {
        Some(g) => g.stop_all()?.iter().map(Grid::rounds).sum(),
        None => 0,
    })
}

/// Every survivor delivered the origin's broadcasts `1..=count` once each, in order; every
/// survivor's deliveries (table changes included) are numbered 1, 2, 3, ... without a gap; and
/// any two survivors delivered the same thing at every index both reached. (Read from the
/// events up to the origin's last confirmation: the nodes' own states are changed by the
/// shutdown that follows, each reactor's nodes seeing the others' connections drop.)
fn check_order(
    survivors: &[usize],
    delivered: &[Vec<(u64, u64, u64)>],
    origin: usize,
    count: u32,
) -> Result<(), String> {
    let want: Vec<u64> = (1..=u64::from(count)).collect();
    for &i in survivors {
        let d = &delivered[i];
        if let Some(k) = d.iter().enumerate().position(|(k, e)| e.0 != k as u64 + 1) {
            return Err(format!(
                "process {i}'s delivery {} has index {}",
                k + 1,
                d[k].0
            ));
        }
        let got: Vec<u64> = d
            .iter()
            .filter(|e| e.1 == origin as u64 && e.2 > 0)
            .map(|e| e.2)
            .collect();
        if got != want {
            let first_wrong = got.iter().zip(&want).position(|(a, b)| a != b);
            return Err(format!(
                "process {i} delivered {} of {count} broadcasts, first out of order at {:?}",
                got.len(),
                first_wrong
            ));
        }
    }
    for (a, &i) in survivors.iter().enumerate() {
        for &j in &survivors[a + 1..] {
            if let Some(k) = delivered[i]
                .iter()
                .zip(&delivered[j])
                .position(|(x, y)| x != y)
            {
                return Err(format!(
                    "processes {i} and {j} delivered different broadcasts at index {}",
                    k + 1
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The projection (deterministic: the simulator) puts back the column it was read off
    /// and keeps the paper's ratios to H2 at 63 PEs within 25%.
    #[test]
    fn the_projection_keeps_the_papers_ratios_at_63() {
        let rows = projection().unwrap();
        assert_eq!(rows.len(), 9);
        for r in rows.iter().filter(|r| r.nodes == 15) {
            assert!((r.sim_over_paper - 1.0).abs() < 0.02, "{r:?}");
        }
        for r in rows.iter().filter(|r| r.nodes == 63 && r.protocol != "H2") {
            let off = r.sim_ratio_to_h2 / r.paper_ratio_to_h2 - 1.0;
            assert!(off.abs() < 0.25, "{r:?}");
        }
    }

    #[test]
    fn victims_are_where_their_names_say() {
        // The binary tree of 15: 0 coordinates 1 and 2, 1 coordinates 3 and 4; 7..14 lead
        // nobody, and 14 is the origin.
        assert_eq!(Victim::Root.pick(Scheme::H2, 15).unwrap(), 0);
        assert_eq!(Victim::Coordinator.pick(Scheme::H2, 15).unwrap(), 1);
        assert_eq!(Victim::Leaf.pick(Scheme::H2, 15).unwrap(), 13);
        // The central coordinator has no coordinator below it.
        assert!(Victim::Coordinator.pick(Scheme::C, 15).is_err());
        assert_eq!(Victim::Leaf.pick(Scheme::C, 15).unwrap(), 13);
    }

    #[test]
    fn the_central_coordinator_leads_everyone() {
        let s = Scheme::C.structure(63);
        assert!((1..63).all(|p| s.coordinator(Rank(p)) == Some(Rank(0))));
        let h = Scheme::H2.structure(63);
        assert_eq!(h.coordinator(Rank(62)), Some(Rank(30)));
    }

    #[test]
    fn the_order_check_finds_gaps_reorderings_and_disagreements() {
        // Origin 2 broadcasts 1 and 2; index 2 is a table change (origin 0, number 0).
        let good = vec![(1, 2, 1), (2, 0, 0), (3, 2, 2)];
        let all = |d: Vec<(u64, u64, u64)>| vec![good.clone(), d, good.clone()];
        assert_eq!(check_order(&[0, 1, 2], &all(good.clone()), 2, 2), Ok(()));
        // A survivor that has not heard of the last yet is a prefix, not a disagreement, but
        // it has not delivered every broadcast.
        assert!(check_order(&[0, 1], &all(good[..2].to_vec()), 2, 2).is_err());
        let gap = vec![(1, 2, 1), (3, 2, 2)];
        assert!(check_order(&[0, 1], &all(gap), 2, 2)
            .unwrap_err()
            .contains("index 3"));
        let swapped = vec![(1, 2, 2), (2, 0, 0), (3, 2, 1)];
        assert!(check_order(&[1], &all(swapped), 2, 2).is_err());
        let other = vec![(1, 2, 1), (2, 1, 0), (3, 2, 2)];
        let e = check_order(&[0, 1], &all(other), 2, 2).unwrap_err();
        assert!(e.contains("different broadcasts at index 2"), "{e}");
        // The victim is not checked.
        assert_eq!(check_order(&[0, 2], &all(vec![]), 2, 2), Ok(()));
    }
}
