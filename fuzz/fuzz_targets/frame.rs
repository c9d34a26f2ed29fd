//! Arbitrary bytes from the network or a disk: the frame decoder (before and after
//! authentication), every protocol's message validation (the same `Framed::read` the engine
//! runs, payloads shared out of the receive buffer), the handshake from both ends, and the IDA
//! piece parser must answer with an error, never a panic, a hang or bytes other than the
//! archive's.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft::wire::handshake::{Handshake, Identity, JobKey, Role};
use weft::proto::Message;
use weft::wire::{Frame, FrameDecoder, Framed, Kind};
use weft::NodeId;

/// Read `frame` as `M`. A payload it hands out is no longer than the frame, and one large
/// enough to be shared lies inside the frame's own bytes.
fn read<M: Framed + Message>(frame: &Frame) {
    if let Ok(m) = M::read(frame) {
        if let Some(p) = m.payload() {
            assert!(
                p.len() <= frame.body().len(),
                "a payload longer than its frame"
            );
            if p.len() >= weft::buf::SHARE_MIN {
                assert!(
                    weft::buf::offset_within(frame.body(), p).is_some(),
                    "a shared payload outside its frame"
                );
            }
        }
    }
}

/// `frame` as each of weft's message types (`weft::for_each_message!`: the list the tag
/// test and the wire's round trip walk too).
fn every_protocol(frame: &Frame) {
    macro_rules! read_as {
        ($m:ty) => {
            read::<$m>(frame);
        };
    }
    weft::for_each_message!(read_as);
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks where the input splits in two pushes (partial frames) and whether
    // the decoder is past authentication (larger bodies, padding frames).
    let first = data.first().copied().unwrap_or(0);
    let cut = (first as usize).min(data.len());
    let mut d = FrameDecoder::new(1 << 10);
    if first & 1 == 1 {
        d.authenticated(1 << 16);
    }
    let me = Identity::new(7, NodeId(1), JobKey::from_bytes([9; 32]));
    let mut out = Vec::new();
    // Both ends of a handshake read the same frames: the responder that accepted the
    // connection, and the initiator that dialed node 5. One that fails stops reading.
    let mut ends = [
        Handshake::with_nonce(Role::Responder, me.clone(), None, [2; 32], &mut out).ok(),
        Handshake::with_nonce(Role::Initiator, me, Some(NodeId(5)), [3; 32], &mut out).ok(),
    ];
    'parts: for part in [&data[..cut], &data[cut..]] {
        d.push(part);
        loop {
            match d.next_frame() {
                Ok(Some(frame)) => {
                    if frame.kind == Kind::Msg {
                        every_protocol(&frame);
                    }
                    for end in &mut ends {
                        if end.as_mut().is_some_and(|h| {
                            h.on_frame(frame.kind, frame.body(), &mut out).is_err()
                        }) {
                            *end = None;
                        }
                    }
                }
                Ok(None) => break,
                Err(_) => break 'parts,
            }
        }
    }
    // The same bytes as a piece file.
    if let Ok(p) = weft::ida::Piece::from_bytes(data) {
        assert_eq!(p.body.len() as u64, p.header.piece_len);
    }
});
