//! Holding back, delivering in BI order, forwarding down the tree and acknowledging up it.

use super::{digest_step, Broadcast, Entry, OrderEvent, OrderMsg, Role, Status, Term, What};

use crate::proto::order::{Mod, Stamp};
use crate::proto::{Event, Outbox};
use crate::NodeId;
use std::cmp::Ordering;

impl Broadcast {
    /// A numbered broadcast came from `from`, sent under `via`.
    pub(super) fn on_bcast(
        &mut self,
        from: NodeId,
        entry: Entry,
        via: Term,
        out: &mut Outbox<OrderMsg>,
    ) {
        if self.is_down(from) {
            return;
        }
        if matches!(self.status, Status::Joining(_)) {
            // In the tree before the welcome came: kept until the snapshot says where to start.
            self.early.entry(entry.bi).or_insert((entry, via));
            return;
        }
        match via.cmp(&self.term) {
            // Sent under a root since replaced: the new root decides what of it stands.
            Ordering::Less => return,
            Ordering::Greater => {
                self.adopt_term(via, &[], out);
                if self.is_gone() {
                    return;
                }
            }
            Ordering::Equal => {}
        }
        if entry.bi < self.next {
            // The coordinator repairs what this process has: it lacks this one's ack (lost
            // to a race with a table change). Said again, once per retry interval.
            if Some(from) == self.parent && !self.reacked {
                self.reacked = true;
                self.acked_stamp = None;
                self.maybe_ack(out);
            }
            return;
        }
        self.holdback.entry(entry.bi).or_insert(entry);
        self.deliver_ready(out);
    }

    /// Deliver every held broadcast whose turn it is.
    pub(super) fn deliver_ready(&mut self, out: &mut Outbox<OrderMsg>) {
        let mut any = false;
        while let Some(e) = self.holdback.remove(&self.next) {
            any = true;
            self.deliver(e, out);
            if self.is_gone() {
                return;
            }
        }
        if any {
            self.progressed(out);
        }
    }

    /// Deliver the next broadcast: forward it down the tree of the table it was numbered
    /// under (the current one: every earlier change is applied), hand it over, apply it.
    pub(super) fn deliver(&mut self, e: Entry, out: &mut Outbox<OrderMsg>) {
        debug_assert_eq!(e.bi, self.next);
        let via = self.term;
        for c in self.children() {
            out.send(
                c,
                OrderMsg::Bcast {
                    entry: e.clone(),
                    via,
                },
            );
        }
        self.next += 1;
        self.count_delivery(&e, false, out);
        if e.seq > 0 {
            let s = self.seqs.entry(e.origin).or_default();
            *s = (*s).max(e.seq);
        }
        let what = e.what.clone();
        self.blog.insert(e.bi, e);
        match what {
            What::App => {}
            What::Mod(m) => self.apply_mod(m, out),
            What::Clear { upto } => {
                self.blog = self.blog.split_off(&(upto + 1));
                if self.log.push(Mod::Clear) {
                    self.table_changed(out);
                }
            }
        }
    }

    /// Count a delivery in the history and report it.
    pub(super) fn count_delivery(&mut self, e: &Entry, replayed: bool, out: &mut Outbox<OrderMsg>) {
        self.delivered += 1;
        self.digest = digest_step(self.digest, [e.bi, e.origin.0, e.seq]);
        if self.cfg.report_deliveries {
            out.report(Event::Order(OrderEvent::Delivered {
                bi: e.bi,
                origin: e.origin,
                seq: e.seq,
                replayed,
                at: self.now,
            }));
        }
    }

    /// A delivered table change.
    fn apply_mod(&mut self, m: Mod, out: &mut Outbox<OrderMsg>) {
        let changed = self.log.push(m);
        match m {
            Mod::Join { id, .. } => {
                // Back (a recovered process) or new: no longer counted gone. Its acks stay:
                // one made before this change carries the old table's stamp and counts for
                // nothing, one made under the new table (it may be ahead) counts.
                self.suspected.remove(&id);
            }
            Mod::Leave(id) => {
                self.child_acks.remove(&id);
                if id == self.me {
                    let left = self.leaving;
                    self.gone(left, out);
                    return;
                }
                // Whoever leaves is gone for good under this incarnation.
                self.suspected.insert(id);
                if id == self.term.root {
                    // The root left (or was removed by itself): the next one takes over.
                    self.root_failed(id, out);
                }
            }
            Mod::Clear => {}
        }
        if changed {
            self.table_changed(out);
        }
    }

    /// The table changed: report it and follow it with the heartbeat ring.
    pub(super) fn table_changed(&mut self, out: &mut Outbox<OrderMsg>) {
        out.report(Event::Order(OrderEvent::Changed {
            members: self.log.table().live_len(),
            at: self.now,
        }));
        self.update_ring(out);
    }

    /// After deliveries or suspicions: follow a new coordinator, acknowledge, let the root's
    /// work go on.
    pub(super) fn progressed(&mut self, out: &mut Outbox<OrderMsg>) {
        if !self.is_member() {
            return;
        }
        self.reparent(out);
        self.maybe_ack(out);
        match self.role {
            Role::Syncing(_) => self.check_sync(out),
            Role::Active(_) => self.pump(out),
            Role::Follower => {}
        }
        self.flood_retry(out);
    }

    /// If the coordinator changed, tell the new one how far this process is (`Have`, naming the
    /// gone coordinators it stopped waiting for) and what its subtree acknowledged.
    pub(super) fn reparent(&mut self, out: &mut Outbox<OrderMsg>) {
        let parent = self.tree_parent();
        if parent == self.parent {
            return;
        }
        self.parent = parent;
        if let Some(p) = parent {
            let dead = self.gone_above(self.me);
            out.send(
                p,
                OrderMsg::Have {
                    term: self.term,
                    next: self.next,
                    dead,
                },
            );
            let v = self.ack_value();
            self.acked = v;
            let stamp = self.log.stamp();
            self.acked_stamp = Some(stamp);
            out.send(p, OrderMsg::Ack { upto: v, stamp });
        }
    }

    /// The highest index delivered by this process and every process below it, counting
    /// only acks made under this process's table (another table, another subtree).
    fn ack_value(&self) -> u64 {
        let mut v = self.next - 1;
        let stamp = self.log.stamp();
        for c in self.children() {
            let a = match self.child_acks.get(&c) {
                Some(&(s, upto)) if s == stamp => upto,
                _ => 0,
            };
            v = v.min(a);
        }
        v
    }

    /// How far child `c` said it is, under whatever table (a lower bound of its own progress,
    /// where repairs start).
    pub(super) fn child_ack(&self, c: NodeId) -> u64 {
        self.child_acks.get(&c).map_or(0, |&(_, upto)| upto)
    }

    /// Send the subtree's acknowledgment up if it grew; at the root, it is the stable index.
    pub(super) fn maybe_ack(&mut self, out: &mut Outbox<OrderMsg>) {
        let v = self.ack_value();
        match self.parent {
            // Under a new table (or after a clearing) the ack is sent again, even if no
            // higher: the coordinator counts only acks made under its own table.
            Some(p) if v > self.acked || Some(self.log.stamp()) != self.acked_stamp => {
                self.acked = v;
                let stamp = self.log.stamp();
                self.acked_stamp = Some(stamp);
                out.send(p, OrderMsg::Ack { upto: v, stamp });
            }
            None if self.is_root() => self.advance_stable(v, out),
            _ => {}
        }
    }

    /// A child's acknowledgment.
    pub(super) fn on_ack(
        &mut self,
        from: NodeId,
        upto: u64,
        stamp: Stamp,
        out: &mut Outbox<OrderMsg>,
    ) {
        if !self.is_member() {
            return;
        }
        self.child_acks.insert(from, (stamp, upto));
        self.stalled.remove(&from);
        self.maybe_ack(out);
    }

    /// Children whose acknowledgment has not moved for a whole retry interval while this
    /// process delivered further get the rest again: whatever was lost with a failure on the
    /// way (the safety net under `Have` and `Adopt`).
    pub(super) fn repair_stalled(&mut self, out: &mut Outbox<OrderMsg>) {
        let top = self.next - 1;
        for c in self.children() {
            let a = self.child_ack(c);
            if a >= top {
                self.stalled.remove(&c);
                continue;
            }
            if self.stalled.get(&c) == Some(&a) {
                self.resend(c, a + 1, out);
            }
            self.stalled.insert(c, a);
        }
    }
}
