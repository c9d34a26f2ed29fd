//! The views of a membership state, computed once and shared by every process that holds it.
//!
//! Every process of a job holds the same list (the initial view, then the admitted joiners)
//! and, once an epoch is installed everywhere, the same live view. On real nodes each process
//! has its own copy, as it must. In the simulator, where all processes share one address space,
//! a copy per process makes memory grow as N²: 8.4 GB at 16 384 processes, and 2^20 could not
//! run in 24 GB. A [`SharedViews`] table lets the processes of one simulation hold one copy per
//! state instead (copy on write: a process that installs a state nobody holds yet computes it
//! and enters it). It is a memo table, not a channel: what a process installs is what it
//! would have computed alone, and the protocol's decisions never read the table.

use crate::NodeId;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

/// The views of one state: the list, the live processes in list order, and the sorted view.
#[derive(Clone, Debug)]
pub(crate) struct Installed {
    /// `initial ++ appended`.
    pub list: Arc<[NodeId]>,
    /// The live processes in list order.
    pub order: Arc<[NodeId]>,
    /// The live processes, sorted.
    pub view: Arc<[NodeId]>,
}

impl Installed {
    /// Whether a process holds these views (not only the table: an entry may name one slice
    /// two or three times, as its list, order and view).
    fn held(&self) -> bool {
        let here = 1
            + usize::from(Arc::ptr_eq(&self.order, &self.list))
            + usize::from(Arc::ptr_eq(&self.order, &self.view));
        Arc::strong_count(&self.order) > here
    }

    /// The list `initial ++ appended`.
    pub fn list(initial: &Arc<[NodeId]>, appended: &[NodeId]) -> Arc<[NodeId]> {
        if appended.is_empty() {
            initial.clone()
        } else {
            initial.iter().chain(appended).copied().collect()
        }
    }

    /// The views of `list` (see [`Self::list`]; `appended`: whether it has joiners) without
    /// the positions `dead`.
    pub fn over(list: Arc<[NodeId]>, appended: bool, dead: &BTreeSet<u32>) -> Self {
        let order = if dead.range(..list.len() as u32).next().is_none() {
            list.clone()
        } else {
            without(&list, dead)
        };
        // The initial view is sorted, so without joiners the order is sorted too.
        let view = if !appended {
            order.clone()
        } else {
            let mut v = order.to_vec();
            v.sort_unstable();
            v.into()
        };
        Self { list, order, view }
    }
}

/// `list` without the `gone` positions (below `list.len()`), in list order, written straight
/// into its shared slice: the slice is allocated once at its exact size (an iterator of known
/// length), and the ids are read run by run between the gone positions, with no lookup per id
/// and no vector in between. Every process without a shared table does this once per epoch,
/// so a job of a thousand processes on two cores pays it a thousand times per stabilization.
pub(crate) fn without(list: &[NodeId], gone: &BTreeSet<u32>) -> Arc<[NodeId]> {
    let gone_here = gone.range(..list.len() as u32);
    let len = list.len() - gone_here.clone().count();
    let mut from = 0;
    let mut runs = gone_here
        .map(|&g| g as usize)
        .chain([list.len()])
        .flat_map(|end| {
            let run = &list[from.min(end)..end];
            from = end + 1;
            run
        })
        .copied();
    (0..len).map(|_| runs.next().unwrap_or(NodeId(0))).collect()
}

/// A state's name in the table: its dead positions and its appended processes (with the
/// initial view, which the table fixes, they determine the views).
type StateKey = (Vec<u32>, Vec<NodeId>);

#[derive(Debug, Default)]
struct Table {
    states: HashMap<StateKey, Installed>,
    /// Prune states nobody holds when the table grows past this.
    prune_above: usize,
}

/// One job's initial view and the views of the states its processes installed, shared by
/// processes that live in one address space (the simulator's). Cloning shares the table.
#[derive(Clone, Debug)]
pub struct SharedViews {
    initial: Arc<[NodeId]>,
    table: Arc<Mutex<Table>>,
}

impl SharedViews {
    /// The table of a job whose initial view is `view` (any order; it is sorted).
    pub fn new(mut view: Vec<NodeId>) -> Self {
        view.sort_unstable();
        view.dedup();
        Self {
            initial: view.into(),
            table: Arc::default(),
        }
    }

    /// The initial view, sorted.
    pub fn initial(&self) -> &Arc<[NodeId]> {
        &self.initial
    }

    /// The views of the state with `dead` positions and `appended` processes: the table's, or
    /// computed now and entered.
    pub(crate) fn get(&self, dead: &BTreeSet<u32>, appended: &[NodeId]) -> Installed {
        // A poisoned table still holds correct entries: each is written whole.
        let mut t = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (dead.iter().copied().collect(), appended.to_vec());
        if let Some(hit) = t.states.get(&key) {
            return hit.clone();
        }
        let list = Installed::list(&self.initial, appended);
        let made = Installed::over(list, !appended.is_empty(), dead);
        if t.states.len() >= t.prune_above {
            // States that only the table still holds are gone for good (every process moved on).
            t.states.retain(|_, s| s.held());
            t.prune_above = (2 * t.states.len()).max(16);
        }
        t.states.insert(key, made.clone());
        made
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[u64]) -> Vec<NodeId> {
        v.iter().map(|&i| NodeId(i)).collect()
    }

    #[test]
    fn without_removes_gone_positions_only() {
        let list = ids(&[1, 3, 5, 7, 9]);
        let gone = |g: &[u32]| g.iter().copied().collect::<BTreeSet<u32>>();
        let without = |g: &[u32]| without(&list, &gone(g)).to_vec();
        assert_eq!(without(&[]), list);
        assert_eq!(without(&[0, 4]), ids(&[3, 5, 7]));
        assert_eq!(without(&[1, 2]), ids(&[1, 7, 9]), "neighbors gone");
        assert_eq!(without(&[2, 7, 100]), ids(&[1, 3, 7, 9]));
        assert_eq!(without(&[0, 1, 2, 3, 4]), ids(&[]));
    }

    #[test]
    fn one_copy_per_state_equal_to_what_a_process_computes_alone() {
        let shared = SharedViews::new(ids(&[9, 1, 5, 3, 7]));
        assert_eq!(&shared.initial()[..], &ids(&[1, 3, 5, 7, 9])[..]);
        let set: BTreeSet<u32> = [1, 3].into();
        let a = shared.get(&set, &ids(&[4]));
        let b = shared.get(&set, &ids(&[4]));
        assert!(
            Arc::ptr_eq(&a.view, &b.view),
            "the second holder shares the first's"
        );
        let alone = Installed::over(Installed::list(shared.initial(), &ids(&[4])), true, &set);
        assert_eq!(a.list, alone.list);
        assert_eq!(a.order, alone.order);
        assert_eq!(&a.order[..], &ids(&[1, 5, 9, 4])[..], "list order");
        assert_eq!(&a.view[..], &ids(&[1, 4, 5, 9])[..], "sorted");
        // Another state, another entry.
        let c = shared.get(&[1].into(), &ids(&[4]));
        assert_eq!(&c.view[..], &ids(&[1, 4, 5, 7, 9])[..]);
        // Without joiners or deaths every view is the initial one itself.
        let none = shared.get(&BTreeSet::new(), &[]);
        assert!(Arc::ptr_eq(&none.view, shared.initial()));
    }

    #[test]
    fn states_nobody_holds_are_pruned() {
        let shared = SharedViews::new((0..64).map(NodeId).collect());
        let kept = shared.get(&[0].into(), &[]);
        for d in 1..40u32 {
            drop(shared.get(&[d].into(), &[]));
        }
        let t = shared.table.lock().unwrap();
        assert!(t.states.len() < 40, "{} states kept", t.states.len());
        assert!(
            t.states.contains_key(&(vec![0], vec![])),
            "a held state stays"
        );
        drop(kept);
    }
}
