//! The messages of the Process Order broadcast, defined once: the protocol uses them and the
//! wire archives them.

use super::super::heartbeat::Beat;
use super::super::order::{Mod, Slot, Stamp};
use crate::buf::Payload;
use crate::NodeId;

pub use self::wire_form::{Entry, OrderMsg, Snapshot, Term, What};

/// Private, so that the archived forms' resolvers stay out of the public API.
mod wire_form {
    use super::*;

    /// Who assigns broadcast indices: a root and the number of roots before it. A new root
    /// takes a higher number than any it heard of; a process follows the highest term it
    /// heard of and ignores what was sent under an older one, so a root that was wrongly
    /// suspected cannot go on numbering broadcasts beside its successor.
    #[derive(
        Clone,
        Copy,
        Debug,
        PartialEq,
        Eq,
        PartialOrd,
        Ord,
        Hash,
        rkyv::Archive,
        rkyv::Serialize,
        rkyv::Deserialize,
    )]
    pub struct Term {
        /// Roots so far.
        pub n: u64,
        /// This term's root.
        pub root: NodeId,
    }

    /// What a broadcast carries.
    #[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
    pub enum What {
        /// An application message.
        App,
        /// A change of the Process Order table (`POModify`).
        Mod(Mod),
        /// The logs are cleared: every broadcast up to `upto` is delivered everywhere, so
        /// the BLog forgets them, and the ModLog restarts (ghosts go, section 6.2).
        Clear {
            /// The highest index every process has delivered.
            upto: u64,
        },
    }

    /// One broadcast as the root numbered it.
    #[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
    pub struct Entry {
        /// The broadcast index BI (from 1, no gaps).
        pub bi: u64,
        /// The process that asked for it (the root itself for table changes).
        pub origin: NodeId,
        /// The origin's number for it (from 1; 0 for the root's own table changes).
        pub seq: u64,
        /// The root's ModLog when it numbered it (section 4): which table the broadcast
        /// travels.
        pub stamp: Stamp,
        /// What it is.
        pub what: What,
        /// The application's bytes.
        pub body: Payload,
    }

    /// The state a joining or recovered process starts from.
    #[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
    pub struct Snapshot {
        /// The term.
        pub term: Term,
        /// The first index the process delivers.
        pub next: u64,
        /// The ModLog's generation.
        pub gen: u64,
        /// The table at the last clearing: (id, live, incarnation).
        pub base: Vec<(NodeId, bool, u64)>,
        /// The ModLog.
        pub mods: Vec<Mod>,
        /// The highest number delivered from each origin (for duplicates, should the process
        /// become the root).
        pub seqs: Vec<(NodeId, u64)>,
        /// The BLog: every broadcast since the last clearing, for the children it may have to
        /// repair, and for a recovered process's replay.
        pub blog: Vec<Entry>,
    }

    /// Messages of the Process Order broadcast.
    #[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
    pub enum OrderMsg {
        /// Origin → root: please broadcast this (the initiator's number makes a resent
        /// request recognizable, section 5.2.2).
        Request {
            /// The origin's incarnation: a request of an earlier life is not numbered.
            inc: u64,
            /// The origin's number.
            seq: u64,
            /// The bytes.
            body: Payload,
        },
        /// A numbered broadcast, down the tree or as a repair, sent under the sender's term.
        Bcast {
            /// The broadcast.
            entry: Entry,
            /// The sender's term.
            via: Term,
        },
        /// Up the tree: every process of my subtree, as the table of `stamp` lays it out,
        /// delivered every index up to `upto`. A subtree is only known under one table: a
        /// coordinator counts an ack made under another one as nothing.
        Ack {
            /// Highest index delivered by the whole subtree.
            upto: u64,
            /// The table the subtree was computed under.
            stamp: Stamp,
        },
        /// Root → origin: every broadcast of yours up to number `upto` is delivered by every
        /// process of the table.
        Confirmed {
            /// The origin's number.
            upto: u64,
        },
        /// To a new coordinator: I deliver from `next`; `dead` are the processes between us
        /// that I stopped waiting for (they were my coordinators).
        Have {
            /// The term.
            term: Term,
            /// The next index I deliver.
            next: u64,
            /// My gone coordinators, nearest first.
            dead: Vec<NodeId>,
        },
        /// A coordinator whose child `dead` failed takes its children: from now on they hear
        /// from the sender.
        Adopt {
            /// The term.
            term: Term,
            /// The gone processes between the sender and the receiver.
            dead: Vec<NodeId>,
        },
        /// → root: `id` failed (section 5.2.1: "the coordinator is notified"). To a process
        /// that is not the root, about the root: you are next, take over.
        Failed {
            /// The failed process.
            id: NodeId,
            /// The sender's next index: a process that came back at a later index than this
            /// is told of its earlier life, and does not stop.
            next: u64,
        },
        /// New root → every process: I am the root of `term`; `dead` are gone; tell me how far
        /// you delivered.
        Sync {
            /// The new term.
            term: Term,
            /// Every process the new root counts gone.
            dead: Vec<NodeId>,
        },
        /// → new root: how far I delivered (`next` is 0 for a process still joining).
        Synced {
            /// The term.
            term: Term,
            /// The next index I deliver.
            next: u64,
        },
        /// New root → a process that delivered further: send me `from..=upto`.
        Fetch {
            /// First index wanted.
            from: u64,
            /// Last index wanted.
            upto: u64,
        },
        /// `SystemJoin`, or a recovered process back under its old id.
        Join {
            /// Its id.
            id: NodeId,
            /// Its incarnation (a restart is a new one).
            inc: u64,
            /// The last broadcast the process delivered before it failed (index, origin,
            /// number), to replay the rest from the BLog (section 5.2.3).
            have: Option<(u64, NodeId, u64)>,
        },
        /// `SystemLeave`.
        Leave {
            /// Its id.
            id: NodeId,
        },
        /// Not the root: here is the term I know.
        Redirect {
            /// The term.
            term: Term,
        },
        /// Active root → a process that speaks as a member but is not in its table (a root
        /// that had been replaced welcomed it): you are not in the table of `term`, stop.
        Out {
            /// The root's term.
            term: Term,
        },
        /// Root → joiner: welcome, start from this state.
        Welcome(Box<Snapshot>),
        /// A broadcast without total order, down the tree rooted at its origin (section 6.1).
        Flood {
            /// The sender.
            origin: NodeId,
            /// Its number.
            seq: u64,
            /// The sender's ModLog (which tree it travels).
            stamp: Stamp,
            /// The bytes.
            body: Payload,
        },
        /// A ring heartbeat.
        Beat(Beat),
    }
}

impl super::super::Message for OrderMsg {
    const TAG: super::super::Tag = 5;
    const NAME: &'static str = "order";

    fn payload(&self) -> Option<&Payload> {
        match self {
            OrderMsg::Request { body, .. } | OrderMsg::Flood { body, .. } => Some(body),
            OrderMsg::Bcast { entry, .. } => Some(&entry.body),
            _ => None,
        }
    }
}

impl OrderMsg {
    /// The term the message was sent under, when it names one.
    pub fn term(&self) -> Option<Term> {
        match self {
            OrderMsg::Bcast { via: term, .. }
            | OrderMsg::Have { term, .. }
            | OrderMsg::Adopt { term, .. }
            | OrderMsg::Sync { term, .. }
            | OrderMsg::Synced { term, .. }
            | OrderMsg::Redirect { term }
            | OrderMsg::Out { term } => Some(*term),
            _ => None,
        }
    }

    /// Only a member sends this: its sender says it delivers in the table's order.
    pub fn claims_membership(&self) -> bool {
        match self {
            OrderMsg::Request { .. }
            | OrderMsg::Ack { .. }
            | OrderMsg::Have { .. }
            | OrderMsg::Failed { .. } => true,
            OrderMsg::Synced { next, .. } => *next > 0,
            _ => false,
        }
    }
}

impl From<Beat> for OrderMsg {
    fn from(b: Beat) -> Self {
        OrderMsg::Beat(b)
    }
}

impl Snapshot {
    /// The table at the last clearing, as slots.
    pub fn base_slots(&self) -> Vec<Slot> {
        self.base
            .iter()
            .map(|&(id, live, inc)| Slot { id, live, inc })
            .collect()
    }
}
