//! Process Order formulas (Gendelman et al., 2000, sections 3, 5.1 and 6).
//!
//! Every process knows its POID (its place in the Process Order table) and computes its place
//! in a logical structure from a formula, with no messages: a K-ary coordination hierarchy, a
//! ring, a hypercube or a 2-D mesh. Each structure also has a spanning tree given by formula
//! (its coordinator and coordinated processes), so any of them can carry a broadcast, and a
//! tree with another root is the same formula over POIDs moved so that the root gets 0: rotated
//! (Figure 7) or swapped with the root (Figure 9).
//!
//! In every spanning tree here a coordinator's POID is smaller than its children's: the
//! lowest live POID is above no live process, which is why it is the one to take over a dead
//! root (section 5.2.2).

use crate::Rank;

/// A logical structure laid over POIDs `0..n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Structure {
    /// The coordination hierarchy: `POID_coord = POID div K` (section 3). `K` at least the
    /// number of processes is the central coordinator of Figure 3a.
    Tree {
        /// K, the most processes one coordinates.
        k: u32,
    },
    /// The complete K-ary tree of section 2's experiment ("a logical binary tree"):
    /// `POID_coord = (POID - 1) div K`, so the root has K children and a full tree of depth d
    /// holds `(K^(d+1) - 1) / (K - 1)` processes (15 and 63 for K = 2: the paper's 16 PEs take
    /// one level more than 15, 63 one more than 16 does).
    Complete {
        /// K, children per coordinator.
        k: u32,
    },
    /// `POID_receiver = (POID_sender + 1) mod n` (section 5.1); as a spanning tree, the chain
    /// from POID 0.
    Ring,
    /// POIDs differing in one bit; as a spanning tree, the binomial tree (a POID's coordinator
    /// clears its highest set bit).
    Hypercube,
    /// A 2-D grid of `cols` POIDs per row, no wrap-around; as a spanning tree, row 0 and column
    /// 0 run from POID 0 and every row runs east from its first column.
    Mesh {
        /// POIDs per row.
        cols: u32,
    },
}

impl Structure {
    /// Whether the parameters make a structure (`K >= 2`, `cols >= 1`).
    pub fn check(self) -> Result<(), String> {
        match self {
            Structure::Tree { k } if k < 2 => Err(format!("a hierarchy needs K >= 2, not {k}")),
            Structure::Complete { k: 0 } => Err("a complete tree needs K >= 1".into()),
            Structure::Mesh { cols: 0 } => Err("a mesh needs at least one column".into()),
            _ => Ok(()),
        }
    }

    /// The coordinator of `poid` in the spanning tree rooted at POID 0 (`None` for the root).
    pub fn coordinator(self, poid: Rank) -> Option<Rank> {
        let p = poid.0;
        if p == 0 {
            return None;
        }
        Some(Rank(match self {
            Structure::Tree { k } => coordinator(poid, k).map_or(0, |r| r.0),
            Structure::Complete { k } => (p - 1) / k,
            Structure::Ring => p - 1,
            Structure::Hypercube => p & !(1 << (31 - p.leading_zeros())),
            Structure::Mesh { cols } => {
                if !p.is_multiple_of(cols) {
                    p - 1
                } else {
                    p - cols
                }
            }
        }))
    }

    /// The processes `poid` coordinates among `n`, in increasing POID order.
    pub fn coordinated(self, poid: Rank, n: u32) -> Vec<Rank> {
        let p = poid.0 as u64;
        let n64 = n as u64;
        let mut kids: Vec<u32> = Vec::new();
        match self {
            Structure::Tree { k } => kids.extend(coordinated(poid, k, n).map(|r| r.0)),
            Structure::Complete { k } => {
                let first = p * k as u64 + 1;
                let end = (first + k as u64).min(n64);
                kids.extend((first..end.max(first)).map(|c| c as u32));
            }
            Structure::Ring => kids.extend(Some(p + 1).filter(|&c| c < n64).map(|c| c as u32)),
            Structure::Hypercube => {
                // p + 2^i for every 2^i above p's highest set bit.
                let mut bit = if p == 0 {
                    1
                } else {
                    1u64 << (64 - p.leading_zeros())
                };
                while p + bit < n64 {
                    kids.push((p + bit) as u32);
                    bit <<= 1;
                }
            }
            Structure::Mesh { cols } => {
                let cols = cols as u64;
                if p % cols + 1 < cols && p + 1 < n64 {
                    kids.push((p + 1) as u32);
                }
                if p.is_multiple_of(cols) && p + cols < n64 {
                    kids.push((p + cols) as u32);
                }
            }
        }
        kids.into_iter().map(Rank).collect()
    }

    /// The structure's own neighbors of `poid` among `n` (the ring wraps around, the mesh
    /// does not), in increasing POID order.
    pub fn neighbors(self, poid: Rank, n: u32) -> Vec<Rank> {
        let mut v: Vec<Rank> = match self {
            Structure::Tree { k } => coordinator(poid, k)
                .into_iter()
                .chain(coordinated(poid, k, n))
                .collect(),
            Structure::Complete { .. } => self
                .coordinator(poid)
                .into_iter()
                .chain(self.coordinated(poid, n))
                .collect(),
            Structure::Ring if n <= 1 => Vec::new(),
            Structure::Ring => vec![ring_pred(poid, n), ring_succ(poid, n)],
            Structure::Hypercube => hypercube_neighbors(poid, n).collect(),
            Structure::Mesh { cols } => mesh_neighbors(poid, cols, n).collect(),
        };
        v.sort_unstable();
        v.dedup();
        v.retain(|&q| q != poid);
        v
    }
}

/// How a structure is re-rooted at another POID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rooting {
    /// POIDs rotate so that the root gets 0 (Figure 7): every position moves.
    Rotate,
    /// The root and POID 0 swap places (Figure 9): every other process keeps its place, so a
    /// sender-rooted tree reuses the coordinator tree's connections except around the two.
    Swap,
}

impl Rooting {
    /// `poid`'s place in the structure rooted at `root`.
    pub fn place(self, poid: Rank, root: Rank, n: u32) -> Rank {
        match self {
            Rooting::Rotate => rotate(poid, root, n),
            Rooting::Swap => swap(poid, root),
        }
    }

    /// The POID at `place` in the structure rooted at `root` (the inverse of [`Self::place`]).
    pub fn poid(self, place: Rank, root: Rank, n: u32) -> Rank {
        match self {
            Rooting::Rotate => unrotate(place, root, n),
            Rooting::Swap => swap(place, root),
        }
    }
}

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

/// The ring successor: `(POID + 1) mod n`, the process one heartbeats (section 5.1).
pub fn ring_succ(poid: Rank, n: u32) -> Rank {
    Rank(((poid.0 as u64 + 1) % n as u64) as u32)
}

/// The ring predecessor: `(POID - 1) mod n`, the process one watches.
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

/// The place of `poid` when `root` swaps with POID 0 (Figure 9); its own inverse.
pub fn swap(poid: Rank, root: Rank) -> Rank {
    if poid == root {
        Rank(0)
    } else if poid.0 == 0 {
        root
    } else {
        poid
    }
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

    #[test]
    fn spanning_trees_of_the_other_structures() {
        let kids = |s: Structure, p, n| {
            s.coordinated(Rank(p), n)
                .into_iter()
                .map(|r| r.0)
                .collect::<Vec<_>>()
        };
        let binary = Structure::Complete { k: 2 };
        assert_eq!(kids(binary, 0, 15), vec![1, 2]);
        assert_eq!(kids(binary, 6, 15), vec![13, 14]);
        assert_eq!(kids(binary, 7, 16), vec![15]);
        assert_eq!(kids(Structure::Ring, 3, 5), vec![4]);
        assert_eq!(kids(Structure::Ring, 4, 5), Vec::<u32>::new());
        // Binomial: 0 → 1, 2, 4; 1 → 3, 5; 2 → 6; 3 → 7.
        assert_eq!(kids(Structure::Hypercube, 0, 8), vec![1, 2, 4]);
        assert_eq!(kids(Structure::Hypercube, 1, 8), vec![3, 5]);
        assert_eq!(kids(Structure::Hypercube, 2, 8), vec![6]);
        assert_eq!(kids(Structure::Hypercube, 3, 8), vec![7]);
        // 3 columns: 0 → 1, 3; 1 → 2; 3 → 4, 6.
        let mesh = Structure::Mesh { cols: 3 };
        assert_eq!(kids(mesh, 0, 8), vec![1, 3]);
        assert_eq!(kids(mesh, 1, 8), vec![2]);
        assert_eq!(kids(mesh, 3, 8), vec![4, 6]);
        assert_eq!(kids(mesh, 6, 8), vec![7]);
    }

    #[test]
    fn swapping_keeps_every_other_place() {
        // Figure 9: D (POID 3) becomes the root, A takes D's place, the rest stay.
        let n = 6;
        for p in 0..n {
            let placed = Rooting::Swap.place(Rank(p), Rank(3), n);
            let want = match p {
                3 => 0,
                0 => 3,
                p => p,
            };
            assert_eq!(placed, Rank(want));
            assert_eq!(Rooting::Swap.poid(placed, Rank(3), n), Rank(p));
        }
    }

    fn structures() -> impl Strategy<Value = Structure> {
        prop_oneof![
            (2u32..9).prop_map(|k| Structure::Tree { k }),
            (1u32..9).prop_map(|k| Structure::Complete { k }),
            Just(Structure::Ring),
            Just(Structure::Hypercube),
            (1u32..12).prop_map(|cols| Structure::Mesh { cols }),
        ]
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

        /// Every structure's spanning tree: each coordinated process names its coordinator
        /// back, coordinators are below their children, every process but 0 is reached once,
        /// and every tree edge is an edge of the structure itself.
        #[test]
        fn every_structure_spans_with_its_own_edges(n in 1u32..600, s in structures()) {
            let mut reached = vec![false; n as usize];
            reached[0] = true;
            for p in 0..n {
                for c in s.coordinated(Rank(p), n) {
                    prop_assert!(c.0 < n && c.0 > p);
                    prop_assert_eq!(s.coordinator(c), Some(Rank(p)));
                    prop_assert!(!reached[c.0 as usize], "{} reached twice", c.0);
                    reached[c.0 as usize] = true;
                    if !matches!(s, Structure::Ring) || n > 1 {
                        prop_assert!(s.neighbors(Rank(p), n).contains(&c));
                    }
                }
            }
            prop_assert!(reached.iter().all(|&r| r));
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

        #[test]
        fn rootings_are_bijections(n in 1u32..500, root in any::<u32>()) {
            let root = Rank(root % n);
            for rooting in [Rooting::Rotate, Rooting::Swap] {
                let mut seen = vec![false; n as usize];
                for p in 0..n {
                    let place = rooting.place(Rank(p), root, n);
                    prop_assert!(place.0 < n && !seen[place.0 as usize]);
                    seen[place.0 as usize] = true;
                    prop_assert_eq!(rooting.poid(place, root, n), Rank(p));
                }
                prop_assert_eq!(rooting.place(root, root, n), Rank(0));
            }
        }
    }
}
