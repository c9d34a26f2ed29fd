//! Radix-tree membership with tree stabilization (Varma et al., ICS'06, sections 3.1–3.7).
//!
//! Every process holds the view (the sorted list of live ids) and the radix tree over it, and
//! computes its parent and children locally. On a failure the detector tells the root
//! (`NodeFailure`, acknowledged with `FailureDetAck`); the root recalculates and sends
//! `FailedNode` to its children, each process recalculates and forwards it down; leaves
//! answer `FailureAck`, inner processes once all their children have, and the tree is
//! stabilized when the root has every child's ack. A root failure goes to the next live process
//! of the list (`RootFailure`), which becomes the root and sends `RootDead` down instead; if
//! that one is dead too, whoever sent it the `RootFailure` finds out (its connection fails)
//! and sends to the next, so a chain of dead successors is walked until a live one takes over.
//! Failures found while a stabilization is in flight start a new epoch with the larger set.
//! A new process asks the root to join (`NewNode`), a recovered one to come back with its old
//! id (`NodeAlive`); the root adds it as a leaf at the bottom of the tree, sends
//! `NewNodeJoin` down (acknowledged up with `NewNodeJoinAck`), and once stable welcomes it with
//! `JoinDetAck`. A joiner that hears nothing asks the next process of its list.
//!
//! A view is named by its epoch *and its root*: a root that dies while its epoch `e` is on
//! its way down leaves some processes in `e`, and the process taking over, which may never have
//! heard of `e`, starts its own epoch. Numbers alone would then name two views. A process
//! installs a regroup that is newer than its own (higher epoch number, or the same with a later
//! root) or that replaces its root (declares it dead: a takeover, whatever its number), and
//! never one whose root its own state counts dead. Acknowledgments name both too, so an ack of
//! the old root's epoch does not count for the new one. The new root numbers its epoch past
//! every number it has heard of (its own, the reports' `RootFailure { epoch }`), so numbers
//! collide only when a takeover raced an epoch nobody reported.
//!
//! Departures from the paper, each deliberate:
//! - The state of an epoch is the *list* (the initial view, then every admitted joiner in
//!   order) and the set of its dead positions; every message that changes the tree carries all
//!   of it ([`Regroup`]). Failures apply in list order, so every process computes the same
//!   tree whatever order it heard of them in, and one that missed an epoch catches up. A
//!   recovered process is a new position at the end of the list under its old id, as the paper
//!   adds it at the bottom like a new node. ICS'06's root is the lowest live id, so a recovered
//!   process below the root becomes root again; `TreeMode::Lowest` does that (the admitting
//!   root hands it the epoch), the other modes keep the root that took over.
//! - `TreeMode::Rebalance` recomputes the balanced radix tree over the live view instead of
//!   patching, so trees do not degrade after many failures. (Process Order's *lazy update* is
//!   the opposite trade: patch now, recompute only when the log is cleared.)
//! - Failures are detected by the `HowAreYou` probe (section 2.2: a process asks its tree
//!   neighbors every `period` and suspects one that has not answered `IAmFine` within
//!   `timeout`) and by [`Protocol::on_suspect`] (a lost connection on the engine, a failed send
//!   in the simulator). Only tree neighbors report; others remember the suspicion.
//! - The children of a failed process hold their report for [`MembershipConfig::orphan_hold`]
//!   and leave it to the failed process's parent, which reports at once: one report per
//!   failure instead of one per neighbor, and no child has to reach the root (on the engine,
//!   a dial and a handshake each, in the middle of the stabilization). A child reports when
//!   the hold runs out or an epoch comes without the failure.
//! - Ring heartbeats ([`MembershipConfig::heartbeat`], from Gendelman et al. section 5.1,
//!   not ICS'06) find a process that hangs with its connections up: each process beats to its
//!   successor in the view's order and its successor, the only one that can tell, reports it
//!   at once whether or not it is a tree neighbor. A process excluded while it hung beats on
//!   when it wakes; the process it beats to shows it the view (`Excluded`), so it asks back
//!   in before its own deadline makes it blame a predecessor that moved on without it.
//! - A process may leave on purpose ([`Membership::leave`], SIGTERM in `weft node`): it reports
//!   itself to the root as a failure, which the root handles as one but reports as
//!   [`MemberEvent::Left`]; the paper has no leave.
//! - With probing on, lost messages are sent again on the probe clock, a child that never
//!   acknowledges is suspected (the FAILURE_ACK timeout), and views that split (a partition,
//!   false suspicions both ways) merge again under the lower root ([`repair`]; ICS'06 lets a
//!   cut-off subtree form its own view and stops there).

mod repair;

pub use repair::ACK_ROUNDS;
use repair::VIA_TRIES;

use super::heartbeat::{Beat, Heartbeat, HeartbeatConfig, BEAT_TIMER, WATCH_TIMER};
use super::startup::StartupGrace;
use super::views::{Installed, SharedViews};
use super::{Event, Outbox, Protocol, Time, TimerId};
use crate::id::IdMap;
use crate::topology::radix::RadixTree;
use crate::topology::recalc::{self, Neighbors};
use crate::{NodeId, Rank};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// How the tree follows failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TreeMode {
    /// The paper's local recalculation: a failed node's children move to its parent.
    Patch,
    /// Recompute the balanced radix tree over the live view.
    Rebalance,
    /// Recompute the balanced radix tree over the live view sorted by id, so that the root is
    /// always the lowest live id (ICS'06 section 3.1: "the node with lowest ID is the root").
    /// A recovered process with an id below the root's takes the root back: the root that
    /// admits it hands it the epoch that admits it, and the recovered process sends that
    /// epoch down and collects its acknowledgments (section 3.7: "if the joiner happens to be
    /// the new root, every node agrees on this during the tree recalculation phase"). With
    /// `Rebalance`, a recovered process goes to the end of the order and never becomes root
    /// again.
    Lowest,
}

/// Timer of the probe rounds.
pub const PROBE_TIMER: TimerId = TimerId(10);
/// Timer of the probe deadline.
pub const TIMEOUT_TIMER: TimerId = TimerId(11);
/// Timer of a joiner's retry (ask the next process of the list).
pub const JOIN_TIMER: TimerId = TimerId(12);
/// Timer of the root's batching window (see [`MembershipConfig::batch`]).
pub const BATCH_TIMER: TimerId = TimerId(13);
/// Timer of a held report (see [`MembershipConfig::orphan_hold`]).
pub const HOLD_TIMER: TimerId = TimerId(14);

/// The usual [`MembershipConfig::orphan_hold`]: far above the time a failure's first report
/// takes to reach the root (tens of µs, a few ms with a thousand processes on two cores), so it
/// runs out only when that report really did not come.
pub const ORPHAN_HOLD: Duration = Duration::from_millis(20);

/// The membership state of an epoch, as messages carry it: the processes appended to the
/// initial view (joiners and recovered processes, in the order the root admitted them) and
/// the dead positions of the list `initial ++ appended`.
#[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Regroup {
    /// Stabilization epoch.
    pub epoch: u64,
    /// Dead positions of the list, ascending.
    pub dead: Vec<u32>,
    /// Processes appended to the initial view, in order.
    pub appended: Vec<NodeId>,
    /// The root of this epoch.
    pub root: NodeId,
}

pub use self::wire_form::MemberMsg;

/// A module of its own for the archived form: rkyv derives a resolver enum whose variant
/// fields carry no docs, and kept private it stays out of the public API.
mod wire_form {
    use super::*;

    /// Messages of the membership protocol.
    #[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
    pub enum MemberMsg {
        /// Failure detector probe.
        HowAreYou {
            /// Probe number.
            seq: u64,
            /// The prober's installed epoch.
            epoch: u64,
            /// The root of that epoch.
            root: NodeId,
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
            /// The highest epoch number the detector has heard of: the new root numbers its
            /// epoch past it.
            epoch: u64,
        },
        /// Down the tree: recalculate after failures.
        FailedNode(Regroup),
        /// Down the tree after a root failure (carries the new root).
        RootDead(Regroup),
        /// Down the tree after a join or a recovery.
        NewNodeJoin(Regroup),
        /// Up the tree: my subtree is stable in the epoch `epoch` of `root` (after `FailedNode` or
        /// `RootDead`).
        FailureAck {
            /// Stabilization epoch.
            epoch: u64,
            /// Its root.
            root: NodeId,
        },
        /// Up the tree: my subtree is stable in the epoch `epoch` of `root` (after `NewNodeJoin`).
        NewNodeJoinAck {
            /// Stabilization epoch.
            epoch: u64,
            /// Its root.
            root: NodeId,
        },
        /// A new process asks to join.
        NewNode {
            /// Its id.
            id: NodeId,
            /// The highest epoch number the asker has heard of: the epoch that admits it is
            /// numbered past it (see [`Membership::root_admits`]).
            epoch: u64,
        },
        /// A recovered process asks to come back with its old id.
        NodeAlive {
            /// Its id.
            id: NodeId,
            /// The highest epoch number the asker has heard of, as in `NewNode`.
            epoch: u64,
        },
        /// Root → joiner, once the tree with it is stable: welcome (with the state to adopt).
        JoinDetAck(Regroup),
        /// To a process the sender's view does not hold (it probed the sender, or a root looks
        /// for strays): the sender's view now. Not in the paper (see [`repair`]).
        Excluded(Regroup),
        /// A ring heartbeat ([`MembershipConfig::heartbeat`]; Gendelman et al. section 5.1).
        Beat(Beat),
    }
}

impl From<Beat> for MemberMsg {
    fn from(b: Beat) -> Self {
        MemberMsg::Beat(b)
    }
}

impl super::Message for MemberMsg {
    const TAG: super::Tag = 4;
    const NAME: &'static str = "membership";
}

/// What made a process suspect a peer: which detector fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Suspicion {
    /// The transport lost its connection to the peer, or could not make one
    /// ([`Protocol::on_suspect`]): a crash, a kill, a reset.
    Lost,
    /// The peer missed its heartbeat deadline while its connection stayed up: it hangs
    /// (stopped, swapping). Only its ring successor, its watcher, sees this.
    Hung,
    /// A probe, or the acknowledgement of an epoch, went unanswered past its deadline.
    Unanswered,
    /// The peer came back as a new incarnation without its state (a restart): its old self
    /// is gone.
    Restarted,
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
        /// What made this process suspect it.
        why: Suspicion,
    },
    /// This process installed a new view.
    ViewChanged {
        /// Epoch.
        epoch: u64,
        /// The epoch's root (with the epoch, the view's name).
        root: NodeId,
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
    /// A joining or recovered process was welcomed (`JoinDetAck`) into `epoch`.
    Joined {
        /// Epoch.
        epoch: u64,
        /// When.
        at: Time,
    },
    /// `peer` left the job on purpose ([`Membership::leave`]): at the root that excludes it,
    /// and at the leaving process itself once a view without it is installed.
    Left {
        /// Who left.
        peer: NodeId,
        /// When.
        at: Time,
    },
}

/// A tree over node ids: parent and ordered children of every member.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdTree {
    root: Option<NodeId>,
    parent: IdMap<NodeId, NodeId>,
    children: IdMap<NodeId, Vec<NodeId>>,
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

/// Settings.
#[derive(Clone, Copy, Debug)]
pub struct MembershipConfig {
    /// Children per node, a power of two.
    pub radix: u32,
    /// Patch (paper) or rebalance.
    pub mode: TreeMode,
    /// `HowAreYou` probing of tree neighbors: (period, timeout); `None` relies on
    /// `on_suspect` alone.
    pub probe: Option<(Duration, Duration)>,
    /// At start, also greet (`HowAreYou`, no answer awaited) the processes a single failure
    /// would make tree neighbors ([`recalc::standby`]): on a connection-oriented transport
    /// their connections then exist before a stabilization needs them.
    pub warm: bool,
    /// How long the root collects failure reports before it starts an epoch with all of them
    /// (`ZERO`: at once, one epoch per new report). Several failures at a time then cost one
    /// stabilization wave instead of one each, for this much more latency on a single failure.
    pub batch: Duration,
    /// Failures the root learns while its epoch is still on its way wait for that epoch to
    /// stabilize and go into the next one together (ICS'06: every failure found during a
    /// phase is handled in the next, so `k` failures cost at most `H - 1` further phases),
    /// instead of restarting the epoch with each (`false`, weft's default: a single failure
    /// is installed sooner). A new root still starts at once.
    pub collect: bool,
    /// How long a process whose parent failed leaves the report to that parent's own parent,
    /// which detects the same failure and reports it at once (`ZERO`: report at once, as in
    /// the paper). A failure then costs one report instead of one per child, and the children
    /// need no connection to the root; if the report does not come (that parent died too, or
    /// did not notice), the hold runs out and the children report, and an epoch that still
    /// lacks the failure makes them report it at once.
    pub orphan_hold: Duration,
    /// Ring heartbeats over the installed view ([`super::heartbeat`]): each process beats to
    /// its successor in the view's order and suspects its predecessor after a silence, which
    /// finds a process that hangs with its connections up (`None`: off).
    pub heartbeat: Option<HeartbeatConfig>,
}

impl Default for MembershipConfig {
    /// What `weft node` runs by default: radix 4, patched trees, no periodic probes (one round
    /// at start, then lost connections), the standby connections warmed, failures installed
    /// one epoch each at once, the usual orphan hold, and ring heartbeats every 100 ms.
    fn default() -> Self {
        let once = Duration::from_secs(3600);
        Self {
            radix: 4,
            mode: TreeMode::Patch,
            probe: Some((once, once)),
            warm: true,
            batch: Duration::ZERO,
            collect: false,
            orphan_hold: ORPHAN_HOLD,
            heartbeat: Some(HeartbeatConfig::default()),
        }
    }
}

impl MembershipConfig {
    /// What a job of `members` processes with these settings runs, as its nodes compare it in
    /// the handshake: processes that disagree on the size, the radix or the tree mode would
    /// compute different trees from the same view, so they refuse each other.
    pub fn params(&self, members: usize) -> String {
        let mode = match self.mode {
            TreeMode::Patch => "patch",
            TreeMode::Rebalance => "rebalance",
            TreeMode::Lowest => "lowest",
        };
        let beats = self
            .heartbeat
            .map_or(String::new(), |h| format!(" {}", h.params()));
        format!(
            "membership nodes={members} radix={} mode={mode}{beats}",
            self.radix
        )
    }
}

/// The initial view a process starts from: its own copy, or one shared with the other
/// processes of a simulation ([`SharedViews`]).
#[derive(Clone, Debug)]
pub enum InitialView {
    /// The process's own list (any order; it is sorted).
    Own(Vec<NodeId>),
    /// A table shared by the processes of one address space.
    Shared(SharedViews),
}

impl From<Vec<NodeId>> for InitialView {
    fn from(v: Vec<NodeId>) -> Self {
        InitialView::Own(v)
    }
}

impl From<&SharedViews> for InitialView {
    fn from(s: &SharedViews) -> Self {
        InitialView::Shared(s.clone())
    }
}

/// What a process outside the view asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asking {
    /// `NewNode`: a new process.
    Join,
    /// `NodeAlive`: a recovered process with its old id.
    Rejoin,
}

/// A process on its way into the view.
#[derive(Clone, Copy, Debug)]
struct Joining {
    asking: Asking,
    /// Index in the initial list of the next process to ask.
    next: usize,
    /// How long to wait for `JoinDetAck` before asking the next one.
    retry: Duration,
    /// A process to ask before the list (the root of the view this one leaves its own for,
    /// see [`repair`]), and how many times it was asked.
    via: Option<NodeId>,
    tries: u32,
    /// Requests sent, all targets: after [`repair::OWN_VIEW_AFTER`] list lengths of them
    /// without a welcome, the process starts a view of its own.
    asked: u32,
    /// The highest epoch this process had heard of when it began to ask: every welcome to
    /// this request is at least as new (see [`Membership::root_admits`]); an older one is a
    /// welcome to an earlier request, duplicated or delayed, into a view long gone.
    since: u64,
}

/// One process's membership state.
#[derive(Debug)]
pub struct Membership {
    me: NodeId,
    cfg: MembershipConfig,
    /// The initial view, sorted.
    initial: Arc<[NodeId]>,
    /// Where the views of each state are shared with other processes of one address space
    /// (the simulator's), if anywhere.
    shared: Option<SharedViews>,
    /// The installed epoch's state.
    state: Regroup,
    /// `state.dead` as a set.
    dead: BTreeSet<u32>,
    /// `initial ++ state.appended`.
    list: Arc<[NodeId]>,
    /// Suspects and the list position (incarnation) each was suspected at.
    suspected: BTreeMap<NodeId, u32>,
    /// Suspects this process reported to a root (reported again after a root change).
    reported: BTreeSet<NodeId>,
    /// A report is held ([`MembershipConfig::orphan_hold`]) and its timer armed.
    holding: bool,
    /// The installed view, shared with the events that announce it.
    view: Arc<[NodeId]>,
    /// The live processes in list order (the view before sorting): the order the balanced
    /// tree of `TreeMode::Rebalance` is laid over, so joiners land at the bottom and the root
    /// is the first live process of the list in both modes. The same slice as `view` while
    /// nobody joined (the list is then sorted).
    order: Arc<[NodeId]>,
    /// This process's root, parent and children in the installed tree.
    nb: Neighbors,
    /// Whether the installed epoch came with a `NewNodeJoin` (its acks are `NewNodeJoinAck`).
    joining_epoch: bool,
    waiting: BTreeSet<NodeId>,
    /// At the root: processes admitted in this epoch, welcomed once it is stable.
    welcome: BTreeSet<NodeId>,
    /// This view's root asked to come back (`NodeAlive`): it left the view, which is a root
    /// failure, and whoever takes over admits it. When that is this process only after a
    /// chase (the next in line was dead too), it admits it once its own epoch is stable:
    /// the asker went on round the list meanwhile, and may not come back here before it
    /// gives up and founds a view of its own (two views, one process each, for good).
    asker: Option<(NodeId, u64)>,
    /// This process admitted the installed epoch's root and handed it the epoch
    /// ([`TreeMode::Lowest`]): the hand-over is sent again every probe round until the epoch
    /// comes back down from that root.
    handed: bool,
    /// At the root, while a batching window is open: whether the root changed.
    batching: Option<bool>,
    /// At the root, with [`MembershipConfig::collect`]: failures wait for the epoch on its
    /// way to stabilize.
    collecting: bool,
    /// Outside the view and asking in.
    joining: Option<Joining>,
    /// The driver's clock at the current call (events carry it).
    now: Time,
    version: u64,
    probe_seq: u64,
    /// Probes awaiting an answer: peer → (seq, deadline).
    outstanding: IdMap<NodeId, (u64, Time)>,
    /// The process this one asked to take over from the failed root (`RootFailure`), until a
    /// new epoch comes: if it turns out dead too, the next one is asked.
    failover: Option<NodeId>,
    /// The highest epoch number heard of, installed or not.
    seen_epoch: u64,
    /// How the installed epoch came down (`FailedNode`, `RootDead` or `NewNodeJoin`): what is
    /// sent again to children that have not acknowledged it.
    down: fn(Regroup) -> MemberMsg,
    /// Probe rounds the installed epoch has waited for acknowledgments.
    waited_rounds: u32,
    /// Probe rounds the installed epoch has still counted alive a process this one suspects.
    stale_rounds: u32,
    /// Suspects reported to the root and not yet acknowledged (`FailureDetAck`).
    unacked: BTreeSet<NodeId>,
    /// At the root: the next position of the list to look at for a process this view
    /// counts dead that may be alive in a view of its own (see [`repair`]).
    stray_next: usize,
    /// Ring heartbeats, when on ([`MembershipConfig::heartbeat`]).
    beats: Option<Heartbeat>,
    /// What the heartbeat ring was last computed from: the state's version, the number of
    /// suspects (a suspect leaves the ring before the view excludes it) and whether this
    /// process was asking in (a welcome into an installed epoch changes nothing else).
    ring_from: (u64, usize, bool),
    /// How long after its start a peer never heard from is not suspected by a heartbeat or a
    /// probe deadline ([`Membership::with_startup_grace`]).
    startup: Duration,
    /// That grace, from `on_start` on.
    grace: StartupGrace,
    /// Leaving on purpose ([`Membership::leave`]): a view without this process is the goal,
    /// not an exclusion to ask back in from.
    leaving: bool,
    /// `Left` was reported for this process itself.
    left_reported: bool,
    /// At the root: processes that said goodbye, shown the view without them once it is
    /// stable, so that no member still holding them sees their connections go (a detection).
    leavers: BTreeSet<NodeId>,
    /// Set from outside (a signal handler) to ask this process to leave at its next wake.
    leave_flag: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl Membership {
    /// A member of the initial `view` (any order; it is sorted), or of a [`SharedViews`]'s.
    pub fn new(me: NodeId, view: impl Into<InitialView>, cfg: MembershipConfig) -> Self {
        let (initial, shared) = match view.into() {
            InitialView::Own(mut v) => {
                v.sort_unstable();
                v.dedup();
                (Arc::<[NodeId]>::from(v), None)
            }
            InitialView::Shared(s) => (s.initial().clone(), Some(s)),
        };
        let mut m = Self {
            me,
            cfg,
            list: initial.clone(),
            view: initial.clone(),
            order: initial.clone(),
            initial,
            shared,
            state: Regroup {
                epoch: 0,
                dead: Vec::new(),
                appended: Vec::new(),
                root: me,
            },
            dead: BTreeSet::new(),
            suspected: BTreeMap::new(),
            reported: BTreeSet::new(),
            holding: false,
            nb: Neighbors {
                root: me,
                parent: None,
                children: Vec::new(),
            },
            joining_epoch: false,
            waiting: BTreeSet::new(),
            welcome: BTreeSet::new(),
            asker: None,
            handed: false,
            batching: None,
            collecting: false,
            joining: None,
            now: Time::ZERO,
            version: 0,
            probe_seq: 0,
            outstanding: IdMap::default(),
            failover: None,
            seen_epoch: 0,
            down: MemberMsg::FailedNode,
            waited_rounds: 0,
            stale_rounds: 0,
            unacked: BTreeSet::new(),
            stray_next: 0,
            beats: cfg.heartbeat.map(Heartbeat::new),
            ring_from: (u64::MAX, 0, false),
            startup: Duration::ZERO,
            grace: StartupGrace::none(),
            leaving: false,
            left_reported: false,
            leavers: BTreeSet::new(),
            leave_flag: None,
        };
        m.nb = m.neighbors_in_state();
        m.state.root = m.nb.root;
        m
    }

    /// A new process outside the job, knowing the job's initial `view`: it asks the first
    /// process of the list to join (`NewNode`), then the next one every `retry` until
    /// welcomed.
    pub fn joiner(
        me: NodeId,
        view: impl Into<InitialView>,
        cfg: MembershipConfig,
        retry: Duration,
    ) -> Self {
        let mut m = Self::new(me, view, cfg);
        m.joining = Some(Joining {
            asking: Asking::Join,
            next: 0,
            retry,
            via: None,
            tries: 0,
            asked: 0,
            since: 0,
        });
        m.nb.parent = None;
        m.nb.children.clear();
        m
    }

    /// A process of the initial `view` that failed and restarted without its state: it asks to
    /// come back with its old id (`NodeAlive`), the next process of the list every `retry`.
    pub fn recovering(
        me: NodeId,
        view: impl Into<InitialView>,
        cfg: MembershipConfig,
        retry: Duration,
    ) -> Self {
        let mut m = Self::joiner(me, view, cfg, retry);
        if let Some(j) = &mut m.joining {
            j.asking = Asking::Rejoin;
        }
        m
    }

    /// Start-up is not a failure ([`super::startup`]): for `grace` from its start, this
    /// process suspects no peer it has never heard from when a heartbeat or a probe deadline
    /// passes. Give it the launcher's start-up timeout (`--startup-timeout-ms`): processes
    /// started seconds apart then form one view instead of excluding those that came later.
    pub fn with_startup_grace(mut self, grace: Duration) -> Self {
        self.startup = grace;
        self
    }

    /// `flag`, once set, makes this process [`leave`](Self::leave) at its next wake
    /// (`NodeHandle::wake`): how a node process turns SIGTERM into a goodbye.
    pub fn with_leave_flag(mut self, flag: Arc<std::sync::atomic::AtomicBool>) -> Self {
        self.leave_flag = Some(flag);
        self
    }

    /// Leave the job on purpose: the root starts an epoch without this process, as for a
    /// failure, but reports it as [`MemberEvent::Left`]; a leaving root hands the tree to the
    /// next in line (`RootFailure` about itself). Once a view without this process comes,
    /// it reports `Left` itself and asks nothing more (no rejoin, no probes).
    pub fn leave<M: From<MemberMsg>>(&mut self, out: &mut Outbox<M>) {
        if self.leaving || self.joining.is_some() {
            return;
        }
        self.leaving = true;
        let root = self.nb.root;
        if root != self.me {
            out.send(root, MemberMsg::NodeFailure { failed: self.me });
            return;
        }
        // The root: the next live process of the tree's order takes over without it.
        let epoch = self.seen_epoch.max(self.state.epoch);
        if let Some(next) = self.next_live(self.me) {
            out.send(
                next,
                MemberMsg::RootFailure {
                    failed: self.me,
                    epoch,
                },
            );
        }
    }

    /// Whether this process asked to leave and a view without it has come.
    pub fn has_left(&self) -> bool {
        self.leaving && !self.is_live(self.me)
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
        self.state.epoch
    }

    /// The installed epoch's root (with the epoch, the installed view's name).
    pub fn root(&self) -> NodeId {
        self.state.root
    }

    /// Whether this process is waiting for acknowledgments.
    pub fn waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Whether this process is still asking to get in.
    pub fn is_joining(&self) -> bool {
        self.joining.is_some()
    }

    /// The current list position of `id` (its latest incarnation).
    fn position(&self, id: NodeId) -> Option<u32> {
        self.position_in(&self.state, id)
    }

    /// The list position of `id`'s latest incarnation in the state `r`.
    fn position_in(&self, r: &Regroup, id: NodeId) -> Option<u32> {
        let n = self.initial.len();
        r.appended
            .iter()
            .rposition(|&x| x == id)
            .map(|p| (n + p) as u32)
            .or_else(|| self.initial.binary_search(&id).ok().map(|p| p as u32))
    }

    /// Whether `id` is in the installed view.
    fn is_live(&self, id: NodeId) -> bool {
        self.position(id).is_some_and(|p| !self.dead.contains(&p))
    }

    /// Whether the state `r` counts `id` dead (its latest incarnation in `r`'s list).
    fn dead_in(&self, r: &Regroup, id: NodeId) -> bool {
        self.position_in(r, id)
            .is_some_and(|p| r.dead.binary_search(&p).is_ok())
    }

    /// Whether the regroup `r` is to be installed over the installed state (module doc):
    /// its root is not one this process counts dead, and it is newer or replaces this
    /// process's root.
    fn supersedes(&self, r: &Regroup) -> bool {
        if (r.epoch, r.root) == (self.state.epoch, self.state.root) {
            return false; // the installed epoch itself
        }
        if self
            .position(r.root)
            .is_some_and(|p| self.dead.contains(&p))
            && (self.cfg.mode != TreeMode::Lowest
                || self.position_in(r, r.root) == self.position(r.root))
        {
            // From a root this state already replaced. With `TreeMode::Lowest` only the same
            // incarnation: a recovered process below the root is the root of the epoch that
            // admits it.
            return false;
        }
        if (r.epoch, r.root) > (self.state.epoch, self.state.root) {
            return true;
        }
        // An older epoch that replaces this process's root (a successor that took over
        // without hearing of the dead root's last epochs) counts only from the same
        // incarnation of its root as this state holds: a state its root made before it came
        // over from another view (a split healing, duplicated or delayed) says this root is
        // dead because that view never held it.
        // And only if it knows the incarnation of this root that this state holds: one that
        // predates it (a root that came back, `TreeMode::Lowest`) cannot have replaced it.
        let root = self.state.root;
        self.dead_in(r, root)
            && self.position_in(r, root) == self.position(root)
            && self.position_in(r, r.root) == self.position(r.root)
    }

    /// This process's neighbors in the installed state, computed locally (section 3.4; see
    /// [`recalc`]). A process outside the view has none.
    fn neighbors_in_state(&self) -> Neighbors {
        let a = self.cfg.radix;
        let pos = self.position(self.me).filter(|p| !self.dead.contains(p));
        let nb = pos.and_then(|p| match self.cfg.mode {
            TreeMode::Rebalance => {
                let rank = p - self.dead.range(..p).count() as u32;
                recalc::rebalanced_at(&self.order, rank, a)
            }
            TreeMode::Lowest => {
                let rank = self.view.binary_search(&self.me).ok()? as u32;
                recalc::rebalanced_at(&self.view, rank, a)
            }
            TreeMode::Patch => recalc::patched_at(&self.list, &self.dead, p, a),
        });
        nb.unwrap_or(Neighbors {
            root: self.root_of_state(),
            parent: None,
            children: Vec::new(),
        })
    }

    /// The root of the installed state: the first live process of the tree's order.
    fn root_of_state(&self) -> NodeId {
        self.tree_order().first().copied().unwrap_or(self.me)
    }

    /// The live processes in the order the tree is laid over (and roots succeed each other
    /// in): the list's, or by id with [`TreeMode::Lowest`].
    fn tree_order(&self) -> &[NodeId] {
        match self.cfg.mode {
            TreeMode::Lowest => &self.view,
            TreeMode::Patch | TreeMode::Rebalance => &self.order,
        }
    }

    /// Set the installed state (list, view, tree) without sending anything.
    fn adopt(&mut self, state: Regroup) {
        // Probes out to an incarnation that the new state replaces would time out on it.
        let before: Vec<(NodeId, Option<u32>)> = self
            .outstanding
            .keys()
            .map(|&id| (id, self.position(id)))
            .collect();
        self.dead = state.dead.iter().copied().collect();
        let Installed { list, order, view } = match &self.shared {
            Some(s) => s.get(&self.dead, &state.appended),
            None => {
                // The list changes only with a join; an epoch of failures keeps it.
                let list = if state.appended == self.state.appended {
                    self.list.clone()
                } else {
                    Installed::list(&self.initial, &state.appended)
                };
                Installed::over(list, !state.appended.is_empty(), &self.dead)
            }
        };
        (self.list, self.order, self.view) = (list, order, view);
        self.state = state;
        self.handed = false;
        self.nb = self.neighbors_in_state();
        self.state.root = self.nb.root;
        // A suspect that came back (a new incarnation) is no longer suspected.
        let positions: Vec<(NodeId, u32)> =
            self.suspected.iter().map(|(&id, &p)| (id, p)).collect();
        for (id, p) in positions {
            if self.position(id) != Some(p) {
                self.suspected.remove(&id);
                self.reported.remove(&id);
            }
        }
        for (id, p) in before {
            if self.position(id) != p {
                self.outstanding.remove(&id);
            }
        }
        self.version += 1;
    }

    /// A member that finds itself dead in the installed state was excluded while alive (a
    /// probe timed out on it): as the paper allows, it asks to come back like a recovered
    /// process, without its state (which the view it comes back to may not supersede).
    fn rejoin_if_excluded<M: From<MemberMsg>>(&mut self, out: &mut Outbox<M>) {
        if self.leaving {
            if !self.is_live(self.me) && !std::mem::replace(&mut self.left_reported, true) {
                out.report(Event::Member(MemberEvent::Left {
                    peer: self.me,
                    at: self.now,
                }));
            }
            return;
        }
        // A state whose list does not hold this process at all excludes it too (one that
        // never heard of its joining).
        if self.joining.is_none() && !self.is_live(self.me) {
            // Through the root that excluded it, which knows the view it comes back to.
            let root = self.state.root;
            self.rejoin_through(root, out);
        }
    }

    /// Install `state`, forward it down with `kind`, and wait for the acks.
    fn install<M: From<MemberMsg>>(
        &mut self,
        state: Regroup,
        kind: fn(Regroup) -> MemberMsg,
        joining_epoch: bool,
        out: &mut Outbox<M>,
    ) {
        let epoch = state.epoch;
        self.seen_epoch = self.seen_epoch.max(epoch);
        self.failover = None;
        self.adopt(state);
        self.joining_epoch = joining_epoch;
        self.down = kind;
        self.waited_rounds = 0;
        self.stale_rounds = 0;
        out.report(Event::Member(MemberEvent::ViewChanged {
            epoch,
            root: self.state.root,
            view: self.view.clone(),
            at: self.now,
        }));
        let kids: Vec<NodeId> = self.nb.children.clone();
        for &k in &kids {
            out.send(k, kind(self.state.clone()));
        }
        // A child already suspected will not answer, and nothing else would stop the wait
        // for it (its connection is already gone): its report goes up below, and the next
        // epoch leaves it out. A root that collects failures waits for this epoch first.
        self.waiting = kids
            .into_iter()
            .filter(|k| !self.suspected.contains_key(k))
            .collect();
        // Whatever the new epoch still lacks is reported now, held reports included: the
        // root started an epoch without them.
        self.report_pending(out);
        self.maybe_ack(out);
        self.rejoin_if_excluded(out);
        self.chase_if_root_suspected(out);
    }

    /// The installed epoch's root is one this process already suspects (it died while its
    /// epoch was on its way down): find the next root now, as on its detection.
    fn chase_if_root_suspected<M: From<MemberMsg>>(&mut self, out: &mut Outbox<M>) {
        let root = self.nb.root;
        if root != self.me && self.joining.is_none() && self.suspected.contains_key(&root) {
            self.chase_root(root, out);
        }
    }

    /// All children acknowledged: tell the parent, or, at the root, report stabilization and
    /// welcome this epoch's joiners.
    fn maybe_ack<M: From<MemberMsg>>(&mut self, out: &mut Outbox<M>) {
        if !self.waiting.is_empty() {
            return;
        }
        let (epoch, root) = (self.state.epoch, self.state.root);
        match self.nb.parent {
            Some(p) if self.joining_epoch => out.send(p, MemberMsg::NewNodeJoinAck { epoch, root }),
            Some(p) => out.send(p, MemberMsg::FailureAck { epoch, root }),
            None if epoch > 0 && self.nb.root == self.me => {
                out.report(Event::Member(MemberEvent::Stabilized {
                    epoch,
                    at: self.now,
                }));
                // Those that said goodbye and are out of this stable view: they may go.
                let gone: Vec<NodeId> = self
                    .leavers
                    .iter()
                    .copied()
                    .filter(|&l| !self.is_live(l))
                    .collect();
                for l in gone {
                    self.leavers.remove(&l);
                    out.send(l, MemberMsg::Excluded(self.state.clone()));
                }
                // A joiner whose incarnation died meanwhile is not welcomed: it asks again.
                for j in std::mem::take(&mut self.welcome) {
                    if self.is_live(j) {
                        out.send(j, MemberMsg::JoinDetAck(self.state.clone()));
                    }
                }
                if let Some((id, seen)) = self.asker.take() {
                    self.root_admits(id, seen, out);
                }
                if std::mem::take(&mut self.collecting) {
                    self.start_failure_epoch(false, out);
                }
            }
            None => {}
        }
    }

    /// The next state: the installed one with the suspects' positions dead, numbered past
    /// every epoch this process has heard of.
    fn next_state(&self) -> Regroup {
        let mut dead = self.dead.clone();
        for (&id, &p) in &self.suspected {
            if id != self.me && self.position(id) == Some(p) {
                dead.insert(p);
            }
        }
        Regroup {
            epoch: self.state.epoch.max(self.seen_epoch) + 1,
            dead: dead.into_iter().collect(),
            appended: self.state.appended.clone(),
            root: self.me,
        }
    }

    /// The root starts a new epoch with `d` dead, together with every process it suspects
    /// itself (a root that took over because all ids before it seemed dead must leave them
    /// out of the tree too).
    fn root_handles<M: From<MemberMsg>>(
        &mut self,
        d: NodeId,
        root_changed: bool,
        out: &mut Outbox<M>,
    ) {
        if d == self.me {
            return;
        }
        if let Some(p) = self.position(d).filter(|p| !self.dead.contains(p)) {
            self.suspected.entry(d).or_insert(p);
        }
        if !self.cfg.batch.is_zero() {
            if self.batching.is_none() {
                out.set_timer(BATCH_TIMER, self.cfg.batch);
            }
            self.batching = Some(self.batching.unwrap_or(false) || root_changed);
            return;
        }
        if self.cfg.collect && !root_changed && !self.waiting.is_empty() {
            self.collecting = true; // see `maybe_ack`
            return;
        }
        self.start_failure_epoch(root_changed, out);
    }

    /// The root's new epoch with every suspect dead (if that changes anything).
    fn start_failure_epoch<M: From<MemberMsg>>(&mut self, root_changed: bool, out: &mut Outbox<M>) {
        let next = self.next_state();
        if next.dead == self.state.dead {
            return; // nothing new
        }
        let kind = if root_changed {
            MemberMsg::RootDead
        } else {
            MemberMsg::FailedNode
        };
        self.install(next, kind, false, out);
    }

    /// The root admits `id` (new, or a new incarnation of a dead process) at the end of the
    /// list, or welcomes at once a process already in a stable view.
    ///
    /// The epoch that admits it is numbered past every epoch the asker has heard of (`seen`):
    /// an asker that comes from another view (a split, see [`repair`]) may still receive that
    /// view's messages, duplicated or delayed, and an epoch number of the old view above the
    /// new one's would supersede it and take the asker back to a view its root has left. An
    /// asker already in the view that has heard of a higher epoch is welcomed by a new epoch
    /// for the same reason.
    fn root_admits<M: From<MemberMsg>>(&mut self, id: NodeId, seen: u64, out: &mut Outbox<M>) {
        self.seen_epoch = self.seen_epoch.max(seen);
        let live = self.is_live(id);
        if live && self.welcome.contains(&id) {
            return; // welcomed when the epoch on its way stabilizes
        }
        if live && seen <= self.state.epoch {
            // A member that left its view for this one (a split) or asks again: welcomed into
            // the installed epoch at once, even while it is on its way. The asker forgot its
            // state and acknowledges nothing before its welcome, so an epoch whose tree holds
            // it would wait for it forever if the welcome waited for that epoch.
            out.send(id, MemberMsg::JoinDetAck(self.state.clone()));
            return;
        }
        let mut next = self.next_state();
        if !live {
            next.appended.push(id);
        }
        self.welcome.insert(id);
        self.install(next, MemberMsg::NewNodeJoin, true, out);
        if self.state.root == id {
            // `TreeMode::Lowest`, and its id is below this root's: it is the new epoch's root.
            // Handed the epoch with its welcome, it sends it down and collects the acks; this
            // process is a member of it already.
            self.welcome.remove(&id);
            self.handed = true;
            out.send(id, MemberMsg::JoinDetAck(self.state.clone()));
        }
    }

    /// The first live process of the tree's order, `d` aside, that this process believes
    /// alive.
    fn next_live(&self, d: NodeId) -> Option<NodeId> {
        self.tree_order()
            .iter()
            .copied()
            .find(|&id| id != d && !self.suspected.contains_key(&id))
    }

    /// The root `failed` is dead: take over if this process is next in line, or ask the next
    /// live process to (`RootFailure`), once per candidate. Called again when that candidate
    /// is found dead, so a chain of dead successors is walked to the first live one.
    fn chase_root<M: From<MemberMsg>>(&mut self, failed: NodeId, out: &mut Outbox<M>) {
        match self.next_live(failed) {
            Some(r) if r == self.me => {
                self.failover = None;
                self.root_handles(failed, true, out);
            }
            Some(r) if self.failover != Some(r) => {
                self.failover = Some(r);
                let epoch = self.seen_epoch.max(self.state.epoch);
                out.send(r, MemberMsg::RootFailure { failed, epoch });
            }
            _ => {}
        }
    }

    /// A suspected failure of `peer` (detection): a lost connection.
    pub fn suspect<M: From<MemberMsg>>(&mut self, peer: NodeId, out: &mut Outbox<M>) {
        self.suspect_as(peer, Suspicion::Lost, out);
    }

    /// A suspected failure of `peer`, for the reason `why`. A [`Suspicion::Hung`] comes from
    /// `peer`'s designated watcher (the heartbeat ring's successor, the only process that can
    /// tell that `peer` hangs), which reports at once, as a tree neighbor does.
    pub(super) fn suspect_as<M: From<MemberMsg>>(
        &mut self,
        peer: NodeId,
        why: Suspicion,
        out: &mut Outbox<M>,
    ) {
        // A child we wait for is gone: stop waiting. The new epoch will come down, unless the
        // root collects failures: then it waits for this epoch, so the rest of the subtree
        // acknowledges it without the dead child (after the report below).
        let was_waiting = self.waiting.remove(&peer);
        self.note_suspect(peer, why, out);
        if was_waiting && self.cfg.collect {
            self.maybe_ack(out);
        }
    }

    /// [`Self::suspect_as`] but for the wait: record the suspicion and report it.
    fn note_suspect<M: From<MemberMsg>>(
        &mut self,
        peer: NodeId,
        why: Suspicion,
        out: &mut Outbox<M>,
    ) {
        let watcher = why == Suspicion::Hung;
        let Some(pos) = self.position(peer).filter(|p| !self.dead.contains(p)) else {
            return;
        };
        self.outstanding.remove(&peer);
        if self.suspected.get(&peer) == Some(&pos) {
            return; // already handled (a second connection to the same peer, say)
        }
        self.suspected.insert(peer, pos);
        out.report(Event::Member(MemberEvent::Detected {
            peer,
            at: self.now,
            why,
        }));
        if self.joining.is_some() {
            return; // not a member yet: nothing to report to
        }
        let root = self.nb.root;
        let neighbor = self.nb.parent == Some(peer) || self.nb.children.contains(&peer);
        if root == peer {
            self.chase_root(peer, out);
        } else if self.failover == Some(peer) && self.suspected.contains_key(&root) {
            // The process asked to take over from the dead root is dead too: the next one.
            self.chase_root(root, out);
        } else if root == self.me {
            self.root_handles(peer, false, out);
        } else if self.nb.parent == Some(peer) && !self.cfg.orphan_hold.is_zero() && !watcher {
            // The failed parent's own parent (alive, or someone above it reports) reports it;
            // this process only makes sure it happens (`report_pending`).
            if !self.holding {
                self.holding = true;
                out.set_timer(HOLD_TIMER, self.cfg.orphan_hold);
            }
        } else if neighbor || watcher {
            // The paper's detectors are a process's tree neighbors; others that lost a
            // connection to `peer` leave the report to them (and make it themselves if `peer`
            // becomes their neighbor, see `install`), so one death is not reported N times.
            self.reported.insert(peer);
            self.unacked.insert(peer);
            out.send(root, MemberMsg::NodeFailure { failed: peer });
        }
    }

    /// Report to the root every suspect the installed epoch still counts alive that this
    /// process must report: one it reported before (the report may have been lost with an old
    /// root) and any tree neighbor (it may have just become one, or its report was held).
    fn report_pending<M: From<MemberMsg>>(&mut self, out: &mut Outbox<M>) {
        let root = self.nb.root;
        if root == self.me {
            return;
        }
        let pending: Vec<NodeId> = self
            .suspected
            .keys()
            .copied()
            .filter(|&s| self.is_live(s) && s != root)
            .filter(|s| {
                self.reported.contains(s)
                    || self.nb.parent == Some(*s)
                    || self.nb.children.contains(s)
            })
            .collect();
        for s in pending {
            self.reported.insert(s);
            self.unacked.insert(s);
            out.send(root, MemberMsg::NodeFailure { failed: s });
        }
    }

    /// Handle a message.
    pub fn handle<M: From<MemberMsg>>(
        &mut self,
        from: NodeId,
        msg: MemberMsg,
        out: &mut Outbox<M>,
    ) {
        let i_am_root = self.nb.root == self.me && self.joining.is_none();
        match msg {
            MemberMsg::NodeFailure { failed } => {
                out.send(from, MemberMsg::FailureDetAck { failed });
                let goodbye = i_am_root && from == failed && self.is_live(failed);
                if goodbye {
                    // A goodbye, not a detection.
                    out.report(Event::Member(MemberEvent::Left {
                        peer: failed,
                        at: self.now,
                    }));
                }
                if goodbye {
                    // The new tree leaves it out: it is shown the view it left once every
                    // member holds that view (`maybe_ack`).
                    self.leavers.insert(failed);
                }
                if i_am_root {
                    self.root_handles(failed, false, out);
                } else if self.joining.is_none() {
                    // Not (or no longer) the root: pass it on.
                    out.send(self.nb.root, MemberMsg::NodeFailure { failed });
                }
            }
            MemberMsg::RootFailure { failed, epoch } => {
                out.send(from, MemberMsg::FailureDetAck { failed });
                self.seen_epoch = self.seen_epoch.max(epoch);
                if self.joining.is_some() {
                    return;
                }
                let goodbye = from == failed && self.is_live(failed) && self.nb.root == failed;
                if goodbye {
                    // The root says goodbye and hands the tree on.
                    out.report(Event::Member(MemberEvent::Left {
                        peer: failed,
                        at: self.now,
                    }));
                    if let Some(p) = self.position(failed) {
                        self.suspected.insert(failed, p);
                    }
                    self.leavers.insert(failed);
                    self.chase_root(failed, out);
                    return;
                }
                if let Some(p) = self.position(failed).filter(|p| !self.dead.contains(p)) {
                    self.suspected.insert(failed, p);
                }
                if self.nb.root == failed {
                    // Take over, or pass it on to a live process before this one that the
                    // sender believed dead.
                    self.chase_root(failed, out);
                    return;
                }
                if i_am_root {
                    // Already root (an earlier report): treat it as a node failure.
                    self.root_handles(failed, false, out);
                }
                // The sender's view is not this one: show it this one (see `repair`).
                out.send(from, MemberMsg::FailedNode(self.state.clone()));
            }
            MemberMsg::FailedNode(r) | MemberMsg::RootDead(r) | MemberMsg::NewNodeJoin(r)
                if !self.supersedes(&r) =>
            {
                // Old, a duplicate (a parent sending it again: ack again), from a root already
                // replaced, or from a view of its own (see `repair`).
                self.seen_epoch = self.seen_epoch.max(r.epoch);
                self.not_superseding(from, r, out);
            }
            MemberMsg::FailedNode(r) => self.install(r, MemberMsg::FailedNode, false, out),
            MemberMsg::RootDead(r) => self.install(r, MemberMsg::RootDead, false, out),
            MemberMsg::NewNodeJoin(r) => self.install(r, MemberMsg::NewNodeJoin, true, out),
            MemberMsg::FailureAck { epoch, root } | MemberMsg::NewNodeJoinAck { epoch, root } => {
                let current = (epoch, root) == (self.state.epoch, self.state.root);
                if current && self.waiting.remove(&from) {
                    self.maybe_ack(out);
                }
            }
            MemberMsg::FailureDetAck { failed } => {
                self.unacked.remove(&failed);
            }
            MemberMsg::NewNode { id, epoch } | MemberMsg::NodeAlive { id, epoch } => {
                if i_am_root {
                    self.root_admits(id, epoch, out);
                } else if self.joining.is_some() {
                } else if self.nb.root == id && epoch > 0 && epoch < self.state.epoch {
                    // A request the root made before this state (duplicated or late: it
                    // asked as a recovered process and was handed the root, see
                    // `TreeMode::Lowest`). A restarted root asks knowing no epoch (0); one
                    // that left its view for another knows this state's epoch at least.
                } else if self.nb.root == id {
                    // The root itself restarted without its state (or left its view for a
                    // root that had died): its old incarnation is gone, which is a root
                    // failure; the next root admits it. When that is this process, at once:
                    // the asker goes round the list and may not come back here before it
                    // gives up and starts a view of its own.
                    self.suspect_as(id, Suspicion::Restarted, out);
                    if self.nb.root == self.me && self.joining.is_none() {
                        self.root_admits(id, epoch, out);
                    } else {
                        self.asker = Some((id, epoch));
                    }
                } else {
                    out.send(self.nb.root, MemberMsg::NewNode { id, epoch });
                }
            }
            MemberMsg::JoinDetAck(mut r) if self.joining.is_none() => {
                // Handed the root while a member already (a request of its, duplicated or
                // late, made the root take it for restarted and admit it again), or after it
                // gave up asking and made a view of its own, which may bear the same name
                // (epoch and root): then it numbers the handed state past its own.
                let collides = (r.epoch, r.root) == (self.state.epoch, self.state.root)
                    && (&r.dead, &r.appended) != (&self.state.dead, &self.state.appended);
                if r.root == self.me && (collides || self.supersedes(&r)) {
                    if collides {
                        r.epoch = self.seen_epoch.max(self.state.epoch) + 1;
                    }
                    self.take_handed(from, r, out);
                }
            }
            MemberMsg::JoinDetAck(r) => {
                let current = self.joining.is_some_and(|j| r.epoch >= j.since);
                if current && self.joining.take().is_some() {
                    out.cancel_timer(JOIN_TIMER);
                    let newer = self.supersedes(&r);
                    if newer && r.root == self.me {
                        self.take_handed(from, r, out);
                    } else if newer {
                        // Installed as a state from its parent would be: its children in this
                        // tree get it, and its parent its acknowledgment (the epoch may still
                        // be on its way, waiting for this process).
                        self.install(r, MemberMsg::NewNodeJoin, true, out);
                    } else {
                        // Already in this epoch's tree (or a later one): take up its place.
                        self.nb = self.neighbors_in_state();
                    }
                    out.report(Event::Member(MemberEvent::Joined {
                        epoch: self.state.epoch,
                        at: self.now,
                    }));
                    self.rejoin_if_excluded(out);
                    self.chase_if_root_suspected(out);
                    if self.cfg.probe.is_some() {
                        let now = self.now;
                        self.probe(now, out);
                    }
                }
            }
            MemberMsg::HowAreYou { seq, epoch, root } => {
                out.send(from, MemberMsg::IAmFine { seq });
                // A process this view excluded still probes, or a root of another view
                // looks for strays: show it the state that excludes it, so it asks to come
                // back (or finds the split, see `repair`). So too a prober behind this
                // state: one whose root has come over to this view follows its root, one
                // that missed epochs of this view catches up.
                if self.joining.is_none()
                    && (!self.is_live(from) || self.prober_behind(epoch, root))
                {
                    out.send(from, MemberMsg::Excluded(self.state.clone()));
                }
            }
            MemberMsg::Excluded(r) => self.on_excluded(r, from, out),
            // Handled by the heartbeats, before the protocol (`on_message`).
            MemberMsg::Beat(_) => {}
            MemberMsg::IAmFine { seq } => {
                if self.outstanding.get(&from).is_some_and(|&(s, _)| s == seq) {
                    self.outstanding.remove(&from);
                }
            }
        }
    }

    /// Handed the root of `r` by `from`, the root that admitted this process
    /// ([`TreeMode::Lowest`]): take the epoch over (send it down, collect the acks). `from`
    /// was alive a moment ago, whatever this process suspected of it before; any other
    /// suspect that `r` counts alive is a failure for this root to handle, as no one else
    /// will hear of it.
    fn take_handed<M: From<MemberMsg>>(&mut self, from: NodeId, r: Regroup, out: &mut Outbox<M>) {
        self.suspected.remove(&from);
        self.reported.remove(&from);
        self.install(r, MemberMsg::NewNodeJoin, true, out);
        let stale: Vec<NodeId> = self
            .suspected
            .keys()
            .copied()
            .filter(|&s| self.is_live(s))
            .collect();
        for s in stale {
            self.root_handles(s, false, out);
        }
    }

    /// Ask the next process of the list to let this one in.
    fn ask<M: From<MemberMsg>>(&mut self, out: &mut Outbox<M>) {
        let Some(j) = self.joining.as_mut() else {
            return;
        };
        let n = self.initial.len();
        if j.asked >= repair::OWN_VIEW_AFTER * n as u32 {
            self.found_own_view(out);
            return;
        }
        j.asked += 1;
        let mut target = None;
        // The process named to ask first is asked a few times before the list.
        if let Some(v) = j.via.filter(|_| j.tries < VIA_TRIES) {
            j.tries += 1;
            target = Some(v);
        }
        for _ in 0..n {
            if target.is_some() {
                break;
            }
            let id = self.initial[j.next % n];
            j.next = (j.next + 1) % n;
            if id != self.me {
                target = Some(id);
            }
        }
        let (id, epoch) = (self.me, self.seen_epoch.max(self.state.epoch));
        let msg = match j.asking {
            Asking::Join => MemberMsg::NewNode { id, epoch },
            Asking::Rejoin => MemberMsg::NodeAlive { id, epoch },
        };
        let retry = j.retry;
        if let Some(t) = target {
            out.send(t, msg);
        }
        out.set_timer(JOIN_TIMER, retry);
    }

    /// A probe round: ask every tree neighbor that has no probe pending.
    fn probe<M: From<MemberMsg>>(&mut self, now: Time, out: &mut Outbox<M>) {
        let Some((period, timeout)) = self.cfg.probe else {
            return;
        };
        if self.has_left() {
            return;
        }
        let neighbors: Vec<NodeId> = self
            .nb
            .parent
            .into_iter()
            .chain(self.nb.children.iter().copied())
            .collect();
        for p in neighbors {
            if self.outstanding.contains_key(&p) || self.suspected.contains_key(&p) {
                continue;
            }
            self.probe_seq += 1;
            self.outstanding.insert(p, (self.probe_seq, now + timeout));
            out.send(
                p,
                MemberMsg::HowAreYou {
                    seq: self.probe_seq,
                    epoch: self.state.epoch,
                    root: self.state.root,
                },
            );
        }
        if !self.outstanding.is_empty() {
            out.set_timer(TIMEOUT_TIMER, timeout);
        }
        out.set_timer(PROBE_TIMER, period);
    }

    /// Probes past their deadline: suspect those peers (one never heard from within the
    /// start-up grace is probed again next round instead).
    fn expire<M: From<MemberMsg>>(&mut self, now: Time, out: &mut Outbox<M>) {
        let late: Vec<NodeId> = self
            .outstanding
            .iter()
            .filter(|(_, &(_, deadline))| deadline <= now)
            .map(|(&p, _)| p)
            .collect();
        for p in late {
            if self.grace.spares(now, p).is_some() {
                self.outstanding.remove(&p);
            } else {
                self.suspect_as(p, Suspicion::Unanswered, out);
            }
        }
        if let Some(next) = self.outstanding.values().map(|&(_, d)| d).min() {
            out.set_timer(TIMEOUT_TIMER, next.since(now));
        }
    }
}

impl Membership {
    /// The heartbeat ring around this process: its predecessor and successor among the
    /// installed view's live processes in list order, suspects skipped; `None` alone or
    /// outside the view.
    fn ring(&self) -> Option<(NodeId, NodeId)> {
        if self.joining.is_some() || !self.is_live(self.me) {
            return None;
        }
        let ring: Vec<NodeId> = self
            .order
            .iter()
            .copied()
            .filter(|p| *p == self.me || !self.suspected.contains_key(p))
            .collect();
        let i = ring.iter().position(|&p| p == self.me)?;
        let n = ring.len();
        (n >= 2).then(|| (ring[(i + n - 1) % n], ring[(i + 1) % n]))
    }

    /// Heartbeats follow the view and the suspicions (cheap when neither changed).
    fn follow_ring(&mut self, now: Time, out: &mut Outbox<MemberMsg>) {
        if self.beats.is_none() {
            return;
        }
        let from = (self.version, self.suspected.len(), self.joining.is_some());
        if from == self.ring_from {
            return;
        }
        self.ring_from = from;
        let ring = self.ring();
        let Some(hb) = self.beats.as_mut() else {
            return;
        };
        match ring {
            Some((pred, succ)) => hb.set_ring(now, Some(pred), Some(succ), out),
            None => hb.stop(out),
        }
    }
}

impl Protocol for Membership {
    type Msg = MemberMsg;
    type Event = crate::proto::Event;
    type Request = crate::proto::NoRequest;

    fn on_start(&mut self, now: Time, out: &mut Outbox<MemberMsg>) {
        self.now = now;
        self.grace = StartupGrace::new(now, self.startup);
        if self.joining.is_some() {
            self.ask(out);
            return;
        }
        self.follow_ring(now, out);
        // A first round at once: it opens the connections to the tree neighbors, so a
        // failure is seen (as a lost connection) from the start.
        self.probe(now, out);
        if self.cfg.warm {
            for p in recalc::standby(&self.initial, self.me, self.cfg.radix) {
                // Sequence 0 is never outstanding, so the answer is ignored.
                out.send(
                    p,
                    MemberMsg::HowAreYou {
                        seq: 0,
                        epoch: self.state.epoch,
                        root: self.state.root,
                    },
                );
            }
        }
    }

    fn on_message(&mut self, now: Time, from: NodeId, msg: MemberMsg, out: &mut Outbox<MemberMsg>) {
        self.now = now;
        self.grace.heard(now, from);
        if let Some(hb) = self.beats.as_mut() {
            // Any message proves its sender alive, as a heartbeat would.
            hb.heard(now, from);
            if let MemberMsg::Beat(b) = &msg {
                hb.on_beat(from, b);
                // A process this view excluded while it hung beats on when it wakes, to a
                // successor that no longer watches it, and watches a predecessor that no
                // longer beats to it: shown the view, it asks back in before its deadline
                // makes it blame a live process.
                if self.joining.is_none() && self.dead_in(&self.state, from) {
                    out.send(from, MemberMsg::Excluded(self.state.clone()));
                }
                return;
            }
        }
        self.handle(from, msg, out);
        self.follow_ring(now, out);
    }

    fn on_timer(&mut self, now: Time, timer: TimerId, out: &mut Outbox<MemberMsg>) {
        self.now = now;
        if timer == BEAT_TIMER || timer == WATCH_TIMER {
            let hung = self
                .beats
                .as_mut()
                .and_then(|hb| hb.on_timer(now, timer, &self.grace, out));
            if let Some(p) = hung {
                // A missed deadline takes the path of a lost connection, reported as by a
                // tree neighbor: nobody else can see a hung process.
                self.suspect_as(p, Suspicion::Hung, out);
                self.follow_ring(now, out);
            }
            return;
        }
        self.on_protocol_timer(now, timer, out);
        self.follow_ring(now, out);
    }

    fn on_suspect(&mut self, now: Time, peer: NodeId, out: &mut Outbox<MemberMsg>) {
        self.now = now;
        self.suspect(peer, out);
        self.follow_ring(now, out);
    }

    fn on_wake(&mut self, now: Time, out: &mut Outbox<MemberMsg>) {
        self.now = now;
        let asked = self
            .leave_flag
            .as_ref()
            .is_some_and(|f| f.load(std::sync::atomic::Ordering::Acquire));
        if asked {
            self.leave(out);
        }
    }

    fn state_version(&self) -> u64 {
        self.version
    }
}

impl Membership {
    /// One of the protocol's own timers (not the heartbeats').
    fn on_protocol_timer(&mut self, now: Time, timer: TimerId, out: &mut Outbox<MemberMsg>) {
        match timer {
            PROBE_TIMER => {
                self.probe(now, out);
                if self.joining.is_none() {
                    self.repair(out);
                }
            }
            TIMEOUT_TIMER => self.expire(now, out),
            JOIN_TIMER => self.ask(out),
            BATCH_TIMER => {
                if let Some(root_changed) = self.batching.take() {
                    self.start_failure_epoch(root_changed, out);
                }
            }
            HOLD_TIMER => {
                self.holding = false;
                if self.joining.is_none() {
                    self.report_pending(out);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Action;
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

    /// Processes that share a [`SharedViews`] hold one copy of each state's views, the same
    /// views a process with its own list computes, in both tree modes.
    #[test]
    fn shared_views_are_one_copy_and_equal_to_an_own_list() {
        for mode in [TreeMode::Patch, TreeMode::Rebalance] {
            let cfg = MembershipConfig {
                radix: 4,
                mode,
                probe: None,
                warm: false,
                batch: Duration::ZERO,
                collect: false,
                orphan_hold: Duration::ZERO,
                heartbeat: None,
            };
            let all = ids(&(0..21).collect::<Vec<_>>());
            let views = SharedViews::new(all.clone());
            let mut shared: Vec<Membership> = (0..21)
                .map(|i| Membership::new(NodeId(i), &views, cfg))
                .collect();
            let mut own: Vec<Membership> = (0..21)
                .map(|i| Membership::new(NodeId(i), all.clone(), cfg))
                .collect();
            let state = Regroup {
                epoch: 1,
                dead: vec![0, 6],
                appended: ids(&[30, 6]),
                root: NodeId(1),
            };
            for m in shared.iter_mut().chain(own.iter_mut()) {
                m.adopt(state.clone());
            }
            for (s, o) in shared.iter().zip(&own) {
                assert!(std::ptr::eq(s.view(), shared[1].view()), "one copy");
                assert_eq!(s.view(), o.view());
                assert_eq!(s.order, o.order);
                assert_eq!(s.neighbors(), o.neighbors(), "{mode:?}");
            }
            assert_eq!(
                shared[1].view(),
                &ids(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 30])
                    [..]
            );
        }
    }

    /// Process `me` of a 21-process radix-4 job (1 has parent 0 and children 5..=8), with
    /// the given orphan hold, started.
    fn member(me: u64, hold: Duration) -> Membership {
        member_with(me, hold, false)
    }

    /// [`member`], the root collecting failures found during an epoch or not.
    fn member_with(me: u64, hold: Duration, collect: bool) -> Membership {
        let cfg = MembershipConfig {
            radix: 4,
            mode: TreeMode::Patch,
            probe: None,
            warm: false,
            batch: Duration::ZERO,
            collect,
            orphan_hold: hold,
            heartbeat: None,
        };
        let mut m = Membership::new(NodeId(me), ids(&(0..21).collect::<Vec<_>>()), cfg);
        m.on_start(Time::ZERO, &mut Outbox::new());
        m
    }

    /// The messages among `out`'s actions.
    fn sends(out: &mut Outbox<MemberMsg>) -> Vec<(NodeId, MemberMsg)> {
        out.drain()
            .filter_map(|a| match a {
                Action::Send { to, msg } => Some((to, msg)),
                _ => None,
            })
            .collect()
    }

    fn report_of(failed: u64) -> (NodeId, MemberMsg) {
        (
            NodeId(0),
            MemberMsg::NodeFailure {
                failed: NodeId(failed),
            },
        )
    }

    /// The epochs the root sends down among `out`'s actions.
    fn epochs_sent(out: &mut Outbox<MemberMsg>) -> BTreeSet<(u64, Vec<u32>)> {
        sends(out)
            .into_iter()
            .filter_map(|(_, m)| match m {
                MemberMsg::FailedNode(r) => Some((r.epoch, r.dead)),
                _ => None,
            })
            .collect()
    }

    /// A second failure reported while the first one's epoch is on its way restarts it at
    /// once by default; with `collect` it waits for that epoch to stabilize and the next
    /// epoch holds it (and any other collected meanwhile).
    #[test]
    fn failures_found_during_an_epoch_restart_it_or_wait_for_it() {
        for collect in [false, true] {
            let mut root = member_with(0, Duration::ZERO, collect);
            let mut out = Outbox::new();
            let report = |failed: u64| MemberMsg::NodeFailure {
                failed: NodeId(failed),
            };
            root.on_message(Time::ZERO, NodeId(1), report(6), &mut out);
            assert_eq!(epochs_sent(&mut out), BTreeSet::from([(1, vec![6])]));
            root.on_message(Time::ZERO, NodeId(1), report(7), &mut out);
            root.on_message(Time::ZERO, NodeId(2), report(10), &mut out);
            let restarted = epochs_sent(&mut out);
            let ack = MemberMsg::FailureAck {
                epoch: 1,
                root: NodeId(0),
            };
            for child in 1..=3 {
                root.on_message(Time::ZERO, NodeId(child), ack.clone(), &mut out);
            }
            assert!(epochs_sent(&mut out).is_empty(), "before the last ack");
            root.on_message(Time::ZERO, NodeId(4), ack, &mut out);
            let after = epochs_sent(&mut out);
            if collect {
                assert!(restarted.is_empty(), "{restarted:?}");
                assert_eq!(after, BTreeSet::from([(2, vec![6, 7, 10])]));
            } else {
                assert_eq!(
                    restarted,
                    BTreeSet::from([(2, vec![6, 7]), (3, vec![6, 7, 10])])
                );
                assert!(after.is_empty(), "epoch 1 was replaced: {after:?}");
            }
        }
    }

    #[test]
    fn a_child_of_a_failed_process_reports_it_only_when_the_hold_runs_out() {
        let hold = Duration::from_millis(5);
        let mut child = member(6, hold);
        let mut out = Outbox::new();
        child.on_suspect(Time::ZERO, NodeId(1), &mut out);
        let actions: Vec<_> = out.drain().collect();
        assert!(
            actions.contains(&Action::SetTimer {
                timer: HOLD_TIMER,
                after: hold
            }),
            "{actions:?}"
        );
        assert!(
            !actions.iter().any(|a| matches!(a, Action::Send { .. })),
            "held, yet sent: {actions:?}"
        );
        // Nobody reported it meanwhile: the child does.
        child.on_timer(Time(5_000_000), HOLD_TIMER, &mut out);
        assert_eq!(sends(&mut out), vec![report_of(1)]);

        // Its parent's own parent reports at once, hold or not.
        let mut grandparent = member(0, hold);
        grandparent.on_suspect(Time::ZERO, NodeId(1), &mut out);
        let down = sends(&mut out);
        assert!(
            down.iter()
                .any(|(to, m)| *to == NodeId(5) && matches!(m, MemberMsg::FailedNode(_))),
            "the root starts the epoch and adopts 1's children: {down:?}"
        );
        // An inner process whose child fails reports at once too.
        let mut parent = member(1, hold);
        parent.on_suspect(Time::ZERO, NodeId(5), &mut out);
        assert_eq!(sends(&mut out), vec![report_of(5)]);
    }

    #[test]
    fn a_held_report_is_dropped_once_an_epoch_counts_the_failure() {
        let mut child = member(6, Duration::from_millis(5));
        let mut out = Outbox::new();
        child.on_suspect(Time::ZERO, NodeId(1), &mut out);
        out.drain().for_each(drop);
        let epoch = Regroup {
            epoch: 1,
            dead: vec![1],
            appended: Vec::new(),
            root: NodeId(0),
        };
        child.on_message(
            Time(1000),
            NodeId(0),
            MemberMsg::FailedNode(epoch),
            &mut out,
        );
        assert_eq!(
            sends(&mut out),
            vec![(
                NodeId(0),
                MemberMsg::FailureAck {
                    epoch: 1,
                    root: NodeId(0)
                }
            )],
            "a leaf acks its new parent, and reports nothing"
        );
        child.on_timer(Time(5_000_000), HOLD_TIMER, &mut out);
        assert_eq!(sends(&mut out), vec![]);
    }

    /// Process `me` of the same 21-process job with ring heartbeats every 10 ms (suspect
    /// after 2.5 periods), started at time 0; what its start sent.
    fn beating(me: u64) -> (Membership, Vec<(NodeId, MemberMsg)>) {
        let cfg = MembershipConfig {
            heartbeat: Some(HeartbeatConfig {
                period: Duration::from_millis(10),
                suspect_after: 2.5,
            }),
            ..member(me, Duration::ZERO).cfg
        };
        let mut m = Membership::new(NodeId(me), ids(&(0..21).collect::<Vec<_>>()), cfg);
        let mut out = Outbox::new();
        m.on_start(Time::ZERO, &mut out);
        let sent = sends(&mut out);
        (m, sent)
    }

    fn beat_to(sent: &[(NodeId, MemberMsg)]) -> Vec<NodeId> {
        sent.iter()
            .filter(|(_, m)| matches!(m, MemberMsg::Beat(b) if !b.watch))
            .map(|(to, _)| *to)
            .collect()
    }

    #[test]
    fn heartbeats_ring_the_view_and_a_hung_predecessor_is_reported_by_its_watcher() {
        // 9 beats to 10 (its successor in the view) and watches 8.
        let (mut m, sent) = beating(9);
        assert_eq!(beat_to(&sent), vec![NodeId(10)]);
        // 8 falls silent. 9 is no tree neighbor of 8 (8's parent is 1, it has no children),
        // yet as 8's watcher it reports it at once when the deadline passes.
        let mut out = Outbox::new();
        m.on_message(
            Time(10_000_000),
            NodeId(8),
            MemberMsg::Beat(Beat {
                seq: 1,
                watch: false,
            }),
            &mut out,
        );
        out.drain().for_each(drop);
        m.on_timer(Time(25_000_000), WATCH_TIMER, &mut out);
        assert!(sends(&mut out).is_empty(), "heard 15 ms ago: not yet");
        m.on_timer(Time(35_000_000), WATCH_TIMER, &mut out);
        let (mut sent, mut why) = (Vec::new(), Vec::new());
        for a in out.drain() {
            match a {
                Action::Send { to, msg } => sent.push((to, msg)),
                Action::Report(Event::Member(MemberEvent::Detected { peer, why: w, .. })) => {
                    why.push((peer, w))
                }
                _ => {}
            }
        }
        assert!(sent.contains(&report_of(8)), "{sent:?}");
        // The detection says which detector fired: the heartbeat, not a lost connection.
        assert_eq!(why, [(NodeId(8), Suspicion::Hung)]);
        // The ring closes over the suspect: 7 is watched now (told so with `watch`).
        assert!(
            sent.iter()
                .any(|(to, m)| *to == NodeId(7) && matches!(m, MemberMsg::Beat(b) if b.watch)),
            "{sent:?}"
        );
    }

    #[test]
    fn a_process_excluded_while_it_hung_is_shown_the_view_by_its_old_successor() {
        let (mut m, _) = beating(4);
        let mut out = Outbox::new();
        // The root's epoch excluding 3, which hung.
        let epoch = Regroup {
            epoch: 1,
            dead: vec![3],
            appended: Vec::new(),
            root: NodeId(0),
        };
        m.on_message(
            Time(1_000),
            NodeId(0),
            MemberMsg::FailedNode(epoch.clone()),
            &mut out,
        );
        let sent = sends(&mut out);
        assert!(
            sent.iter()
                .any(|(to, m)| *to == NodeId(2) && matches!(m, MemberMsg::Beat(b) if b.watch)),
            "4 watches 2 now: {sent:?}"
        );
        // 3 wakes and beats on: it is shown the view that excludes it.
        m.on_message(
            Time(2_000),
            NodeId(3),
            MemberMsg::Beat(Beat {
                seq: 9,
                watch: false,
            }),
            &mut out,
        );
        assert_eq!(
            sends(&mut out),
            vec![(NodeId(3), MemberMsg::Excluded(epoch))]
        );
        // A live process's beat is only a beat.
        m.on_message(
            Time(3_000),
            NodeId(2),
            MemberMsg::Beat(Beat {
                seq: 1,
                watch: false,
            }),
            &mut out,
        );
        assert!(sends(&mut out).is_empty());
    }

    #[test]
    fn heartbeats_are_job_parameters() {
        let (m, _) = beating(0);
        assert!(m.cfg.params(21).contains("heartbeat=10000us/2.5"));
        assert!(!member(0, Duration::ZERO)
            .cfg
            .params(21)
            .contains("heartbeat"));
    }

    #[test]
    fn without_a_hold_every_neighbor_reports_at_once_as_in_the_paper() {
        let mut child = member(6, Duration::ZERO);
        let mut out = Outbox::new();
        child.on_suspect(Time::ZERO, NodeId(1), &mut out);
        assert_eq!(sends(&mut out), vec![report_of(1)]);
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
