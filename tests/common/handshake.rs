//! A handshake carried out by hand over a plain socket, as any other process (a stranger with
//! the wrong key, or a real peer whose node runs nowhere near the test's descriptors) would.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use weft::wire::handshake::{Handshake, Identity, Role};
use weft::wire::mac::Session;
use weft::wire::FrameDecoder;
use weft::NodeId;

/// Dial-side handshake as `me` on the connected `s`: send our Hello, answer the node's, and
/// check its proof. The node's id once it proved the job key, or why not (the node closed,
/// said nothing within `patience`, or failed the proof).
pub fn shake_hands(s: &mut TcpStream, me: Identity, patience: Duration) -> Result<NodeId, String> {
    shake_hands_as(Role::Initiator, s, me, patience)
}

/// [`shake_hands`] on either side: `Role::Responder` on a connection the node dialed.
#[allow(dead_code)] // not every test binary that shares this module answers dials
pub fn shake_hands_as(
    role: Role,
    s: &mut TcpStream,
    me: Identity,
    patience: Duration,
) -> Result<NodeId, String> {
    authenticate(role, s, me, patience, &mut Vec::new()).map(|(id, _)| id)
}

/// [`shake_hands_as`], keeping every byte this end sent in `sent` (a recording to replay),
/// and returning the connection's session as well: what an authenticated peer holds, to seal
/// the frames it sends after the handshake.
pub fn authenticate(
    role: Role,
    s: &mut TcpStream,
    me: Identity,
    patience: Duration,
    sent: &mut Vec<u8>,
) -> Result<(NodeId, Session), String> {
    let mut out = Vec::new();
    let mut hs = Handshake::start(role, me, None, &mut out).map_err(|e| e.to_string())?;
    s.write_all(&out)
        .map_err(|e| format!("send our Hello: {e}"))?;
    sent.extend_from_slice(&out);
    s.set_read_timeout(Some(patience))
        .map_err(|e| e.to_string())?;
    let mut dec = FrameDecoder::default();
    let mut buf = [0u8; 4096];
    loop {
        // A read with a timeout fails with EINTR after the process is stopped and continued
        // (signal(7)), handler or not: that is no answer from the node.
        let n = match s.read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => r.map_err(|e| format!("read: {e}"))?,
        };
        if n == 0 {
            return Err("the node closed the connection".into());
        }
        dec.push(&buf[..n]);
        while let Some(f) = dec.next_frame().map_err(|e| e.to_string())? {
            let mut reply = Vec::new();
            let done = hs.on_frame(f.kind, f.body(), &mut reply);
            s.write_all(&reply).map_err(|e| format!("send: {e}"))?;
            sent.extend_from_slice(&reply);
            if let Some(peer) = done.map_err(|e| e.to_string())? {
                let session = hs.session().ok_or("authenticated, yet no session")?;
                return Ok((peer.id, session));
            }
        }
    }
}
