//! Uniform agreement among the survivors of a membership view: what ULFM's
//! `MPIX_Comm_agree` gives an MPI program, for any runtime under any launcher.
//!
//! Every live rank calls [`Uniform::agree`] with a `u64` and an operation, in the same order
//! (instance `k` is each rank's `k`-th call, as a collective). Each sends its value to the
//! root of its current view. The root decides instance `k` once it holds a value from every
//! member of its view: the operation folded over them, and the failed set (the job's ranks
//! outside the view). It sends the decision to every member, and each reports it once.
//!
//! A failure during the call stalls the root (a member's value never comes) until the
//! membership installs the view without the dead; then every member sends its value again to
//! the (possibly new) root, with the decision of the last instance it decided, if any. A root
//! that hears of a decision adopts it rather than deciding again, so two ranks never decide
//! differently: if any survivor decided `k`, everyone decides what it did (the ERA paper's
//! rule that a decision, once made visible, is the only one; the root's is made visible to the
//! others only through the members it reached). Instances are decided in order at each rank:
//! a rank contributes to `k + 1` only after its application heard `k` decided.
//!
//! The state is sans-IO and driven by its owner ([`super::endpoint::Service`]), which hands it
//! each view the membership installs.

use super::{Message, Outbox, Tag};
use crate::NodeId;
use std::collections::{BTreeMap, HashMap};

pub use self::wire_form::UniformMsg;

/// A module of its own for the archived form (see `proto::route`).
mod wire_form {
    /// Messages of the uniform agreement, and of revocation (ULFM's pair).
    #[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
    pub enum UniformMsg {
        /// A member's value for instance `k`, to the root.
        Contribute {
            /// The instance.
            k: u64,
            /// The value.
            value: u64,
            /// The operation ([`super::AgreeOp`] as a byte).
            op: u8,
        },
        /// A decision of instance `k`: from the root to every member, and from a member to
        /// a new root (the last decision it heard, which the new root then gives everyone).
        Decide {
            /// The instance.
            k: u64,
            /// The value decided.
            value: u64,
            /// The ids outside the view it was decided in.
            failed: Vec<u64>,
        },
        /// A revocation's notice, flooded over the BMG (`proto::revoke`).
        Revoke {
            /// The rank that revoked.
            origin: u32,
            /// Its revocation's number.
            seq: u64,
        },
    }
}

impl Message for UniformMsg {
    const TAG: Tag = 11;
    const NAME: &'static str = "uniform";
}

/// How the values are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AgreeOp {
    /// Bitwise AND (ULFM's agree: every survivor's flag).
    And,
    /// Bitwise OR.
    Or,
    /// The largest.
    Max,
}

impl AgreeOp {
    fn fold(self, a: u64, b: u64) -> u64 {
        match self {
            AgreeOp::And => a & b,
            AgreeOp::Or => a | b,
            AgreeOp::Max => a.max(b),
        }
    }

    fn byte(self) -> u8 {
        self as u8
    }

    fn from_byte(b: u8) -> Option<AgreeOp> {
        [AgreeOp::And, AgreeOp::Or, AgreeOp::Max]
            .get(b as usize)
            .copied()
    }
}

/// One decided instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The instance.
    pub k: u64,
    /// The value.
    pub value: u64,
    /// The job's ids outside the view it was decided in, ascending.
    pub failed: Vec<NodeId>,
}

/// One rank's part in the agreements of a job.
#[derive(Debug)]
pub struct Uniform {
    me: NodeId,
    /// The job's ids (what is not in a view has failed or left).
    job: Vec<NodeId>,
    /// The next instance this rank will call.
    next: u64,
    /// This rank's values of instances it has not seen decided.
    mine: BTreeMap<u64, (u64, AgreeOp)>,
    /// The last decision this rank heard.
    last: Option<Decision>,
    /// The root this rank last sent to (a new one is told the last decision).
    root: Option<NodeId>,
    /// As a root: values received, per instance.
    got: BTreeMap<u64, HashMap<NodeId, (u64, AgreeOp)>>,
}

impl Uniform {
    /// The agreements of `me` in a job of `job` (sorted ids).
    pub fn new(me: NodeId, job: Vec<NodeId>) -> Self {
        Self {
            me,
            job,
            next: 0,
            mine: BTreeMap::new(),
            last: None,
            root: None,
            got: BTreeMap::new(),
        }
    }

    /// Start this rank's next instance with `value`; returns its number. `view` and `root`:
    /// the membership's current view. Call it again only once the last instance is decided
    /// (as ULFM's agree blocks). Decisions come back as reports.
    pub fn agree(
        &mut self,
        value: u64,
        op: AgreeOp,
        view: &[NodeId],
        root: NodeId,
        out: &mut Outbox<UniformMsg, Decision>,
    ) -> u64 {
        let k = self.next;
        self.next += 1;
        self.mine.insert(k, (value, op));
        self.contribute(k, view, root, out);
        k
    }

    /// A new view: a new root hears the last decision this rank knows, values not yet
    /// decided go to the root again (it may be new, or waiting for a member that is gone),
    /// and a root decides what it now can.
    pub fn on_view(
        &mut self,
        view: &[NodeId],
        root: NodeId,
        out: &mut Outbox<UniformMsg, Decision>,
    ) {
        if self.root.is_some_and(|r| r != root) && root != self.me {
            if let Some(d) = &self.last {
                out.send(root, decide_msg(d));
            }
        }
        self.root = Some(root);
        let pending: Vec<u64> = self.mine.keys().copied().collect();
        for k in pending {
            self.contribute(k, view, root, out);
        }
        if root == self.me {
            let open: Vec<u64> = self.got.keys().copied().collect();
            for k in open {
                self.try_decide(k, view, out);
            }
        }
    }

    /// A message from `from`; `view` and `root` as in [`Uniform::agree`].
    pub fn on_message(
        &mut self,
        from: NodeId,
        msg: UniformMsg,
        view: &[NodeId],
        root: NodeId,
        out: &mut Outbox<UniformMsg, Decision>,
    ) {
        match msg {
            UniformMsg::Contribute { k, value, op } => {
                let Some(op) = AgreeOp::from_byte(op) else {
                    return; // not an operation: a member of another version
                };
                self.take(from, k, value, op, view, root, out);
            }
            // The owner hands revocations to `proto::revoke`.
            UniformMsg::Revoke { .. } => {}
            UniformMsg::Decide { k, value, failed } => {
                let failed = failed.into_iter().map(NodeId).collect();
                let d = Decision { k, value, failed };
                if self.decide(d.clone(), out) && root == self.me {
                    // A decision an earlier root made: this root gives it to everyone.
                    self.got.remove(&k);
                    for &m in view.iter().filter(|&&m| m != self.me) {
                        out.send(m, decide_msg(&d));
                    }
                }
            }
        }
    }

    /// Send this rank's value of `k` to `root` (to itself: taken at once).
    fn contribute(
        &mut self,
        k: u64,
        view: &[NodeId],
        root: NodeId,
        out: &mut Outbox<UniformMsg, Decision>,
    ) {
        let Some(&(value, op)) = self.mine.get(&k) else {
            return;
        };
        self.root = Some(root);
        if root == self.me {
            self.take(self.me, k, value, op, view, root, out);
        } else {
            let op = op.byte();
            out.send(root, UniformMsg::Contribute { k, value, op });
        }
    }

    /// As the root (or one about to be): a member's value of `k`.
    #[allow(clippy::too_many_arguments)]
    fn take(
        &mut self,
        from: NodeId,
        k: u64,
        value: u64,
        op: AgreeOp,
        view: &[NodeId],
        root: NodeId,
        out: &mut Outbox<UniformMsg, Decision>,
    ) {
        match &self.last {
            // Decided already: the asker missed it (a new root, a lost message).
            Some(d) if d.k == k && from != self.me => return out.send(from, decide_msg(d)),
            // Long decided here: the asker has heard it by now.
            Some(d) if d.k >= k => return,
            _ => {}
        }
        self.got.entry(k).or_default().insert(from, (value, op));
        if root == self.me {
            self.try_decide(k, view, out);
        }
    }

    /// As the root: decide `k` once every member's value of it is in.
    fn try_decide(&mut self, k: u64, view: &[NodeId], out: &mut Outbox<UniformMsg, Decision>) {
        let Some(values) = self.got.get(&k) else {
            return;
        };
        // The root's own operation rules (every rank passes the same one).
        let Some(&(_, op)) = values.get(&self.me) else {
            return;
        };
        if !view.iter().all(|m| values.contains_key(m)) {
            return;
        }
        let value = view
            .iter()
            .map(|m| values[m].0)
            .reduce(|a, b| op.fold(a, b))
            .unwrap_or(0);
        let failed = self
            .job
            .iter()
            .copied()
            .filter(|id| view.binary_search(id).is_err())
            .collect();
        let d = Decision { k, value, failed };
        self.got.remove(&k);
        for &m in view.iter().filter(|&&m| m != self.me) {
            out.send(m, decide_msg(&d));
        }
        self.decide(d, out);
    }

    /// Hear a decision of an instance this rank called and has not seen decided: reported
    /// once. Whether it was news.
    fn decide(&mut self, d: Decision, out: &mut Outbox<UniformMsg, Decision>) -> bool {
        if self.mine.remove(&d.k).is_none() {
            return false; // decided here already, or not called here (not in its view)
        }
        if self.last.as_ref().is_none_or(|l| l.k < d.k) {
            self.last = Some(d.clone());
        }
        out.report(d);
        true
    }

    /// This rank's instances not yet decided.
    pub fn pending(&self) -> usize {
        self.mine.len()
    }
}

fn decide_msg(d: &Decision) -> UniformMsg {
    UniformMsg::Decide {
        k: d.k,
        value: d.value,
        failed: d.failed.iter().map(|i| i.0).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Action;

    /// Messages and decisions of one call.
    fn drain(out: &mut Outbox<UniformMsg, Decision>) -> (Vec<(NodeId, UniformMsg)>, Vec<Decision>) {
        let (mut sent, mut decided) = (Vec::new(), Vec::new());
        for a in out.drain() {
            match a {
                Action::Send { to, msg } => sent.push((to, msg)),
                Action::Report(d) => decided.push(d),
                _ => {}
            }
        }
        (sent, decided)
    }

    /// The root decides, reaches only rank 3 with its decision, and dies. The new root, rank
    /// 1, could decide afresh over the survivors and give another value; rank 3 tells it what
    /// was decided, and it gives that to everyone instead.
    #[test]
    fn a_decision_one_member_heard_is_the_one_a_new_root_gives() {
        let ids: Vec<NodeId> = (0..4).map(NodeId).collect();
        let mut u: Vec<Uniform> = ids.iter().map(|&i| Uniform::new(i, ids.clone())).collect();
        let mut out = Outbox::new();
        // Everyone agrees on OR with its own bit; rank 0 is the root.
        let mut to_root = Vec::new();
        for (r, x) in u.iter_mut().enumerate() {
            x.agree(1 << r, AgreeOp::Or, &ids, NodeId(0), &mut out);
            to_root.extend(drain(&mut out).0);
        }
        let mut decisions = Vec::new();
        for (to, msg) in to_root.into_iter().filter(|(to, _)| *to == NodeId(0)) {
            let from = NodeId(match &msg {
                UniformMsg::Contribute { value, .. } => value.trailing_zeros() as u64,
                _ => unreachable!(),
            });
            u[to.0 as usize].on_message(from, msg, &ids, NodeId(0), &mut out);
            decisions.extend(drain(&mut out).0);
        }
        let d3 = decisions
            .iter()
            .find(|(to, _)| *to == NodeId(3))
            .unwrap()
            .1
            .clone();
        assert_eq!(
            d3,
            UniformMsg::Decide {
                k: 0,
                value: 0b1111,
                failed: vec![]
            }
        );
        // Only rank 3 hears it; rank 0 dies.
        u[3].on_message(NodeId(0), d3, &ids, NodeId(0), &mut out);
        assert_eq!(drain(&mut out).1.len(), 1);
        let view: Vec<NodeId> = ids[1..].to_vec();
        // The view without rank 0, rooted at 1: every member hands its part to the new root.
        let mut to_new = Vec::new();
        for (r, x) in u.iter_mut().enumerate().skip(1) {
            x.on_view(&view, NodeId(1), &mut out);
            let (sent, decided) = drain(&mut out);
            assert!(decided.is_empty());
            to_new.extend(sent.into_iter().map(|(to, m)| (NodeId(r as u64), to, m)));
        }
        let mut heard = vec![Vec::new(); 4];
        let mut queue: std::collections::VecDeque<_> = to_new.into();
        while let Some((from, to, msg)) = queue.pop_front() {
            u[to.0 as usize].on_message(from, msg, &view, NodeId(1), &mut out);
            let (sent, decided) = drain(&mut out);
            heard[to.0 as usize].extend(decided);
            queue.extend(sent.into_iter().map(|(t, m)| (to, t, m)));
        }
        for (r, h) in heard.iter().enumerate().skip(1).take(2) {
            assert_eq!(
                h,
                &[Decision {
                    k: 0,
                    value: 0b1111,
                    failed: vec![]
                }],
                "rank {r} decides what rank 3 heard, not the survivors' 0b1110"
            );
        }
        assert!(heard[3].is_empty(), "rank 3 decided once, before");
    }
}
