//! Algorithm 1 of Bosilca et al. (2009): a self-stabilizing oriented ring built from any tree.
//!
//! Each process knows its `Parent` and ordered `Children` in the launch tree (constants) and
//! computes `Succ` and `Pred` (outputs). The rules, numbered as in the paper:
//!
//! 1. `Children ≠ ∅ →` `Succ = First(Children)`, send `FConnect(Id)` to `Succ`.
//! 2. recv `FConnect(I)` from `p` `→` if `p = Parent` then `Pred = I`.
//! 3. `Children = ∅ →` send `Info(Id)` to `Parent`.
//! 4. recv `Info(I)` from `p` `→` if `p ∈ Children`: if `q = next(p, Children) ≠ ⊥` send
//!    `AskConnect(I)` to `q`; else if `Parent ≠ ⊥` send `Info(I)` to `Parent`; else
//!    `Pred = I` and send `BConnect(Id)` to `I`.
//! 5. recv `AskConnect(I)` from `p` `→` `Pred = I`, send `BConnect(Id)` to `I`.
//! 6. recv `BConnect(I)` from `p` `→` `Succ = I`.
//!
//! The resulting ring is the preorder of the tree: a non-leaf's successor is its first child, a
//! leaf's is the next sibling of the highest subtree it is the rightmost leaf of, and the
//! rightmost leaf of the whole tree closes the ring on the root.
//!
//! Departures from the paper, each for a real implementation's sake:
//! - Rules 1 and 3 fire on a timer ([`super::spontaneous`]); a node stops firing once its state
//!   is settled, judged locally: `Succ` and `Pred` were written by the rules during this run
//!   (for a non-leaf, `Succ = First(Children)`). The paper's simulator judged "correct" with
//!   global knowledge; from a clean start the two coincide.
//! - A tree of one process (no parent, no children) is a ring of one: `Succ = Pred = Id`. The
//!   paper's rules leave both at `⊥` there.

use super::spontaneous::{Rules, Standalone};
use super::{Outbox, TimerId};
use crate::{NodeId, PackedId};

/// Messages of Algorithm 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub enum RingMsg {
    /// `F_Connect(I)`: a parent introduces itself to its first child as its predecessor.
    FConnect(NodeId),
    /// `Info(I)`: leaf `I` looks for its successor, travelling up the tree.
    Info(NodeId),
    /// `Ask_Connect(I)`: "leaf `I` precedes you", from a parent to the next child.
    AskConnect(NodeId),
    /// `B_Connect(I)`: "I am your successor", back to the leaf.
    BConnect(NodeId),
}

/// The ring rules of one process. Ids are stored in 32 bits ([`PackedId`]): 40 bytes a
/// process instead of 88, at a million simulated processes.
#[derive(Clone, Debug)]
pub struct Ring {
    id: PackedId,
    parent: PackedId,
    children: Box<[PackedId]>,
    succ: PackedId,
    pred: PackedId,
    succ_heard: bool,
    pred_heard: bool,
    version: u64,
}

impl Ring {
    /// A process with its place in the launch tree and no ring knowledge yet. Ids are ranks
    /// below `u32::MAX`.
    ///
    /// # Panics
    /// When an id is not.
    pub fn new(id: NodeId, parent: Option<NodeId>, children: Vec<NodeId>) -> Self {
        let pack = |v: NodeId| PackedId::new(v).expect("ring ids are ranks below u32::MAX");
        Self {
            id: pack(id),
            parent: parent.map_or(PackedId::NONE, pack),
            children: children.into_iter().map(pack).collect(),
            succ: PackedId::NONE,
            pred: PackedId::NONE,
            succ_heard: false,
            pred_heard: false,
            version: 0,
        }
    }

    /// This process.
    pub fn id(&self) -> NodeId {
        self.id.get().expect("a ring process has an id")
    }

    /// `Parent` in the launch tree.
    pub fn parent(&self) -> Option<NodeId> {
        self.parent.get()
    }

    /// `Children` in the launch tree, in order.
    pub fn children(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.children.iter().filter_map(|c| c.get())
    }

    /// A leaf of the launch tree (rule 3's process: it looks for its successor with `Info`).
    pub fn is_leaf(&self) -> bool {
        self.children.is_empty() && self.parent().is_some()
    }

    fn first_child(&self) -> Option<NodeId> {
        self.children.first().and_then(|c| c.get())
    }

    /// `Succ`: the next process clockwise.
    pub fn succ(&self) -> Option<NodeId> {
        self.succ.get()
    }

    /// `Pred`: the previous process.
    pub fn pred(&self) -> Option<NodeId> {
        self.pred.get()
    }

    /// Counter bumped whenever `Succ` or `Pred` changes value.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Overwrite the outputs: an arbitrary initial configuration for self-stabilization runs.
    pub fn corrupt(&mut self, succ: Option<NodeId>, pred: Option<NodeId>, heard: bool) {
        self.succ = PackedId::pack(succ);
        self.pred = PackedId::pack(pred);
        self.succ_heard = heard;
        self.pred_heard = heard;
    }

    /// Whether the local state looks final: the outputs were written by this run's rules.
    pub fn settled(&self) -> bool {
        let pred = self.pred_heard && self.pred().is_some();
        let me = Some(self.id());
        match (self.parent(), self.first_child()) {
            (None, None) => self.succ() == me && self.pred() == me,
            (_, Some(first)) => self.succ() == Some(first) && pred,
            (Some(_), None) => self.succ_heard && self.succ().is_some() && pred,
        }
    }

    /// Set `Succ` (or `Pred` when `!succ`); an id that is not a rank names nobody and is
    /// ignored. Returns whether the value changed.
    fn set(&mut self, succ: bool, v: NodeId) -> bool {
        let Some(v) = PackedId::new(v) else {
            return false;
        };
        let (slot, heard) = if succ {
            (&mut self.succ, &mut self.succ_heard)
        } else {
            (&mut self.pred, &mut self.pred_heard)
        };
        *heard = true;
        let changed = *slot != v;
        if changed {
            *slot = v;
            self.version += 1;
        }
        changed
    }

    fn set_succ(&mut self, v: NodeId) -> bool {
        self.set(true, v)
    }

    fn set_pred(&mut self, v: NodeId) -> bool {
        self.set(false, v)
    }

    /// The spontaneous rules 1 and 3. Returns whether `Succ` or `Pred` changed.
    pub fn fire<M: From<RingMsg>>(&mut self, out: &mut Outbox<M>) -> bool {
        let me = self.id();
        match (self.first_child(), self.parent()) {
            // Rule 1.
            (Some(first), _) => {
                let changed = self.set_succ(first);
                out.send(first, RingMsg::FConnect(me));
                changed
            }
            // Rule 3.
            (None, Some(parent)) => {
                out.send(parent, RingMsg::Info(me));
                false
            }
            // A ring of one.
            (None, None) => {
                let s = self.set_succ(me);
                self.set_pred(me) | s
            }
        }
    }

    /// Rules 2, 4, 5 and 6. Returns whether `Succ` or `Pred` changed.
    pub fn handle<M: From<RingMsg>>(
        &mut self,
        from: NodeId,
        msg: RingMsg,
        out: &mut Outbox<M>,
    ) -> bool {
        let me = self.id();
        match msg {
            // Rule 2.
            RingMsg::FConnect(i) => self.parent() == Some(from) && self.set_pred(i),
            // Rule 4.
            RingMsg::Info(i) => {
                let Some(at) = self.children().position(|c| c == from) else {
                    return false;
                };
                let next = self.children().nth(at + 1);
                if let Some(q) = next {
                    out.send(q, RingMsg::AskConnect(i));
                    false
                } else if let Some(parent) = self.parent() {
                    out.send(parent, RingMsg::Info(i));
                    false
                } else {
                    let changed = self.set_pred(i);
                    out.send(i, RingMsg::BConnect(me));
                    changed
                }
            }
            // Rule 5.
            RingMsg::AskConnect(i) => {
                let changed = self.set_pred(i);
                out.send(i, RingMsg::BConnect(me));
                changed
            }
            // Rule 6.
            RingMsg::BConnect(i) => self.set_succ(i),
        }
    }
}

/// Timer of the ring's spontaneous rules when it runs alone.
pub const RING_TIMER: TimerId = TimerId(1);

impl Rules for Ring {
    type Msg = RingMsg;
    const TIMER: TimerId = RING_TIMER;

    fn fire(&mut self, out: &mut Outbox<RingMsg>) {
        Ring::fire(self, out);
    }

    fn handle(&mut self, from: NodeId, msg: RingMsg, out: &mut Outbox<RingMsg>) -> bool {
        Ring::handle(self, from, msg, out)
    }

    fn settled(&self) -> bool {
        Ring::settled(self)
    }

    fn version(&self) -> u64 {
        Ring::version(self)
    }
}

/// Algorithm 1 as a standalone protocol.
pub type RingNode = Standalone<Ring>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::spontaneous::SpontaneousConfig;
    use crate::proto::{Action, Protocol, Time};

    fn n(i: u64) -> NodeId {
        NodeId(i)
    }

    fn sends(out: &mut Outbox<RingMsg>) -> Vec<(NodeId, RingMsg)> {
        out.drain()
            .filter_map(|a| match a {
                Action::Send { to, msg } => Some((to, msg)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn rule_4_routes_info_by_position_among_children() {
        // Node 1 with children 2, 3 and parent 0.
        let mut r = Ring::new(n(1), Some(n(0)), vec![n(2), n(3)]);
        let mut out = Outbox::new();
        // From the first child: ask the next child to connect back to the leaf.
        r.handle(n(2), RingMsg::Info(n(9)), &mut out);
        assert_eq!(sends(&mut out), vec![(n(3), RingMsg::AskConnect(n(9)))]);
        // From the last child: pass it up.
        r.handle(n(3), RingMsg::Info(n(9)), &mut out);
        assert_eq!(sends(&mut out), vec![(n(0), RingMsg::Info(n(9)))]);
        // From a stranger: ignored.
        r.handle(n(7), RingMsg::Info(n(9)), &mut out);
        assert!(sends(&mut out).is_empty());
    }

    #[test]
    fn root_closes_the_ring_on_the_rightmost_leaf() {
        let mut root = Ring::new(n(0), None, vec![n(1)]);
        let mut out = Outbox::new();
        assert!(root.handle(n(1), RingMsg::Info(n(5)), &mut out));
        assert_eq!(root.pred(), Some(n(5)));
        assert_eq!(sends(&mut out), vec![(n(5), RingMsg::BConnect(n(0)))]);
    }

    #[test]
    fn f_connect_only_from_parent() {
        let mut r = Ring::new(n(2), Some(n(1)), vec![]);
        let mut out: Outbox<RingMsg> = Outbox::new();
        assert!(!r.handle(n(7), RingMsg::FConnect(n(7)), &mut out));
        assert_eq!(r.pred(), None);
        assert!(r.handle(n(1), RingMsg::FConnect(n(1)), &mut out));
        assert_eq!(r.pred(), Some(n(1)));
    }

    #[test]
    fn single_process_is_a_ring_of_one() {
        let mut node = RingNode::new(Ring::new(n(4), None, vec![]), SpontaneousConfig::default());
        let mut out = Outbox::new();
        node.on_start(Time::ZERO, &mut out);
        out.drain().for_each(drop);
        node.on_timer(Time::ZERO, RING_TIMER, &mut out);
        assert_eq!(node.rules.succ(), Some(n(4)));
        assert_eq!(node.rules.pred(), Some(n(4)));
        assert!(node.rules.settled());
    }
}
