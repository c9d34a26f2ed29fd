//! Connection handshake and job authentication, sans-IO.
//!
//! Both sides send `Hello { version, job_id, node_id, nonce }`. Having the peer's Hello, each
//! sends `Auth { mac }` with `mac = HMAC-SHA256(job key, label ‖ job_id ‖ initiator id ‖
//! responder id ‖ initiator nonce ‖ responder nonce)`, where the label says which role computed
//! it ("weft-v1 initiator" / "weft-v1 responder"), so a peer cannot reflect our own proof back.
//! Fresh nonces on both sides make every transcript new, so a recorded Auth proves nothing later.
//! Each side checks the other's MAC in constant time. A stranger (garbage), a wrong job, a wrong
//! version or a wrong key is refused with a [`HandshakeError`], and no message of it reaches a
//! protocol: the caller only starts passing `Msg` frames up after [`Handshake::on_frame`] has
//! returned the authenticated peer id.

use super::frame::{write_frame, Kind};
use super::WireError;
use crate::NodeId;
use hmac::{Hmac, Mac};
use rkyv::rancor::BoxedError;
use rkyv::util::AlignedVec;
use rkyv::{Archive, Deserialize, Serialize};
use sha2::Sha256;
use std::path::Path;

/// Handshake protocol version: 2 since peers may send padding frames ([`Kind::Pad`]), which
/// a version-1 decoder refuses.
pub const HANDSHAKE_VERSION: u16 = 2;

/// Largest frame body a connection accepts before it has authenticated. Hello and Auth are
/// under 100 bytes; the rest is room for later versions. A stranger may not make a node set
/// aside a full message's room (16 MiB by default) by announcing a large frame.
pub const MAX_HANDSHAKE_BODY: u32 = 1024;

/// The secret every process of one job shares.
#[derive(Clone, PartialEq, Eq)]
pub struct JobKey([u8; 32]);

impl std::fmt::Debug for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobKey(..)") // never print the secret
    }
}

impl JobKey {
    /// A key from 32 bytes.
    pub fn from_bytes(b: [u8; 32]) -> Self {
        Self(b)
    }

    /// A key from 64 hex digits.
    pub fn from_hex(s: &str) -> Result<Self, HandshakeError> {
        let s = s.trim();
        if s.len() != 64 || !s.is_ascii() {
            return Err(HandshakeError::BadKey("expected 64 hex digits".into()));
        }
        let mut k = [0u8; 32];
        for (i, byte) in k.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)
                .map_err(|_| HandshakeError::BadKey("expected 64 hex digits".into()))?;
        }
        Ok(Self(k))
    }

    /// The key as 64 hex digits, to hand to processes a launcher starts (`WEFT_JOB_KEY`).
    /// Never log it.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// `WEFT_JOB_KEY` (64 hex digits), if set.
    pub fn from_env() -> Result<Option<Self>, HandshakeError> {
        match std::env::var("WEFT_JOB_KEY") {
            Ok(v) => Self::from_hex(&v).map(Some),
            Err(_) => Ok(None),
        }
    }

    /// A key file: 64 hex digits, or exactly 32 raw bytes.
    pub fn from_file(path: &Path) -> Result<Self, HandshakeError> {
        let bytes = std::fs::read(path)
            .map_err(|e| HandshakeError::BadKey(format!("{}: {e}", path.display())))?;
        match <[u8; 32]>::try_from(bytes.as_slice()) {
            Ok(raw) => Ok(Self(raw)),
            Err(_) => Self::from_hex(&String::from_utf8_lossy(&bytes)),
        }
    }

    /// A fresh random key (for in-process clusters), from the kernel's CSPRNG.
    pub fn generate() -> Result<Self, HandshakeError> {
        Ok(Self(random32()?))
    }
}

/// 32 bytes from the kernel's CSPRNG, through `getrandom(2)`: no file to open, so a node
/// that has run out of descriptors still starts handshakes (opening `/dev/urandom` for each
/// nonce failed there, and refused a legitimate peer as a bad key).
pub fn random32() -> Result<[u8; 32], HandshakeError> {
    let mut b = [0u8; 32];
    let mut at = 0;
    while at < b.len() {
        // SAFETY: the kernel writes at most `b.len() - at` bytes, the rest of `b`.
        let n = unsafe { libc::getrandom(b[at..].as_mut_ptr().cast(), b.len() - at, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(HandshakeError::BadKey(format!("no randomness: {e}")));
        }
        at += n as usize;
    }
    Ok(b)
}

/// Why a handshake failed. The connection is closed; the node goes on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HandshakeError {
    /// The bytes were not valid frames.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The peer speaks another handshake version.
    #[error("handshake version {theirs}, we speak {ours}")]
    WrongVersion {
        /// Ours.
        ours: u16,
        /// Theirs.
        theirs: u16,
    },
    /// The peer belongs to another job.
    #[error("peer is in job {theirs:#x}, we are in job {ours:#x}")]
    WrongJob {
        /// Ours.
        ours: u64,
        /// Theirs.
        theirs: u64,
    },
    /// We dialed one node and another answered.
    #[error("dialed {expected}, reached {got}")]
    WrongPeer {
        /// Whom we dialed.
        expected: NodeId,
        /// Who answered.
        got: NodeId,
    },
    /// The peer does not know the job key.
    #[error("peer failed to prove knowledge of the job key")]
    BadProof,
    /// A frame out of order (e.g. a message before authentication).
    #[error("unexpected {0:?} frame during the handshake")]
    Unexpected(Kind),
    /// A job key that cannot be used.
    #[error("bad job key: {0}")]
    BadKey(String),
}

#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
struct Hello {
    version: u16,
    job_id: u64,
    node_id: u64,
    nonce: [u8; 32],
}

#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
struct Auth {
    mac: [u8; 32],
}

/// Which end of the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Opened the connection.
    Initiator,
    /// Accepted it.
    Responder,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Role::Initiator => b"weft-v1 initiator",
            Role::Responder => b"weft-v1 responder",
        }
    }
}

/// Who we are in the job.
#[derive(Clone, Debug)]
pub struct Identity {
    /// The job.
    pub job_id: u64,
    /// This node.
    pub node_id: NodeId,
    /// The job's shared key.
    pub key: JobKey,
}

/// One connection's handshake.
#[derive(Debug)]
pub struct Handshake {
    role: Role,
    me: Identity,
    nonce: [u8; 32],
    expect: Option<NodeId>,
    peer: Option<(NodeId, [u8; 32])>,
    done: bool,
}

fn decode<T>(body: &[u8]) -> Result<T, HandshakeError>
where
    T: Archive,
    T::Archived: for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, BoxedError>>
        + rkyv::Deserialize<T, rkyv::api::high::HighDeserializer<BoxedError>>,
{
    // Handshake frames are tiny: copy into an aligned buffer rather than trust the caller's.
    let mut aligned = AlignedVec::<16>::with_capacity(body.len());
    aligned.extend_from_slice(body);
    rkyv::from_bytes::<T, BoxedError>(&aligned)
        .map_err(|e| HandshakeError::Wire(WireError::Malformed(e.to_string())))
}

impl Handshake {
    /// Start a handshake with a fresh nonce; the Hello to send is appended to `out`.
    /// An initiator passes the id it dialed in `expect`.
    pub fn start(
        role: Role,
        me: Identity,
        expect: Option<NodeId>,
        out: &mut Vec<u8>,
    ) -> Result<Self, HandshakeError> {
        Self::with_nonce(role, me, expect, random32()?, out)
    }

    /// [`Self::start`] with a given nonce (tests).
    pub fn with_nonce(
        role: Role,
        me: Identity,
        expect: Option<NodeId>,
        nonce: [u8; 32],
        out: &mut Vec<u8>,
    ) -> Result<Self, HandshakeError> {
        let hello = Hello {
            version: HANDSHAKE_VERSION,
            job_id: me.job_id,
            node_id: me.node_id.0,
            nonce,
        };
        let body =
            rkyv::to_bytes::<BoxedError>(&hello).map_err(|e| WireError::Encode(e.to_string()))?;
        write_frame(Kind::Hello, &body, out)?;
        Ok(Self {
            role,
            me,
            nonce,
            expect,
            peer: None,
            done: false,
        })
    }

    /// Whether the peer is authenticated.
    pub fn is_done(&self) -> bool {
        self.done
    }

    fn mac(&self, by: Role, peer_id: NodeId, peer_nonce: &[u8; 32]) -> Hmac<Sha256> {
        let (ini_id, res_id, ini_nonce, res_nonce) = match self.role {
            Role::Initiator => (self.me.node_id, peer_id, &self.nonce, peer_nonce),
            Role::Responder => (peer_id, self.me.node_id, peer_nonce, &self.nonce),
        };
        // HMAC accepts keys of any length; 32 bytes cannot fail.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.me.key.0)
            .expect("HMAC takes any key length");
        mac.update(by.label());
        mac.update(&self.me.job_id.to_le_bytes());
        mac.update(&ini_id.0.to_le_bytes());
        mac.update(&res_id.0.to_le_bytes());
        mac.update(ini_nonce);
        mac.update(res_nonce);
        mac
    }

    /// Feed one frame from the peer. Returns the peer's id once it is authenticated; anything
    /// wrong is an error and the connection must be closed.
    pub fn on_frame(
        &mut self,
        kind: Kind,
        body: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<NodeId>, HandshakeError> {
        match (kind, self.peer) {
            (Kind::Hello, None) => {
                let hello: Hello = decode(body)?;
                if hello.version != HANDSHAKE_VERSION {
                    return Err(HandshakeError::WrongVersion {
                        ours: HANDSHAKE_VERSION,
                        theirs: hello.version,
                    });
                }
                if hello.job_id != self.me.job_id {
                    return Err(HandshakeError::WrongJob {
                        ours: self.me.job_id,
                        theirs: hello.job_id,
                    });
                }
                let peer = NodeId(hello.node_id);
                if let Some(expected) = self.expect.filter(|&e| e != peer) {
                    return Err(HandshakeError::WrongPeer {
                        expected,
                        got: peer,
                    });
                }
                self.peer = Some((peer, hello.nonce));
                let auth = Auth {
                    mac: self
                        .mac(self.role, peer, &hello.nonce)
                        .finalize()
                        .into_bytes()
                        .into(),
                };
                let body = rkyv::to_bytes::<BoxedError>(&auth)
                    .map_err(|e| WireError::Encode(e.to_string()))?;
                write_frame(Kind::Auth, &body, out)?;
                Ok(None)
            }
            (Kind::Auth, Some((peer, peer_nonce))) if !self.done => {
                let auth: Auth = decode(body)?;
                let their_role = match self.role {
                    Role::Initiator => Role::Responder,
                    Role::Responder => Role::Initiator,
                };
                self.mac(their_role, peer, &peer_nonce)
                    .verify_slice(&auth.mac)
                    .map_err(|_| HandshakeError::BadProof)?;
                self.done = true;
                Ok(Some(peer))
            }
            (kind, _) => Err(HandshakeError::Unexpected(kind)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::FrameDecoder;

    #[test]
    fn a_key_survives_hex() {
        let k = JobKey::generate().unwrap();
        assert_eq!(JobKey::from_hex(&k.to_hex()).unwrap(), k);
        assert_eq!(JobKey::from_bytes([0xab; 32]).to_hex(), "ab".repeat(32));
    }

    fn id(job: u64, node: u64, key: u8) -> Identity {
        Identity {
            job_id: job,
            node_id: NodeId(node),
            key: JobKey::from_bytes([key; 32]),
        }
    }

    /// Run both sides to completion over in-memory streams.
    fn run(
        a: Identity,
        b: Identity,
        expect: Option<NodeId>,
    ) -> (
        Result<Option<NodeId>, HandshakeError>,
        Result<Option<NodeId>, HandshakeError>,
    ) {
        let (mut to_b, mut to_a) = (Vec::new(), Vec::new());
        let mut ha = Handshake::with_nonce(Role::Initiator, a, expect, [1; 32], &mut to_b).unwrap();
        let mut hb = Handshake::with_nonce(Role::Responder, b, None, [2; 32], &mut to_a).unwrap();
        // Decoders as a node has them before authentication: the frames must fit.
        let (mut da, mut db) = (
            FrameDecoder::new(MAX_HANDSHAKE_BODY),
            FrameDecoder::new(MAX_HANDSHAKE_BODY),
        );
        let (mut ra, mut rb) = (Ok(None), Ok(None));
        for _ in 0..4 {
            db.push(&std::mem::take(&mut to_b));
            while let Some(f) = db.next_frame().unwrap() {
                if rb.is_ok() {
                    rb = hb.on_frame(f.kind, f.body(), &mut to_a);
                }
            }
            da.push(&std::mem::take(&mut to_a));
            while let Some(f) = da.next_frame().unwrap() {
                if ra.is_ok() {
                    ra = ha.on_frame(f.kind, f.body(), &mut to_b);
                }
            }
        }
        (ra, rb)
    }

    #[test]
    fn same_job_same_key_authenticates_both_ways() {
        let (a, b) = run(id(7, 1, 9), id(7, 2, 9), Some(NodeId(2)));
        assert_eq!(a, Ok(Some(NodeId(2))));
        assert_eq!(b, Ok(Some(NodeId(1))));
    }

    #[test]
    fn wrong_key_job_peer_are_refused() {
        let (a, b) = run(id(7, 1, 9), id(7, 2, 8), None);
        assert_eq!(
            (a, b),
            (Err(HandshakeError::BadProof), Err(HandshakeError::BadProof))
        );
        let (a, _) = run(id(7, 1, 9), id(8, 2, 9), None);
        assert!(matches!(
            a,
            Err(HandshakeError::WrongJob { ours: 7, theirs: 8 })
        ));
        let (a, _) = run(id(7, 1, 9), id(7, 3, 9), Some(NodeId(2)));
        assert!(matches!(a, Err(HandshakeError::WrongPeer { .. })));
    }

    #[test]
    fn reflected_proof_and_early_messages_are_refused() {
        // The responder's own Auth sent back to it must not verify (the role is in the MAC).
        let me = id(7, 2, 9);
        let mut sink = Vec::new();
        let mut h =
            Handshake::with_nonce(Role::Responder, me.clone(), None, [2; 32], &mut sink).unwrap();
        let mut peer_hello = Vec::new();
        Handshake::with_nonce(Role::Initiator, id(7, 1, 9), None, [1; 32], &mut peer_hello)
            .unwrap();
        let mut d = FrameDecoder::default();
        d.push(&peer_hello);
        let f = d.next_frame().unwrap().unwrap();
        let mut my_auth = Vec::new();
        h.on_frame(f.kind, f.body(), &mut my_auth).unwrap();
        let mut d = FrameDecoder::default();
        d.push(&my_auth);
        let f = d.next_frame().unwrap().unwrap();
        assert_eq!(
            h.on_frame(f.kind, f.body(), &mut sink),
            Err(HandshakeError::BadProof)
        );
        // A protocol message before authentication is refused.
        let mut h = Handshake::with_nonce(Role::Responder, me, None, [2; 32], &mut sink).unwrap();
        assert_eq!(
            h.on_frame(Kind::Msg, &[], &mut sink),
            Err(HandshakeError::Unexpected(Kind::Msg))
        );
        // Garbage in a Hello frame is a wire error, not a panic.
        let mut h =
            Handshake::with_nonce(Role::Responder, id(7, 2, 9), None, [2; 32], &mut sink).unwrap();
        assert!(matches!(
            h.on_frame(Kind::Hello, &[0xee; 13], &mut sink),
            Err(HandshakeError::Wire(_))
        ));
    }

    #[test]
    fn keys_parse_and_never_print() {
        let hex = "00".repeat(31) + "ff";
        let k = JobKey::from_hex(&hex).unwrap();
        assert_eq!(k.0[31], 0xff);
        assert!(JobKey::from_hex("abc").is_err());
        assert!(JobKey::from_hex(&"zz".repeat(32)).is_err());
        assert_eq!(format!("{k:?}"), "JobKey(..)");
        assert_ne!(JobKey::generate().unwrap(), JobKey::generate().unwrap());
    }
}
