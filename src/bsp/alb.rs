//! ADAPTIVE LOAD BALANCING (section 4): discard the excess of an overloaded PrimaryJobQueue
//! at the start of a superstep, and give each pending thread to one of the live processors
//! that contest for it, with probability `∝ 1 / Z_0` (the contester's queue after
//! discarding), so that lightly loaded processors take more. Theorem 4.1: every live
//! processor's load stays within `c_1 V / A_k · Θ(log log n)`.

use crate::rng::SimRng;

/// DISCARDING: keep at most `limit` of `queue`'s threads, chosen at random; return the rest
/// (now pending).
pub fn discard(queue: &mut Vec<u32>, limit: usize, rng: &mut SimRng) -> Vec<u32> {
    if queue.len() <= limit {
        return Vec::new();
    }
    // A partial Fisher–Yates: the first `limit` places get a uniform sample.
    for i in 0..limit {
        let j = i + rng.below((queue.len() - i) as u64) as usize;
        queue.swap(i, j);
    }
    queue.split_off(limit)
}

/// The contester that gets a pending thread: contester `c` (with queue length `z0[c]` after
/// discarding) with probability `(1 / (z0[c] + 1)) / Σ (1 / (z0[j] + 1))` (the `+ 1` keeps an
/// empty queue finite).
pub fn award(contesters: &[usize], z0: &[usize], rng: &mut SimRng) -> Option<usize> {
    let weight = |c: usize| 1.0 / (z0[c] as f64 + 1.0);
    let total: f64 = contesters.iter().map(|&c| weight(c)).sum();
    let mut x = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
    for &c in contesters {
        x -= weight(c);
        if x <= 0.0 {
            return Some(c);
        }
    }
    contesters.last().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discarding_keeps_the_limit_and_loses_no_thread() {
        let mut rng = SimRng::new(1);
        let mut q: Vec<u32> = (0..100).collect();
        let mut rest = discard(&mut q, 30, &mut rng);
        assert_eq!(q.len(), 30);
        rest.extend(&q);
        rest.sort();
        assert_eq!(rest, (0..100).collect::<Vec<u32>>());
    }

    #[test]
    fn the_lighter_contester_wins_more_often() {
        let mut rng = SimRng::new(2);
        let z0 = [0usize, 9];
        let wins = (0..10_000)
            .filter(|_| award(&[0, 1], &z0, &mut rng) == Some(0))
            .count();
        // Weights 1 and 1/10: the light one should win about 10/11 of the time.
        assert!((8_800..9_400).contains(&wins), "{wins}");
    }
}
