//! Launch trees: the spanning trees a launcher (srun, mpirun) starts processes along.
//!
//! Shapes from Bosilca et al. section 4: balanced binary and binomial trees of a given depth, and
//! random trees of a given depth and maximal degree where every process above the requested
//! depth has between 1 and `degree` children. Processes are numbered breadth first, root 0.

use crate::rng::SimRng;
use serde::Serialize;
use std::fmt;

/// The shape of a launch tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TreeKind {
    /// Balanced binary tree: `2^(depth+1) - 1` processes.
    Binary,
    /// Binomial tree `B_depth`: `2^depth` processes.
    Binomial,
    /// Random tree of the given depth and maximal degree.
    Random,
}

impl fmt::Display for TreeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TreeKind::Binary => "binary",
            TreeKind::Binomial => "binomial",
            TreeKind::Random => "random",
        })
    }
}

/// Why a tree could not be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TreeError {
    /// The tree would have more processes than allowed.
    #[error("a {kind} tree of depth {depth} would have more than {limit} processes")]
    TooLarge {
        /// Shape asked for.
        kind: TreeKind,
        /// Depth asked for.
        depth: u32,
        /// The limit.
        limit: u64,
    },
    /// A random tree needs a degree of at least 1.
    #[error("random trees need --degree >= 1")]
    Degree,
}

/// A rooted tree over processes `0..len`, root 0, children in launch order (compressed rows).
#[derive(Clone, Debug)]
pub struct Tree {
    parent: Vec<u32>,
    child_start: Vec<u32>,
    child_list: Vec<u32>,
}

const NO_PARENT: u32 = u32::MAX;

impl Tree {
    /// Build from a children function evaluated breadth first.
    fn from_bfs(mut children_of: impl FnMut(u32, u32) -> u32, limit: u64) -> Option<Tree> {
        // children_of(process, depth) -> number of children; ids are handed out breadth first.
        let mut parent = vec![NO_PARENT];
        let mut depth = vec![0u32];
        let mut child_start = Vec::new();
        let mut child_list = Vec::new();
        let mut next = 0usize;
        while next < parent.len() {
            child_start.push(child_list.len() as u32);
            let k = children_of(next as u32, depth[next]);
            if parent.len() as u64 + k as u64 > limit {
                return None;
            }
            for _ in 0..k {
                let c = parent.len() as u32;
                parent.push(next as u32);
                depth.push(depth[next] + 1);
                child_list.push(c);
            }
            next += 1;
        }
        child_start.push(child_list.len() as u32);
        Some(Tree {
            parent,
            child_start,
            child_list,
        })
    }

    /// A balanced binary tree whose leaves are at `depth`.
    pub fn binary(depth: u32, limit: u64) -> Result<Tree, TreeError> {
        Self::from_bfs(|_, d| if d < depth { 2 } else { 0 }, limit).ok_or(TreeError::TooLarge {
            kind: TreeKind::Binary,
            depth,
            limit,
        })
    }

    /// The binomial tree `B_depth`. A node of order `k` has children of orders `k-1, ..., 0`:
    /// largest subtree first, the order in which every leaf's `Info` climbs at most two levels
    /// (the paper's 4-phase ring for binomial trees).
    pub fn binomial(depth: u32, limit: u64) -> Result<Tree, TreeError> {
        if depth >= 32 || (1u64 << depth) > limit {
            return Err(TreeError::TooLarge {
                kind: TreeKind::Binomial,
                depth,
                limit,
            });
        }
        // Orders are assigned as ids are handed out, breadth first.
        let mut order = vec![depth];
        let tree = Self::from_bfs(
            |p, _| {
                let k = order[p as usize];
                order.extend((0..k).rev());
                k
            },
            limit,
        );
        tree.ok_or(TreeError::TooLarge {
            kind: TreeKind::Binomial,
            depth,
            limit,
        })
    }

    /// A random tree: every process of depth below `depth` has `1..=degree` children.
    pub fn random(
        depth: u32,
        degree: u32,
        rng: &mut SimRng,
        limit: u64,
    ) -> Result<Tree, TreeError> {
        if degree == 0 {
            return Err(TreeError::Degree);
        }
        Self::from_bfs(
            |_, d| {
                if d < depth {
                    rng.range(1, degree as u64) as u32
                } else {
                    0
                }
            },
            limit,
        )
        .ok_or(TreeError::TooLarge {
            kind: TreeKind::Random,
            depth,
            limit,
        })
    }

    /// A random tree of exactly `n` processes, as a launcher might start them: breadth first,
    /// each process gets `1..=degree` children until `n` are placed.
    pub fn random_sized(n: u32, degree: u32, rng: &mut SimRng) -> Result<Tree, TreeError> {
        if degree == 0 {
            return Err(TreeError::Degree);
        }
        let mut placed = 1u64;
        let n = u64::from(n.max(1));
        Self::from_bfs(
            |_, _| {
                let k = rng.range(1, u64::from(degree)).min(n - placed);
                placed += k;
                k as u32
            },
            n,
        )
        .ok_or(TreeError::TooLarge {
            kind: TreeKind::Random,
            depth: 0,
            limit: n,
        })
    }

    /// Number of processes.
    pub fn len(&self) -> usize {
        self.parent.len()
    }

    /// Whether the tree is empty (never: a tree has a root).
    pub fn is_empty(&self) -> bool {
        self.parent.is_empty()
    }

    /// Parent of `p`, `None` for the root.
    pub fn parent(&self, p: u32) -> Option<u32> {
        let q = self.parent[p as usize];
        (q != NO_PARENT).then_some(q)
    }

    /// Children of `p` in launch order.
    pub fn children(&self, p: u32) -> &[u32] {
        let (a, b) = (
            self.child_start[p as usize] as usize,
            self.child_start[p as usize + 1] as usize,
        );
        &self.child_list[a..b]
    }

    /// Number of edges on the longest root-to-leaf path.
    pub fn depth(&self) -> u32 {
        let mut depth = vec![0u32; self.len()];
        let mut max = 0;
        // Breadth-first numbering: a parent always precedes its children.
        for p in 1..self.len() {
            depth[p] = depth[self.parent[p] as usize] + 1;
            max = max.max(depth[p]);
        }
        max
    }

    /// The processes in preorder (parent, then each child's subtree in order): the oriented
    /// ring Algorithm 1 must build, computed independently of it.
    pub fn preorder(&self) -> Vec<u32> {
        let mut order = Vec::with_capacity(self.len());
        let mut stack = vec![0u32];
        while let Some(p) = stack.pop() {
            order.push(p);
            stack.extend(self.children(p).iter().rev());
        }
        order
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(Tree::binary(0, u64::MAX).unwrap().len(), 1);
        assert_eq!(Tree::binary(3, u64::MAX).unwrap().len(), 15);
        assert_eq!(Tree::binomial(5, u64::MAX).unwrap().len(), 32);
        assert_eq!(Tree::binomial(5, u64::MAX).unwrap().depth(), 5);
        assert_eq!(Tree::binary(6, u64::MAX).unwrap().depth(), 6);
        assert!(Tree::binary(30, 1000).is_err());
    }

    #[test]
    fn a_sized_random_tree_has_its_size_and_bounded_degree() {
        for (n, degree, seed) in [(1, 3, 1), (2, 1, 2), (100, 3, 3), (1000, 8, 4)] {
            let t = Tree::random_sized(n, degree, &mut SimRng::new(seed)).unwrap();
            assert_eq!(t.len(), n as usize);
            assert!((0..n).all(|p| t.children(p).len() <= degree as usize));
            assert_eq!(t.preorder().len(), n as usize, "every process reached");
        }
        let a = Tree::random_sized(200, 4, &mut SimRng::new(9)).unwrap();
        let b = Tree::random_sized(200, 4, &mut SimRng::new(10)).unwrap();
        assert!(
            (1..200).any(|p| a.parent(p) != b.parent(p)),
            "the seed matters"
        );
        assert_eq!(
            Tree::random_sized(5, 0, &mut SimRng::new(1)).err(),
            Some(TreeError::Degree)
        );
    }

    #[test]
    fn binomial_children_largest_subtree_first() {
        let t = Tree::binomial(3, u64::MAX).unwrap();
        // Root of B_3 has children of orders 2, 1, 0: subtree sizes 4, 2, 1.
        let sizes: Vec<usize> = t.children(0).iter().map(|&c| subtree(&t, c)).collect();
        assert_eq!(sizes, vec![4, 2, 1]);
    }

    fn subtree(t: &Tree, p: u32) -> usize {
        1 + t.children(p).iter().map(|&c| subtree(t, c)).sum::<usize>()
    }

    #[test]
    fn random_tree_respects_depth_and_degree() {
        let mut rng = SimRng::new(7);
        let t = Tree::random(6, 3, &mut rng, u64::MAX).unwrap();
        assert_eq!(t.depth(), 6);
        for p in 0..t.len() as u32 {
            assert!(t.children(p).len() <= 3);
            for &c in t.children(p) {
                assert_eq!(t.parent(c), Some(p));
            }
        }
        let order = t.preorder();
        assert_eq!(order.len(), t.len());
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert!(sorted.iter().enumerate().all(|(i, &p)| i as u32 == p));
    }
}
