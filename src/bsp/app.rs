//! BSP programs whose results can be checked.

use super::Program;

/// Prefix sums by recursive doubling (Hillis–Steele): in superstep `k`, processor `i` sends
/// its partial sum to `i + 2^k` and adds what it receives; after `⌈log2 V⌉ + 1` supersteps each
/// holds the sum of the initial values `0..=i`. Later supersteps change nothing.
pub struct PrefixSum;

impl Program for PrefixSum {
    fn name(&self) -> &'static str {
        "prefix-sum"
    }

    fn init(&self, vid: u64, _v: u64) -> u64 {
        vid.wrapping_mul(2_654_435_761) % 1000
    }

    fn step(
        &self,
        vid: u64,
        k: u32,
        v: u64,
        state: u64,
        inbox: &[(u64, u64)],
    ) -> (u64, Vec<(u64, u64)>) {
        // Messages of superstep k − 1 carry partial sums from i − 2^(k−1).
        let state = inbox.iter().fold(state, |s, &(_, x)| s.wrapping_add(x));
        let to = 1u64
            .checked_shl(k)
            .and_then(|d| vid.checked_add(d))
            .filter(|&t| t < v);
        (state, to.map(|t| vec![(t, state)]).unwrap_or_default())
    }
}

/// One-dimensional Jacobi relaxation in integers (exact, so a rerun is bit-identical):
/// `x_i ← (x_{i−1} + 2 x_i + x_{i+1}) / 4` with fixed ends, neighbors' values exchanged by
/// messages each superstep.
pub struct Jacobi;

impl Program for Jacobi {
    fn name(&self) -> &'static str {
        "jacobi"
    }

    fn init(&self, vid: u64, v: u64) -> u64 {
        if vid == 0 || vid + 1 == v {
            1 << 20
        } else {
            (vid * 7919) % 4096
        }
    }

    fn step(
        &self,
        vid: u64,
        k: u32,
        v: u64,
        state: u64,
        inbox: &[(u64, u64)],
    ) -> (u64, Vec<(u64, u64)>) {
        let fixed = vid == 0 || vid + 1 == v;
        let state = if k == 0 || fixed {
            state
        } else {
            let left = inbox.iter().find(|m| m.0 + 1 == vid).map_or(state, |m| m.1);
            let right = inbox.iter().find(|m| m.0 == vid + 1).map_or(state, |m| m.1);
            (left + 2 * state + right) / 4
        };
        let mut out = Vec::with_capacity(2);
        if vid > 0 {
            out.push((vid - 1, state));
        }
        if vid + 1 < v {
            out.push((vid + 1, state));
        }
        (state, out)
    }
}

/// The program named `name`.
pub fn by_name(name: &str) -> Option<&'static dyn Program> {
    match name {
        "prefix-sum" => Some(&PrefixSum),
        "jacobi" => Some(&Jacobi),
        _ => None,
    }
}

/// Run `p` fault-free for `supersteps`: the reference result.
pub fn reference(p: &dyn Program, v: u64, supersteps: u32) -> Vec<u64> {
    let mut state: Vec<u64> = (0..v).map(|i| p.init(i, v)).collect();
    let mut inbox: Vec<Vec<(u64, u64)>> = vec![Vec::new(); v as usize];
    for k in 0..supersteps {
        let mut next: Vec<Vec<(u64, u64)>> = vec![Vec::new(); v as usize];
        for i in 0..v {
            let (s, out) = p.step(i, k, v, state[i as usize], &inbox[i as usize]);
            state[i as usize] = s;
            for (to, x) in out {
                next[to as usize].push((i, x));
            }
        }
        inbox = next;
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_sum_gives_the_prefix_sums() {
        let v = 100;
        let got = reference(&PrefixSum, v, 8);
        let mut acc = 0u64;
        for i in 0..v {
            acc += PrefixSum.init(i, v);
            assert_eq!(got[i as usize], acc, "at {i}");
        }
    }

    #[test]
    fn jacobi_smooths_toward_the_fixed_ends() {
        let v = 16;
        let got = reference(&Jacobi, v, 400);
        assert_eq!(got[0], 1 << 20);
        assert!(
            got[8] > 1 << 19,
            "the middle warms up toward the ends: {}",
            got[8]
        );
    }
}
