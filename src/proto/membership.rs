//! Radix-tree membership with tree stabilization (Varma et al., ICS'06, sections 3.1–3.6).
//!
//! Every process holds the view (the sorted list of live ids) and the radix tree over it, and
//! computes its parent and children locally. On a failure the detector tells the root
//! (`NodeFailure`, acknowledged with `FailureDetAck`); the root recalculates and sends
//! `FailedNode(set)` to its children, each process recalculates and forwards it down; leaves
//! answer `FailureAck`, inner processes once all their children have, and the tree is
//! stabilized when the root has every child's ack. A root failure goes to the next live process
//! of the list (`RootFailure`), which becomes the root and sends `RootDead` down instead.
//! Failures found while a stabilization is in flight start a new epoch with the larger set.
//!
//! Departures from the paper, each deliberate:
//! - The tree of an epoch is a function of the initial view and the *set* of failed ids,
//!   applied in increasing id order (the paper patches in arrival order). Every process then
//!   computes the same tree whatever order it heard of the failures in, and one that missed an
//!   epoch catches up from the cumulative set.
//! - `TreeMode::Rebalance` recomputes the balanced radix tree over the live view instead of
//!   patching (Process Order's lazy update), so trees do not degrade after many failures.
//! - Failures are detected by the `HowAreYou` probe (section 2.2: a process asks its tree
//!   neighbors every `period` and suspects one that has not answered `IAmFine` within
//!   `timeout`) and by [`Protocol::on_suspect`] (a lost connection on the engine, a failed send
//!   in the simulator). Joins (`NewNode`) and recoveries (`NodeAlive`) are not implemented yet.

use super::{Event, Outbox, Protocol, Time, TimerId};
use crate::topology::radix::RadixTree;
use crate::topology::recalc::{self, Neighbors};
use crate::{NodeId, Rank};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// How the tree follows failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum TreeMode {
    /// The paper's local recalculation: a failed node's children move to its parent.
    Patch,
    /// Recompute the balanced radix tree over the live view.
    Rebalance,
}

/// Timer of the probe rounds.
pub const PROBE_TIMER: TimerId = TimerId(10);
/// Timer of the probe deadline.
pub const TIMEOUT_TIMER: TimerId = TimerId(11);

/// Messages of the membership protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberMsg {
    /// Failure detector probe.
    HowAreYou {
        /// Probe number.
        seq: u64,
    },
    /// Answer to a probe.
    IAmFine {
        /// The probe's number.
        seq: u64,
    },
    /// Detector → root: `failed` stopped answering.
    NodeFailure {
        /// The failed process.
        failed: NodeId,
    },
    /// Root → detector: report received.
    FailureDetAck {
        /// The failed process reported.
        failed: NodeId,
    },
    /// Detector → next live process: the root failed; you are the root now.
    RootFailure {
        /// The failed root.
        failed: NodeId,
    },
    /// Down the tree: recalculate without the `failed` set.
    FailedNode {
        /// Stabilization epoch.
        epoch: u64,
        /// Every failed process so far.
        failed: Vec<NodeId>,
        /// The root of this epoch.
        root: NodeId,
    },
    /// Down the tree after a root failure (carries the new root).
    RootDead {
        /// Stabilization epoch.
        epoch: u64,
        /// Every failed process so far.
        failed: Vec<NodeId>,
        /// The new root.
        root: NodeId,
    },
    /// Up the tree: my subtree is stable in `epoch`.
    FailureAck {
        /// Stabilization epoch.
        epoch: u64,
    },
}

/// What membership reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberEvent {
    /// This process newly suspects `peer` (detection).
    Detected {
        /// The suspected process.
        peer: NodeId,
        /// When (the driver's clock).
        at: Time,
    },
    /// This process installed a new view.
    ViewChanged {
        /// Epoch.
        epoch: u64,
        /// Live ids, sorted.
        view: Arc<[NodeId]>,
        /// When.
        at: Time,
    },
    /// At the root: every child acknowledged `epoch`.
    Stabilized {
        /// Epoch.
        epoch: u64,
        /// When.
        at: Time,
    },
}

/// A tree over node ids: parent and ordered children of every member.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdTree {
    root: Option<NodeId>,
    parent: HashMap<NodeId, NodeId>,
    children: HashMap<NodeId, Vec<NodeId>>,
}

impl IdTree {
    /// The radix tree of radix `a` over a sorted view.
    pub fn radix(view: &[NodeId], a: u32) -> IdTree {
        let t = RadixTree::new(view.len() as u32, a).expect("radix checked at construction");
        let mut tree = IdTree {
            root: view.first().copied(),
            ..IdTree::default()
        };
        for (i, &id) in view.iter().enumerate() {
            let kids: Vec<NodeId> = t
                .children(Rank(i as u32))
                .map(|r| view[r.0 as usize])
                .collect();
            for &k in &kids {
                tree.parent.insert(k, id);
            }
            tree.children.insert(id, kids);
        }
        tree
    }

    /// The whole tree over `initial` after patching out `failed` in increasing id order
    /// ([`IdTree::remove`] applied globally; the oracle of the local recalculation).
    pub fn patched(initial: &[NodeId], failed: &BTreeSet<NodeId>, a: u32) -> IdTree {
        let mut t = IdTree::radix(initial, a);
        let mut gone = BTreeSet::new();
        for &d in failed {
            gone.insert(d);
            let next = initial.iter().copied().find(|id| !gone.contains(id));
            t.remove(d, next);
        }
        t
    }

    /// The root.
    pub fn root(&self) -> Option<NodeId> {
        self.root
    }

    /// Parent of `id`.
    pub fn parent(&self, id: NodeId) -> Option<NodeId> {
        self.parent.get(&id).copied()
    }

    /// Children of `id`.
    pub fn children(&self, id: NodeId) -> &[NodeId] {
        self.children.get(&id).map_or(&[], |v| v.as_slice())
    }

    /// Number of levels.
    pub fn height(&self) -> u32 {
        fn h(t: &IdTree, n: NodeId) -> u32 {
            1 + t.children(n).iter().map(|&c| h(t, c)).max().unwrap_or(0)
        }
        self.root.map_or(0, |r| h(self, r))
    }

    /// Section 3.4's local recalculation for a failed `d`: its children get its parent, are
    /// merged into the parent's children in `d`'s place, and `d` disappears. A failed root is
    /// replaced by `next_root` (the next live id of the list), which adopts the other children.
    pub fn remove(&mut self, d: NodeId, next_root: Option<NodeId>) {
        let kids = self.children.remove(&d).unwrap_or_default();
        match self.parent.remove(&d) {
            Some(p) => {
                let siblings = self.children.entry(p).or_default();
                match siblings.iter().position(|&s| s == d) {
                    Some(at) => {
                        siblings.splice(at..=at, kids.iter().copied());
                    }
                    None => siblings.extend(kids.iter().copied()),
                }
                for &k in &kids {
                    self.parent.insert(k, p);
                }
            }
            None => {
                // The root failed.
                let Some(r) = next_root else {
                    self.root = None;
                    return;
                };
                if let Some(old) = self.parent.remove(&r) {
                    if let Some(v) = self.children.get_mut(&old) {
                        v.retain(|&x| x != r);
                    }
                }
                let adopt: Vec<NodeId> = kids.into_iter().filter(|&k| k != r).collect();
                for &k in &adopt {
                    self.parent.insert(k, r);
                }
                let mine = self.children.entry(r).or_default();
                let mut merged = adopt;
                merged.append(mine);
                *mine = merged;
                self.root = Some(r);
            }
        }
    }
}

/// The sorted `list` without the `gone` ids: the runs between them copied whole, so a view of
/// thousands costs a memcpy, not a set lookup per id.
fn without(list: &[NodeId], gone: &BTreeSet<NodeId>) -> Vec<NodeId> {
    let mut out = Vec::with_capacity(list.len());
    let mut from = 0;
    for g in gone {
        if let Ok(at) = list[from..].binary_search(g) {
            out.extend_from_slice(&list[from..from + at]);
            from += at + 1;
        }
    }
    out.extend_from_slice(&list[from..]);
    out
}

/// Settings.
#[derive(Clone, Copy, Debug)]
pub struct MembershipConfig {
    /// Children per node, a power of two.
    pub radix: u32,
    /// Patch (paper) or rebalance.
    pub mode: TreeMode,
    /// `HowAreYou` probing of tree neighbors: (period, timeout); `None` relies on
    /// `on_suspect` alone.
    pub probe: Option<(std::time::Duration, std::time::Duration)>,
    /// At start, also greet (`HowAreYou`, no answer awaited) the processes a single failure
    /// would make tree neighbors ([`recalc::standby`]): on a connection-oriented transport
    /// their connections then exist before a stabilization needs them.
    pub warm: bool,
}

/// One process's membership state.
#[derive(Debug)]
pub struct Membership {
    me: NodeId,
    cfg: MembershipConfig,
    initial: Vec<NodeId>,
    failed: BTreeSet<NodeId>,
    suspected: BTreeSet<NodeId>,
    /// Suspects this process reported to a root (reported again after a root change).
    reported: BTreeSet<NodeId>,
    /// The installed view, shared with the events that announce it.
    view: Arc<[NodeId]>,
    /// This process's root, parent and children in the installed tree.
    nb: Neighbors,
    epoch: u64,
    waiting: BTreeSet<NodeId>,
    /// The driver's clock at the current call (events carry it).
    now: Time,
    version: u64,
    probe_seq: u64,
    /// Probes awaiting an answer: peer → (seq, deadline).
    outstanding: HashMap<NodeId, (u64, Time)>,
}

impl Membership {
    /// A member of the initial `view` (any order; it is sorted).
    pub fn new(me: NodeId, mut view: Vec<NodeId>, cfg: MembershipConfig) -> Self {
        view.sort_unstable();
        view.dedup();
        let nb = recalc::rebalanced(&view, me, cfg.radix).unwrap_or(Neighbors {
            root: view.first().copied().unwrap_or(me),
            parent: None,
            children: Vec::new(),
        });
        Self {
            me,
            cfg,
            view: view.clone().into(),
            initial: view,
            failed: BTreeSet::new(),
            suspected: BTreeSet::new(),
            reported: BTreeSet::new(),
            nb,
            epoch: 0,
            waiting: BTreeSet::new(),
            now: Time::ZERO,
            version: 0,
            probe_seq: 0,
            outstanding: HashMap::new(),
        }
    }

    /// The installed view.
    pub fn view(&self) -> &[NodeId] {
        &self.view
    }

    /// This process's root, parent and children in the installed tree.
    pub fn neighbors(&self) -> &Neighbors {
        &self.nb
    }

    /// The installed epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether this process is waiting for acknowledgments.
    pub fn waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// The view and this process's neighbors without the `failed` set, computed locally
    /// (section 3.4; see [`recalc`]). A process that others declared failed keeps no
    /// neighbors: it is out of the view.
    fn tree_without(&self, failed: &BTreeSet<NodeId>) -> (Vec<NodeId>, Neighbors) {
        let view = without(&self.initial, failed);
        let a = self.cfg.radix;
        let nb = match self.cfg.mode {
            TreeMode::Rebalance => recalc::rebalanced(&view, self.me, a),
            TreeMode::Patch => recalc::patched(&self.initial, failed, self.me, a),
        };
        let nb = nb.unwrap_or(Neighbors {
            root: view.first().copied().unwrap_or(self.me),
            parent: None,
            children: Vec::new(),
        });
        (view, nb)
    }

    /// Install epoch `epoch` without `failed`, forward it down, and wait for the acks.
    fn install<M: From<MemberMsg>>(
        &mut self,
        epoch: u64,
        failed: BTreeSet<NodeId>,
        root_changed: bool,
        out: &mut Outbox<M>,
    ) {
        let (view, nb) = self.tree_without(&failed);
        self.epoch = epoch;
        self.failed = failed;
        self.view = view.into();
        self.nb = nb;
        self.version += 1;
        out.report(Event::Member(MemberEvent::ViewChanged {
            epoch,
            view: self.view.clone(),
            at: self.now,
        }));
        let kids: Vec<NodeId> = self.nb.children.clone();
        let set: Vec<NodeId> = self.failed.iter().copied().collect();
        let root = self.nb.root;
        for &k in &kids {
            let msg = if root_changed {
                MemberMsg::RootDead {
                    epoch,
                    failed: set.clone(),
                    root,
                }
            } else {
                MemberMsg::FailedNode {
                    epoch,
                    failed: set.clone(),
                    root,
                }
            };
            out.send(k, msg);
        }
        self.waiting = kids.into_iter().collect();
        // Failures this process reported may have been lost with an old root, and a suspect
        // may have just become its neighbor: report whatever the new epoch still lacks.
        if root != self.me {
            let pending: Vec<NodeId> = self
                .suspected
                .iter()
                .copied()
                .filter(|s| !self.failed.contains(s) && *s != root)
                .filter(|s| {
                    self.reported.contains(s)
                        || self.nb.parent == Some(*s)
                        || self.nb.children.contains(s)
                })
                .collect();
            for s in pending {
                self.reported.insert(s);
                out.send(root, MemberMsg::NodeFailure { failed: s });
            }
        }
        self.maybe_ack(out);
    }

    /// All children acknowledged: tell the parent, or, at the root, report stabilization.
    fn maybe_ack<M: From<MemberMsg>>(&mut self, out: &mut Outbox<M>) {
        if !self.waiting.is_empty() {
            return;
        }
        match self.nb.parent {
            Some(p) => out.send(p, MemberMsg::FailureAck { epoch: self.epoch }),
            None if self.epoch > 0 => out.report(Event::Member(MemberEvent::Stabilized {
                epoch: self.epoch,
                at: self.now,
            })),
            None => {}
        }
    }

    /// The root starts a new epoch with `d` added to the failed set, together with every
    /// process it suspects itself (a root that took over because all ids before it seemed dead
    /// must leave them out of the tree too).
    fn root_handles<M: From<MemberMsg>>(
        &mut self,
        d: NodeId,
        root_changed: bool,
        out: &mut Outbox<M>,
    ) {
        if d == self.me {
            return;
        }
        self.suspected.insert(d);
        let mut failed = self.failed.clone();
        failed.extend(self.suspected.iter().copied().filter(|&s| s != self.me));
        if failed.len() == self.failed.len() {
            return; // nothing new
        }
        self.install(self.epoch + 1, failed, root_changed, out);
    }

    /// The live process after `d` in the list that this process believes alive.
    fn next_live(&self, d: NodeId) -> Option<NodeId> {
        self.view
            .iter()
            .copied()
            .find(|&id| id != d && !self.failed.contains(&id) && !self.suspected.contains(&id))
    }

    /// A suspected failure of `peer` (detection).
    pub fn suspect<M: From<MemberMsg>>(&mut self, peer: NodeId, out: &mut Outbox<M>) {
        if self.failed.contains(&peer) || self.view.binary_search(&peer).is_err() {
            return;
        }
        self.outstanding.remove(&peer);
        // A child we wait for is gone: stop waiting; the new epoch will come down.
        self.waiting.remove(&peer);
        if !self.suspected.insert(peer) {
            return; // already handled (a second connection to the same peer, say)
        }
        out.report(Event::Member(MemberEvent::Detected { peer, at: self.now }));
        let root = self.nb.root;
        let neighbor = self.nb.parent == Some(peer) || self.nb.children.contains(&peer);
        if root == peer {
            match self.next_live(peer) {
                Some(r) if r == self.me => self.root_handles(peer, true, out),
                Some(r) => out.send(r, MemberMsg::RootFailure { failed: peer }),
                None => {}
            }
        } else if root == self.me {
            self.root_handles(peer, false, out);
        } else if neighbor {
            // The paper's detectors are a process's tree neighbors; others that lost a
            // connection to `peer` leave the report to them (and make it themselves if `peer`
            // becomes their neighbor, see `install`), so one death is not reported N times.
            self.reported.insert(peer);
            out.send(root, MemberMsg::NodeFailure { failed: peer });
        }
    }

    /// Handle a message.
    pub fn handle<M: From<MemberMsg>>(
        &mut self,
        from: NodeId,
        msg: MemberMsg,
        out: &mut Outbox<M>,
    ) {
        match msg {
            MemberMsg::NodeFailure { failed } => {
                out.send(from, MemberMsg::FailureDetAck { failed });
                if Some(self.nb.root) == Some(self.me) {
                    self.root_handles(failed, false, out);
                } else if let Some(r) = Some(self.nb.root) {
                    // Not (or no longer) the root: pass it on.
                    out.send(r, MemberMsg::NodeFailure { failed });
                }
            }
            MemberMsg::RootFailure { failed } => {
                out.send(from, MemberMsg::FailureDetAck { failed });
                self.suspected.insert(failed);
                if Some(self.nb.root) == Some(failed) {
                    self.root_handles(failed, true, out);
                } else if Some(self.nb.root) == Some(self.me) {
                    // Already root (an earlier report): treat it as a node failure.
                    self.root_handles(failed, false, out);
                }
            }
            MemberMsg::FailedNode { epoch, failed, .. }
            | MemberMsg::RootDead { epoch, failed, .. } => {
                if epoch <= self.epoch {
                    return; // old or duplicate
                }
                let root_changed = failed.iter().any(|&f| Some(self.nb.root) == Some(f));
                self.install(epoch, failed.into_iter().collect(), root_changed, out);
            }
            MemberMsg::FailureAck { epoch } => {
                if epoch == self.epoch && self.waiting.remove(&from) {
                    self.maybe_ack(out);
                }
            }
            MemberMsg::FailureDetAck { .. } => {}
            MemberMsg::HowAreYou { seq } => out.send(from, MemberMsg::IAmFine { seq }),
            MemberMsg::IAmFine { seq } => {
                if self.outstanding.get(&from).is_some_and(|&(s, _)| s == seq) {
                    self.outstanding.remove(&from);
                }
            }
        }
    }

    /// A probe round: ask every tree neighbor that has no probe pending.
    fn probe<M: From<MemberMsg>>(&mut self, now: Time, out: &mut Outbox<M>) {
        let Some((period, timeout)) = self.cfg.probe else {
            return;
        };
        let neighbors: Vec<NodeId> = self
            .nb
            .parent
            .into_iter()
            .chain(self.nb.children.iter().copied())
            .collect();
        for p in neighbors {
            if self.outstanding.contains_key(&p) || self.suspected.contains(&p) {
                continue;
            }
            self.probe_seq += 1;
            self.outstanding.insert(p, (self.probe_seq, now + timeout));
            out.send(
                p,
                MemberMsg::HowAreYou {
                    seq: self.probe_seq,
                },
            );
        }
        if !self.outstanding.is_empty() {
            out.set_timer(TIMEOUT_TIMER, timeout);
        }
        out.set_timer(PROBE_TIMER, period);
    }

    /// Probes past their deadline: suspect those peers.
    fn expire<M: From<MemberMsg>>(&mut self, now: Time, out: &mut Outbox<M>) {
        let late: Vec<NodeId> = self
            .outstanding
            .iter()
            .filter(|(_, &(_, deadline))| deadline <= now)
            .map(|(&p, _)| p)
            .collect();
        for p in late {
            self.suspect(p, out);
        }
        if let Some(next) = self.outstanding.values().map(|&(_, d)| d).min() {
            out.set_timer(TIMEOUT_TIMER, next.since(now));
        }
    }
}

impl Protocol for Membership {
    type Msg = MemberMsg;

    fn on_start(&mut self, now: Time, out: &mut Outbox<MemberMsg>) {
        self.now = now;
        // A first round at once: it opens the connections to the tree neighbors, so a
        // failure is seen (as a lost connection) from the start.
        self.probe(now, out);
        if self.cfg.warm {
            for p in recalc::standby(&self.initial, self.me, self.cfg.radix) {
                // Sequence 0 is never outstanding, so the answer is ignored.
                out.send(p, MemberMsg::HowAreYou { seq: 0 });
            }
        }
    }

    fn on_message(&mut self, now: Time, from: NodeId, msg: MemberMsg, out: &mut Outbox<MemberMsg>) {
        self.now = now;
        self.handle(from, msg, out);
    }

    fn on_timer(&mut self, now: Time, timer: TimerId, out: &mut Outbox<MemberMsg>) {
        self.now = now;
        match timer {
            PROBE_TIMER => self.probe(now, out),
            TIMEOUT_TIMER => self.expire(now, out),
            _ => {}
        }
    }

    fn on_suspect(&mut self, now: Time, peer: NodeId, out: &mut Outbox<MemberMsg>) {
        self.now = now;
        self.suspect(peer, out);
    }

    fn state_version(&self) -> u64 {
        self.version
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Each process's local recalculation equals its place in the whole patched tree, and
        /// the rebalanced neighbors equal the radix tree over the live view: for any size,
        /// radix and failed set (leading ids, i.e. root failures, included).
        #[test]
        fn local_recalculation_matches_the_global_tree(
            n in 1usize..90,
            log2a in 1u32..4,
            picks in proptest::collection::vec(0usize..90, 0..12),
            lead in 0usize..4,
        ) {
            let a = 1 << log2a;
            let initial: Vec<NodeId> = (0..n as u64).map(|i| NodeId(3 * i + 1)).collect();
            let mut failed: BTreeSet<NodeId> = picks.iter().filter(|&&p| p < n).map(|&p| initial[p]).collect();
            failed.extend(initial.iter().take(lead.min(n)));
            let live: Vec<NodeId> = initial.iter().copied().filter(|i| !failed.contains(i)).collect();
            let whole = IdTree::patched(&initial, &failed, a);
            let balanced = IdTree::radix(&live, a);
            for &me in &initial {
                let local = recalc::patched(&initial, &failed, me, a);
                let re = recalc::rebalanced(&live, me, a);
                if failed.contains(&me) {
                    prop_assert!(local.is_none() && re.is_none());
                    continue;
                }
                let local = local.expect("a live process has neighbors");
                prop_assert_eq!(Some(local.root), whole.root());
                prop_assert_eq!(local.parent, whole.parent(me), "parent of {}", me);
                prop_assert_eq!(local.children.as_slice(), whole.children(me), "children of {}", me);
                let re = re.expect("a live process has neighbors");
                prop_assert_eq!(Some(re.root), balanced.root());
                prop_assert_eq!(re.parent, balanced.parent(me));
                prop_assert_eq!(re.children.as_slice(), balanced.children(me));
            }
        }
    }

    fn ids(v: &[u64]) -> Vec<NodeId> {
        v.iter().map(|&i| NodeId(i)).collect()
    }

    #[test]
    fn a_view_without_some_ids() {
        let list = ids(&[1, 3, 5, 7, 9]);
        let gone = |v: &[u64]| v.iter().map(|&i| NodeId(i)).collect::<BTreeSet<_>>();
        assert_eq!(without(&list, &gone(&[])), list);
        assert_eq!(without(&list, &gone(&[1, 9])), ids(&[3, 5, 7]));
        assert_eq!(without(&list, &gone(&[2, 5, 6, 100])), ids(&[1, 3, 7, 9]));
        assert_eq!(without(&list, &gone(&[1, 3, 5, 7, 9])), ids(&[]));
    }

    #[test]
    fn patching_moves_children_to_the_grandparent() {
        // 4-ary over 0..21: node 1 has children 5..=8 and parent 0.
        let view = ids(&(0..21).collect::<Vec<_>>());
        let mut t = IdTree::radix(&view, 4);
        assert_eq!(t.children(NodeId(1)), ids(&[5, 6, 7, 8]).as_slice());
        t.remove(NodeId(1), None);
        assert_eq!(
            t.children(NodeId(0)),
            ids(&[5, 6, 7, 8, 2, 3, 4]).as_slice()
        );
        assert_eq!(t.parent(NodeId(6)), Some(NodeId(0)));
        // The root fails: 2 (next in the list) takes over and adopts the rest.
        t.remove(NodeId(0), Some(NodeId(2)));
        assert_eq!(t.root(), Some(NodeId(2)));
        assert_eq!(t.parent(NodeId(5)), Some(NodeId(2)));
        assert!(t.children(NodeId(2)).contains(&NodeId(3)));
    }
}
