//! Joining (`SystemJoin`), leaving (`SystemLeave`) and coming back after a failure (section
//! 5.2.3).

use super::{
    Broadcast, BroadcastConfig, Joining, OrderEvent, OrderMsg, Pending, Role, Snapshot, Status,
};
use crate::proto::order::{ModLog, PoTable};
use crate::proto::{Event, Outbox};
use crate::NodeId;

impl Broadcast {
    /// A new process outside the system: it asks `contacts` in turn (one per retry interval)
    /// to let it in; once every contact is suspected it stops ([`OrderEvent::Gone`]).
    /// `inc` tells its lives apart (a restart takes a new one).
    pub fn joiner(me: NodeId, contacts: Vec<NodeId>, cfg: BroadcastConfig, inc: u64) -> Self {
        let lazy = cfg.lazy;
        Self::blank(
            me,
            inc,
            cfg,
            PoTable::new([], lazy),
            Status::Joining(Joining {
                contacts,
                next: 0,
                have: None,
            }),
        )
    }

    /// A process that failed and restarted: it joins again under its old id, and `have` (the
    /// last broadcast it delivered before failing, as index, origin and number, from its own
    /// log) asks for the ones it missed to be replayed.
    pub fn recovering(
        me: NodeId,
        contacts: Vec<NodeId>,
        cfg: BroadcastConfig,
        inc: u64,
        have: Option<(u64, NodeId, u64)>,
    ) -> Self {
        let mut b = Self::joiner(me, contacts, cfg, inc);
        if let Status::Joining(j) = &mut b.status {
            j.have = have;
        }
        b
    }

    pub(super) fn joining_have(&self) -> Option<(u64, NodeId, u64)> {
        match &self.status {
            Status::Joining(j) => j.have,
            _ => None,
        }
    }

    /// Ask the next contact to let this process in.
    pub(super) fn ask(&mut self, out: &mut Outbox<OrderMsg>) {
        let Status::Joining(j) = &mut self.status else {
            return;
        };
        if j.contacts.is_empty() {
            return;
        }
        if j.contacts.iter().all(|c| self.suspected.contains(c)) {
            // Every contact failed or left: nobody can let this process in.
            self.gone(false, out);
            return;
        }
        let to = j.contacts[j.next % j.contacts.len()];
        j.next += 1;
        let have = j.have;
        out.send(
            to,
            OrderMsg::Join {
                id: self.me,
                inc: self.inc,
                have,
            },
        );
    }

    /// `SystemJoin` (or a recovered process): the root numbers it; anyone else passes it on.
    pub(super) fn on_join(
        &mut self,
        id: NodeId,
        inc: u64,
        have: Option<(u64, NodeId, u64)>,
        out: &mut Outbox<OrderMsg>,
    ) {
        if !self.is_member() || id == self.me {
            return;
        }
        match self.role {
            Role::Active(_) | Role::Syncing(_) => {
                let queued = self.pending.iter().any(
                    |p| matches!(p, Pending::Join { id: j, inc: i, .. } if *j == id && *i == inc),
                );
                if !queued {
                    self.pending.push_back(Pending::Join { id, inc, have });
                }
                self.pump(out);
            }
            Role::Follower => out.send(self.term.root, OrderMsg::Join { id, inc, have }),
        }
    }

    /// `SystemLeave`: the root numbers it; anyone else passes it on.
    pub(super) fn on_leave(&mut self, id: NodeId, out: &mut Outbox<OrderMsg>) {
        if !self.is_member() {
            return;
        }
        match self.role {
            Role::Active(_) | Role::Syncing(_) => {
                self.pending.push_back(Pending::Leave(id));
                self.pump(out);
            }
            Role::Follower => out.send(self.term.root, OrderMsg::Leave { id }),
        }
    }

    /// This process's planned departure.
    pub(super) fn leave(&mut self, out: &mut Outbox<OrderMsg>) {
        if !self.is_member() {
            return;
        }
        self.leaving = true;
        let me = self.me;
        self.on_leave(me, out);
    }

    /// The root welcomes `id`, just numbered into the table: the state after its `SystemJoin`,
    /// with the BLog (which holds the replay a recovered process asks for).
    pub(super) fn welcome(
        &mut self,
        id: NodeId,
        _have: Option<(u64, NodeId, u64)>,
        out: &mut Outbox<OrderMsg>,
    ) {
        let base = self
            .log
            .base()
            .slots()
            .iter()
            .map(|s| (s.id, s.live, s.inc))
            .collect();
        let snapshot = Snapshot {
            term: self.term,
            next: self.next,
            gen: self.log.stamp().gen,
            base,
            mods: self.log.mods().to_vec(),
            seqs: self.seqs.iter().map(|(&o, &s)| (o, s)).collect(),
            blog: self.blog.values().cloned().collect(),
        };
        out.send(id, OrderMsg::Welcome(Box::new(snapshot)));
    }

    /// The root's welcome: take up the state, replay what a recovered process missed, and
    /// deliver from there.
    pub(super) fn on_welcome(&mut self, s: Snapshot, out: &mut Outbox<OrderMsg>) {
        let Status::Joining(j) = &self.status else {
            return;
        };
        let have = j.have;
        let base = PoTable::from_slots(s.base_slots(), self.cfg.lazy);
        self.log = ModLog::from_parts(base, s.mods.clone(), s.gen);
        if self
            .log
            .table()
            .slot(self.me)
            .is_none_or(|x| x.inc != self.inc)
        {
            return; // a welcome for an earlier life
        }
        self.term = s.term;
        self.seen_term = self.seen_term.max(s.term.n);
        self.next = s.next;
        self.joined_at = s.next - 1;
        self.seqs = s.seqs.iter().copied().collect();
        // This life numbers its broadcasts after the last one delivered from this id.
        self.my_seq = self.seqs.get(&self.me).copied().unwrap_or(0);
        self.confirmed_upto = self.my_seq;
        self.confirmed_at_retry = self.my_seq;
        self.blog = s.blog.into_iter().map(|e| (e.bi, e)).collect();
        // Section 5.2.3: the broadcasts missed while down, from the BLog, if it still holds
        // every one after the last delivered and that one is the same broadcast.
        let (mut replayed, mut gap) = (0, false);
        if let Some((bi, origin, seq)) = have {
            // Only from a broadcast the BLog shows is the same one: a process that failed with
            // the root may have delivered one that was numbered again since.
            let same = self
                .blog
                .get(&bi)
                .is_some_and(|e| e.origin == origin && e.seq == seq);
            if same {
                let missed: Vec<_> = self
                    .blog
                    .range(bi + 1..self.next)
                    .map(|(_, e)| e.clone())
                    .collect();
                for e in &missed {
                    self.count_delivery(e, true, out);
                    replayed += 1;
                }
            } else {
                gap = true;
            }
        }
        self.status = Status::Member;
        self.role = Role::Follower;
        // What the tree sent before the welcome came, if sent under this term or a later one.
        for (bi, (e, via)) in std::mem::take(&mut self.early) {
            if bi >= self.next && via >= self.term {
                self.holdback.entry(bi).or_insert(e);
            }
        }
        out.report(Event::Order(OrderEvent::Welcomed {
            next: self.next,
            replayed,
            gap,
            at: self.now,
        }));
        self.update_ring(out);
        self.deliver_ready(out);
        self.progressed(out);
        self.work_start(out);
    }
}
