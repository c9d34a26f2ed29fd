//! The wire format: frames, any protocol's messages in them, the stream decoder, the
//! handshake and the per-frame MAC. Bytes in, bytes out: no system call is made here.
//!
//! Everything that comes off the network is checked before it is used, and every defect is a
//! [`WireError`] for that one connection, never a panic.

pub mod decoder;
pub mod frame;
pub mod handshake;
pub mod mac;
pub mod msg;
pub mod sendq;

pub use decoder::{Frame, FrameDecoder, PAGE};
pub use frame::Kind;
pub use msg::{write_frame, write_sealed_frame, Framed};
pub use sendq::SendQueue;

/// Why bytes from a peer were refused. The connection that sent them is closed; the node goes on.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
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
    /// Reserved header bytes are not zero, or a tag or flag where the kind has none.
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
    /// A padding frame before the handshake finished.
    #[error("padding before the handshake")]
    PadBeforeAuth,
    /// A message of another protocol than the connection's.
    #[error("a frame of protocol tag {tag} on a {want} connection")]
    WrongProtocol {
        /// The frame's tag.
        tag: u8,
        /// The protocol the receiver runs.
        want: &'static str,
    },
    /// A message frame without the MAC this connection requires of it.
    #[error("an unauthenticated {0} frame where a MAC is required")]
    MacMissing(&'static str),
    /// A frame whose MAC does not verify (forged, altered, replayed, reordered or dropped).
    #[error("frame {0} of the session fails its MAC")]
    BadMac(u64),
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
