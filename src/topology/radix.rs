//! The radix tree over a sorted view (Varma et al., ICS'06, sections 3.1–3.2).
//!
//! Position 0 (the lowest id of the view) is the root and every node has `a = 2^k` children,
//! laid out breadth first: the children of `r` are `a*r + 1 ..= a*r + a`. Every process computes
//! its parent and children from `(n, a)` alone, with no messages. The path from the root to a
//! position is a string of child indices, `log2 a` bits per level: the routing digits the paper
//! encodes in a node's position.

use super::TopologyError;
use crate::Rank;

/// A complete `a`-ary tree over ranks `0..n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RadixTree {
    n: u32,
    log2a: u32,
}

/// Routing digits from the root to a position: `len` child indices, the first (root's) in the
/// most significant position, `log2 a` bits each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RadixPath {
    /// Packed digits, the last hop in the low bits.
    pub digits: u64,
    /// Number of hops from the root.
    pub len: u32,
}

impl RadixTree {
    /// A tree of `n` positions and radix `a` (a power of two, at least 2).
    pub fn new(n: u32, a: u32) -> Result<Self, TopologyError> {
        if a < 2 || !a.is_power_of_two() {
            return Err(TopologyError::Radix(a));
        }
        Ok(Self {
            n,
            log2a: a.trailing_zeros(),
        })
    }

    /// Number of positions.
    pub fn len(&self) -> u32 {
        self.n
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The radix `a`.
    pub fn radix(&self) -> u32 {
        1 << self.log2a
    }

    /// The parent of `r`, `None` for the root.
    pub fn parent(&self, r: Rank) -> Option<Rank> {
        debug_assert!(r.0 < self.n);
        (r.0 > 0).then(|| Rank((r.0 - 1) >> self.log2a))
    }

    /// The children of `r` that exist in a view of `n` positions, in order.
    pub fn children(&self, r: Rank) -> impl DoubleEndedIterator<Item = Rank> {
        let first = ((r.0 as u64) << self.log2a) + 1;
        let end = (first + self.radix() as u64).min(self.n as u64);
        (first..end.max(first)).map(|c| Rank(c as u32))
    }

    /// Number of edges from the root to `r`.
    pub fn depth(&self, r: Rank) -> u32 {
        self.path(r).len
    }

    /// Number of levels `H` (the root alone has height 1, an empty tree 0). Depth grows with
    /// the rank in breadth-first layout, so the last position is on the deepest level.
    pub fn height(&self) -> u32 {
        if self.n == 0 {
            0
        } else {
            self.depth(Rank(self.n - 1)) + 1
        }
    }

    /// The routing digits from the root to `r`.
    pub fn path(&self, r: Rank) -> RadixPath {
        let mask = (1u64 << self.log2a) - 1;
        let mut at = r.0 as u64;
        let mut digits = 0u64;
        let mut len = 0;
        while at > 0 {
            let digit = (at - 1) & mask;
            digits |= digit << (len * self.log2a);
            at = (at - 1) >> self.log2a;
            len += 1;
        }
        RadixPath { digits, len }
    }

    /// The position reached by following `path` from the root (the inverse of [`Self::path`]).
    pub fn rank_of(&self, path: RadixPath) -> Option<Rank> {
        let mask = (1u64 << self.log2a) - 1;
        let mut at = 0u64;
        for level in (0..path.len).rev() {
            let digit = (path.digits >> (level * self.log2a)) & mask;
            at = (at << self.log2a) + 1 + digit;
            if at >= self.n as u64 {
                return None;
            }
        }
        Some(Rank(at as u32))
    }

    /// Split the tree into `parts` groups of nearly equal size (±1) that cut few edges: the
    /// positions in depth-first preorder, cut into consecutive blocks. Preorder keeps every
    /// subtree contiguous, so a cut between two blocks separates only the children of the
    /// boundary's ancestors: at most `height × a` edges per cut. Returns each position's group.
    ///
    /// This is how in-process nodes are spread over reactors for a tree protocol: a message
    /// between nodes of one reactor is handled where it is sent, with no other core woken.
    pub fn preorder_blocks(&self, parts: u32) -> Vec<u32> {
        let n = self.n as usize;
        let mut part = vec![0u32; n];
        let parts = parts.max(1) as u64;
        let mut stack = Vec::with_capacity(self.height() as usize * self.radix() as usize + 1);
        if n > 0 {
            stack.push(Rank(0));
        }
        let mut visited = 0u64;
        while let Some(r) = stack.pop() {
            part[r.0 as usize] = (visited * parts / n as u64) as u32;
            visited += 1;
            // Pushed last first, so the first child is visited next.
            stack.extend(self.children(r).rev());
        }
        part
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rejects_radix_that_is_not_a_power_of_two() {
        assert!(RadixTree::new(10, 3).is_err());
        assert!(RadixTree::new(10, 1).is_err());
        assert!(RadixTree::new(10, 0).is_err());
        assert!(RadixTree::new(10, 8).is_ok());
    }

    #[test]
    fn heights_of_full_trees() {
        // 1 + 4 + 16 = 21 nodes fill three levels of a 4-ary tree; one more starts a fourth.
        assert_eq!(RadixTree::new(21, 4).unwrap().height(), 3);
        assert_eq!(RadixTree::new(22, 4).unwrap().height(), 4);
        assert_eq!(RadixTree::new(1, 2).unwrap().height(), 1);
        assert_eq!(RadixTree::new(0, 2).unwrap().height(), 0);
        assert_eq!(RadixTree::new(1024, 2).unwrap().height(), 11);
    }

    proptest! {
        #[test]
        fn parent_and_children_agree(n in 1u32..5000, log2a in 1u32..5) {
            let t = RadixTree::new(n, 1 << log2a).unwrap();
            let mut seen_as_child = 0u32;
            for r in 0..n {
                let r = Rank(r);
                let kids: Vec<Rank> = t.children(r).collect();
                prop_assert!(kids.len() as u32 <= t.radix());
                for c in kids {
                    prop_assert_eq!(t.parent(c), Some(r));
                    prop_assert_eq!(t.depth(c), t.depth(r) + 1);
                    seen_as_child += 1;
                }
                if let Some(p) = t.parent(r) {
                    prop_assert!(t.children(p).any(|c| c == r));
                }
                prop_assert!(t.depth(r) < t.height());
                prop_assert_eq!(t.rank_of(t.path(r)), Some(r));
            }
            // Every node but the root is somebody's child exactly once.
            prop_assert_eq!(seen_as_child, n - 1);
        }

        #[test]
        fn preorder_blocks_are_balanced_and_cut_few_edges(
            n in 1u32..3000,
            log2a in 1u32..4,
            parts in 1u32..9,
        ) {
            let t = RadixTree::new(n, 1 << log2a).unwrap();
            let part = t.preorder_blocks(parts);
            prop_assert_eq!(part.len(), n as usize);
            let mut sizes = vec![0u32; parts as usize];
            for &p in &part {
                prop_assert!(p < parts);
                sizes[p as usize] += 1;
            }
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            prop_assert!(hi - lo <= 1, "sizes {:?}", sizes);
            let cut = (1..n)
                .filter(|&r| part[r as usize] != part[t.parent(Rank(r)).unwrap().0 as usize])
                .count() as u32;
            prop_assert!(cut <= (parts - 1) * t.height() * t.radix(), "{} edges cut", cut);
        }
    }
}
