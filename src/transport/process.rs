//! One membership node as its own OS process (`weft node`), for multi-process runs: the
//! launcher gives it its id, the initial view, the peers' addresses and the job key; it reports
//! what happens as it happens, stamped with `CLOCK_MONOTONIC` so a launcher on the same host
//! can put the reports of all its processes on one time line.

use super::{spawn, NodeOptions, NodeSpec};
use crate::engine::reactor::NodeEvent;
use crate::engine::{monotonic_ns, EngineError};
use crate::proto::membership::{MemberEvent, Membership, MembershipConfig};
use crate::proto::Event;
use crate::wire::handshake::JobKey;
use crate::NodeId;
use serde::Serialize;
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

/// How the process enters the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A member of the initial view.
    Member,
    /// A new process asking to join (`NewNode`).
    Join,
    /// A restarted member asking to come back with its old id (`NodeAlive`).
    Recover,
}

/// Everything a node process needs.
pub struct NodeProcess {
    /// Its id.
    pub id: NodeId,
    /// The job's initial view.
    pub members: Vec<NodeId>,
    /// Where the other processes listen.
    pub peers: HashMap<NodeId, SocketAddr>,
    /// Its bound listener.
    pub listener: TcpListener,
    /// The job key.
    pub key: JobKey,
    /// Membership settings.
    pub membership: MembershipConfig,
    /// How it enters.
    pub entry: Entry,
    /// Engine settings.
    pub opts: NodeOptions,
}

/// One report line (`weft node` prints them as JSON lines).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Report {
    /// The reporting node.
    pub node: u64,
    /// `started`, `authenticated`, `suspect`, `refused`, `detected`, `view`, `stabilized` or
    /// `joined`.
    pub kind: &'static str,
    /// The backend the node runs on (started): `uring`, or `poll` if it was forced or an
    /// automatic choice fell back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// The peer concerned (authenticated, suspect, detected).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<u64>,
    /// The epoch (view, stabilized, joined).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// The installed view (view).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub view: Option<Vec<u64>>,
    /// Why (refused; for a line that stands for many, the last one's reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// How many refusals the line stands for, when more than one: a node reports 16 a second
    /// one by one and counts the rest ([`NodeEvent::RefusedMore`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// When, `CLOCK_MONOTONIC` ns.
    pub mono_ns: u64,
}

/// Run the node until `report` returns `false` (or forever: a node process normally ends by
/// being killed).
pub fn run(p: NodeProcess, mut report: impl FnMut(&Report) -> bool) -> Result<(), EngineError> {
    let epoch = Instant::now();
    let epoch_ns = monotonic_ns();
    let retry = Duration::from_millis(200);
    let proto = match p.entry {
        Entry::Member => Membership::new(p.id, p.members.clone(), p.membership),
        Entry::Join => Membership::joiner(p.id, p.members.clone(), p.membership, retry),
        Entry::Recover => Membership::recovering(p.id, p.members.clone(), p.membership, retry),
    };
    let opts = NodeOptions {
        epoch: Some(epoch),
        ..p.opts
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let spec = NodeSpec {
        id: p.id,
        listener: p.listener,
        peers: p.peers,
        key: p.key,
        core: None,
    };
    let mut node = spawn(spec, &opts, proto, tx)?;
    let base = |kind| Report {
        node: p.id.0,
        kind,
        backend: None,
        peer: None,
        epoch: None,
        view: None,
        why: None,
        count: None,
        mono_ns: monotonic_ns(),
    };
    let started = Report {
        backend: Some(node.backend.to_string()),
        ..base("started")
    };
    if !report(&started) {
        return node.stop().map(drop);
    }
    while let Ok((_, e)) = rx.recv() {
        let r = match e {
            NodeEvent::Authenticated(peer) => Report {
                peer: Some(peer.0),
                ..base("authenticated")
            },
            NodeEvent::Suspect(peer) => Report {
                peer: Some(peer.0),
                ..base("suspect")
            },
            NodeEvent::Refused(why) => Report {
                why: Some(why),
                ..base("refused")
            },
            NodeEvent::RefusedMore { count, last } => Report {
                why: Some(last),
                count: Some(count),
                ..base("refused")
            },
            NodeEvent::Protocol(Event::Member(m)) => match m {
                MemberEvent::Detected { peer, at } => Report {
                    peer: Some(peer.0),
                    mono_ns: epoch_ns + at.0,
                    ..base("detected")
                },
                MemberEvent::ViewChanged { epoch, view, at } => Report {
                    epoch: Some(epoch),
                    view: Some(view.iter().map(|i| i.0).collect()),
                    mono_ns: epoch_ns + at.0,
                    ..base("view")
                },
                MemberEvent::Stabilized { epoch, at } => Report {
                    epoch: Some(epoch),
                    mono_ns: epoch_ns + at.0,
                    ..base("stabilized")
                },
                MemberEvent::Joined { epoch, at } => Report {
                    epoch: Some(epoch),
                    mono_ns: epoch_ns + at.0,
                    ..base("joined")
                },
            },
            NodeEvent::Protocol(_) => continue,
        };
        if !report(&r) {
            break;
        }
    }
    node.stop().map(drop)
}
