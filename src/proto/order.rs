//! The Process Order table (Gendelman et al., 2000, sections 3, 4 and 6.2).
//!
//! Every process holds the same table: the job's processes in a fixed order, each one's POID
//! its position. Coordinators, children, ring neighbors, hypercube and mesh neighbors all come
//! from the formulas of [`crate::topology::order`] over it, so the table is the only thing a
//! change of membership has to tell anyone. It changes only by modifications (`POModify`)
//! that every process applies in the same total order ([`Mod`]), and the modifications since
//! the last clearing form the [`ModLog`], from which any process can rebuild the table as a
//! sender saw it.
//!
//! The order is the paper's sorted system ids for the initial processes, then join order: a
//! joiner takes the next POID, so it lands at the leaf level (Figure 8b) and no POID before it
//! moves.
//!
//! Two ways to follow a departure (section 6.2):
//! - *eager* (section 4, Figure 3c): the leaver's entry goes, every POID after it moves down
//!   one, and the hierarchy is recomputed at once (many processes change coordinator);
//! - *lazy update* (Figure 8): the entry stays as a ghost, the ghost's coordinator takes over
//!   broadcasting to its children ([`Tree`] splices ghosts out), and the hierarchy is
//!   recomputed only when the log is cleared ([`Mod::Clear`]). Few connections change until
//!   then, at the price of a less balanced tree.
//!
//! A process that suspects a failure splices the suspect out the same way before the table
//! says so (section 5.2.1: "propagates the broadcast to the children of the failed process").

use crate::topology::order::{Rooting, Structure};
use crate::{NodeId, Rank};

pub use self::wire_form::Mod;

/// Private, so that the archived form's resolver stays out of the public API.
mod wire_form {
    use super::*;

    /// A modification of the table (`POModify`), applied by every process in the total order
    /// of broadcasts.
    #[derive(
        Clone, Copy, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
    )]
    pub enum Mod {
        /// `SystemJoin`: the process takes the next POID. A recovered process joins again under
        /// its old id, as a new incarnation (its old entry left first).
        Join {
            /// The process.
            id: NodeId,
            /// Its incarnation: a restarted process is told from the one that joined before.
            inc: u64,
        },
        /// `SystemLeave`, or a failure reported to the coordinator (handled "in the same way as
        /// if the failed process willingly leaves", section 5.2.1).
        Leave(NodeId),
        /// The log is cleared: ghosts go and the hierarchy is recomputed (lazy update), and the
        /// logs restart.
        Clear,
    }
}

/// One entry of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The process.
    pub id: NodeId,
    /// Whether it is in the system (a ghost of the lazy update is not).
    pub live: bool,
    /// Its incarnation (0 for the initial processes).
    pub inc: u64,
}

/// The Process Order table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoTable {
    slots: Vec<Slot>,
    lazy: bool,
    live: usize,
}

impl PoTable {
    /// The initial table: `ids` sorted (the paper's sorted system ids), POIDs `0..n`.
    pub fn new(ids: impl IntoIterator<Item = NodeId>, lazy: bool) -> Self {
        let mut ids: Vec<NodeId> = ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        let live = ids.len();
        Self {
            slots: ids
                .into_iter()
                .map(|id| Slot {
                    id,
                    live: true,
                    inc: 0,
                })
                .collect(),
            lazy,
            live,
        }
    }

    /// A table from its entries, as a snapshot carries them (ghosts only in a lazy table).
    pub fn from_slots(slots: Vec<Slot>, lazy: bool) -> Self {
        let live = slots.iter().filter(|s| s.live).count();
        Self { slots, lazy, live }
    }

    /// Every entry, ghosts included, in POID order.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// Whether departures leave ghosts until the log is cleared (Figure 8).
    pub fn is_lazy(&self) -> bool {
        self.lazy
    }

    /// Apply a modification; whether the table changed (a join of a live id, a leave of an
    /// absent one and a clear without ghosts change nothing).
    pub fn apply(&mut self, m: &Mod) -> bool {
        match *m {
            Mod::Join { id, inc } => {
                if self.is_live(id) {
                    return false;
                }
                self.slots.push(Slot {
                    id,
                    live: true,
                    inc,
                });
                self.live += 1;
                true
            }
            Mod::Leave(id) => {
                let Some(at) = self.slots.iter().position(|s| s.live && s.id == id) else {
                    return false;
                };
                if self.lazy {
                    self.slots[at].live = false;
                } else {
                    self.slots.remove(at);
                }
                self.live -= 1;
                true
            }
            Mod::Clear => {
                let before = self.slots.len();
                self.slots.retain(|s| s.live);
                before != self.slots.len()
            }
        }
    }

    /// Positions, ghosts included (the `n` of the formulas).
    pub fn len(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Whether the table has no entry.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Live processes.
    pub fn live_len(&self) -> usize {
        self.live
    }

    /// The POID of live process `id`.
    pub fn poid(&self, id: NodeId) -> Option<Rank> {
        self.slots
            .iter()
            .position(|s| s.live && s.id == id)
            .map(|p| Rank(p as u32))
    }

    /// The entry of live process `id`.
    pub fn slot(&self, id: NodeId) -> Option<Slot> {
        self.slots.iter().copied().find(|s| s.live && s.id == id)
    }

    /// Whether `id` is a live process of the table.
    pub fn is_live(&self, id: NodeId) -> bool {
        self.slots.iter().any(|s| s.live && s.id == id)
    }

    /// The live processes in POID order.
    pub fn live_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.slots.iter().filter(|s| s.live).map(|s| s.id)
    }

    /// The live process after `id` on the ring of live processes in POID order, skipping those
    /// `down` says are gone (section 5.1: `(POID + 1) mod n`); `None` if it is alone.
    pub fn ring_succ(&self, id: NodeId, down: impl Fn(NodeId) -> bool) -> Option<NodeId> {
        self.ring_step(id, down, false)
    }

    /// The live process before `id` on that ring: the one whose heartbeats `id` watches.
    pub fn ring_pred(&self, id: NodeId, down: impl Fn(NodeId) -> bool) -> Option<NodeId> {
        self.ring_step(id, down, true)
    }

    fn ring_step(&self, id: NodeId, down: impl Fn(NodeId) -> bool, back: bool) -> Option<NodeId> {
        let at = self.poid(id)?.0 as usize;
        let n = self.slots.len();
        (1..n)
            .map(|d| if back { (at + n - d) % n } else { (at + d) % n })
            .map(|i| self.slots[i])
            .find(|s| s.live && !down(s.id))
            .map(|s| s.id)
    }

    /// `id`'s neighbors in `structure` laid over the live processes (ghosts do not count: a
    /// mesh or a hypercube for an application is the current one).
    pub fn neighbors(&self, id: NodeId, structure: Structure) -> Vec<NodeId> {
        let live: Vec<NodeId> = self.live_ids().collect();
        let Some(at) = live.iter().position(|&x| x == id) else {
            return Vec::new();
        };
        structure
            .neighbors(Rank(at as u32), live.len() as u32)
            .into_iter()
            .map(|r| live[r.0 as usize])
            .collect()
    }

    /// The coordination hierarchy (or any structure's spanning tree) over this table, rooted
    /// at POID 0, with the processes `down` says are gone spliced out.
    pub fn tree<F: Fn(NodeId) -> bool>(&self, structure: Structure, down: F) -> Tree<'_, F> {
        Tree {
            table: self,
            structure,
            rooting: Rooting::Rotate,
            root: Rank(0),
            down,
        }
    }

    /// The same structure rooted at live process `sender` instead (section 6.1's broadcast
    /// without total order), re-rooted by `rooting`.
    pub fn tree_rooted_at<F: Fn(NodeId) -> bool>(
        &self,
        structure: Structure,
        rooting: Rooting,
        sender: NodeId,
        down: F,
    ) -> Option<Tree<'_, F>> {
        let root = self.poid(sender)?;
        Some(Tree {
            table: self,
            structure,
            rooting,
            root,
            down,
        })
    }
}

/// A spanning tree over a table, as one process computes it: the structure's formula over
/// POIDs (re-rooted at `root`), with ghosts and suspects spliced out. A gone process's live
/// descendants hang from its nearest live ancestor; if the root itself is gone, the first live
/// process in the rooted order (the lowest live POID, for the coordinator tree) takes its place
/// and adopts the rest (section 5.2.2).
pub struct Tree<'a, F> {
    table: &'a PoTable,
    structure: Structure,
    rooting: Rooting,
    root: Rank,
    down: F,
}

impl<F: Fn(NodeId) -> bool> Tree<'_, F> {
    fn n(&self) -> u32 {
        self.table.len()
    }

    fn alive(&self, pos: Rank) -> bool {
        let s = self.table.slots[pos.0 as usize];
        s.live && !(self.down)(s.id)
    }

    fn id(&self, pos: Rank) -> NodeId {
        self.table.slots[pos.0 as usize].id
    }

    fn formula_parent(&self, pos: Rank) -> Option<Rank> {
        let n = self.n();
        let place = self.rooting.place(pos, self.root, n);
        self.structure
            .coordinator(place)
            .map(|p| self.rooting.poid(p, self.root, n))
    }

    fn formula_children(&self, pos: Rank) -> Vec<Rank> {
        let n = self.n();
        let place = self.rooting.place(pos, self.root, n);
        self.structure
            .coordinated(place, n)
            .into_iter()
            .map(|c| self.rooting.poid(c, self.root, n))
            .collect()
    }

    /// The live processes below `pos` whose path up to it crosses only gone processes.
    fn through(&self, pos: Rank, out: &mut Vec<Rank>) {
        for c in self.formula_children(pos) {
            if self.alive(c) {
                out.push(c);
            } else {
                self.through(c, out);
            }
        }
    }

    fn root_pos(&self) -> Option<Rank> {
        if self.table.is_empty() {
            return None;
        }
        if self.alive(self.root) {
            return Some(self.root);
        }
        let n = self.n();
        (0..n)
            .map(|place| self.rooting.poid(Rank(place), self.root, n))
            .find(|&p| self.alive(p))
    }

    /// The effective root: the nominal one, or the first live process after it.
    pub fn root(&self) -> Option<NodeId> {
        self.root_pos().map(|p| self.id(p))
    }

    /// `id`'s coordinator (`None` for the root, and for a process not live in the tree).
    pub fn parent(&self, id: NodeId) -> Option<NodeId> {
        let pos = self.table.poid(id).filter(|&p| self.alive(p))?;
        let root = self.root_pos()?;
        if pos == root {
            return None;
        }
        let mut up = self.formula_parent(pos);
        while let Some(p) = up {
            if self.alive(p) {
                return Some(self.id(p));
            }
            up = self.formula_parent(p);
        }
        Some(self.id(root))
    }

    /// The processes `id` coordinates (forwards broadcasts to), in POID order of discovery.
    pub fn children(&self, id: NodeId) -> Vec<NodeId> {
        let Some(pos) = self.table.poid(id).filter(|&p| self.alive(p)) else {
            return Vec::new();
        };
        let mut kids = Vec::new();
        self.through(pos, &mut kids);
        if Some(pos) == self.root_pos() && pos != self.root {
            // The nominal root is gone: adopt everything hanging below it, except oneself.
            let mut orphans = Vec::new();
            self.through(self.root, &mut orphans);
            kids.extend(orphans.into_iter().filter(|&o| o != pos));
        }
        kids.into_iter().map(|p| self.id(p)).collect()
    }

    /// `id`'s gone ancestors between it and its coordinator, nearest first: whom it stops
    /// waiting for.
    pub fn gone_above(&self, id: NodeId) -> Vec<NodeId> {
        let Some(pos) = self.table.poid(id) else {
            return Vec::new();
        };
        let mut gone = Vec::new();
        let mut up = self.formula_parent(pos);
        while let Some(p) = up {
            if self.alive(p) {
                break;
            }
            gone.push(self.id(p));
            up = self.formula_parent(p);
        }
        gone
    }
}

/// The ModLog: the modifications since the table was last cleared, over the table as it was
/// then. A broadcast names the log it was sent under by its [`Stamp`], and a receiver rebuilds
/// the table the sender used from it (section 4, proof point 1; section 6.1). The previous
/// generation is kept too, so that a stamp from just before a clearing still resolves.
#[derive(Clone, Debug)]
pub struct ModLog {
    gen: u64,
    base: PoTable,
    mods: Vec<Mod>,
    current: PoTable,
    prev: Option<(u64, PoTable, Vec<Mod>)>,
}

/// Which table a sender used: the log's generation (clearings so far) and its length.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
pub struct Stamp {
    /// Clearings so far.
    pub gen: u64,
    /// Modifications since the last one.
    pub len: u32,
}

impl ModLog {
    /// A log over `table`, at generation `gen`.
    pub fn new(table: PoTable, gen: u64) -> Self {
        Self {
            gen,
            base: table.clone(),
            mods: Vec::new(),
            current: table,
            prev: None,
        }
    }

    /// A log rebuilt from a snapshot: its base table and modifications.
    pub fn from_parts(base: PoTable, mods: Vec<Mod>, gen: u64) -> Self {
        let mut current = base.clone();
        for m in &mods {
            current.apply(m);
        }
        Self {
            gen,
            base,
            mods,
            current,
            prev: None,
        }
    }

    /// The table after every modification.
    pub fn table(&self) -> &PoTable {
        &self.current
    }

    /// The table at the last clearing.
    pub fn base(&self) -> &PoTable {
        &self.base
    }

    /// The modifications since the last clearing.
    pub fn mods(&self) -> &[Mod] {
        &self.mods
    }

    /// The current stamp.
    pub fn stamp(&self) -> Stamp {
        Stamp {
            gen: self.gen,
            len: self.mods.len() as u32,
        }
    }

    /// Record and apply a modification; a clearing starts a new generation. Whether the table
    /// changed.
    pub fn push(&mut self, m: Mod) -> bool {
        let changed = self.current.apply(&m);
        if m == Mod::Clear {
            let old_base = std::mem::replace(&mut self.base, self.current.clone());
            let old_mods = std::mem::take(&mut self.mods);
            self.prev = Some((self.gen, old_base, old_mods));
            self.gen += 1;
        } else {
            self.mods.push(m);
        }
        changed
    }

    /// The table a sender with `stamp` used, if this log still holds it; `None` if the stamp
    /// is ahead of this log (wait for the modifications) or from a generation already dropped.
    pub fn table_at(&self, stamp: Stamp) -> Option<PoTable> {
        let (base, mods) = if stamp.gen == self.gen {
            (&self.base, &self.mods)
        } else {
            match &self.prev {
                Some((g, b, m)) if *g == stamp.gen => (b, m),
                _ => return None,
            }
        };
        let mods = mods.get(..stamp.len as usize)?;
        let mut t = base.clone();
        for m in mods {
            t.apply(m);
        }
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ids(v: &[u64]) -> Vec<NodeId> {
        v.iter().map(|&i| NodeId(i)).collect()
    }

    fn none(_: NodeId) -> bool {
        false
    }

    #[test]
    fn figure_2_poids_follow_sorted_system_ids() {
        // P0 (20), P2 (24), P1 (37), P3 (44): sorted by system id.
        let t = PoTable::new(ids(&[37, 20, 44, 24]), false);
        let order: Vec<u64> = t.live_ids().map(|i| i.0).collect();
        assert_eq!(order, vec![20, 24, 37, 44]);
        assert_eq!(t.poid(NodeId(37)), Some(Rank(2)));
    }

    #[test]
    fn figure_3c_eager_departure_rearranges_the_hierarchy() {
        // K = 3 over a..i (0..9); b (1) leaves: everyone after it moves down one POID.
        let mut t = PoTable::new(ids(&[0, 1, 2, 3, 4, 5, 6, 7, 8]), false);
        let k3 = Structure::Tree { k: 3 };
        assert_eq!(t.tree(k3, none).children(NodeId(1)), ids(&[3, 4, 5]));
        assert!(t.apply(&Mod::Leave(NodeId(1))));
        let tree = t.tree(k3, none);
        assert_eq!(tree.children(NodeId(0)), ids(&[2, 3]));
        assert_eq!(tree.children(NodeId(2)), ids(&[4, 5, 6]));
        assert_eq!(tree.children(NodeId(3)), ids(&[7, 8]));
    }

    #[test]
    fn figure_8_lazy_update_lets_the_parent_adopt_until_the_log_is_cleared() {
        // K = 2 (POID div 2): 0 → 1; 1 → 2, 3; 2 → 4, 5; 3 → 6.
        let k2 = Structure::Tree { k: 2 };
        let mut t = PoTable::new(ids(&[0, 1, 2, 3, 4, 5, 6]), true);
        // 1 leaves: its children 2, 3 are adopted by 0, nobody else moves.
        t.apply(&Mod::Leave(NodeId(1)));
        let tree = t.tree(k2, none);
        assert_eq!(tree.children(NodeId(0)), ids(&[2, 3]));
        assert_eq!(tree.parent(NodeId(3)), Some(NodeId(0)));
        assert_eq!(tree.children(NodeId(2)), ids(&[4, 5]));
        // A joiner lands at the leaf level, below POID 3 (7 div 2 = 3).
        t.apply(&Mod::Join {
            id: NodeId(9),
            inc: 1,
        });
        assert_eq!(t.tree(k2, none).parent(NodeId(9)), Some(NodeId(3)));
        // Clearing recomputes over 0, 2, 3, 4, 5, 6, 9: 0 → 2; 2 → 3, 4; 3 → 5, 6; 4 → 9.
        assert!(t.apply(&Mod::Clear));
        let tree = t.tree(k2, none);
        assert_eq!(tree.children(NodeId(0)), ids(&[2]));
        assert_eq!(tree.children(NodeId(3)), ids(&[5, 6]));
        assert_eq!(tree.children(NodeId(4)), ids(&[9]));
        assert_eq!(t.len(), 7);
    }

    #[test]
    fn a_gone_root_is_replaced_by_the_lowest_live_poid_which_adopts_the_rest() {
        let k2 = Structure::Tree { k: 2 };
        let t = PoTable::new(ids(&[0, 1, 2, 3, 4, 5, 6]), false);
        let down = |i: NodeId| i == NodeId(0);
        let tree = t.tree(k2, down);
        assert_eq!(tree.root(), Some(NodeId(1)));
        assert_eq!(tree.children(NodeId(1)), ids(&[2, 3]));
        assert_eq!(tree.parent(NodeId(2)), Some(NodeId(1)));
        assert_eq!(tree.gone_above(NodeId(1)), ids(&[0]));
        // With K = 3 the root coordinates 1 and 2; 2 is adopted by the new root 1.
        let tree = t.tree(Structure::Tree { k: 3 }, down);
        assert_eq!(tree.children(NodeId(1)), ids(&[3, 4, 5, 2]));
        assert_eq!(tree.parent(NodeId(2)), Some(NodeId(1)));
        assert_eq!(tree.parent(NodeId(6)), Some(NodeId(2)));
    }

    #[test]
    fn a_suspect_is_spliced_out_section_5_2_1() {
        // "if node D failed and B tried to send it a broadcast, B would ... propagate the
        // broadcast to Y and to M" (D's children).
        let k2 = Structure::Tree { k: 2 };
        let t = PoTable::new(ids(&[0, 1, 2, 3, 4, 5, 6, 7, 8]), false);
        let tree = t.tree(k2, |i| i == NodeId(3));
        assert_eq!(tree.children(NodeId(1)), ids(&[2, 6, 7]));
        assert_eq!(tree.gone_above(NodeId(7)), ids(&[3]));
    }

    #[test]
    fn the_ring_skips_ghosts_and_suspects() {
        let mut t = PoTable::new(ids(&[0, 1, 2, 3]), true);
        t.apply(&Mod::Leave(NodeId(1)));
        assert_eq!(t.ring_succ(NodeId(0), none), Some(NodeId(2)));
        assert_eq!(t.ring_pred(NodeId(0), none), Some(NodeId(3)));
        assert_eq!(t.ring_succ(NodeId(3), |i| i == NodeId(0)), Some(NodeId(2)));
        let alone = PoTable::new(ids(&[5]), false);
        assert_eq!(alone.ring_succ(NodeId(5), none), None);
    }

    #[test]
    fn a_sender_rooted_tree_by_swap_keeps_the_other_places() {
        let k2 = Structure::Tree { k: 2 };
        let t = PoTable::new(ids(&[0, 1, 2, 3, 4, 5]), false);
        let tree = t
            .tree_rooted_at(k2, Rooting::Swap, NodeId(3), none)
            .unwrap();
        assert_eq!(tree.root(), Some(NodeId(3)));
        // 3 sits at place 0, 0 at place 3: 3 → 1; 1 → 2, 0; 2 → 4, 5.
        assert_eq!(tree.children(NodeId(3)), ids(&[1]));
        assert_eq!(tree.children(NodeId(1)), ids(&[2, 0]));
        assert_eq!(tree.children(NodeId(2)), ids(&[4, 5]));
    }

    #[test]
    fn the_modlog_rebuilds_older_tables_across_one_clearing() {
        let mut log = ModLog::new(PoTable::new(ids(&[0, 1, 2]), true), 0);
        let s0 = log.stamp();
        log.push(Mod::Join {
            id: NodeId(7),
            inc: 1,
        });
        let s1 = log.stamp();
        log.push(Mod::Leave(NodeId(1)));
        log.push(Mod::Clear);
        assert_eq!(log.stamp(), Stamp { gen: 1, len: 0 });
        assert_eq!(log.table_at(s0).unwrap().live_len(), 3);
        assert!(log.table_at(s1).unwrap().is_live(NodeId(7)));
        assert_eq!(log.table().len(), 3);
        log.push(Mod::Clear);
        assert_eq!(log.table_at(s0), None, "two clearings back is gone");
        assert_eq!(
            log.table_at(Stamp { gen: 2, len: 5 }),
            None,
            "ahead of the log"
        );
    }

    fn table_and_down() -> impl Strategy<Value = (PoTable, Vec<bool>, Structure)> {
        (1usize..80, any::<bool>(), any::<u64>(), 0u32..5, 2u32..6).prop_map(
            |(n, lazy, bits, which, k)| {
                let mut t = PoTable::new((0..n as u64).map(NodeId), lazy);
                // Leave some (ghosts when lazy), suspect some others.
                let mut down = vec![false; n];
                for (i, d) in down.iter_mut().enumerate() {
                    match (bits >> (i % 64)) & 3 {
                        0 if i % 3 == 0 => {
                            t.apply(&Mod::Leave(NodeId(i as u64)));
                        }
                        1 if i % 5 == 1 => *d = true,
                        _ => {}
                    }
                }
                let s = match which {
                    0 => Structure::Tree { k },
                    1 => Structure::Ring,
                    2 => Structure::Hypercube,
                    3 => Structure::Complete { k },
                    _ => Structure::Mesh { cols: k },
                };
                (t, down, s)
            },
        )
    }

    proptest! {
        /// Whatever is gone, the live, unsuspected processes form one tree: every one but the
        /// root has a parent that lists it as a child, and each is reached exactly once.
        #[test]
        fn splicing_leaves_a_spanning_tree((t, down, s) in table_and_down()) {
            let gone = |i: NodeId| down[i.0 as usize];
            let tree = t.tree(s, gone);
            let alive: Vec<NodeId> = t.live_ids().filter(|&i| !gone(i)).collect();
            let Some(root) = tree.root() else {
                prop_assert!(alive.is_empty());
                return Ok(());
            };
            prop_assert_eq!(root, alive[0], "the lowest live POID is the root");
            let mut reached = std::collections::BTreeSet::new();
            reached.insert(root);
            let mut frontier = vec![root];
            while let Some(x) = frontier.pop() {
                for c in tree.children(x) {
                    prop_assert_eq!(tree.parent(c), Some(x));
                    prop_assert!(reached.insert(c), "{:?} reached twice", c);
                    frontier.push(c);
                }
            }
            prop_assert_eq!(reached.len(), alive.len());
        }
    }
}
