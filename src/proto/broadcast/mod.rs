//! Total-order broadcast through the Process Order hierarchy (Gendelman et al., 2000, sections
//! 3 to 6).
//!
//! A process that wants to broadcast sends the message to the root (the coordinator, the lowest
//! live POID); the root numbers it with the next broadcast index BI, stamps it with its ModLog
//! and sends it down the hierarchy of the Process Order table ([`super::order`]). Changes of the
//! table (`SystemJoin`, `SystemLeave`, failures) are broadcasts too, so every process applies
//! them at the same point of the same sequence. Acknowledgments travel back up (a process acks
//! once its whole subtree has), and the root tells each origin when its broadcasts are
//! delivered everywhere (the paper's section 2 broadcast, whose cycle ends when every reply is
//! in).
//!
//! Files: [`msg`] the messages; `deliver.rs` holding back, delivering in BI order, forwarding
//! and acknowledging; `root.rs` the root's numbering, stability and log clearing;
//! `failure.rs` suspicions, the repair of a failed coordinator's subtree and the takeover of a
//! failed root; `join.rs` joins, leaves and recovery; `flood.rs` the broadcast without total
//! order; `workload.rs` the load that experiments generate.
//!
//! # The guarantee
//!
//! Processes fail by stopping (crash-stop). A process that is suspected is removed from the
//! table and must not come back under the same incarnation: if it was only slow, the first
//! message it sends after its removal gets it told, and it stops ([`OrderEvent::Gone`]). A
//! slow root may, before it learns it was replaced, still welcome joiners: their SystemJoin
//! is in its lost tail, and the first process of the new term they speak to tells them so
//! (the active root: "you are out"; anyone else: its term, which leads them to that root).
//! Two processes that removed each other settle by the term: the one under the older stops.
//! Channels are reliable and FIFO while both ends live.
//!
//! - **Total order.** Every process delivers broadcasts in BI order, without gaps or
//!   duplicates, from the index it joined at. Any two processes that deliver index `b` deliver
//!   the same broadcast there. The only exception is a tail lost with a failure: a process
//!   that fails (or is removed) may have delivered indices that no survivor ever delivers, when
//!   the root failed with them on their way; the new root numbers other broadcasts there.
//! - **Agreement.** A broadcast delivered by any process that stays in the table is
//!   delivered by every process that stays in the table from the time it was numbered.
//! - **Validity.** A broadcast whose origin stays in the table is delivered by every process
//!   that stays in the table: the origin keeps asking (to each new root) until its broadcast is
//!   confirmed.
//! - **Confirmation.** When the origin hears [`OrderEvent::Confirmed`], every process of the
//!   table as the root then saw it has delivered the broadcast; it is therefore delivered by
//!   every future survivor, whatever fails next.
//! - **Per-origin order.** One origin's broadcasts are delivered in the order it asked for them.
//!
//! A process that joins, or a failed one that comes back ([`Broadcast::recovering`]), starts
//! from a snapshot of the root's state and delivers from the index after its `SystemJoin`; a
//! recovered process that says what it delivered before it failed first gets the broadcasts it
//! missed replayed from the BLog (section 5.2.3), when the log still holds them.
//!
//! The broadcast without total order ([`Broadcast::flood`], section 6.1) reaches, once each,
//! every process that is in the sender's table and stays up while it spreads; it is not
//! repaired after a failure and not ordered with anything.
//!
//! # Departures from the paper, each deliberate
//!
//! - A process forwards a broadcast when it delivers it, in BI order, so it always holds the
//!   table the broadcast was numbered under: the ModLog travels by reference (its [`Stamp`]),
//!   not whole (Figure 6's mixed-up arrivals cannot happen). Only the broadcast without total
//!   order, which is not delivered in order, rebuilds an older table from the stamp.
//! - A table change travels the tree it changes (the table before it), as every broadcast does;
//!   the joiner, not yet in that tree, is welcomed by the root with a snapshot instead.
//! - Gaps after a coordinator fails are repaired by the child asking its new coordinator
//!   (`Have`, section 5.2.1's comparison of BIs) and by the failed process's own coordinator
//!   pushing to the orphans (`Adopt`): whichever hears of the failure first.
//! - A new root first asks every process how far it delivered (`Sync`), fetches what it lacks
//!   from one that delivered further, and only then numbers new broadcasts under a new *term*:
//!   section 5.2.2's comparison of BIs, made safe when the old root was only slow.
//! - Failures are suspected from lost connections and failed sends, and from the ring
//!   heartbeats of [`super::heartbeat`] when they are on.
//!
//! [`Stamp`]: super::order::Stamp

mod deliver;
mod failure;
mod flood;
mod join;
pub mod msg;
mod root;
mod workload;

pub use msg::{Entry, OrderMsg, Snapshot, Term, What};
pub use workload::Workload;

use super::heartbeat::{Heartbeat, HeartbeatConfig};
use super::order::{ModLog, PoTable, Stamp};
use super::startup::StartupGrace;
use super::{Event, Outbox, Protocol, Time, TimerId};
use crate::buf::Payload;
use crate::id::IdMap;
use crate::topology::order::Structure;
use crate::NodeId;
use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::time::Duration;

/// Timer of retries: a joiner's next contact, an origin's unconfirmed requests, a stalled
/// child's repair.
pub const RETRY_TIMER: TimerId = TimerId(50);
/// Timer of the workload's next broadcast.
pub const WORK_TIMER: TimerId = TimerId(51);
/// Timer of a planned departure ([`BroadcastConfig::leave_after`]).
pub const LEAVE_TIMER: TimerId = TimerId(52);

/// The usual [`BroadcastConfig::retry`]: long against a broadcast's round trip on a cluster
/// (tens of µs to a few ms), so a retry means something was lost, not slow.
pub const RETRY: Duration = Duration::from_millis(200);

/// The usual [`BroadcastConfig::clear_every`].
pub const CLEAR_EVERY: u32 = 256;

/// Settings.
#[derive(Clone, Debug)]
pub struct BroadcastConfig {
    /// The hierarchy broadcasts travel (any structure's spanning tree).
    pub structure: Structure,
    /// Lazy update (Figure 8): departures leave ghosts until the log is cleared.
    pub lazy: bool,
    /// The root clears the logs once this many indices are delivered everywhere since the last
    /// clearing (0: never; the BLog then grows with every broadcast).
    pub clear_every: u32,
    /// Time between retries (see [`RETRY_TIMER`]).
    pub retry: Duration,
    /// Ring heartbeats, if on.
    pub heartbeat: Option<HeartbeatConfig>,
    /// Report every delivery ([`OrderEvent::Delivered`]); checkers want it, timing does not.
    pub report_deliveries: bool,
    /// Broadcasts this process makes by itself.
    pub workload: Workload,
    /// Leave the system (`SystemLeave`) this long after starting.
    pub leave_after: Option<Duration>,
}

impl Default for BroadcastConfig {
    fn default() -> Self {
        Self {
            structure: Structure::Tree { k: 4 },
            lazy: false,
            clear_every: CLEAR_EVERY,
            retry: RETRY,
            heartbeat: None,
            report_deliveries: false,
            workload: Workload::default(),
            leave_after: None,
        }
    }
}

impl BroadcastConfig {
    /// Each wrong setting, named.
    pub fn check(&self) -> Result<(), String> {
        self.structure.check()?;
        if self.retry.is_zero() {
            return Err("retry interval must be above zero".into());
        }
        if let Some(h) = &self.heartbeat {
            h.check()?;
        }
        Ok(())
    }

    /// What a job of `members` processes runs, compared in the handshake: processes that lay
    /// out another hierarchy would forward broadcasts where nobody waits for them.
    pub fn params(&self, members: usize) -> String {
        let mut p = format!(
            "order nodes={members} structure={:?} lazy={}",
            self.structure, self.lazy
        );
        if let Some(h) = &self.heartbeat {
            p.push(' ');
            p.push_str(&h.params());
        }
        p
    }
}

/// What the broadcast reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrderEvent {
    /// This process delivered broadcast `bi` (only with
    /// [`BroadcastConfig::report_deliveries`]).
    Delivered {
        /// Its index.
        bi: u64,
        /// Its origin.
        origin: NodeId,
        /// The origin's number for it (0 for a table change).
        seq: u64,
        /// Delivered from the BLog to a recovered process (section 5.2.3), not live.
        replayed: bool,
        /// When.
        at: Time,
    },
    /// This process's broadcasts up to number `seq` are delivered everywhere.
    Confirmed {
        /// The origin's number.
        seq: u64,
        /// When.
        at: Time,
    },
    /// This process's workload is done: every broadcast it made is confirmed.
    Finished {
        /// When.
        at: Time,
    },
    /// The table changed.
    Changed {
        /// Live processes.
        members: usize,
        /// When.
        at: Time,
    },
    /// A new root took over (or this process learned of it).
    RootChanged {
        /// The term.
        term: Term,
        /// When.
        at: Time,
    },
    /// This process suspects `peer`.
    Suspected {
        /// The suspect.
        peer: NodeId,
        /// When.
        at: Time,
    },
    /// A joining or recovered process was welcomed; it delivers from index `next`.
    Welcomed {
        /// The first index it delivers.
        next: u64,
        /// Broadcasts replayed to it from the BLog (a recovered process).
        replayed: u64,
        /// Whether it asked for a replay the BLog could not give (cleared past it).
        gap: bool,
        /// When.
        at: Time,
    },
    /// This process is out: it left (`left`), or was removed after a suspicion.
    Gone {
        /// It asked to leave.
        left: bool,
        /// When.
        at: Time,
    },
    /// A broadcast without total order arrived.
    Flooded {
        /// Its sender.
        origin: NodeId,
        /// The sender's number.
        seq: u64,
        /// When.
        at: Time,
    },
}

/// Where a process stands.
#[derive(Clone, Debug)]
enum Status {
    /// Asking to be let in.
    Joining(Joining),
    /// In the table.
    Member,
    /// Left or removed: it does nothing any more.
    Gone,
}

/// A process on its way in.
#[derive(Clone, Debug)]
struct Joining {
    /// Whom to ask, in turn.
    contacts: Vec<NodeId>,
    /// The next contact to ask.
    next: usize,
    /// What it delivered before it failed (a recovered process).
    have: Option<(u64, NodeId, u64)>,
}

/// The root's work.
#[derive(Clone, Debug)]
enum Role {
    /// Not the root.
    Follower,
    /// A new root learning how far every process delivered (section 5.2.2).
    Syncing(Syncing),
    /// The root, numbering broadcasts.
    Active(Active),
}

#[derive(Clone, Debug, Default)]
struct Syncing {
    /// Processes that have not answered `Sync`.
    waiting: BTreeSet<NodeId>,
    /// Each answer's next index.
    replies: BTreeMap<NodeId, u64>,
    /// The process asked for the indices this root lacks.
    fetching: Option<NodeId>,
}

#[derive(Clone, Debug, Default)]
struct Active {
    /// Every index up to this is delivered by every process of the table.
    stable: u64,
    /// The `upto` of the last clearing asked for.
    cleared: u64,
}

/// Work waiting for the root.
#[derive(Clone, Debug)]
enum Pending {
    Leave(NodeId),
    Join {
        id: NodeId,
        inc: u64,
        have: Option<(u64, NodeId, u64)>,
    },
    Clear,
}

/// One process's Process Order broadcast.
#[derive(Debug)]
pub struct Broadcast {
    me: NodeId,
    /// This process's incarnation (a restart is a new one).
    inc: u64,
    cfg: BroadcastConfig,
    now: Time,
    status: Status,
    /// Asked to leave: the `SystemLeave` that removes it is a departure, not an exclusion.
    leaving: bool,
    /// The table and its ModLog.
    log: ModLog,
    term: Term,
    /// The highest term number heard of.
    seen_term: u64,
    /// The next index to deliver.
    next: u64,
    /// The index of this life's `SystemJoin` (0 for the initial members).
    joined_at: u64,
    /// Broadcasts that came before their turn.
    holdback: BTreeMap<u64, Entry>,
    /// Broadcasts that came to a joiner before its welcome, with the term they came under.
    early: BTreeMap<u64, (Entry, Term)>,
    /// Broadcasts delivered since the last clearing (the BLog).
    blog: BTreeMap<u64, Entry>,
    /// Processes this one counts gone (suspected, or removed and not back).
    suspected: BTreeSet<NodeId>,
    /// The coordinator last computed (acks and repairs go there).
    parent: Option<NodeId>,
    /// Each child's last ack.
    child_acks: IdMap<NodeId, (Stamp, u64)>,
    /// The ack value a stalled child had at the last retry.
    stalled: IdMap<NodeId, u64>,
    /// Children this process pushed a repair to after their coordinator failed: their `Have`
    /// needs no second one.
    adopted: BTreeSet<NodeId>,
    /// The last ack sent up, and the table it was made under.
    acked: u64,
    acked_stamp: Option<Stamp>,
    /// The ack was said again this retry interval.
    reacked: bool,
    /// This process's broadcasts: the last number used, and those not yet confirmed.
    my_seq: u64,
    unconfirmed: BTreeMap<u64, Payload>,
    confirmed_upto: u64,
    /// `confirmed_upto` at the last retry (no progress since: ask again).
    confirmed_at_retry: u64,
    /// The highest number delivered from each origin.
    seqs: IdMap<NodeId, u64>,
    role: Role,
    /// Requests waiting for their turn at the root, by origin and number.
    requests: BTreeMap<NodeId, BTreeMap<u64, Payload>>,
    /// Table changes waiting at the root.
    pending: VecDeque<Pending>,
    heartbeat: Option<Heartbeat>,
    flood: flood::FloodState,
    work: workload::WorkState,
    /// Deliveries, and a digest of their (index, origin, number) sequence: equal digests, equal
    /// histories.
    delivered: u64,
    digest: u64,
    version: u64,
}

impl Broadcast {
    /// A member of the initial set `members` (any order: sorted into the table).
    pub fn new(me: NodeId, members: Vec<NodeId>, cfg: BroadcastConfig) -> Self {
        let table = PoTable::new(members, cfg.lazy);
        let root = table.live_ids().next().unwrap_or(me);
        let mut b = Self::blank(me, 0, cfg, table, Status::Member);
        b.term = Term { n: 0, root };
        b.role = if root == me {
            Role::Active(Active::default())
        } else {
            Role::Follower
        };
        b.parent = b.tree_parent();
        b
    }

    fn blank(me: NodeId, inc: u64, cfg: BroadcastConfig, table: PoTable, status: Status) -> Self {
        let heartbeat = cfg.heartbeat.map(Heartbeat::new);
        Self {
            me,
            inc,
            now: Time::ZERO,
            status,
            leaving: false,
            log: ModLog::new(table, 0),
            // Below every real term, so a joiner follows the first one it hears of.
            term: Term {
                n: 0,
                root: NodeId(0),
            },
            seen_term: 0,
            next: 1,
            joined_at: 0,
            holdback: BTreeMap::new(),
            early: BTreeMap::new(),
            blog: BTreeMap::new(),
            suspected: BTreeSet::new(),
            parent: None,
            child_acks: IdMap::default(),
            stalled: IdMap::default(),
            adopted: BTreeSet::new(),
            acked: 0,
            acked_stamp: None,
            reacked: false,
            my_seq: 0,
            unconfirmed: BTreeMap::new(),
            confirmed_upto: 0,
            confirmed_at_retry: 0,
            seqs: IdMap::default(),
            role: Role::Follower,
            requests: BTreeMap::new(),
            pending: VecDeque::new(),
            heartbeat,
            flood: flood::FloodState::default(),
            work: workload::WorkState::default(),
            delivered: 0,
            digest: DIGEST_SEED,
            version: 0,
            cfg,
        }
    }

    /// This process's id.
    pub fn id(&self) -> NodeId {
        self.me
    }

    /// The table as this process has it.
    pub fn table(&self) -> &PoTable {
        self.log.table()
    }

    /// The current term (its root).
    pub fn term(&self) -> Term {
        self.term
    }

    /// The next index this process delivers.
    pub fn next_index(&self) -> u64 {
        self.next
    }

    /// Broadcasts delivered, and the digest of their sequence.
    pub fn history(&self) -> (u64, u64) {
        (self.delivered, self.digest)
    }

    /// Whether this process left or was removed.
    pub fn is_gone(&self) -> bool {
        matches!(self.status, Status::Gone)
    }

    /// Whether this process is in the table (not joining, not gone).
    pub fn is_member(&self) -> bool {
        matches!(self.status, Status::Member)
    }

    /// Whether this process is the root and numbering broadcasts.
    pub fn is_root(&self) -> bool {
        matches!(self.role, Role::Active(_))
    }

    /// This process's broadcasts not yet confirmed.
    pub fn unconfirmed(&self) -> usize {
        self.unconfirmed.len()
    }

    /// Numbers this process gave its broadcasts so far (the last one).
    pub fn submitted(&self) -> u64 {
        self.my_seq
    }

    /// The highest of this process's numbers confirmed.
    pub fn confirmed(&self) -> u64 {
        self.confirmed_upto
    }

    /// The state a trace shows: term, role, next index, coordinator, children and their acks.
    pub fn describe(&self) -> String {
        let acks: Vec<String> = self
            .children()
            .iter()
            .map(|c| format!("{c}:{:?}", self.child_acks.get(c)))
            .collect();
        format!(
            "{} term {:?} root {} next {} parent {:?} acked {} under {:?} stamp {:?} children [{}] suspected {:?}",
            self.me,
            self.term,
            self.is_root(),
            self.next,
            self.parent,
            self.acked,
            self.acked_stamp,
            self.log.stamp(),
            acks.join(" "),
            self.suspected
        )
    }

    /// The BLog's length (broadcasts kept since the last clearing).
    pub fn blog_len(&self) -> usize {
        self.blog.len()
    }

    /// Broadcast `body` in total order; returns its number. The origin keeps it until it is
    /// confirmed, and asks each new root again.
    pub fn submit(&mut self, body: Payload, out: &mut Outbox<OrderMsg>) -> u64 {
        self.my_seq += 1;
        let seq = self.my_seq;
        self.unconfirmed.insert(seq, body.clone());
        self.request(seq, body, out);
        seq
    }

    /// Send this process's request `seq` where it is numbered: to the root, or to itself.
    fn request(&mut self, seq: u64, body: Payload, out: &mut Outbox<OrderMsg>) {
        if self.term.root == self.me {
            self.on_request(self.me, self.inc, seq, body, out);
        } else {
            let inc = self.inc;
            out.send(self.term.root, OrderMsg::Request { inc, seq, body });
        }
    }

    /// Ask again for every broadcast of this process not yet confirmed.
    fn request_unconfirmed(&mut self, out: &mut Outbox<OrderMsg>) {
        let again: Vec<(u64, Payload)> = self
            .unconfirmed
            .iter()
            .map(|(&s, b)| (s, b.clone()))
            .collect();
        for (seq, body) in again {
            self.request(seq, body, out);
        }
    }

    fn is_down(&self, id: NodeId) -> bool {
        self.suspected.contains(&id)
    }

    /// My children in the tree of the current table, suspects spliced out.
    fn children(&self) -> Vec<NodeId> {
        self.log
            .table()
            .tree(self.cfg.structure, |i| self.is_down(i))
            .children(self.me)
    }

    fn tree_parent(&self) -> Option<NodeId> {
        self.log
            .table()
            .tree(self.cfg.structure, |i| self.is_down(i))
            .parent(self.me)
    }

    fn tree_root(&self) -> Option<NodeId> {
        self.log
            .table()
            .tree(self.cfg.structure, |i| self.is_down(i))
            .root()
    }

    fn gone_above(&self, id: NodeId) -> Vec<NodeId> {
        self.log
            .table()
            .tree(self.cfg.structure, |i| self.is_down(i))
            .gone_above(id)
    }

    /// The ring changed (table or suspicions): heartbeats follow it.
    fn update_ring(&mut self, out: &mut Outbox<OrderMsg>) {
        if !self.is_member() {
            return;
        }
        let Some(hb) = self.heartbeat.as_mut() else {
            return;
        };
        let table = self.log.table();
        let down = |i: NodeId| self.suspected.contains(&i);
        let pred = table.ring_pred(self.me, down);
        let succ = table.ring_succ(self.me, down);
        hb.set_ring(self.now, pred, succ, out);
    }

    /// Leave or be removed: nothing more is done.
    fn gone(&mut self, left: bool, out: &mut Outbox<OrderMsg>) {
        if self.is_gone() {
            return;
        }
        self.status = Status::Gone;
        self.role = Role::Follower;
        if let Some(hb) = self.heartbeat.as_mut() {
            hb.stop(out);
        }
        out.cancel_timer(RETRY_TIMER);
        out.cancel_timer(WORK_TIMER);
        out.cancel_timer(LEAVE_TIMER);
        out.report(Event::Order(OrderEvent::Gone { left, at: self.now }));
    }

    /// Handle one message.
    fn handle(&mut self, from: NodeId, msg: OrderMsg, out: &mut Outbox<OrderMsg>) {
        if self.is_gone() {
            return;
        }
        if let Some(hb) = self.heartbeat.as_mut() {
            hb.heard(self.now, from);
        }
        // A process removed from the table (only slow, if it still talks) is told so once.
        // Unless it speaks under a newer term: then this process is the one left behind (it
        // was the slow one), and the term decides.
        if self.is_member()
            && self.suspected.contains(&from)
            && !self.log.table().is_live(from)
            && !matches!(msg, OrderMsg::Join { .. })
            && msg.term().is_none_or(|t| t <= self.term)
        {
            out.send(from, self.failed(from));
            return;
        }
        // One that speaks as a member but is not a live member of the table: a root that no longer was one
        // may have welcomed it, its SystemJoin lost with that root's tail. The active root's
        // table is the authority: it is told it is out. Another table may only lag behind a
        // join (a syncing root's too, until it fetched), so it just names its term: a process
        // left behind under an old term adopts the new one and talks to its root, which tells
        // it.
        if self.is_member() && msg.claims_membership() && !self.log.table().is_live(from) {
            if let Role::Active(_) = self.role {
                out.send(from, OrderMsg::Out { term: self.term });
                return;
            }
            out.send(from, OrderMsg::Redirect { term: self.term });
        }
        match msg {
            OrderMsg::Request { inc, seq, body } => self.on_request(from, inc, seq, body, out),
            OrderMsg::Bcast { entry, via } => self.on_bcast(from, entry, via, out),
            OrderMsg::Ack { upto, stamp } => self.on_ack(from, upto, stamp, out),
            OrderMsg::Confirmed { upto } => self.on_confirmed(upto, out),
            OrderMsg::Have { term, next, dead } => self.on_have(from, term, next, dead, out),
            OrderMsg::Adopt { term, dead } => self.on_adopt(term, dead, out),
            OrderMsg::Failed { id, next } => self.on_failed(id, next, out),
            OrderMsg::Sync { term, dead } => self.on_sync(term, dead, out),
            OrderMsg::Synced { term, next } => self.on_synced(from, term, next, out),
            OrderMsg::Fetch { from: first, upto } => self.on_fetch(from, first, upto, out),
            OrderMsg::Join { id, inc, have } => self.on_join(id, inc, have, out),
            OrderMsg::Leave { id } => self.on_leave(id, out),
            OrderMsg::Redirect { term } => self.on_redirect(term, out),
            OrderMsg::Out { term } => self.on_out(term, out),
            OrderMsg::Welcome(s) => self.on_welcome(*s, out),
            OrderMsg::Flood {
                origin,
                seq,
                stamp,
                body,
            } => self.on_flood(from, origin, seq, stamp, body, out),
            OrderMsg::Beat(b) => {
                if let Some(hb) = self.heartbeat.as_mut() {
                    hb.on_beat(from, &b);
                }
            }
        }
    }

    fn on_timer_inner(&mut self, timer: TimerId, out: &mut Outbox<OrderMsg>) {
        if self.is_gone() {
            return;
        }
        if let Some(hb) = self.heartbeat.as_mut() {
            if let Some(peer) = hb.on_timer(self.now, timer, &StartupGrace::none(), out) {
                self.suspect(peer, out);
                return;
            }
        }
        match timer {
            RETRY_TIMER => self.retry(out),
            WORK_TIMER => self.work_timer(out),
            LEAVE_TIMER => self.leave(out),
            _ => {}
        }
    }

    /// The retry round: ask again whatever has not moved for a whole interval.
    fn retry(&mut self, out: &mut Outbox<OrderMsg>) {
        out.set_timer(RETRY_TIMER, self.cfg.retry);
        self.reacked = false;
        if matches!(self.status, Status::Joining(_)) {
            self.ask(out);
            return;
        }
        // The origin: unconfirmed and nothing confirmed since the last round.
        if !self.unconfirmed.is_empty() && self.confirmed_upto == self.confirmed_at_retry {
            self.request_unconfirmed(out);
        }
        self.confirmed_at_retry = self.confirmed_upto;
        self.repair_stalled(out);
        self.report_suspects(out);
    }

    /// A follower's suspicions the table still ignores are told to the root again: the first
    /// report may have gone to a root that failed before acting on it, and the new root
    /// would otherwise keep the suspect as this process's coordinator or child while this
    /// process splices it out, each side waiting for the other for good.
    fn report_suspects(&mut self, out: &mut Outbox<OrderMsg>) {
        let root = self.term.root;
        if !matches!(self.role, Role::Follower) || !self.is_member() || root == self.me {
            return;
        }
        let table = self.log.table();
        let stale: Vec<NodeId> = self
            .suspected
            .iter()
            .copied()
            .filter(|&s| s != root && table.is_live(s))
            .collect();
        for s in stale {
            out.send(root, self.failed(s));
        }
    }

    /// Send `to` every broadcast of the BLog from index `from` up to what this process
    /// delivered.
    fn resend(&self, to: NodeId, from: u64, out: &mut Outbox<OrderMsg>) {
        if from >= self.next {
            return; // it is ahead of this process: nothing to give
        }
        let via = self.term;
        for e in self.blog.range(from..self.next).map(|(_, e)| e) {
            out.send(
                to,
                OrderMsg::Bcast {
                    entry: e.clone(),
                    via,
                },
            );
        }
    }

    fn bump(&mut self) {
        self.version += 1;
    }
}

/// The digest's start and step (FNV-1a over the words of each delivery).
const DIGEST_SEED: u64 = 0xcbf2_9ce4_8422_2325;

fn digest_step(d: u64, words: [u64; 3]) -> u64 {
    words
        .iter()
        .fold(d, |d, w| (d ^ w).wrapping_mul(0x100_0000_01b3))
}

impl Protocol for Broadcast {
    type Msg = OrderMsg;
    type Event = crate::proto::Event;
    type Request = crate::proto::NoRequest;

    fn on_start(&mut self, now: Time, out: &mut Outbox<OrderMsg>) {
        self.now = now;
        out.set_timer(RETRY_TIMER, self.cfg.retry);
        if let Some(after) = self.cfg.leave_after {
            out.set_timer(LEAVE_TIMER, after);
        }
        match self.status {
            Status::Joining(_) => self.ask(out),
            Status::Member => {
                self.update_ring(out);
                self.work_start(out);
            }
            Status::Gone => {}
        }
        self.bump();
    }

    fn on_message(&mut self, now: Time, from: NodeId, msg: OrderMsg, out: &mut Outbox<OrderMsg>) {
        self.now = now;
        self.handle(from, msg, out);
        self.bump();
    }

    fn on_timer(&mut self, now: Time, timer: TimerId, out: &mut Outbox<OrderMsg>) {
        self.now = now;
        self.on_timer_inner(timer, out);
        self.bump();
    }

    fn on_suspect(&mut self, now: Time, peer: NodeId, out: &mut Outbox<OrderMsg>) {
        self.now = now;
        self.suspect(peer, out);
        self.bump();
    }

    fn state_version(&self) -> u64 {
        self.version
    }
}

/// Ids already seen by a set: the flood's duplicates.
type Seen = HashSet<(NodeId, u64)>;
