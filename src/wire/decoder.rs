//! Cutting a byte stream into checked frames, in place.
//!
//! Bytes are appended to a 16-byte-aligned buffer; [`FrameDecoder::next_frame`] returns where
//! the next complete frame's body lies in it, so the caller validates and reads the body where
//! it sits (rkyv `access`), without copying. Because frames are multiples of 16 bytes and the
//! buffer is only ever shifted by whole frames, every body stays aligned.

use super::frame::{FrameHeader, Kind, DEFAULT_MAX_BODY};
use super::WireError;
use rkyv::util::AlignedVec;
use std::ops::Range;

/// A per-connection stream decoder.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: AlignedVec<16>,
    /// Start of the unread bytes (always a multiple of 16).
    read: usize,
    max_body: u32,
    /// Once an error is seen the stream is out of sync for good.
    failed: bool,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_BODY)
    }
}

impl FrameDecoder {
    /// A decoder refusing bodies larger than `max_body`.
    pub fn new(max_body: u32) -> Self {
        Self {
            buf: AlignedVec::new(),
            read: 0,
            max_body,
            failed: false,
        }
    }

    /// Append received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        // Reclaim consumed space once it is the larger part (keeps alignment: `read % 16 == 0`).
        if self.read > 0 && self.read * 2 >= self.buf.len() {
            let rest = self.buf.len() - self.read;
            self.buf.as_mut_slice().copy_within(self.read.., 0);
            self.buf.resize(rest, 0);
            self.read = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received but not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.read
    }

    /// The next complete frame: its kind and the range of its body in [`Self::bytes`].
    /// `Ok(None)` means "need more bytes". An error poisons the decoder: the connection must be
    /// closed, since the stream can no longer be trusted to be in sync.
    pub fn next_frame(&mut self) -> Result<Option<(Kind, Range<usize>)>, WireError> {
        if self.failed {
            return Err(WireError::Poisoned);
        }
        let rest = &self.buf[self.read..];
        let header = match FrameHeader::parse(rest, self.max_body) {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(None),
            Err(e) => {
                self.failed = true;
                return Err(e);
            }
        };
        if rest.len() < header.frame_len() {
            return Ok(None);
        }
        let body = self.read + 16..self.read + 16 + header.body_len as usize;
        self.read += header.frame_len();
        Ok(Some((header.kind, body)))
    }

    /// The buffer the ranges of [`Self::next_frame`] index into. Valid until the next `push`.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ArchivedMsg, Msg};

    fn frames(msgs: &[Msg]) -> Vec<u8> {
        let mut out = Vec::new();
        for m in msgs {
            m.write_frame(&mut out).unwrap();
        }
        out
    }

    #[test]
    fn byte_by_byte_stream_yields_every_message_in_place() {
        let msgs = vec![
            Msg::Ping {
                seq: 7,
                payload: vec![1; 33],
            },
            Msg::Up { ident: 5, hop: 3 },
            Msg::Data { payload: vec![] },
            Msg::BConnect { id: 9 },
        ];
        let stream = frames(&msgs);
        let mut d = FrameDecoder::default();
        let mut got = Vec::new();
        for b in &stream {
            d.push(std::slice::from_ref(b));
            while let Some((kind, body)) = d.next_frame().unwrap() {
                assert_eq!(kind, Kind::Msg);
                let bytes = &d.bytes()[body];
                assert_eq!(bytes.as_ptr() as usize % 16, 0, "body aligned in place");
                let archived: &ArchivedMsg = Msg::access(bytes).unwrap();
                got.push(rkyv::deserialize::<Msg, rkyv::rancor::BoxedError>(archived).unwrap());
            }
        }
        assert_eq!(got, msgs);
        assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn garbage_oversize_and_truncation() {
        // Garbage: an error, and the decoder stays poisoned.
        let mut d = FrameDecoder::default();
        d.push(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(d.next_frame(), Err(WireError::BadMagic));
        assert_eq!(d.next_frame(), Err(WireError::Poisoned));
        // Oversized length: refused from the header alone, before the body arrives.
        let mut d = FrameDecoder::new(64);
        let mut f = Vec::new();
        crate::wire::frame::FrameHeader::write(Kind::Msg, 1 << 30, &mut f);
        d.push(&f);
        assert!(matches!(d.next_frame(), Err(WireError::TooLarge { .. })));
        // Truncated: no frame until the rest arrives.
        let stream = frames(&[Msg::Data {
            payload: vec![3; 100],
        }]);
        let mut d = FrameDecoder::default();
        d.push(&stream[..stream.len() - 1]);
        assert_eq!(d.next_frame(), Ok(None));
        d.push(&stream[stream.len() - 1..]);
        assert!(d.next_frame().unwrap().is_some());
        // A well-framed body that is not a valid archive: a validation error, no panic.
        let mut junk = Vec::new();
        crate::wire::frame::write_frame(Kind::Msg, &[0xff; 40], &mut junk).unwrap();
        let mut d = FrameDecoder::default();
        d.push(&junk);
        let (_, body) = d.next_frame().unwrap().unwrap();
        assert!(matches!(
            Msg::access(&d.bytes()[body]),
            Err(WireError::Malformed(_))
        ));
    }

    #[test]
    fn overlay_messages_round_trip() {
        use crate::proto::bmg::BmgMsg;
        use crate::proto::overlay::OverlayMsg;
        use crate::proto::ring::RingMsg;
        use crate::NodeId;
        let all: Vec<OverlayMsg> = vec![
            RingMsg::FConnect(NodeId(1)).into(),
            RingMsg::Info(NodeId(2)).into(),
            RingMsg::AskConnect(NodeId(3)).into(),
            RingMsg::BConnect(NodeId(4)).into(),
            BmgMsg::Up {
                ident: NodeId(5),
                hop: 6,
            }
            .into(),
            BmgMsg::Dn {
                ident: NodeId(7),
                hop: 8,
            }
            .into(),
        ];
        let stream = frames(&all.iter().map(|&m| Msg::from(m)).collect::<Vec<_>>());
        let mut d = FrameDecoder::default();
        d.push(&stream);
        for want in all {
            let (_, body) = d.next_frame().unwrap().unwrap();
            assert_eq!(
                Msg::access(&d.bytes()[body]).unwrap().to_overlay(),
                Some(want)
            );
        }
    }
}

#[cfg(test)]
mod seeds {
    use super::FrameDecoder;

    /// The fuzz seed corpus: one valid frame of each kind. Checked to decode here; written out
    /// when `WEFT_WRITE_FUZZ_SEEDS` names a directory
    /// (`WEFT_WRITE_FUZZ_SEEDS=$PWD/fuzz/seeds/frame cargo test --lib fuzz_seeds`).
    #[test]
    fn fuzz_seeds_are_valid_frames() {
        use crate::wire::handshake::{Handshake, Identity, JobKey, Role};
        use crate::wire::Msg;
        let mut seeds: Vec<Vec<u8>> = Vec::new();
        for m in [
            Msg::Ping {
                seq: 1,
                payload: vec![7; 32],
            },
            Msg::Pong {
                seq: 1,
                payload: vec![],
            },
            Msg::Data {
                payload: b"hello".to_vec(),
            },
            Msg::FConnect { id: 3 },
            Msg::Up { ident: 4, hop: 2 },
        ] {
            let mut f = Vec::new();
            m.write_frame(&mut f).unwrap();
            seeds.push(f);
        }
        let me = Identity {
            job_id: 7,
            node_id: crate::NodeId(5),
            key: JobKey::from_bytes([9; 32]),
        };
        let mut hello = Vec::new();
        Handshake::with_nonce(Role::Initiator, me, None, [1; 32], &mut hello).unwrap();
        seeds.push(hello);
        for s in &seeds {
            let mut d = FrameDecoder::default();
            d.push(s);
            let (_, body) = d.next_frame().unwrap().expect("a whole frame");
            assert_eq!(body.end.div_ceil(16) * 16, s.len());
        }
        if let Ok(dir) = std::env::var("WEFT_WRITE_FUZZ_SEEDS") {
            std::fs::create_dir_all(&dir).unwrap();
            for (i, s) in seeds.iter().enumerate() {
                std::fs::write(format!("{dir}/seed-{i:02}"), s).unwrap();
            }
        }
    }
}
