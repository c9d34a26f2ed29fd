//! The root's work: numbering requests and table changes, learning what is stable, telling
//! origins, clearing the logs.

use super::{Active, Broadcast, Entry, OrderEvent, OrderMsg, Pending, Role, What};
use crate::buf::Payload;
use crate::proto::order::Mod;
use crate::proto::{Event, Outbox};
use crate::NodeId;
use std::collections::BTreeMap;

impl Broadcast {
    /// A request to broadcast (`origin`'s number `seq`, from its incarnation `inc`).
    pub(super) fn on_request(
        &mut self,
        origin: NodeId,
        inc: u64,
        seq: u64,
        body: Payload,
        out: &mut Outbox<OrderMsg>,
    ) {
        if !self.is_member() {
            return;
        }
        if self.log.table().slot(origin).is_none_or(|s| s.inc != inc) {
            // An earlier life's request, or one from outside the table: not numbered.
            return;
        }
        if let Role::Follower = self.role {
            // Not the root (any more): tell the origin whom this process follows.
            if origin != self.me {
                out.send(origin, OrderMsg::Redirect { term: self.term });
            }
            return;
        }
        let done = self.seqs.get(&origin).copied().unwrap_or(0);
        if seq <= done {
            // Asked again: numbered already. Confirm it if it is stable; otherwise the
            // confirmation will come when it is.
            if let Role::Active(a) = &self.role {
                let pending = self
                    .blog
                    .range(a.stable + 1..)
                    .any(|(_, e)| e.origin == origin && e.seq == seq);
                if !pending {
                    self.confirm(origin, seq, out);
                }
            }
            return;
        }
        self.requests.entry(origin).or_default().insert(seq, body);
        self.pump(out);
    }

    /// Number whatever waits, in order: table changes first, then each origin's requests in
    /// its own order.
    pub(super) fn pump(&mut self, out: &mut Outbox<OrderMsg>) {
        while self.is_root() && self.is_member() {
            if let Some(p) = self.pending.pop_front() {
                self.number_change(p, out);
                continue;
            }
            let mut found = None;
            for (&origin, queue) in self.requests.iter_mut() {
                let done = self.seqs.get(&origin).copied().unwrap_or(0);
                while queue.first_key_value().is_some_and(|(&s, _)| s <= done) {
                    queue.pop_first();
                }
                if let Some((&s, _)) = queue.first_key_value() {
                    if s == done + 1 {
                        let body = queue.pop_first().map(|(_, b)| b).unwrap_or_default();
                        found = Some((origin, s, body));
                        break;
                    }
                }
            }
            self.requests.retain(|_, q| !q.is_empty());
            let Some((origin, seq, body)) = found else {
                break;
            };
            self.number(origin, seq, What::App, body, out);
        }
    }

    /// A table change waiting at the root.
    fn number_change(&mut self, p: Pending, out: &mut Outbox<OrderMsg>) {
        match p {
            Pending::Leave(id) => {
                if self.log.table().is_live(id) {
                    self.number_mod(Mod::Leave(id), out);
                    if self.is_down(id) {
                        // Removed on a suspicion: if it was only slow or cut off, and has
                        // nothing more to say, this tells it it is out.
                        out.send(id, self.failed(id));
                    }
                }
            }
            Pending::Join { id, inc, have } => match self.log.table().slot(id) {
                Some(s) if s.inc == inc => {
                    // Admitted already; its welcome was lost (with an earlier root).
                    self.welcome(id, have, out);
                }
                Some(_) => {
                    // A restart before its failure was noticed: the old one leaves first.
                    self.number_mod(Mod::Leave(id), out);
                    self.pending.push_front(Pending::Join { id, inc, have });
                }
                None => {
                    // An earlier life's requests are not numbered any more.
                    self.requests.remove(&id);
                    self.number_mod(Mod::Join { id, inc }, out);
                    self.welcome(id, have, out);
                }
            },
            Pending::Clear => {
                let upto = match &self.role {
                    Role::Active(a) => a.stable,
                    _ => return,
                };
                self.number(self.me, 0, What::Clear { upto }, Payload::default(), out);
            }
        }
    }

    fn number_mod(&mut self, m: Mod, out: &mut Outbox<OrderMsg>) {
        self.number(self.me, 0, What::Mod(m), Payload::default(), out);
    }

    /// Give the next index to a broadcast and deliver it here, which sends it down.
    fn number(
        &mut self,
        origin: NodeId,
        seq: u64,
        what: What,
        body: Payload,
        out: &mut Outbox<OrderMsg>,
    ) {
        let e = Entry {
            bi: self.next,
            origin,
            seq,
            stamp: self.log.stamp(),
            what,
            body,
        };
        self.deliver(e, out);
        if self.is_member() {
            self.maybe_ack(out);
        }
    }

    /// The root's subtree acknowledged up to `v`: everything up to it is delivered everywhere.
    /// Tell each origin, and clear the logs when enough is stable.
    pub(super) fn advance_stable(&mut self, v: u64, out: &mut Outbox<OrderMsg>) {
        let Role::Active(a) = &mut self.role else {
            return;
        };
        if v <= a.stable {
            return;
        }
        let old = a.stable;
        a.stable = v;
        let clear = self.cfg.clear_every > 0 && v - a.cleared >= self.cfg.clear_every as u64;
        if clear {
            a.cleared = v;
        }
        let mut best: BTreeMap<NodeId, u64> = BTreeMap::new();
        for e in self.blog.range(old + 1..=v).map(|(_, e)| e) {
            if e.seq > 0 && e.what == What::App {
                let s = best.entry(e.origin).or_default();
                *s = (*s).max(e.seq);
            }
        }
        for (origin, seq) in best {
            self.confirm(origin, seq, out);
        }
        if clear {
            self.pending.push_back(Pending::Clear);
            self.pump(out);
        }
    }

    /// Tell `origin` its broadcasts up to `seq` are delivered everywhere.
    fn confirm(&mut self, origin: NodeId, seq: u64, out: &mut Outbox<OrderMsg>) {
        if origin == self.me {
            self.on_confirmed(seq, out);
        } else {
            out.send(origin, OrderMsg::Confirmed { upto: seq });
        }
    }

    /// The root confirmed this process's broadcasts up to `upto`.
    pub(super) fn on_confirmed(&mut self, upto: u64, out: &mut Outbox<OrderMsg>) {
        if upto <= self.confirmed_upto || upto > self.my_seq {
            return;
        }
        for seq in self.confirmed_upto + 1..=upto {
            self.unconfirmed.remove(&seq);
            out.report(Event::Order(OrderEvent::Confirmed { seq, at: self.now }));
        }
        self.confirmed_upto = upto;
        self.work_pump(out);
    }

    /// This process becomes the numbering root: the gone processes leave the table, then the
    /// waiting work goes on.
    pub(super) fn become_active(&mut self, out: &mut Outbox<OrderMsg>) {
        self.role = Role::Active(Active::default());
        let gone: Vec<NodeId> = self
            .log
            .table()
            .live_ids()
            .filter(|&i| self.is_down(i))
            .collect();
        for id in gone {
            self.pending.push_back(Pending::Leave(id));
        }
        self.pump(out);
        self.maybe_ack(out);
    }
}
