//! Revocation: a reliable broadcast that every live rank sees exactly once (ULFM's
//! `MPIX_Comm_revoke`, whose `mpi_ft_reliable_bcast` floods the same `±2^k` pattern).
//!
//! The origin sends a notice to its BMG fingers (Bosilca et al.: `p ± 2^k`); a rank that sees
//! a notice for the first time reports it and sends it on to its own fingers, all but the one
//! it came from; copies are dropped by (origin, number). Fingers outside the current view are
//! skipped. Every live rank hears it as long as the live ranks' fingers connect them, which
//! the BMG guarantees for up to `2⌈log2 N⌉ − 1` failures (more in practice).

use super::uniform::UniformMsg;
use super::Outbox;
use crate::topology::bmg;
use crate::{NodeId, Rank};
use std::collections::HashSet;

/// Most notices remembered: past it the oldest are forgotten (a copy that comes later than
/// a thousand newer notices would be reported again).
pub const SEEN_MAX: usize = 1024;

/// One rank's part in the job's revocations.
#[derive(Debug)]
pub struct Revocations {
    me: Rank,
    /// The job's ids: rank `r` is `ring[r]`.
    ring: Vec<NodeId>,
    fingers: Vec<Rank>,
    next: u64,
    seen: HashSet<(u32, u64)>,
    order: std::collections::VecDeque<(u32, u64)>,
}

impl Revocations {
    /// Rank `me`'s, in a job of `ring` (sorted ids).
    pub fn new(me: Rank, ring: Vec<NodeId>) -> Self {
        let fingers = bmg::neighbors(me, ring.len() as u32);
        Self {
            me,
            ring,
            fingers,
            next: 0,
            seen: HashSet::new(),
            order: std::collections::VecDeque::new(),
        }
    }

    /// Revoke: send a notice from this rank to its fingers in `view`. Returns its number (the
    /// owner reports the revocation at this rank itself).
    pub fn revoke(
        &mut self,
        view: &[NodeId],
        out: &mut Outbox<UniformMsg, super::uniform::Decision>,
    ) -> u64 {
        let seq = self.next;
        self.next += 1;
        self.note(self.me.0, seq);
        self.flood(self.me.0, seq, None, view, out);
        seq
    }

    /// A notice from `from`: whether it is news (then it has been sent on).
    pub fn on_notice(
        &mut self,
        from: NodeId,
        origin: u32,
        seq: u64,
        view: &[NodeId],
        out: &mut Outbox<UniformMsg, super::uniform::Decision>,
    ) -> bool {
        if origin as usize >= self.ring.len() || !self.note(origin, seq) {
            return false;
        }
        self.flood(origin, seq, Some(from), view, out);
        true
    }

    /// Remember (origin, seq); whether it was new.
    fn note(&mut self, origin: u32, seq: u64) -> bool {
        if !self.seen.insert((origin, seq)) {
            return false;
        }
        self.order.push_back((origin, seq));
        if self.order.len() > SEEN_MAX {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        true
    }

    fn flood(
        &self,
        origin: u32,
        seq: u64,
        came_from: Option<NodeId>,
        view: &[NodeId],
        out: &mut Outbox<UniformMsg, super::uniform::Decision>,
    ) {
        for f in &self.fingers {
            let id = self.ring[f.0 as usize];
            if Some(id) != came_from && view.binary_search(&id).is_ok() {
                out.send(id, UniformMsg::Revoke { origin, seq });
            }
        }
    }
}
