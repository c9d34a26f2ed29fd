//! The one message enum every protocol's messages travel in, archived with rkyv and read in
//! place from the receive buffer after validation.

use super::decoder::Frame;
use super::frame::{write_frame_with, Kind};
use super::payload::Payload;
use super::WireError;
use crate::proto::bmg::BmgMsg;
use crate::proto::overlay::OverlayMsg;
use crate::proto::ring::RingMsg;
use crate::NodeId;
use rkyv::rancor::{BoxedError, Failure};
use rkyv::{Archive, Deserialize, Serialize};

/// A membership epoch's state on the wire ([`crate::proto::membership::Regroup`]).
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct WireRegroup {
    /// Stabilization epoch.
    pub epoch: u64,
    /// Dead positions of the list.
    pub dead: Vec<u32>,
    /// Processes appended to the initial view.
    pub appended: Vec<u64>,
    /// The epoch's root.
    pub root: u64,
}

impl From<crate::proto::membership::Regroup> for WireRegroup {
    fn from(r: crate::proto::membership::Regroup) -> Self {
        WireRegroup {
            epoch: r.epoch,
            dead: r.dead,
            appended: r.appended.into_iter().map(|i| i.0).collect(),
            root: r.root.0,
        }
    }
}

impl ArchivedWireRegroup {
    fn to_native(&self) -> crate::proto::membership::Regroup {
        crate::proto::membership::Regroup {
            epoch: self.epoch.to_native(),
            dead: self.dead.iter().map(|d| d.to_native()).collect(),
            appended: self
                .appended
                .iter()
                .map(|i| NodeId(i.to_native()))
                .collect(),
            root: NodeId(self.root.to_native()),
        }
    }
}

/// Every message weft sends. Variants keep the papers' names; later protocols add theirs.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub enum Msg {
    /// Latency probe: echo `payload` back in a `Pong`.
    Ping {
        /// Sequence number.
        seq: u64,
        /// Bytes to carry.
        payload: Payload,
    },
    /// Answer to `Ping`.
    Pong {
        /// The ping's sequence number.
        seq: u64,
        /// The ping's bytes.
        payload: Payload,
    },
    /// Opaque application data.
    Data {
        /// The bytes.
        payload: Payload,
    },
    /// Algorithm 1: `F_Connect(I)`.
    FConnect {
        /// `I`.
        id: u64,
    },
    /// Algorithm 1: `Info(I)`.
    Info {
        /// `I`.
        id: u64,
    },
    /// Algorithm 1: `Ask_Connect(I)`.
    AskConnect {
        /// `I`.
        id: u64,
    },
    /// Algorithm 1: `B_Connect(I)`.
    BConnect {
        /// `I`.
        id: u64,
    },
    /// Algorithm 2: `UP(ident, nb_hop)`.
    Up {
        /// `ident`.
        ident: u64,
        /// `nb_hop`.
        hop: u8,
    },
    /// Algorithm 2: `DN(ident, nb_hop)`.
    Dn {
        /// `ident`.
        ident: u64,
        /// `nb_hop`.
        hop: u8,
    },
    /// Relay: a token that has made `hops` hops (the per-message cost probe).
    Token {
        /// Hops so far.
        hops: u64,
    },
    /// Membership: failure-detector probe.
    HowAreYou {
        /// Probe number.
        seq: u64,
    },
    /// Membership: answer to `HowAreYou`.
    IAmFine {
        /// The probe's number.
        seq: u64,
    },
    /// Membership: detector → root.
    NodeFailure {
        /// The failed process.
        failed: u64,
    },
    /// Membership: root → detector.
    FailureDetAck {
        /// The failed process.
        failed: u64,
    },
    /// Membership: detector → next live process after a root failure.
    RootFailure {
        /// The failed root.
        failed: u64,
    },
    /// Membership: recalculate after failures, down the tree.
    FailedNode {
        /// The epoch's state.
        state: WireRegroup,
    },
    /// Membership: as `FailedNode`, after a root failure.
    RootDead {
        /// The epoch's state.
        state: WireRegroup,
    },
    /// Membership: recalculate after a join or a recovery, down the tree.
    NewNodeJoin {
        /// The epoch's state.
        state: WireRegroup,
    },
    /// Membership: a join's subtree is stable, up the tree.
    NewNodeJoinAck {
        /// Stabilization epoch.
        epoch: u64,
    },
    /// Membership: a new process asks to join.
    NewNode {
        /// Its id.
        id: u64,
    },
    /// Membership: a recovered process asks to come back.
    NodeAlive {
        /// Its id.
        id: u64,
    },
    /// Membership: root → joiner, welcome.
    JoinDetAck {
        /// The state to adopt.
        state: WireRegroup,
    },
    /// Membership: my subtree is stable in `epoch`, up the tree.
    FailureAck {
        /// Stabilization epoch.
        epoch: u64,
    },
}

impl Msg {
    /// Append this message as a frame, serializing the body straight into `out` (no
    /// intermediate buffer, no second copy). `out` must end on a frame boundary (its length a
    /// multiple of 16, as every frame is): rkyv aligns relative to the writer's position, so
    /// the body's alignment inside the frame is then the same as in a buffer of its own. On an
    /// error `out` is left as it was.
    pub fn write_frame(&self, out: &mut Vec<u8>) -> Result<(), WireError> {
        debug_assert_eq!(
            out.len() % 16,
            0,
            "frames are appended on 16-byte boundaries"
        );
        write_frame_with(Kind::Msg, out, |out| {
            rkyv::api::high::to_bytes_in::<_, BoxedError>(self, out)
                .map(drop)
                .map_err(|e| WireError::Encode(e.to_string()))
        })
    }

    /// The payload this message carries, if any: the bytes a sender may splice into its
    /// queue by reference instead of copying ([`super::sendq`]).
    pub fn payload(&self) -> Option<&Payload> {
        match self {
            Msg::Ping { payload, .. } | Msg::Pong { payload, .. } | Msg::Data { payload } => {
                Some(payload)
            }
            _ => None,
        }
    }

    /// Validate a frame body and view it in place. `body` must start 16-byte aligned (frame
    /// bodies in a [`super::FrameDecoder`]'s buffer do).
    ///
    /// The check runs with rkyv's zero-sized error type first: every byte is checked the
    /// same, but no error context is built along the way, and it costs a third of the
    /// cycles (a warm loop: 12–17 against 32–53 per 32-byte ping). Only a body that fails
    /// is checked again, with `BoxedError`, for a readable reason.
    pub fn access(body: &[u8]) -> Result<&ArchivedMsg, WireError> {
        if let Ok(msg) = rkyv::access::<ArchivedMsg, Failure>(body) {
            return Ok(msg);
        }
        Err(WireError::Malformed(
            match rkyv::access::<ArchivedMsg, BoxedError>(body) {
                Err(e) => e.to_string(),
                Ok(_) => "rejected by the check, accepted by the explained one".into(),
            },
        ))
    }
}

impl From<OverlayMsg> for Msg {
    fn from(m: OverlayMsg) -> Msg {
        match m {
            OverlayMsg::Ring(RingMsg::FConnect(i)) => Msg::FConnect { id: i.0 },
            OverlayMsg::Ring(RingMsg::Info(i)) => Msg::Info { id: i.0 },
            OverlayMsg::Ring(RingMsg::AskConnect(i)) => Msg::AskConnect { id: i.0 },
            OverlayMsg::Ring(RingMsg::BConnect(i)) => Msg::BConnect { id: i.0 },
            OverlayMsg::Bmg(BmgMsg::Up { ident, hop }) => Msg::Up {
                ident: ident.0,
                hop,
            },
            OverlayMsg::Bmg(BmgMsg::Dn { ident, hop }) => Msg::Dn {
                ident: ident.0,
                hop,
            },
        }
    }
}

impl ArchivedMsg {
    /// The overlay protocol's message, if this is one (read from the archive, no allocation).
    pub fn to_overlay(&self) -> Option<OverlayMsg> {
        Some(match self {
            ArchivedMsg::FConnect { id } => RingMsg::FConnect(NodeId(id.to_native())).into(),
            ArchivedMsg::Info { id } => RingMsg::Info(NodeId(id.to_native())).into(),
            ArchivedMsg::AskConnect { id } => RingMsg::AskConnect(NodeId(id.to_native())).into(),
            ArchivedMsg::BConnect { id } => RingMsg::BConnect(NodeId(id.to_native())).into(),
            ArchivedMsg::Up { ident, hop } => BmgMsg::Up {
                ident: NodeId(ident.to_native()),
                hop: *hop,
            }
            .into(),
            ArchivedMsg::Dn { ident, hop } => BmgMsg::Dn {
                ident: NodeId(ident.to_native()),
                hop: *hop,
            }
            .into(),
            _ => return None,
        })
    }
}

/// A protocol message type that travels inside [`Msg`].
pub trait WireMsg: Sized {
    /// Wrap for sending.
    fn to_wire(self) -> Msg;
    /// Read from a validated archive `m` of `frame`'s body (large payloads are shared with
    /// the frame, [`Frame::share`]); `None` if the message is not this protocol's.
    fn from_wire(m: &ArchivedMsg, frame: &Frame) -> Option<Self>;
}

impl WireMsg for OverlayMsg {
    fn to_wire(self) -> Msg {
        self.into()
    }
    fn from_wire(m: &ArchivedMsg, _: &Frame) -> Option<Self> {
        m.to_overlay()
    }
}

impl WireMsg for crate::proto::ping::PingMsg {
    fn to_wire(self) -> Msg {
        use crate::proto::ping::PingMsg;
        match self {
            PingMsg::Ping { seq, payload } => Msg::Ping { seq, payload },
            PingMsg::Pong { seq, payload } => Msg::Pong { seq, payload },
        }
    }
    fn from_wire(m: &ArchivedMsg, frame: &Frame) -> Option<Self> {
        use crate::proto::ping::PingMsg;
        match m {
            ArchivedMsg::Ping { seq, payload } => Some(PingMsg::Ping {
                seq: seq.to_native(),
                payload: frame.share(payload.as_slice()),
            }),
            ArchivedMsg::Pong { seq, payload } => Some(PingMsg::Pong {
                seq: seq.to_native(),
                payload: frame.share(payload.as_slice()),
            }),
            _ => None,
        }
    }
}

impl WireMsg for crate::proto::relay::RelayMsg {
    fn to_wire(self) -> Msg {
        let crate::proto::relay::RelayMsg::Token { hops } = self;
        Msg::Token { hops }
    }
    fn from_wire(m: &ArchivedMsg, _: &Frame) -> Option<Self> {
        match m {
            ArchivedMsg::Token { hops } => Some(crate::proto::relay::RelayMsg::Token {
                hops: hops.to_native(),
            }),
            _ => None,
        }
    }
}

impl WireMsg for crate::proto::membership::MemberMsg {
    fn to_wire(self) -> Msg {
        use crate::proto::membership::MemberMsg as M;
        match self {
            M::HowAreYou { seq } => Msg::HowAreYou { seq },
            M::IAmFine { seq } => Msg::IAmFine { seq },
            M::NodeFailure { failed } => Msg::NodeFailure { failed: failed.0 },
            M::FailureDetAck { failed } => Msg::FailureDetAck { failed: failed.0 },
            M::RootFailure { failed } => Msg::RootFailure { failed: failed.0 },
            M::FailedNode(r) => Msg::FailedNode { state: r.into() },
            M::RootDead(r) => Msg::RootDead { state: r.into() },
            M::NewNodeJoin(r) => Msg::NewNodeJoin { state: r.into() },
            M::FailureAck { epoch } => Msg::FailureAck { epoch },
            M::NewNodeJoinAck { epoch } => Msg::NewNodeJoinAck { epoch },
            M::NewNode { id } => Msg::NewNode { id: id.0 },
            M::NodeAlive { id } => Msg::NodeAlive { id: id.0 },
            M::JoinDetAck(r) => Msg::JoinDetAck { state: r.into() },
        }
    }

    fn from_wire(m: &ArchivedMsg, _: &Frame) -> Option<Self> {
        use crate::proto::membership::MemberMsg as M;
        let id = |x: &rkyv::rend::u64_le| NodeId(x.to_native());
        Some(match m {
            ArchivedMsg::HowAreYou { seq } => M::HowAreYou {
                seq: seq.to_native(),
            },
            ArchivedMsg::IAmFine { seq } => M::IAmFine {
                seq: seq.to_native(),
            },
            ArchivedMsg::NodeFailure { failed } => M::NodeFailure { failed: id(failed) },
            ArchivedMsg::FailureDetAck { failed } => M::FailureDetAck { failed: id(failed) },
            ArchivedMsg::RootFailure { failed } => M::RootFailure { failed: id(failed) },
            ArchivedMsg::FailedNode { state } => M::FailedNode(state.to_native()),
            ArchivedMsg::RootDead { state } => M::RootDead(state.to_native()),
            ArchivedMsg::NewNodeJoin { state } => M::NewNodeJoin(state.to_native()),
            ArchivedMsg::FailureAck { epoch } => M::FailureAck {
                epoch: epoch.to_native(),
            },
            ArchivedMsg::NewNodeJoinAck { epoch } => M::NewNodeJoinAck {
                epoch: epoch.to_native(),
            },
            ArchivedMsg::NewNode { id: x } => M::NewNode { id: id(x) },
            ArchivedMsg::NodeAlive { id: x } => M::NodeAlive { id: id(x) },
            ArchivedMsg::JoinDetAck { state } => M::JoinDetAck(state.to_native()),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::membership::{MemberMsg, Regroup};
    use crate::wire::FrameDecoder;

    /// Serializing in place gives exactly the frame of a separately serialized body, after
    /// any 16-aligned prefix (the connection's pending frames).
    #[test]
    fn in_place_frames_equal_separately_built_ones() {
        let msgs = [
            Msg::Ping {
                seq: 3,
                payload: (0..1000u32).map(|i| i as u8).collect::<Vec<_>>().into(),
            },
            Msg::Up { ident: 9, hop: 2 },
            Msg::Data {
                payload: Payload::default(),
            },
        ];
        for prefix in [0usize, 16, 48] {
            let mut ours = vec![7u8; prefix];
            let mut theirs = ours.clone();
            for m in &msgs {
                m.write_frame(&mut ours).unwrap();
                let body = rkyv::to_bytes::<BoxedError>(m).unwrap();
                crate::wire::frame::write_frame(Kind::Msg, &body, &mut theirs).unwrap();
            }
            assert_eq!(ours, theirs, "prefix {prefix}");
        }
    }

    /// A body the check rejects is rejected with rkyv's own reason, whichever way it is
    /// wrong: a bad variant tag, a payload length past the body, a relative pointer out of
    /// it, or too few bytes for the root.
    #[test]
    fn rejected_bodies_carry_a_readable_reason() {
        let good = rkyv::to_bytes::<BoxedError>(&Msg::Ping {
            seq: 1,
            payload: vec![5; 40].into(),
        })
        .unwrap();
        assert!(Msg::access(&good).is_ok());
        let root = good.len() - std::mem::size_of::<ArchivedMsg>();
        let mut cases: Vec<(&str, rkyv::util::AlignedVec<16>)> = Vec::new();
        // A ping's root: the tag, then `seq` at +8, then the payload's relative pointer (+16)
        // and length (+20).
        for (what, at, byte) in [
            ("tag", root, 0xee),
            ("length", root + 20, 0x7f),
            ("pointer", root + 16, 0x40),
        ] {
            let mut bad = good.clone();
            bad[at] = byte;
            cases.push((what, bad));
        }
        let mut short = rkyv::util::AlignedVec::<16>::new();
        short.extend_from_slice(&good[..8]);
        cases.push(("short", short));
        for (what, bad) in cases {
            match Msg::access(&bad) {
                Err(WireError::Malformed(why)) => assert!(
                    !why.is_empty() && !why.contains("accepted by the explained one"),
                    "{what}: {why}"
                ),
                other => panic!("{what}: {other:?}"),
            }
        }
    }

    /// Every membership message survives framing, validation and reading in place.
    #[test]
    fn membership_messages_round_trip() {
        let msgs = vec![
            MemberMsg::HowAreYou { seq: 7 },
            MemberMsg::IAmFine { seq: 7 },
            MemberMsg::NodeFailure { failed: NodeId(3) },
            MemberMsg::FailureDetAck { failed: NodeId(3) },
            MemberMsg::RootFailure { failed: NodeId(0) },
            MemberMsg::FailedNode(Regroup {
                epoch: 2,
                dead: vec![3, 9],
                appended: vec![],
                root: NodeId(0),
            }),
            MemberMsg::RootDead(Regroup {
                epoch: 3,
                dead: vec![0],
                appended: vec![NodeId(40)],
                root: NodeId(1),
            }),
            MemberMsg::NewNodeJoin(Regroup {
                epoch: 4,
                dead: vec![0, 7],
                appended: vec![NodeId(40), NodeId(7)],
                root: NodeId(1),
            }),
            MemberMsg::FailureAck { epoch: 3 },
            MemberMsg::NewNodeJoinAck { epoch: 4 },
            MemberMsg::NewNode { id: NodeId(40) },
            MemberMsg::NodeAlive { id: NodeId(7) },
            MemberMsg::JoinDetAck(Regroup {
                epoch: 4,
                dead: vec![],
                appended: vec![NodeId(40)],
                root: NodeId(1),
            }),
        ];
        let mut bytes = Vec::new();
        for m in &msgs {
            m.clone().to_wire().write_frame(&mut bytes).unwrap();
        }
        let mut dec = FrameDecoder::new(1 << 20);
        dec.push(&bytes);
        let mut back = Vec::new();
        while let Some(f) = dec.next_frame().unwrap() {
            let archived = Msg::access(f.body()).unwrap();
            back.push(MemberMsg::from_wire(archived, &f).unwrap());
        }
        assert_eq!(back, msgs);
        // Another protocol's message is not membership's.
        let ping = Msg::FConnect { id: 1 };
        let mut b = Vec::new();
        ping.write_frame(&mut b).unwrap();
        let mut dec = FrameDecoder::new(1 << 20);
        dec.push(&b);
        let f = dec.next_frame().unwrap().unwrap();
        assert!(MemberMsg::from_wire(Msg::access(f.body()).unwrap(), &f).is_none());
    }
}
