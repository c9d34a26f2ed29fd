//! The wire format: frames, the archived `Msg` enum, the stream decoder and the handshake.
//!
//! Everything that comes off the network is checked before it is used, and every defect is a
//! [`WireError`] for that one connection, never a panic.

pub mod decoder;
pub mod frame;
pub mod handshake;
#[allow(missing_docs)] // for the types rkyv generates (resolvers); `Msg` itself is documented
pub mod msg;
pub mod payload;
pub mod sendq;

pub use decoder::{Frame, FrameDecoder, PAGE};
pub use frame::Kind;
pub use msg::{ArchivedMsg, Msg, WireMsg};
pub use payload::Payload;
pub use sendq::SendQueue;

/// Why bytes from a peer were refused. The connection that sent them is closed; the node goes on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    /// Not a weft frame.
    #[error("bad frame magic")]
    BadMagic,
    /// A wire version this node does not speak.
    #[error("unsupported wire version {0}")]
    BadVersion(u8),
    /// Unknown frame kind.
    #[error("unknown frame kind {0}")]
    BadKind(u8),
    /// Reserved header bytes are not zero.
    #[error("reserved header bytes are not zero")]
    Reserved,
    /// Body longer than this receiver accepts.
    #[error("frame body of {len} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// Announced length.
        len: u32,
        /// Receiver's maximum.
        max: u32,
    },
    /// The body does not validate as the expected archive.
    #[error("malformed frame body: {0}")]
    Malformed(String),
    /// A message could not be encoded.
    #[error("cannot encode message: {0}")]
    Encode(String),
    /// The stream failed before; nothing more is read from it.
    #[error("stream already failed")]
    Poisoned,
}
