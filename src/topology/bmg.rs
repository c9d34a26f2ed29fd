//! The binomial graph (BMG): a circulant graph over ring positions `0..n`.
//!
//! Node `p` links clockwise to `(p + 2^k) mod n` and counterclockwise to `(p - 2^k) mod n` for
//! every `k` with `2^k < n` (Bosilca et al., section 3.4.1). These functions are the oracle the
//! simulator judges the self-stabilizing construction against, so they share no code with
//! `proto::bmg`.

use crate::Rank;

/// Number of levels `k` with `2^k < n`: the length of the `CW` and `CCW` arrays.
pub fn levels(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        // 2^k < n  <=>  k <= floor(log2(n - 1))
        32 - (n - 1).leading_zeros()
    }
}

/// The clockwise neighbor at level `k`: `(p + 2^k) mod n`.
pub fn cw(p: Rank, k: u32, n: u32) -> Rank {
    debug_assert!(k < levels(n) && p.0 < n);
    Rank(((p.0 as u64 + (1u64 << k)) % n as u64) as u32)
}

/// The counterclockwise neighbor at level `k`: `(p - 2^k) mod n`.
pub fn ccw(p: Rank, k: u32, n: u32) -> Rank {
    debug_assert!(k < levels(n) && p.0 < n);
    let step = (1u64 << k) % n as u64;
    Rank(((p.0 as u64 + n as u64 - step) % n as u64) as u32)
}

/// The distinct neighbors of `p` (both directions, every level), sorted, `p` itself excluded.
pub fn neighbors(p: Rank, n: u32) -> Vec<Rank> {
    let mut v: Vec<Rank> = (0..levels(n))
        .flat_map(|k| [cw(p, k, n), ccw(p, k, n)])
        .filter(|&q| q != p)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// One signed jump `±2^k` along the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Jump {
    /// Level: the jump spans `2^k` positions.
    pub k: u32,
    /// `true` for clockwise (`+2^k`), `false` for counterclockwise.
    pub clockwise: bool,
}

/// Greedy routing: the first jump from `src` toward `dst`, or `None` when they are equal.
///
/// Go the shorter way round the ring and take the largest jump that does not overshoot. It needs
/// no state and takes `popcount(min(d, n - d)) <= ceil(log2 n)` hops for a clockwise offset `d`.
/// [`Router`] finds the true shortest paths, which can be shorter by wrapping around the ring.
pub fn next_jump(src: Rank, dst: Rank, n: u32) -> Option<Jump> {
    debug_assert!(src.0 < n && dst.0 < n);
    let d = (dst.0 as u64 + n as u64 - src.0 as u64) % n as u64;
    if d == 0 {
        return None;
    }
    let (dist, clockwise) = if d <= n as u64 - d {
        (d, true)
    } else {
        (n as u64 - d, false)
    };
    Some(Jump {
        k: 63 - dist.leading_zeros(),
        clockwise,
    })
}

/// The next hop from `src` toward `dst` by greedy routing (see [`next_jump`]).
pub fn next_hop(src: Rank, dst: Rank, n: u32) -> Option<Rank> {
    next_jump(src, dst, n).map(|j| j.apply(src, n))
}

impl Jump {
    /// Where this jump leads from `p`.
    pub fn apply(self, p: Rank, n: u32) -> Rank {
        if self.clockwise {
            cw(p, self.k, n)
        } else {
            ccw(p, self.k, n)
        }
    }
}

/// Shortest-path routing over the BMG of `n` processes.
///
/// The BMG is a circulant graph, so the distance from `p` to `q` depends only on the offset
/// `q - p`: one breadth-first search from position 0 (`O(n log n)` once, one byte per offset)
/// gives every distance, and the next hop is a jump that lowers the remaining distance by one.
/// Shortest routes may wrap around the ring and take one jump twice (`n = 43`:
/// `21 = 32 + 32 - 43`, two hops where greedy routing needs three).
#[derive(Clone, Debug)]
pub struct Router {
    n: u32,
    dist: Vec<u8>,
}

impl Router {
    /// Distances for a BMG of `n` processes.
    pub fn new(n: u32) -> Self {
        let mut dist = vec![u8::MAX; n as usize];
        if n > 0 {
            dist[0] = 0;
        }
        let mut frontier = vec![0u32];
        let mut d = 0u8;
        while !frontier.is_empty() {
            d += 1;
            let mut next = Vec::new();
            for &p in &frontier {
                for k in 0..levels(n) {
                    for q in [cw(Rank(p), k, n), ccw(Rank(p), k, n)] {
                        if dist[q.0 as usize] == u8::MAX {
                            dist[q.0 as usize] = d;
                            next.push(q.0);
                        }
                    }
                }
            }
            frontier = next;
        }
        Self { n, dist }
    }

    /// Number of hops on a shortest path from `src` to `dst`.
    pub fn distance(&self, src: Rank, dst: Rank) -> u32 {
        self.dist[self.offset(src, dst)] as u32
    }

    fn offset(&self, src: Rank, dst: Rank) -> usize {
        ((dst.0 as u64 + self.n as u64 - src.0 as u64) % self.n as u64) as usize
    }

    /// The first jump of a shortest path (the largest such jump), `None` when `src == dst`.
    pub fn next_jump(&self, src: Rank, dst: Rank) -> Option<Jump> {
        let left = self.distance(src, dst);
        if left == 0 {
            return None;
        }
        (0..levels(self.n))
            .rev()
            .flat_map(|k| [true, false].map(|clockwise| Jump { k, clockwise }))
            .find(|j| self.distance(j.apply(src, self.n), dst) + 1 == left)
    }

    /// The next hop of a shortest path from `src` to `dst`.
    pub fn next_hop(&self, src: Rank, dst: Rank) -> Option<Rank> {
        self.next_jump(src, dst).map(|j| j.apply(src, self.n))
    }
}

/// The number of hops [`next_hop`] routing takes from `src` to `dst`.
pub fn route_len(src: Rank, dst: Rank, n: u32) -> u32 {
    let mut at = src;
    let mut hops = 0;
    while let Some(next) = next_hop(at, dst, n) {
        at = next;
        hops += 1;
    }
    hops
}

/// `ceil(log2 n)`: the diameter bound of the BMG.
pub fn diameter_bound(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        32 - (n - 1).leading_zeros()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    /// Breadth-first distances from position 0 over the formula's edges: the ground truth for
    /// routing (the graph is vertex-transitive, so distances from 0 are distances from anyone).
    fn bfs_from_zero(n: u32) -> Vec<u32> {
        let mut dist = vec![u32::MAX; n as usize];
        dist[0] = 0;
        let mut q = VecDeque::from([0u32]);
        while let Some(p) = q.pop_front() {
            for k in 0..levels(n) {
                for q2 in [cw(Rank(p), k, n), ccw(Rank(p), k, n)] {
                    if dist[q2.0 as usize] == u32::MAX {
                        dist[q2.0 as usize] = dist[p as usize] + 1;
                        q.push_back(q2.0);
                    }
                }
            }
        }
        dist
    }

    #[test]
    fn levels_match_definition() {
        for n in 1..2000u32 {
            let expect = (0..32).filter(|&k| (1u64 << k) < n as u64).count() as u32;
            assert_eq!(levels(n), expect, "n = {n}");
        }
    }

    #[test]
    fn router_finds_shortest_paths() {
        for n in (1..=300u32).chain([1000, 1023, 1024, 1025, 4097]) {
            let dist = bfs_from_zero(n);
            let router = Router::new(n);
            for dst in 0..n {
                let (src, dst) = (Rank(0), Rank(dst));
                assert_eq!(router.distance(src, dst), dist[dst.0 as usize], "n = {n}");
                // Following the router takes exactly that many hops, each along an edge.
                let mut at = src;
                let mut hops = 0;
                while let Some(next) = router.next_hop(at, dst) {
                    assert!(neighbors(at, n).contains(&next));
                    at = next;
                    hops += 1;
                }
                assert_eq!((at, hops), (dst, dist[dst.0 as usize]));
                assert!(hops <= route_len(src, dst, n), "shortest beats greedy");
            }
        }
        // The wrap-around case of the doc comment.
        assert_eq!(Router::new(43).distance(Rank(0), Rank(21)), 2);
        assert_eq!(route_len(Rank(0), Rank(21), 43), 3);
    }

    proptest! {
        #[test]
        fn neighbor_tables_match_formula(n in 1u32..=100_000, p_seed in any::<u32>()) {
            let p = Rank(p_seed % n);
            let got = neighbors(p, n);
            for k in 0..levels(n) {
                let plus = Rank(((p.0 as u64 + (1u64 << k)) % n as u64) as u32);
                let minus = Rank((((p.0 as i64 - (1i64 << k)) % n as i64 + n as i64) % n as i64) as u32);
                prop_assert_eq!(cw(p, k, n), plus);
                prop_assert_eq!(ccw(p, k, n), minus);
                prop_assert!(plus == p || got.contains(&plus));
                prop_assert!(minus == p || got.contains(&minus));
            }
            // Nothing else is a neighbor, and the degree is at most 2 * levels.
            prop_assert!(got.len() as u32 <= 2 * levels(n));
            for q in &got {
                prop_assert!((0..levels(n)).any(|k| cw(p, k, n) == *q || ccw(p, k, n) == *q));
            }
        }

        #[test]
        fn shortest_paths_within_bound(n in 1u32..=100_000, a in any::<u32>(), b in any::<u32>()) {
            let (src, dst) = (Rank(a % n), Rank(b % n));
            let router = Router::new(n);
            prop_assert!(router.distance(src, dst) <= route_len(src, dst, n));
            prop_assert_eq!(router.distance(src, dst) == 1, neighbors(src, n).contains(&dst));
        }

        #[test]
        fn greedy_routing_reaches_destination_within_bound(n in 1u32..=100_000, a in any::<u32>(), b in any::<u32>()) {
            let (src, dst) = (Rank(a % n), Rank(b % n));
            let mut at = src;
            let mut hops = 0;
            while let Some(next) = next_hop(at, dst, n) {
                prop_assert!(neighbors(at, n).contains(&next), "hop is not a BMG edge");
                at = next;
                hops += 1;
                prop_assert!(hops <= diameter_bound(n));
            }
            prop_assert_eq!(at, dst);
        }
    }
}
