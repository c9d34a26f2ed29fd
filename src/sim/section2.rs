//! The Process Order paper's section 2 experiment (Gendelman et al., 2000, Figure 1) projected
//! in the simulator: the same total-order broadcast and hierarchies that `weft bench
//! broadcast` runs on engine nodes (the central coordinator C, the binary hierarchy with a new
//! connection per message H1, and on kept connections H2), on a network described by two
//! costs:
//! - `latency`: one message's one-way time between two workstations (10 Mbps shared
//!   Ethernet with the grid application's traffic, Java's TCP);
//! - `connect`: what a message on a connection of its own adds, half at the sender (connect)
//!   and half at the receiver (accept), on the CPU of each, so that a process handling many
//!   connections (the central coordinator) handles them one after another.
//!
//! The paper gives no such figures, only the nine times of its table. [`calibrate`] reads them
//! off its smallest system (15 PEs, one subnet): `latency` from H2, and a `connect` for each
//! reconnecting scheme from H1 and C (the coordinator's connections cost more than a tree
//! node's: it holds many at once). The projection to 16 and 63 PEs then comes from the
//! hierarchies alone, which is the paper's claim: a broadcast's time grows with the depth of
//! the tree for H1 and H2 and with the number of processes for C.

use crate::proto::broadcast::{Broadcast, BroadcastConfig, OrderEvent, Workload};
use crate::proto::Event;
use crate::sim::timed::{Net, TimedConfig, TimedWorld};
use crate::topology::order::Structure;
use crate::NodeId;
use std::time::Duration;

/// The paper's table: 100 broadcasts, seconds, for (PEs, C, H1, H2).
pub const PAPER: [(usize, f64, f64, f64); 3] = [
    (63, 463.2, 24.2, 4.8),
    (16, 39.6, 14.1, 3.5),
    (15, 39.7, 7.5, 1.3),
];

/// Broadcasts per run, as in the paper.
pub const BROADCASTS: u32 = 100;

/// A network for the projection.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Costs {
    /// One-way time of one message, µs.
    pub latency_us: f64,
    /// What a message on a new connection adds, µs (half at each end).
    pub connect_us: f64,
}

/// Mean time of one broadcast cycle of `n` processes over `structure`, the first cycle left
/// out: the last process broadcasts [`BROADCASTS`] times, each confirmed before the next (as
/// `weft bench broadcast` does). `None` if the stream did not finish.
pub fn cycle(n: usize, structure: Structure, costs: Costs) -> Option<Duration> {
    let origin = n - 1;
    let base = BroadcastConfig {
        structure,
        // Nothing is lost here, and the paper's broadcasts never retried: the usual retry
        // (200 ms, long on a cluster) would fire within the slow cycles of C.
        retry: Duration::from_secs(3600),
        ..BroadcastConfig::default()
    };
    let ids: Vec<NodeId> = (0..n as u64).map(NodeId).collect();
    let nodes: Vec<Broadcast> = (0..n)
        .map(|i| {
            let mut c = base.clone();
            if i == origin {
                c.workload = Workload {
                    count: BROADCASTS,
                    window: 1,
                    size: 64,
                    ..Workload::default()
                };
            }
            Broadcast::new(ids[i], ids.clone(), c)
        })
        .collect();
    let half = Duration::from_secs_f64(costs.connect_us / 2e6);
    let mut w = TimedWorld::new(
        nodes,
        TimedConfig {
            net: Net::Constant {
                l: Duration::from_secs_f64(costs.latency_us / 1e6),
            },
            ocp: half,
            send: half,
            detect: Duration::from_millis(1),
        },
    );
    w.start();
    let mut confirmed = Vec::with_capacity(BROADCASTS as usize);
    while w.step().is_some() {
        for (who, _, e) in w.take_reports() {
            match e {
                Event::Order(OrderEvent::Confirmed { at, .. }) if who as usize == origin => {
                    confirmed.push(at.0);
                }
                Event::Order(OrderEvent::Finished { .. }) if who as usize == origin => {
                    let (first, last) = (*confirmed.first()?, *confirmed.last()?);
                    let cycles = confirmed.len().checked_sub(1).filter(|&c| c > 0)?;
                    return Some(Duration::from_nanos((last - first) / cycles as u64));
                }
                _ => {}
            }
        }
    }
    None
}

/// The costs that put each scheme's cycle on the paper's 15-PE time, one after the other:
/// `latency` from H2 (kept connections: a cycle is latencies alone, so it scales with it),
/// then the `connect` of H1 and the one of C with that latency. A cycle grows with `connect`
/// but not in proportion (small costs hide behind the latency, large ones queue on the
/// coordinator's CPU), so each is found by bisection.
pub fn calibrate(structure: impl Fn(usize, bool) -> Structure) -> Option<Calibration> {
    let (n, c_s, h1_s, h2_s) = PAPER[2];
    let per = |s: f64| s * 1e6 / f64::from(BROADCASTS); // µs per broadcast
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let tree = structure(n, false);
    let unit = us(cycle(
        n,
        tree,
        Costs {
            latency_us: 1.0,
            connect_us: 0.0,
        },
    )?);
    let latency_us = per(h2_s) / unit;
    let connect = |target_s: f64, s: Structure| -> Option<f64> {
        let at = |k: f64| {
            cycle(
                n,
                s,
                Costs {
                    latency_us,
                    connect_us: k,
                },
            )
            .map(us)
        };
        let target = per(target_s);
        if at(0.0)? >= target {
            return Some(0.0);
        }
        let mut hi = 1000.0;
        while at(hi)? < target {
            hi *= 2.0;
            if hi > 1e9 {
                return None;
            }
        }
        let mut lo = 0.0;
        while hi - lo > 0.5 {
            let mid = (lo + hi) / 2.0;
            if at(mid)? < target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Some((lo + hi) / 2.0)
    };
    Some(Calibration {
        latency_us,
        h1_connect_us: connect(h1_s, tree)?,
        c_connect_us: connect(c_s, structure(n, true))?,
    })
}

/// Costs read off the paper's 15-PE column.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Calibration {
    /// One-way message time, µs (from H2).
    pub latency_us: f64,
    /// A tree node's new connection, µs (from H1).
    pub h1_connect_us: f64,
    /// The central coordinator's new connection, µs (from C).
    pub c_connect_us: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> Structure {
        Structure::Complete { k: 2 }
    }

    #[test]
    fn a_kept_connection_cycle_grows_with_the_depth_not_the_size() {
        let c = Costs {
            latency_us: 100.0,
            connect_us: 0.0,
        };
        let at = |n| cycle(n, tree(), c).unwrap().as_secs_f64() * 1e6;
        // 15 processes: depth 3, 16: depth 4; the origin (a leaf) adds its request and the
        // confirmation, so a cycle is a whole number of latencies.
        let (a, b, big) = (at(15), at(16), at(63));
        assert!(b > a && big > b, "{a} {b} {big}");
        assert_eq!(a % 100.0, 0.0, "{a}");
        assert!(
            big - b < 3.0 * (b - a) + 1.0,
            "depth, not size: {a} {b} {big}"
        );
    }

    #[test]
    fn the_calibration_puts_the_15_pe_column_back() {
        let s = |n: usize, central: bool| {
            if central {
                Structure::Tree { k: n as u32 }
            } else {
                tree()
            }
        };
        let cal = calibrate(s).unwrap();
        assert!(cal.latency_us > 0.0 && cal.h1_connect_us > 0.0 && cal.c_connect_us > 0.0);
        let (n, c_s, h1_s, h2_s) = PAPER[2];
        let secs = |st: Structure, k: f64| {
            cycle(
                n,
                st,
                Costs {
                    latency_us: cal.latency_us,
                    connect_us: k,
                },
            )
            .unwrap()
            .as_secs_f64()
                * f64::from(BROADCASTS)
        };
        for (got, want) in [
            (secs(tree(), 0.0), h2_s),
            (secs(tree(), cal.h1_connect_us), h1_s),
            (secs(s(n, true), cal.c_connect_us), c_s),
        ] {
            assert!((got - want).abs() / want < 0.02, "{got} vs {want}");
        }
    }
}
