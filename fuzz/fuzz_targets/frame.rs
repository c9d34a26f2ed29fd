//! Arbitrary bytes from the network: the frame decoder, the in-place message validation, the
//! payloads shared out of the receive buffer and the handshake must answer with an error,
//! never a panic, a hang or bytes other than the archive's.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft::wire::handshake::{Handshake, Identity, JobKey, Role};
use weft::wire::{ArchivedMsg, FrameDecoder, Kind, Msg};
use weft::NodeId;

fuzz_target!(|data: &[u8]| {
    // Split the input in two pushes at a data-dependent point: exercises partial frames.
    let cut = data.first().map_or(0, |&b| b as usize).min(data.len());
    let mut d = FrameDecoder::new(1 << 16);
    let me = Identity::new(7, NodeId(1), JobKey::from_bytes([9; 32]));
    let mut out = Vec::new();
    // Both ends of a handshake read the same frames: the responder that accepted the
    // connection, and the initiator that dialed node 5 (the seed Hello's id), which also
    // checks that the peer is the one it meant to reach. One that fails stops reading.
    let mut ends = [
        Some(
            Handshake::with_nonce(Role::Responder, me.clone(), None, [2; 32], &mut out)
                .expect("hello"),
        ),
        Some(
            Handshake::with_nonce(Role::Initiator, me, Some(NodeId(5)), [3; 32], &mut out)
                .expect("hello"),
        ),
    ];
    for part in [&data[..cut], &data[cut..]] {
        d.push(part);
        loop {
            match d.next_frame() {
                Ok(Some(frame)) => {
                    let (kind, bytes) = (frame.kind, frame.body());
                    if kind == Kind::Msg {
                        if let Ok(m) = Msg::access(bytes) {
                            let _ = m.to_overlay();
                            if let ArchivedMsg::Ping { payload, .. }
                            | ArchivedMsg::Pong { payload, .. }
                            | ArchivedMsg::Data { payload } = m
                            {
                                let shared = frame.share(payload.as_slice());
                                assert_eq!(&shared[..], payload.as_slice());
                            }
                        }
                    }
                    for end in &mut ends {
                        if end
                            .as_mut()
                            .is_some_and(|h| h.on_frame(kind, bytes, &mut out).is_err())
                        {
                            *end = None;
                        }
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
