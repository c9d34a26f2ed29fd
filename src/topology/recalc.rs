//! The local recalculation of ICS'06 section 3.4: after failures, the parent and children of one
//! process, computed by that process alone from the initial view and the failed set, in time
//! proportional to its own neighborhood (ancestors walked, dead subtrees expanded), not to N.
//!
//! Patching (the paper): a failed process's children take its place in its parent's list, in
//! order, so each live process's parent is its nearest live ancestor. A failed root is replaced
//! by the next id of the list, which leaves its own parent and adopts the old root's other
//! children ahead of its own. Failures apply in increasing id order, so the failed roots are
//! exactly the leading failed ids of the list and are handled first.
//!
//! Rebalancing: the balanced radix tree recomputed over the live view (what Process Order calls
//! eager update; its lazy update keeps ghosts until the log is cleared, see `proto::order`).

use super::radix::RadixTree;
use crate::{NodeId, Rank};
use std::collections::{BTreeSet, HashMap};

/// What one process needs of the tree: the root, its parent and its ordered children.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Neighbors {
    /// The root of the tree.
    pub root: NodeId,
    /// The parent (`None` at the root).
    pub parent: Option<NodeId>,
    /// The children, in order.
    pub children: Vec<NodeId>,
}

/// `me`'s neighbors in the balanced radix tree of radix `a` over the sorted `view`; `None` if
/// `me` is not in the view.
pub fn rebalanced(view: &[NodeId], me: NodeId, a: u32) -> Option<Neighbors> {
    let r = view.binary_search(&me).ok()? as u32;
    rebalanced_at(view, r, a)
}

/// The neighbors of rank `r` in the balanced radix tree over `order` (ids in tree order).
pub fn rebalanced_at(order: &[NodeId], r: u32, a: u32) -> Option<Neighbors> {
    let t = RadixTree::new(order.len() as u32, a).ok()?;
    if r as usize >= order.len() {
        return None;
    }
    Some(Neighbors {
        root: order[0],
        parent: t.parent(Rank(r)).map(|p| order[p.0 as usize]),
        children: t.children(Rank(r)).map(|c| order[c.0 as usize]).collect(),
    })
}

/// `me`'s neighbors in the radix tree over the sorted `initial` view, patched for `failed`;
/// `None` if `me` failed, is not in the view, or nobody is left.
pub fn patched(
    initial: &[NodeId],
    failed: &BTreeSet<NodeId>,
    me: NodeId,
    a: u32,
) -> Option<Neighbors> {
    let dead: BTreeSet<u32> = failed
        .iter()
        .filter_map(|f| initial.binary_search(f).ok())
        .map(|r| r as u32)
        .collect();
    let me = initial.binary_search(&me).ok()? as u32;
    patched_at(initial, &dead, me, a)
}

/// The same over positions: the radix tree over the positions of `list` (any ids, in list
/// order), patched for the `dead` positions; the neighbors of position `me`.
pub fn patched_at(list: &[NodeId], dead: &BTreeSet<u32>, me: u32, a: u32) -> Option<Neighbors> {
    if dead.contains(&me) || me as usize >= list.len() {
        return None;
    }
    let t = Patched::new(list.len() as u32, dead, a)?;
    let parent = if me == t.root {
        None
    } else {
        let mut p = t.parent(me);
        while let Some(x) = p.filter(|x| dead.contains(x)) {
            p = t.parent(x);
        }
        p
    };
    let mut children = Vec::new();
    t.expand(&t.children(me), &mut children);
    let id = |r: u32| list[r as usize];
    Some(Neighbors {
        root: id(t.root),
        parent: parent.map(id),
        children: children.into_iter().map(id).collect(),
    })
}

/// The radix tree over positions after the root replacements, as overrides of its formulas.
struct Patched<'a> {
    dead: &'a BTreeSet<u32>,
    t: RadixTree,
    root: u32,
    parent_of: HashMap<u32, Option<u32>>,
    children_of: HashMap<u32, Vec<u32>>,
}

impl<'a> Patched<'a> {
    fn new(n: u32, dead: &'a BTreeSet<u32>, a: u32) -> Option<Self> {
        let t = RadixTree::new(n, a).ok()?;
        // The leading dead positions are the roots that fail in turn.
        let k = (0..n).take_while(|r| dead.contains(r)).count() as u32;
        if k >= n {
            return None;
        }
        let mut p = Patched {
            dead,
            t,
            root: k,
            parent_of: HashMap::new(),
            children_of: HashMap::new(),
        };
        for old in 0..k {
            let new = old + 1;
            if let Some(q) = p.parent(new) {
                let mut v = p.children(q);
                v.retain(|&c| c != new);
                p.children_of.insert(q, v);
            }
            let mut merged: Vec<u32> = p.children(old).into_iter().filter(|&c| c != new).collect();
            for &c in &merged {
                p.parent_of.insert(c, Some(new));
            }
            merged.extend(p.children(new));
            p.children_of.insert(new, merged);
            p.children_of.insert(old, Vec::new());
            p.parent_of.insert(new, None);
        }
        Some(p)
    }

    fn parent(&self, r: u32) -> Option<u32> {
        if let Some(&p) = self.parent_of.get(&r) {
            return p;
        }
        self.t.parent(Rank(r)).map(|p| p.0)
    }

    fn children(&self, r: u32) -> Vec<u32> {
        if let Some(v) = self.children_of.get(&r) {
            return v.clone();
        }
        self.t.children(Rank(r)).map(|c| c.0).collect()
    }

    /// Replace every dead position of `list` by its own (expanded) children, in place.
    fn expand(&self, list: &[u32], out: &mut Vec<u32>) {
        for &c in list {
            if self.dead.contains(&c) {
                self.expand(&self.children(c), out);
            } else {
                out.push(c);
            }
        }
    }
}

/// The processes a single failure would make `me`'s new tree neighbors when patching the radix
/// tree over `initial`: its grandparent (its parent failed), its grandchildren (a child
/// failed) and, for the second id of the list, the root's other children (the root failed and
/// it takes over). Empty if `me` is not in the view.
pub fn standby(initial: &[NodeId], me: NodeId, a: u32) -> Vec<NodeId> {
    let Ok(t) = RadixTree::new(initial.len() as u32, a) else {
        return Vec::new();
    };
    let Ok(r) = initial.binary_search(&me) else {
        return Vec::new();
    };
    let r = Rank(r as u32);
    let id = |x: Rank| initial[x.0 as usize];
    let mut out: Vec<NodeId> = t
        .parent(r)
        .and_then(|p| t.parent(p))
        .map(id)
        .into_iter()
        .collect();
    for c in t.children(r) {
        out.extend(t.children(c).map(id));
    }
    if r.0 == 1 {
        out.extend(t.children(Rank(0)).filter(|&c| c != r).map(id));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every edge a single failure adds to the patched tree touches a standby pair.
    #[test]
    fn standby_covers_every_new_edge_after_one_failure() {
        for (n, a) in [(1, 2), (2, 2), (7, 2), (21, 4), (64, 4), (100, 8)] {
            let initial: Vec<NodeId> = (0..n as u64).map(NodeId).collect();
            let before: Vec<Neighbors> = initial
                .iter()
                .map(|&x| patched(&initial, &BTreeSet::new(), x, a).unwrap())
                .collect();
            for &d in &initial {
                let failed: BTreeSet<NodeId> = [d].into();
                for &x in initial.iter().filter(|&&x| x != d) {
                    let nb = patched(&initial, &failed, x, a).unwrap();
                    let old = &before[x.0 as usize];
                    let warm = standby(&initial, x, a);
                    for y in nb.parent.into_iter().chain(nb.children) {
                        let known = old.parent == Some(y) || old.children.contains(&y);
                        let warm_either = warm.contains(&y) || standby(&initial, y, a).contains(&x);
                        assert!(known || warm_either, "n={n} a={a} d={d}: {x}-{y} is cold");
                    }
                }
            }
        }
    }
}
