//! Failures (section 5.2): suspicions, the repair of a failed coordinator's subtree (types 1
//! and 2 turned into type 3 by comparing BIs), and a new root taking over.

use super::{Broadcast, OrderEvent, OrderMsg, Role, Status, Syncing, Term};
use crate::proto::{Event, Outbox};
use crate::NodeId;
use std::collections::BTreeSet;

impl Broadcast {
    /// This process suspects `peer` (a lost connection, a failed send, a missed heartbeat):
    /// it splices it out, takes its children, and tells the root.
    pub(super) fn suspect(&mut self, peer: NodeId, out: &mut Outbox<OrderMsg>) {
        if !self.mark_gone(peer, out) {
            return;
        }
        if matches!(self.status, Status::Joining(_)) {
            return; // the next retry asks another contact
        }
        if peer == self.term.root {
            self.root_failed(peer, out);
        } else if self.is_down(self.term.root) && self.term.root != self.me {
            // The root is already counted gone and the one this process told to take over
            // is gone too: tell the next one (or take over).
            self.root_failed(self.term.root, out);
        } else {
            match &mut self.role {
                Role::Active(_) => self.pending.push_back(super::Pending::Leave(peer)),
                Role::Syncing(s) => {
                    s.waiting.remove(&peer);
                    s.replies.remove(&peer);
                    if s.fetching == Some(peer) {
                        s.fetching = None;
                    }
                }
                Role::Follower => {
                    if self.log.table().is_live(peer) {
                        out.send(self.term.root, self.failed(peer));
                    }
                }
            }
        }
        self.progressed(out);
    }

    /// Count `peer` gone here: report it, push what its children may lack to them (they are
    /// this process's now, if it was their coordinator), follow the ring. Whether it is new.
    fn mark_gone(&mut self, peer: NodeId, out: &mut Outbox<OrderMsg>) -> bool {
        if peer == self.me || self.is_gone() || self.suspected.contains(&peer) {
            return false;
        }
        let before = self.children();
        self.suspected.insert(peer);
        out.report(Event::Order(OrderEvent::Suspected { peer, at: self.now }));
        if self.is_member() {
            // Section 5.2.1: "propagates the broadcast to the children of the failed process".
            // They may lack what the failed one received and did not pass on; the failed one's
            // subtree acknowledged everything up to its last ack, so the rest goes to them.
            let from = self.child_ack(peer) + 1;
            for c in self.children() {
                if before.contains(&c) {
                    continue;
                }
                let dead = self.gone_above(c);
                out.send(
                    c,
                    OrderMsg::Adopt {
                        term: self.term,
                        dead,
                    },
                );
                self.resend(c, from, out);
                self.adopted.insert(c);
            }
            self.update_ring(out);
        }
        true
    }

    /// The root is gone: the first live process after it (the lowest live POID) takes over;
    /// if that is not this one, it is told.
    pub(super) fn root_failed(&mut self, root: NodeId, out: &mut Outbox<OrderMsg>) {
        match self.tree_root() {
            Some(next) if next == self.me => self.take_over(out),
            Some(next) => out.send(next, self.failed(root)),
            None => {}
        }
    }

    /// Become the root of a new term: ask every process how far it delivered.
    fn take_over(&mut self, out: &mut Outbox<OrderMsg>) {
        if matches!(self.role, Role::Syncing(_) | Role::Active(_)) && self.term.root == self.me {
            return;
        }
        self.seen_term = self.seen_term.max(self.term.n) + 1;
        self.term = Term {
            n: self.seen_term,
            root: self.me,
        };
        // What came under the old term is not certain to stand: it comes again if it does.
        self.holdback.clear();
        let table = self.log.table();
        let dead: Vec<NodeId> = table.live_ids().filter(|&i| self.is_down(i)).collect();
        let others: Vec<NodeId> = table.live_ids().filter(|&i| i != self.me).collect();
        let waiting: BTreeSet<NodeId> = others
            .iter()
            .copied()
            .filter(|&i| !self.is_down(i))
            .collect();
        for id in others {
            // The gone ones too: one that was only slow learns it is out.
            out.send(
                id,
                OrderMsg::Sync {
                    term: self.term,
                    dead: dead.clone(),
                },
            );
        }
        self.role = Role::Syncing(Syncing {
            waiting,
            ..Syncing::default()
        });
        self.parent = None;
        out.report(Event::Order(OrderEvent::RootChanged {
            term: self.term,
            at: self.now,
        }));
        self.check_sync(out);
    }

    /// A newer term was heard of (`Sync`, a redirect, or a broadcast sent under it): follow its
    /// root, count gone whoever it counts gone (every process before it, and `dead`), ask it
    /// again for this process's unconfirmed broadcasts, and tell it how far this one is.
    pub(super) fn adopt_term(&mut self, term: Term, dead: &[NodeId], out: &mut Outbox<OrderMsg>) {
        if term <= self.term {
            return;
        }
        self.term = term;
        self.seen_term = self.seen_term.max(term.n);
        // What came under the old term is not certain to stand: it comes again if it does.
        self.holdback.clear();
        let mut gone: Vec<NodeId> = dead.to_vec();
        if self.log.table().is_live(term.root) {
            gone.extend(self.log.table().live_ids().take_while(|&i| i != term.root));
        }
        if self.is_member() && gone.contains(&self.me) {
            self.gone(false, out);
            return;
        }
        if !matches!(self.role, Role::Follower) {
            self.role = Role::Follower;
        }
        for g in gone {
            self.mark_gone(g, out);
        }
        let next = if self.is_member() { self.next } else { 0 };
        out.send(term.root, OrderMsg::Synced { term, next });
        out.report(Event::Order(OrderEvent::RootChanged { term, at: self.now }));
        if self.is_member() {
            self.request_unconfirmed(out);
            self.progressed(out);
        }
    }

    /// `Failed`: at the root, a failure report; at the process next in line, the root failed;
    /// naming this process, it was removed.
    pub(super) fn on_failed(&mut self, id: NodeId, next: u64, out: &mut Outbox<OrderMsg>) {
        if id == self.me && next <= self.joined_at {
            return; // the sender has not delivered this life's SystemJoin yet
        }
        if id == self.me {
            // Counted gone by the others: a process only slow stops here (crash-stop).
            self.gone(false, out);
            return;
        }
        match self.role {
            Role::Active(_) | Role::Syncing(_) => self.suspect(id, out),
            Role::Follower if id == self.term.root => self.suspect(id, out),
            Role::Follower => {
                if self.is_member() && self.term.root != self.me {
                    out.send(self.term.root, self.failed(id));
                }
            }
        }
    }

    /// `Failed` about `id`, with how far this process is.
    pub(super) fn failed(&self, id: NodeId) -> OrderMsg {
        OrderMsg::Failed {
            id,
            next: self.next,
        }
    }

    /// A new root's `Sync`.
    pub(super) fn on_sync(&mut self, term: Term, dead: Vec<NodeId>, out: &mut Outbox<OrderMsg>) {
        if term < self.term {
            return;
        }
        if term > self.term {
            self.adopt_term(term, &dead, out);
            return;
        }
        let next = if self.is_member() { self.next } else { 0 };
        out.send(term.root, OrderMsg::Synced { term, next });
    }

    /// An answer to this root's `Sync`.
    pub(super) fn on_synced(
        &mut self,
        from: NodeId,
        term: Term,
        next: u64,
        out: &mut Outbox<OrderMsg>,
    ) {
        if term != self.term {
            return;
        }
        match &mut self.role {
            Role::Syncing(s) => {
                s.waiting.remove(&from);
                if next > 0 {
                    s.replies.insert(from, next);
                }
                self.check_sync(out);
            }
            Role::Active(_) if next > 0 && next < self.next => self.resend(from, next, out),
            _ => {}
        }
    }

    /// Once every process answered: fetch what this root lacks from one that delivered further,
    /// then start numbering.
    pub(super) fn check_sync(&mut self, out: &mut Outbox<OrderMsg>) {
        let Role::Syncing(s) = &mut self.role else {
            return;
        };
        if !s.waiting.is_empty() {
            return;
        }
        let top = self.next - 1;
        let best = s
            .replies
            .iter()
            .map(|(&id, &n)| (n - 1, id))
            .max()
            .filter(|&(f, _)| f > top);
        let Some((furthest, holder)) = best else {
            let replies = std::mem::take(&mut s.replies);
            self.become_active(out);
            // Those behind get the rest from here at once: what their coordinators sent under
            // the old term may have reached them after they followed the new one, and was
            // dropped.
            for (id, n) in replies {
                if n < self.next {
                    self.resend(id, n, out);
                }
            }
            return;
        };
        if s.fetching.is_none() {
            s.fetching = Some(holder);
            out.send(
                holder,
                OrderMsg::Fetch {
                    from: self.next,
                    upto: furthest,
                },
            );
        }
    }

    /// A new root asks for broadcasts it lacks.
    pub(super) fn on_fetch(&self, from: NodeId, first: u64, upto: u64, out: &mut Outbox<OrderMsg>) {
        if first > upto {
            return;
        }
        let via = self.term;
        for e in self.blog.range(first..=upto).map(|(_, e)| e) {
            out.send(
                from,
                OrderMsg::Bcast {
                    entry: e.clone(),
                    via,
                },
            );
        }
    }

    /// A child tells its new coordinator (this process) how far it is, and which coordinators
    /// between them it counts gone.
    pub(super) fn on_have(
        &mut self,
        from: NodeId,
        term: Term,
        next: u64,
        dead: Vec<NodeId>,
        out: &mut Outbox<OrderMsg>,
    ) {
        if term > self.term {
            self.adopt_term(term, &[], out);
        }
        if !self.is_member() {
            return;
        }
        let repair = !dead.is_empty();
        for d in dead {
            self.suspect(d, out);
            if !self.is_member() {
                return;
            }
        }
        if repair && !self.adopted.remove(&from) {
            self.resend(from, next, out);
        }
        self.progressed(out);
    }

    /// This process's coordinator failed and the one above took it (`dead` are gone).
    pub(super) fn on_adopt(&mut self, term: Term, dead: Vec<NodeId>, out: &mut Outbox<OrderMsg>) {
        if term > self.term {
            self.adopt_term(term, &[], out);
        }
        if !self.is_member() {
            return;
        }
        for d in dead {
            self.mark_gone(d, out);
        }
        self.progressed(out);
    }

    /// The active root of `term` never let this process in: its welcome came from a root
    /// that had been replaced, and its SystemJoin is in that root's lost tail. Unlike
    /// `Failed`, this holds whatever index the root is at (its indices are not this
    /// process's). A joiner still waiting for its welcome, or a member of a newer term,
    /// ignores it.
    pub(super) fn on_out(&mut self, term: Term, out: &mut Outbox<OrderMsg>) {
        if self.is_member() && term >= self.term {
            self.gone(false, out);
        }
    }

    /// A redirect names the term some process follows.
    pub(super) fn on_redirect(&mut self, term: Term, out: &mut Outbox<OrderMsg>) {
        if let Status::Joining(_) = self.status {
            out.send(
                term.root,
                OrderMsg::Join {
                    id: self.me,
                    inc: self.inc,
                    have: self.joining_have(),
                },
            );
            return;
        }
        self.adopt_term(term, &[], out);
    }
}
