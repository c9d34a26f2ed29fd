//! Why one connection ended or was refused. The reactor closes that connection alone and goes
//! on; the reason reaches whoever reads the node's events ([`Refusal`]).

use crate::wire::handshake::HandshakeError;
use crate::wire::{Kind, WireError};
use crate::NodeId;
use std::fmt;

/// Why a connection failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConnError {
    /// The peer closed its end.
    #[error("closed by peer")]
    ClosedByPeer,
    /// The peer closed a connection this node dialed before the handshake was done: what a
    /// peer with another job key (or job, or parameters) does, and says only to itself.
    #[error(
        "closed by the peer during the handshake: it may hold another job key (WEFT_JOB_KEY), \
         or run another job or other parameters; its own log names the reason"
    )]
    ClosedInHandshake,
    /// Released on purpose, both goodbyes said (no failure: see `release.rs`).
    #[error("released")]
    Released,
    /// A system call on the socket failed.
    #[error("{0}")]
    Io(IoFailure),
    /// Bytes that are not weft's frames, or a frame that does not check.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The handshake failed (wrong key, job, parameters, version).
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    /// A handshake frame after the handshake.
    #[error("unexpected {0:?} frame after the handshake")]
    Unexpected(Kind),
    /// More bytes than a handshake holds, before the handshake finished.
    #[error("{0} bytes before the handshake finished (a handshake is at most {1})")]
    Chatty(usize, usize),
    /// No handshake within the deadline.
    #[error("no handshake within {0} ms")]
    HandshakeTimeout(u128),
    /// So many bytes wait for a peer that has stopped reading.
    #[error("{0} bytes queued for a peer that does not read")]
    Stalled(usize),
    /// The socket accepted no bytes of a send.
    #[error("the socket took no bytes")]
    NoProgress,
    /// A direct receive completed without the buffer it was lent.
    #[error("a receive completed without its buffer")]
    LostLoan,
    /// The node knows no address for a peer it must reach: treated as a refused dial.
    #[error("no address for {0}")]
    NoAddress(NodeId),
    /// Closed to make room for other connections (too many strangers, or no descriptor).
    #[error("crowded out: no handshake in {waited_ms} ms, {why}")]
    CrowdedOut {
        /// How long it had waited.
        waited_ms: u128,
        /// What it made room for.
        why: String,
    },
    /// The listener cannot accept (out of descriptors or memory): it rests and tries again.
    #[error("accept: {0}; the listener tries again every {1} ms")]
    AcceptRests(String, u128),
    /// A shared-memory link could not be set up, or its peer broke it (a ring position
    /// that cannot be, a set-up socket it wrote on).
    #[error("shared memory: {0}")]
    Shm(String),
    /// A second process claiming a live member's id: refused, the live one kept.
    #[error("{peer} is already connected as incarnation {live}; refused incarnation {other}")]
    Impostor {
        /// The id claimed.
        peer: NodeId,
        /// The incarnation connected.
        live: u64,
        /// The incarnation refused.
        other: u64,
    },
}

/// A failed system call, kept as text and errno so that the error can be cloned and
/// compared (an `io::Error` can be neither).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoFailure {
    /// What was being done (`connect 127.0.0.1:4000`, `recv`, `socket options`).
    pub op: String,
    /// The OS error number, if there was one.
    pub errno: Option<i32>,
    /// The error's text.
    pub text: String,
}

impl fmt::Display for IoFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.op, self.text)
    }
}

impl ConnError {
    /// The peer we dialed keeps its own dial instead (`crossing.rs`): no failure yet.
    pub(super) fn deferred(&self) -> bool {
        matches!(self, ConnError::Handshake(HandshakeError::Deferred(_)))
    }

    /// `op` failed with `e`.
    pub fn io(op: impl Into<String>, e: &std::io::Error) -> Self {
        ConnError::Io(IoFailure {
            op: op.into(),
            errno: e.raw_os_error(),
            text: e.to_string(),
        })
    }

    /// A failure the kernel reported as the negative errno `res` of a completion.
    pub fn errno(op: impl Into<String>, res: i32) -> Self {
        Self::io(op, &std::io::Error::from_raw_os_error(-res))
    }
}

/// A refused or dropped connection, as a node reports it: with its peer when it had one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The authenticated or dialed peer, if any (a stranger has none).
    pub peer: Option<NodeId>,
    /// Why.
    pub why: ConnError,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.peer {
            Some(p) => write!(f, "{p}: {}", self.why),
            None => write!(f, "{}", self.why),
        }
    }
}
