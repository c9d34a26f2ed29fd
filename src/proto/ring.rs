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
use crate::NodeId;

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

/// The ring rules of one process.
#[derive(Clone, Debug)]
pub struct Ring {
    id: NodeId,
    parent: Option<NodeId>,
    children: Box<[NodeId]>,
    succ: Option<NodeId>,
    pred: Option<NodeId>,
    succ_heard: bool,
    pred_heard: bool,
    version: u64,
}

impl Ring {
    /// A process with its place in the launch tree and no ring knowledge yet.
    pub fn new(id: NodeId, parent: Option<NodeId>, children: Vec<NodeId>) -> Self {
        Self {
            id,
            parent,
            children: children.into_boxed_slice(),
            succ: None,
            pred: None,
            succ_heard: false,
            pred_heard: false,
            version: 0,
        }
    }

    /// This process.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// `Parent` in the launch tree.
    pub fn parent(&self) -> Option<NodeId> {
        self.parent
    }

    /// `Children` in the launch tree, in order.
    pub fn children(&self) -> &[NodeId] {
        &self.children
    }

    /// `Succ`: the next process clockwise.
    pub fn succ(&self) -> Option<NodeId> {
        self.succ
    }

    /// `Pred`: the previous process.
    pub fn pred(&self) -> Option<NodeId> {
        self.pred
    }

    /// Counter bumped whenever `Succ` or `Pred` changes value.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Overwrite the outputs: an arbitrary initial configuration for self-stabilization runs.
    pub fn corrupt(&mut self, succ: Option<NodeId>, pred: Option<NodeId>, heard: bool) {
        self.succ = succ;
        self.pred = pred;
        self.succ_heard = heard;
        self.pred_heard = heard;
    }

    /// Whether the local state looks final: the outputs were written by this run's rules.
    pub fn settled(&self) -> bool {
        let pred = self.pred_heard && self.pred.is_some();
        match (self.parent, self.children.first()) {
            (None, None) => self.succ == Some(self.id) && self.pred == Some(self.id),
            (_, Some(&first)) => self.succ == Some(first) && pred,
            (Some(_), None) => self.succ_heard && self.succ.is_some() && pred,
        }
    }

    fn set_succ(&mut self, v: NodeId) -> bool {
        self.succ_heard = true;
        let changed = self.succ != Some(v);
        if changed {
            self.succ = Some(v);
            self.version += 1;
        }
        changed
    }

    fn set_pred(&mut self, v: NodeId) -> bool {
        self.pred_heard = true;
        let changed = self.pred != Some(v);
        if changed {
            self.pred = Some(v);
            self.version += 1;
        }
        changed
    }

    /// The spontaneous rules 1 and 3. Returns whether `Succ` or `Pred` changed.
    pub fn fire<M: From<RingMsg>>(&mut self, out: &mut Outbox<M>) -> bool {
        match (self.children.first().copied(), self.parent) {
            // Rule 1.
            (Some(first), _) => {
                let changed = self.set_succ(first);
                out.send(first, RingMsg::FConnect(self.id));
                changed
            }
            // Rule 3.
            (None, Some(parent)) => {
                out.send(parent, RingMsg::Info(self.id));
                false
            }
            // A ring of one.
            (None, None) => {
                let s = self.set_succ(self.id);
                self.set_pred(self.id) | s
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
        match msg {
            // Rule 2.
            RingMsg::FConnect(i) => self.parent == Some(from) && self.set_pred(i),
            // Rule 4.
            RingMsg::Info(i) => {
                let Some(at) = self.children.iter().position(|&c| c == from) else {
                    return false;
                };
                if let Some(&q) = self.children.get(at + 1) {
                    out.send(q, RingMsg::AskConnect(i));
                    false
                } else if let Some(parent) = self.parent {
                    out.send(parent, RingMsg::Info(i));
                    false
                } else {
                    let changed = self.set_pred(i);
                    out.send(i, RingMsg::BConnect(self.id));
                    changed
                }
            }
            // Rule 5.
            RingMsg::AskConnect(i) => {
                let changed = self.set_pred(i);
                out.send(i, RingMsg::BConnect(self.id));
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
