//! Frames on a byte stream: a fixed 16-byte header, then an rkyv body padded to 16 bytes, then,
//! on an authenticated connection, a 16-byte MAC.
//!
//! ```text
//! offset size field
//!      0    4 magic "WEFT"
//!      4    1 version (3)
//!      5    1 kind: 1 = protocol message, 2 = `Hello`, 3 = `Auth` (handshake),
//!             4 = padding (skipped by the receiver)
//!      6    1 protocol tag of a message frame (`proto::Message::TAG`), 0 for other kinds
//!      7    1 flags: bit 0 = a MAC follows the padded body; the other bits are zero
//!      8    4 body length B (u32 little endian, <= the receiver's maximum)
//!     12    4 zero
//!     16    B body: an rkyv 0.8 archive
//!   16+B      zero padding to a multiple of 16
//!   16+P   16 MAC (bit 0 of the flags): AES-256-GMAC, see `mac`
//! ```
//!
//! Every frame is a multiple of 16 bytes long, so frames laid back to back in a 16-aligned
//! receive buffer all have 16-aligned bodies, which rkyv reads in place (no copy). The
//! smoltcp discipline: [`FrameHeader::parse`] checks everything before anything is used; a bad
//! magic, version, kind, tag, flag, reserved field or length is a [`WireError`] for that
//! connection.

use super::WireError;

/// Frame magic.
pub const MAGIC: [u8; 4] = *b"WEFT";
/// Wire protocol version: 3 since frames carry their protocol's tag and a MAC flag (version 1
/// had one message enum for every protocol and no MAC).
pub const VERSION: u8 = 3;
/// Bytes of a frame's MAC.
pub const MAC_LEN: usize = 16;
/// Flag bit: a MAC follows the padded body.
pub const FLAG_MAC: u8 = 1;
/// Header bytes.
pub const HEADER_LEN: usize = 16;
/// Default largest body a receiver accepts (16 MiB).
pub const DEFAULT_MAX_BODY: u32 = 16 << 20;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A protocol message (`proto::Message`, its protocol in the tag byte).
    Msg = 1,
    /// Handshake: who I am.
    Hello = 2,
    /// Handshake: proof of the job key.
    Auth = 3,
    /// Padding, skipped by the receiver's decoder: moves the next frame's bytes within the
    /// sender's kernel pages (see [`super::sendq`]). Only after the handshake: a stranger has
    /// no business padding.
    Pad = 4,
    /// Goodbye: the sender sends nothing more on this connection, and the receiver answers
    /// with one of its own after what it still had to send; then both close it without
    /// suspecting each other (a connection released, see `ReactorOptions::reconnect`). Only
    /// after the handshake, with a MAC like a control message.
    Bye = 5,
    /// Handshake, in place of the responder's Auth: "my own dial to you is under way, use
    /// it". Sent by the lower id to a higher one whose dial crossed its own, so that a pair
    /// opens one connection, not two (`engine::reactor::crossing`). Unauthenticated, like
    /// everything before Auth: its dialer waits a bounded time for the other connection.
    Defer = 6,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        match v {
            1 => Some(Kind::Msg),
            2 => Some(Kind::Hello),
            3 => Some(Kind::Auth),
            4 => Some(Kind::Pad),
            5 => Some(Kind::Bye),
            6 => Some(Kind::Defer),
            _ => None,
        }
    }
}

/// A checked frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the body is.
    pub kind: Kind,
    /// The protocol of a message frame (0 for the other kinds).
    pub tag: u8,
    /// A MAC follows the padded body.
    pub mac: bool,
    /// Body bytes (without padding).
    pub body_len: u32,
}

/// Body length rounded up to the 16-byte frame granule.
pub fn padded(len: usize) -> usize {
    len.div_ceil(16) * 16
}

impl FrameHeader {
    /// Parse and check the first 16 bytes of `buf` (`Ok(None)` if fewer are there yet).
    pub fn parse(buf: &[u8], max_body: u32) -> Result<Option<FrameHeader>, WireError> {
        let Some(h) = buf.get(..HEADER_LEN) else {
            return Ok(None);
        };
        if h[..4] != MAGIC {
            return Err(WireError::BadMagic);
        }
        if h[4] != VERSION {
            return Err(WireError::BadVersion(h[4]));
        }
        let kind = Kind::from_u8(h[5]).ok_or(WireError::BadKind(h[5]))?;
        let (tag, flags) = (h[6], h[7]);
        if flags & !FLAG_MAC != 0 || h[12..16] != [0, 0, 0, 0] {
            return Err(WireError::Reserved);
        }
        // Only a message names a protocol; only a message and a goodbye are authenticated
        // frame by frame (the handshake authenticates itself, padding carries nothing).
        let maced = matches!(kind, Kind::Msg | Kind::Bye);
        if (kind == Kind::Msg) != (tag != 0) || (!maced && flags != 0) {
            return Err(WireError::Reserved);
        }
        let body_len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
        if body_len > max_body {
            return Err(WireError::TooLarge {
                len: body_len,
                max: max_body,
            });
        }
        Ok(Some(FrameHeader {
            kind,
            tag,
            mac: flags & FLAG_MAC != 0,
            body_len,
        }))
    }

    /// Bytes of the whole frame, padding and MAC included.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + padded(self.body_len as usize) + if self.mac { MAC_LEN } else { 0 }
    }

    /// The header of a frame of `kind` (a message: of protocol `tag`, with a MAC if `mac`)
    /// and a body of `body_len` bytes.
    pub fn encode(kind: Kind, tag: u8, mac: bool, body_len: u32) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..4].copy_from_slice(&MAGIC);
        h[4] = VERSION;
        h[5] = kind as u8;
        h[6] = tag;
        h[7] = if mac { FLAG_MAC } else { 0 };
        h[8..12].copy_from_slice(&body_len.to_le_bytes());
        h
    }
}

/// Append a whole frame of a kind that carries no protocol and no MAC (handshake, padding):
/// header, body, padding.
pub fn write_frame(kind: Kind, body: &[u8], out: &mut Vec<u8>) -> Result<(), WireError> {
    write_frame_with(kind, out, |out| {
        out.extend_from_slice(body);
        Ok(())
    })
}

/// Append a frame whose body `body` writes straight into `out` (no intermediate buffer): the
/// header is written with a placeholder length, patched once the body's size is known, and the
/// frame padded. On an error `out` is left as it was.
pub fn write_frame_with(
    kind: Kind,
    out: &mut Vec<u8>,
    body: impl FnOnce(&mut Vec<u8>) -> Result<(), WireError>,
) -> Result<(), WireError> {
    let start = out.len();
    out.extend_from_slice(&FrameHeader::encode(kind, 0, false, 0));
    let body_start = out.len();
    let written = body(out).and_then(|()| {
        u32::try_from(out.len() - body_start).map_err(|_| WireError::TooLarge {
            len: u32::MAX,
            max: u32::MAX,
        })
    });
    let len = match written {
        Ok(len) => len,
        Err(e) => {
            out.truncate(start);
            return Err(e);
        }
    };
    out[start + 8..start + 12].copy_from_slice(&len.to_le_bytes());
    out.resize(body_start + padded(len as usize), 0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_checks() {
        let mut f = Vec::new();
        write_frame(Kind::Hello, &[1, 2, 3], &mut f).unwrap();
        assert_eq!(f.len(), 32);
        let h = FrameHeader::parse(&f, 100).unwrap().unwrap();
        assert_eq!((h.kind, h.body_len, h.frame_len()), (Kind::Hello, 3, 32));
        assert_eq!(FrameHeader::parse(&f[..15], 100), Ok(None));
        let bad = |i: usize, v: u8| {
            let mut g = f.clone();
            g[i] = v;
            FrameHeader::parse(&g, 100)
        };
        assert_eq!(bad(0, b'X'), Err(WireError::BadMagic));
        assert_eq!(bad(4, 9), Err(WireError::BadVersion(9)));
        assert_eq!(bad(5, 0), Err(WireError::BadKind(0)));
        assert_eq!(
            bad(6, 1),
            Err(WireError::Reserved),
            "a Hello names no protocol"
        );
        assert_eq!(bad(7, 1), Err(WireError::Reserved), "a Hello has no MAC");
        assert_eq!(bad(7, 2), Err(WireError::Reserved), "an unknown flag");
        assert_eq!(bad(13, 1), Err(WireError::Reserved));
        assert_eq!(bad(9, 1), Err(WireError::TooLarge { len: 259, max: 100 }));
        // A message names its protocol, and may carry a MAC.
        let msg = FrameHeader::encode(Kind::Msg, 4, true, 3);
        let h = FrameHeader::parse(&msg, 100).unwrap().unwrap();
        assert_eq!((h.tag, h.mac, h.frame_len()), (4, true, 48));
        let untagged = FrameHeader::encode(Kind::Msg, 0, false, 3);
        assert_eq!(FrameHeader::parse(&untagged, 100), Err(WireError::Reserved));
    }
}
