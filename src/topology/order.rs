//! Process Order formulas (Gendelman et al., 2000, sections 3 and 6).
//!
//! Every process knows its POID (its rank in the Process Order table) and computes its place in
//! a logical structure from a formula, with no messages: a K-ary coordination hierarchy, a ring,
//! a hypercube or a 2-D mesh. A different root is obtained by rotating POIDs (Figure 7).

use crate::Rank;

/// The coordinator of `poid` in a hierarchy of fan-out `k`: `POID div K`. The root (POID 0)
/// has none.
pub fn coordinator(poid: Rank, k: u32) -> Option<Rank> {
    debug_assert!(k >= 2);
    (poid.0 > 0).then(|| Rank(poid.0 / k))
}

/// The processes `poid` coordinates among `n`: every `c` with `c div K = poid`, except itself.
pub fn coordinated(poid: Rank, k: u32, n: u32) -> impl Iterator<Item = Rank> {
    let first = poid.0 as u64 * k as u64;
    let end = (first + k as u64).min(n as u64);
    (first..end.max(first))
        .filter(move |&c| c != poid.0 as u64)
        .map(|c| Rank(c as u32))
}

/// The ring successor: `(POID + 1) mod n` (the heartbeat ring of section 6).
pub fn ring_succ(poid: Rank, n: u32) -> Rank {
    Rank(((poid.0 as u64 + 1) % n as u64) as u32)
}

/// The ring predecessor: `(POID - 1) mod n`.
pub fn ring_pred(poid: Rank, n: u32) -> Rank {
    Rank(((poid.0 as u64 + n as u64 - 1) % n as u64) as u32)
}

/// Hypercube neighbors: POIDs differing in one bit, among those that exist (`< n`).
pub fn hypercube_neighbors(poid: Rank, n: u32) -> impl Iterator<Item = Rank> {
    let dims = if n <= 1 {
        0
    } else {
        32 - (n - 1).leading_zeros()
    };
    (0..dims)
        .map(move |i| poid.0 ^ (1 << i))
        .filter(move |&q| q < n)
        .map(Rank)
}

/// 2-D mesh neighbors (north, south, west, east; no wrap-around) with `cols` POIDs per row,
/// among those that exist (`< n`; the last row may be partial).
pub fn mesh_neighbors(poid: Rank, cols: u32, n: u32) -> impl Iterator<Item = Rank> {
    debug_assert!(cols >= 1);
    let (row, col) = (poid.0 / cols, poid.0 % cols);
    let north = (row > 0).then(|| poid.0 - cols);
    let south = Some(poid.0 as u64 + cols as u64)
        .filter(|&s| s < n as u64)
        .map(|s| s as u32);
    let west = (col > 0).then(|| poid.0 - 1);
    let east = (col + 1 < cols && poid.0 + 1 < n).then(|| poid.0 + 1);
    [north, south, west, east].into_iter().flatten().map(Rank)
}

/// The POID of `poid` in the structure rooted at `root` instead of 0 (Figure 7): POIDs rotate so
/// that the root gets 0.
pub fn rotate(poid: Rank, root: Rank, n: u32) -> Rank {
    Rank(((poid.0 as u64 + n as u64 - root.0 as u64) % n as u64) as u32)
}

/// The inverse of [`rotate`].
pub fn unrotate(rotated: Rank, root: Rank, n: u32) -> Rank {
    Rank(((rotated.0 as u64 + root.0 as u64) % n as u64) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn figure_3b_three_coordinated_processes() {
        // K = 3: a0 coordinates 1, 2; b1 coordinates 3, 4, 5; c2 coordinates 6, 7, 8.
        let kids = |p| coordinated(Rank(p), 3, 9).map(|r| r.0).collect::<Vec<_>>();
        assert_eq!(kids(0), vec![1, 2]);
        assert_eq!(kids(1), vec![3, 4, 5]);
        assert_eq!(kids(2), vec![6, 7, 8]);
        assert_eq!(coordinator(Rank(5), 3), Some(Rank(1)));
        assert_eq!(coordinator(Rank(0), 3), None);
    }

    proptest! {
        #[test]
        fn hierarchy_is_a_tree(n in 1u32..3000, k in 2u32..10) {
            let mut count = 0;
            for p in 0..n {
                for c in coordinated(Rank(p), k, n) {
                    prop_assert_eq!(coordinator(c, k), Some(Rank(p)));
                    count += 1;
                }
            }
            prop_assert_eq!(count, n - 1);
        }

        #[test]
        fn ring_hypercube_mesh_are_symmetric(n in 1u32..3000, p in any::<u32>(), cols in 1u32..64) {
            let p = Rank(p % n);
            prop_assert_eq!(ring_pred(ring_succ(p, n), n), p);
            for q in hypercube_neighbors(p, n) {
                prop_assert!(hypercube_neighbors(q, n).any(|r| r == p));
                prop_assert_eq!((p.0 ^ q.0).count_ones(), 1);
            }
            for q in mesh_neighbors(p, cols, n) {
                prop_assert!(q.0 < n);
                prop_assert!(mesh_neighbors(q, cols, n).any(|r| r == p));
            }
            prop_assert_eq!(unrotate(rotate(p, Rank(7 % n), n), Rank(7 % n), n), p);
        }
    }
}
