//! The stabilization latency models of ICS'06 section 7, as functions of measured parameters.
//!
//! - Base (equations 1–2): `Ts = Ocm + Ocp·H` with `Ocm = 2·L·(H−1)`: the message goes down and
//!   the acknowledgment comes up `H−1` levels, and every level recalculates once.
//! - Distance (section 7.1): each level costs its largest parent–child distance in torus hops
//!   times `L`, `Ocm = 2·L·Σ_levels max hops`, ranks mapped onto the torus in XYZ order.
//! - Hop latency (weft's own): the distance model with each level charged the latency
//!   measured at its hop count, `L(h) = L(1) + (h−1)·L_hop`, instead of `h·L`.
//! - Contention (section 7.2, Figures 6–8): the base model with `L` replaced by `L(N)`, the
//!   latency measured while N nodes communicate at once in groups of a parent and its
//!   children (Figure 7; [`crate::bench::contention`] measures it):
//!   `Ts = 2·L(N)·(H−1) + Ocp·H`.
//! - CPU sharing (weft's own, beside the paper's): where all nodes of a run share a machine's
//!   cores, the shared resource is the CPU, so the load term is the CPU of the stabilization
//!   spread over the cores: its `M` messages at `c` each (the per-message cost measured under
//!   load) and the local recalculation of every one of the `P` processes that install the new
//!   view (`Ocp` each; on BG/L each had its own CPU, here they queue):
//!   `Ts = base + (M·c + P·Ocp)/cores`.

use crate::topology::radix::RadixTree;
use crate::topology::torus::Torus;
use crate::Rank;

/// Equations 1–2: `2·L·(H−1) + Ocp·H`, µs.
pub fn base(l_us: f64, ocp_us: f64, h: u32) -> f64 {
    2.0 * l_us * (h.saturating_sub(1)) as f64 + ocp_us * h as f64
}

/// The distance model: `2·L·Σ_levels max hops + Ocp·H`, µs, for the radix-`a` tree over `n`
/// ranks laid on `torus` in XYZ order ([`Torus::partition`] gives BG/L's shape for `n`; ranks
/// beyond a torus too small would fold onto it, so callers refuse one).
pub fn distance(l_us: f64, ocp_us: f64, n: u32, a: u32, torus: Torus) -> f64 {
    let Some(worst) = level_hops(n, a, torus) else {
        return f64::NAN;
    };
    let h = worst.len() as u32;
    2.0 * l_us * worst.iter().map(|&w| w as f64).sum::<f64>() + ocp_us * h as f64
}

/// The hop-latency model (weft's own, beside the paper's distance model): each level costs
/// the latency measured at its largest parent–child hop count, `L(h) = L(1) + (h − 1)·L_hop`,
/// rather than `h` times the one-hop `L`: `2·Σ_levels L(max hops) + Ocp·H`, µs. Where a hop
/// costs the whole `L` (BG/L, by the paper's account) the two agree; where most of `L` is the
/// ends' software and a hop adds little (a forwarding kernel), this one is the physics.
pub fn hop_latency(l1_us: f64, l_hop_us: f64, ocp_us: f64, n: u32, a: u32, torus: Torus) -> f64 {
    let Some(worst) = level_hops(n, a, torus) else {
        return f64::NAN;
    };
    let h = worst.len() as u32;
    let at = |hops: u32| l1_us + hops.saturating_sub(1) as f64 * l_hop_us;
    let levels = worst.iter().filter(|&&w| w > 0);
    2.0 * levels.map(|&w| at(w)).sum::<f64>() + ocp_us * h as f64
}

/// Per level of the radix-`a` tree over `n` ranks on `torus` (XYZ order), its largest
/// parent–child distance in hops (at least 1: ranks folded onto one node still send); the
/// list is as long as the tree is high, the root's level 0. `None` for no such tree.
fn level_hops(n: u32, a: u32, torus: Torus) -> Option<Vec<u32>> {
    let t = RadixTree::new(n, a).ok()?;
    let mut worst = vec![0u32; t.height() as usize];
    let size = torus.size().max(1);
    let on = |r: u32| Rank((r as u64 % size) as u32);
    for r in 1..n {
        if let Some(p) = t.parent(Rank(r)) {
            let d = t.depth(Rank(r)) as usize;
            worst[d] = worst[d].max(torus.hops(on(p.0), on(r)).max(1));
        }
    }
    Some(worst)
}

/// The line through `(h, L(h))`: `(L at one hop, L_hop)`, the latency the ends pay and
/// what each further hop adds, µs. Siegel's repeated median (each point's median slope to
/// the others, then their median): a latency that one scheduling accident inflated several
/// times over moves it not at all, where least squares would follow it (up to half the
/// points may be such). One point gives no slope (0).
pub fn fit_hops(points: &[(u32, f64)]) -> (f64, f64) {
    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        let k = v.len();
        if k % 2 == 1 {
            v[k / 2]
        } else {
            (v[k / 2 - 1] + v[k / 2]) / 2.0
        }
    }
    if points.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let slope = if points.len() < 2 {
        0.0
    } else {
        median(
            points
                .iter()
                .map(|&(xi, yi)| {
                    median(
                        points
                            .iter()
                            .filter(|&&(xj, _)| xj != xi)
                            .map(|&(xj, yj)| (yj - yi) / (xj as f64 - xi as f64))
                            .collect(),
                    )
                })
                .collect(),
        )
    };
    let at_one = median(
        points
            .iter()
            .map(|&(x, y)| y - (x as f64 - 1.0) * slope)
            .collect(),
    );
    (at_one, slope)
}

/// The CPU a stabilization spreads over the cores: `messages` at `c` each and `processes`
/// recalculations at `Ocp` each, µs.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// Messages of the stabilization (M).
    pub messages: u64,
    /// CPU per message under load (c), µs.
    pub c_us: f64,
    /// Processes that install the new view (P).
    pub processes: u32,
    /// Local recalculation per process (Ocp), µs.
    pub ocp_us: f64,
}

/// ICS'06's contention model: equations 1–2 with the latency under contention `L(N)` for
/// `L`, µs.
pub fn contention(l_n_us: f64, ocp_us: f64, h: u32) -> f64 {
    base(l_n_us, ocp_us, h)
}

/// The CPU-sharing model: the base model plus `(M·c + P·Ocp)/cores`, µs.
pub fn cpu_sharing(base_us: f64, load: Load, cores: u32) -> f64 {
    let cpu = load.messages as f64 * load.c_us + load.processes as f64 * load.ocp_us;
    base_us + cpu / cores.max(1) as f64
}

/// `|predicted − measured| / measured`.
pub fn relative_error(predicted: f64, measured: f64) -> f64 {
    (predicted - measured).abs() / measured.abs().max(f64::MIN_POSITIVE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_base_model() {
        // BG/L: L = 4.6 µs, Ocp = 2 µs; 1024 nodes, a = 2 -> H = 11: 2·4.6·10 + 2·11 = 114.
        assert!((base(4.6, 2.0, 11) - 114.0).abs() < 1e-9);
        assert_eq!(base(4.6, 2.0, 1), 2.0, "a lone root only recalculates");
    }

    #[test]
    fn distance_is_at_least_base_and_grows_on_the_torus() {
        let torus = Torus::MIDPLANE;
        for (n, a) in [(8, 2), (64, 4), (1024, 2)] {
            let h = RadixTree::new(n, a).unwrap().height();
            let d = distance(4.6, 2.0, n, a, torus);
            assert!(d >= base(4.6, 2.0, h) - 1e-9, "n={n}: {d}");
        }
        // In a 1-D line of 8, a binary tree's deep levels span several hops.
        let line = Torus::new(8, 1, 1).unwrap();
        assert!(distance(1.0, 0.0, 8, 2, line) > base(1.0, 0.0, 3));
    }

    #[test]
    fn contention_is_the_base_model_at_the_loaded_latency() {
        // The paper's XTORC figures: L = 118 µs alone; a loaded L(N) twice that doubles the
        // communication term and leaves the recalculations.
        let (ocp, h) = (2.0, 4);
        assert_eq!(contention(118.0, ocp, h), base(118.0, ocp, h));
        let alone = base(118.0, ocp, h) - ocp * h as f64;
        assert_eq!(contention(236.0, ocp, h) - ocp * h as f64, 2.0 * alone);
    }

    #[test]
    fn cpu_sharing_adds_the_cpu_of_the_messages_and_the_recalculations() {
        let load = Load {
            messages: 126,
            c_us: 8.0,
            processes: 63,
            ocp_us: 2.0,
        };
        assert_eq!(cpu_sharing(100.0, load, 2), 100.0 + (1008.0 + 126.0) / 2.0);
        let alone = Load {
            processes: 0,
            ..load
        };
        assert_eq!(cpu_sharing(100.0, alone, 1), 100.0 + 1008.0);
        assert!((relative_error(110.0, 100.0) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn hop_latency_is_the_distance_model_when_a_hop_costs_all_of_l() {
        let torus = Torus::MIDPLANE;
        for (n, a) in [(64, 2), (512, 4), (100, 8)] {
            let d = distance(4.6, 2.0, n, a, torus);
            let h = hop_latency(4.6, 4.6, 2.0, n, a, torus);
            assert!((d - h).abs() < 1e-9, "{n} {a}: {d} vs {h}");
            // A hop that adds nothing leaves the base model.
            let flat = hop_latency(4.6, 0.0, 2.0, n, a, torus);
            let height = RadixTree::new(n, a).unwrap().height();
            assert!(
                (flat - base(4.6, 2.0, height)).abs() < 1e-9,
                "{n} {a}: {flat}"
            );
        }
    }

    #[test]
    fn the_hop_fit_finds_a_line_it_was_given() {
        let pts: Vec<(u32, f64)> = (1..=6).map(|h| (h, 30.0 + 2.5 * (h - 1) as f64)).collect();
        let (l1, hop) = fit_hops(&pts);
        assert!(
            (l1 - 30.0).abs() < 1e-9 && (hop - 2.5).abs() < 1e-9,
            "{l1} {hop}"
        );
        assert_eq!(fit_hops(&[(1, 7.0)]), (7.0, 0.0));
        // One hop count whose ping shared a core with its peer (seven times slower) does not
        // move the line: measured on a 4x4x4 namespace torus.
        let (l1, hop) = fit_hops(&[(1, 5.76), (2, 6.09), (3, 6.63), (4, 38.1)]);
        assert!(
            (l1 - 5.655).abs() < 0.01 && (hop - 0.54).abs() < 0.01,
            "{l1} {hop}"
        );
    }
}
