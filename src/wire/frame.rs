//! Frames on a byte stream: a fixed 16-byte header, then an rkyv body padded to 16 bytes.
//!
//! ```text
//! offset size field
//!      0    4 magic "WEFT"
//!      4    1 version (1)
//!      5    1 kind: 1 = protocol message (`Msg`), 2 = `Hello`, 3 = `Auth` (handshake),
//!             4 = padding (skipped by the receiver)
//!      6    2 zero
//!      8    4 body length B (u32 little endian, <= the receiver's maximum)
//!     12    4 zero
//!     16    B body: an rkyv 0.8 archive
//!   16+B      zero padding to a multiple of 16
//! ```
//!
//! Every frame is a multiple of 16 bytes long, so frames laid back to back in a 16-aligned
//! receive buffer all have 16-aligned bodies, which rkyv reads in place (no copy). The
//! smoltcp discipline: [`FrameHeader::parse`] checks everything before anything is used; a bad
//! magic, version, kind, reserved field or length is a [`WireError`] for that connection.

use super::WireError;

/// Frame magic.
pub const MAGIC: [u8; 4] = *b"WEFT";
/// Wire protocol version.
pub const VERSION: u8 = 1;
/// Header bytes.
pub const HEADER_LEN: usize = 16;
/// Default largest body a receiver accepts (16 MiB).
pub const DEFAULT_MAX_BODY: u32 = 16 << 20;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A protocol message ([`super::Msg`]).
    Msg = 1,
    /// Handshake: who I am.
    Hello = 2,
    /// Handshake: proof of the job key.
    Auth = 3,
    /// Padding, skipped by the receiver's decoder: moves the next frame's bytes within the
    /// sender's kernel pages (see [`super::sendq`]). Peers send it from handshake version 2.
    Pad = 4,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        match v {
            1 => Some(Kind::Msg),
            2 => Some(Kind::Hello),
            3 => Some(Kind::Auth),
            4 => Some(Kind::Pad),
            _ => None,
        }
    }
}

/// A checked frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the body is.
    pub kind: Kind,
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
        if h[6..8] != [0, 0] || h[12..16] != [0, 0, 0, 0] {
            return Err(WireError::Reserved);
        }
        let body_len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
        if body_len > max_body {
            return Err(WireError::TooLarge {
                len: body_len,
                max: max_body,
            });
        }
        Ok(Some(FrameHeader { kind, body_len }))
    }

    /// Bytes of the whole frame, padding included.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + padded(self.body_len as usize)
    }

    /// The header for a body of `body_len` bytes.
    pub fn encode(kind: Kind, body_len: u32) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..4].copy_from_slice(&MAGIC);
        h[4] = VERSION;
        h[5] = kind as u8;
        h[8..12].copy_from_slice(&body_len.to_le_bytes());
        h
    }

    /// Append the header for a body of `body_len` bytes.
    pub fn write(kind: Kind, body_len: u32, out: &mut Vec<u8>) {
        out.extend_from_slice(&Self::encode(kind, body_len));
    }
}

/// Append a whole frame (header, body, padding) to `out`.
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
    FrameHeader::write(kind, 0, out);
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
        write_frame(Kind::Msg, &[1, 2, 3], &mut f).unwrap();
        assert_eq!(f.len(), 32);
        let h = FrameHeader::parse(&f, 100).unwrap().unwrap();
        assert_eq!((h.kind, h.body_len, h.frame_len()), (Kind::Msg, 3, 32));
        assert_eq!(FrameHeader::parse(&f[..15], 100), Ok(None));
        let bad = |i: usize, v: u8| {
            let mut g = f.clone();
            g[i] = v;
            FrameHeader::parse(&g, 100)
        };
        assert_eq!(bad(0, b'X'), Err(WireError::BadMagic));
        assert_eq!(bad(4, 9), Err(WireError::BadVersion(9)));
        assert_eq!(bad(5, 0), Err(WireError::BadKind(0)));
        assert_eq!(bad(6, 1), Err(WireError::Reserved));
        assert_eq!(bad(13, 1), Err(WireError::Reserved));
        assert_eq!(bad(9, 1), Err(WireError::TooLarge { len: 259, max: 100 }));
    }
}
