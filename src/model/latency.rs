//! The stabilization latency models of ICS'06 section 7, as functions of measured parameters.
//!
//! - Base (equations 1–2): `Ts = Ocm + Ocp·H` with `Ocm = 2·L·(H−1)`: the message goes down and
//!   the acknowledgment comes up `H−1` levels, and every level recalculates once.
//! - Distance (section 7.1): each level costs its largest parent–child distance in torus hops
//!   times `L`, `Ocm = 2·L·Σ_levels max hops`, ranks mapped onto the torus in XYZ order.
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
    let Ok(t) = RadixTree::new(n, a) else {
        return f64::NAN;
    };
    let h = t.height();
    let mut worst = vec![0u32; h as usize];
    let size = torus.size().max(1);
    let on = |r: u32| Rank((r as u64 % size) as u32);
    for r in 1..n {
        if let Some(p) = t.parent(Rank(r)) {
            let d = t.depth(Rank(r)) as usize;
            worst[d] = worst[d].max(torus.hops(on(p.0), on(r)).max(1));
        }
    }
    2.0 * l_us * worst.iter().map(|&w| w as f64).sum::<f64>() + ocp_us * h as f64
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
}
