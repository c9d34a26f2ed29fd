//! The one message enum every protocol's messages travel in, archived with rkyv and read in
//! place from the receive buffer after validation.

use super::frame::{write_frame, Kind};
use super::WireError;
use crate::proto::bmg::BmgMsg;
use crate::proto::overlay::OverlayMsg;
use crate::proto::ring::RingMsg;
use crate::NodeId;
use rkyv::rancor::BoxedError;
use rkyv::{Archive, Deserialize, Serialize};

/// Every message weft sends. Variants keep the papers' names; later protocols add theirs.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub enum Msg {
    /// Latency probe: echo `payload` back in a `Pong`.
    Ping {
        /// Sequence number.
        seq: u64,
        /// Bytes to carry.
        payload: Vec<u8>,
    },
    /// Answer to `Ping`.
    Pong {
        /// The ping's sequence number.
        seq: u64,
        /// The ping's bytes.
        payload: Vec<u8>,
    },
    /// Opaque application data.
    Data {
        /// The bytes.
        payload: Vec<u8>,
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
}

impl Msg {
    /// Append this message as a frame.
    pub fn write_frame(&self, out: &mut Vec<u8>) -> Result<(), WireError> {
        let body =
            rkyv::to_bytes::<BoxedError>(self).map_err(|e| WireError::Encode(e.to_string()))?;
        write_frame(Kind::Msg, &body, out)
    }

    /// Validate a frame body and view it in place. `body` must start 16-byte aligned (frame
    /// bodies in a [`super::FrameDecoder`]'s buffer do).
    pub fn access(body: &[u8]) -> Result<&ArchivedMsg, WireError> {
        rkyv::access::<ArchivedMsg, BoxedError>(body)
            .map_err(|e| WireError::Malformed(e.to_string()))
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
    /// Read from a validated archive; `None` if the message is not this protocol's.
    fn from_wire(m: &ArchivedMsg) -> Option<Self>;
}

impl WireMsg for OverlayMsg {
    fn to_wire(self) -> Msg {
        self.into()
    }
    fn from_wire(m: &ArchivedMsg) -> Option<Self> {
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
    fn from_wire(m: &ArchivedMsg) -> Option<Self> {
        use crate::proto::ping::PingMsg;
        match m {
            ArchivedMsg::Ping { seq, payload } => Some(PingMsg::Ping {
                seq: seq.to_native(),
                payload: payload.as_slice().to_vec(),
            }),
            ArchivedMsg::Pong { seq, payload } => Some(PingMsg::Pong {
                seq: seq.to_native(),
                payload: payload.as_slice().to_vec(),
            }),
            _ => None,
        }
    }
}
