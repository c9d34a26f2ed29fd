//! Connection handshake and job authentication, sans-IO.
//!
//! Both sides send `Hello { version, job_id, node_id, incarnation, nonce, params, bulk_mac }`.
//! Having the peer's Hello, each sends `Auth { mac }` with `mac = HMAC-SHA256(job key, label ‖
//! T)`, where T is the transcript (job id, both ids, both incarnations, both nonces, the job
//! parameters, both bulk flags) and the label says which role computed it ("weft-v4
//! initiator" / "weft-v4 responder"), so a peer cannot reflect our own proof back. Fresh nonces
//! on both sides make every transcript new, so a recorded Auth proves nothing later. Each side
//! checks the other's MAC in constant time. A stranger (garbage), a wrong job, a wrong version,
//! other job parameters or a wrong key is refused with a [`HandshakeError`], and no message of
//! it reaches a protocol: the caller only starts passing message frames up after
//! [`Handshake::on_frame`] has returned the authenticated peer.
//!
//! The handshake also gives the connection its session ([`Handshake::session`]): one key per
//! direction, derived from the job key and T, with which every control frame after it is
//! authenticated ([`super::mac`]). That binds what follows to this handshake: a relay that
//! passed it through holds no key, so it can close the connection but not speak on it.
//!
//! `params` names what the job runs (say `membership nodes=6 radix=4 mode=patch`): nodes that
//! disagree on it would compute different trees from the same view, so they refuse each
//! other, both saying which parameters differ. `incarnation` tells a restarted process from
//! the one it replaces and from an impostor with its id (see the engine's routes).

use super::frame::{write_frame, Kind};
use super::mac::{FrameMac, Session};
use super::WireError;
use crate::NodeId;
use hmac::{Hmac, Mac};
use rkyv::rancor::BoxedError;
use rkyv::util::AlignedVec;
use rkyv::{Archive, Deserialize, Serialize};
use sha2::Sha256;
use std::io::Read;
use std::path::Path;

/// Handshake protocol version: 6 since a responder may answer a crossing dial with Defer
/// ([`Handshake::defer`]); 5 since a membership join names the highest epoch its asker
/// has heard of (4 authenticated frames with AES-GMAC; 3 had HMAC-SHA256 tags; 3 added
/// incarnations, job parameters and frame MACs; 2 padding frames). Processes of different
/// versions refuse each other at the handshake, before any message is decoded.
pub const HANDSHAKE_VERSION: u16 = 6;

/// Longest job parameter string a Hello carries (it must fit [`MAX_HANDSHAKE_BODY`]).
pub const MAX_PARAMS: usize = 512;

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

    /// A key from 64 hex digits (surrounding whitespace allowed, nothing else: `from_str_radix`
    /// alone would take a `+` sign in place of a digit).
    pub fn from_hex(s: &str) -> Result<Self, HandshakeError> {
        let s = s.trim();
        if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
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
            Ok(v) => Self::from_hex(&v).map(Some).map_err(|e| match e {
                HandshakeError::BadKey(why) => {
                    HandshakeError::BadKey(format!("WEFT_JOB_KEY: {why}"))
                }
                e => e,
            }),
            Err(_) => Ok(None),
        }
    }

    /// A key file: 64 hex digits (with surrounding whitespace), or exactly 32 raw bytes. At
    /// most [`KEY_FILE_MAX`] bytes are read, so a wrong path (`/dev/zero`, a log) is an error,
    /// not a process reading until memory runs out.
    pub fn from_file(path: &Path) -> Result<Self, HandshakeError> {
        let bad = |e: String| HandshakeError::BadKey(format!("{}: {e}", path.display()));
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(KEY_FILE_MAX as u64 + 1).read_to_end(&mut bytes))
            .map_err(|e| bad(e.to_string()))?;
        if bytes.len() > KEY_FILE_MAX {
            return Err(bad(format!(
                "more than {KEY_FILE_MAX} bytes: not a key (64 hex digits or 32 bytes)"
            )));
        }
        match <[u8; 32]>::try_from(bytes.as_slice()) {
            Ok(raw) => Ok(Self(raw)),
            Err(_) => {
                Self::from_hex(&String::from_utf8_lossy(&bytes)).map_err(|e| bad(e.to_string()))
            }
        }
    }

    /// A fresh random key (for in-process clusters), from the kernel's CSPRNG.
    pub fn generate() -> Result<Self, HandshakeError> {
        Ok(Self(random32()?))
    }

    /// HMAC-SHA256 under this key of `label` and then `parts`, each length-prefixed (so no two
    /// different splits of the same bytes give one tag): for exchanges outside the handshake
    /// that only the job may take part in (the launch rendezvous).
    pub fn tag(&self, label: &[u8], parts: &[&[u8]]) -> [u8; 32] {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("any key length");
        for p in std::iter::once(label).chain(parts.iter().copied()) {
            mac.update(&(p.len() as u64).to_le_bytes());
            mac.update(p);
        }
        mac.finalize().into_bytes().into()
    }

    /// A key derived from a secret the user shares with every process and the launcher's job
    /// id: one secret serves many jobs, and each job gets its own key.
    pub fn derive(secret: &[u8], job: &str) -> Self {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("any key length");
        mac.update(b"weft job key v1");
        mac.update(job.as_bytes());
        Self(mac.finalize().into_bytes().into())
    }
}

/// Most bytes a key file may hold: 64 hex digits and generous whitespace.
pub const KEY_FILE_MAX: usize = 256;

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
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
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
    /// The peer runs the job with other parameters (another size, radix or tree mode).
    #[error("peer runs {theirs:?}, we run {ours:?}")]
    WrongParams {
        /// Ours.
        ours: String,
        /// Theirs.
        theirs: String,
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
    /// The peer we dialed is dialing us too and keeps its own connection (a [`Kind::Defer`]).
    #[error("{0} dials us itself and keeps that connection")]
    Deferred(NodeId),
}

#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
struct Hello {
    version: u16,
    job_id: u64,
    node_id: u64,
    incarnation: u64,
    nonce: [u8; 32],
    params: String,
    bulk_mac: bool,
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
            Role::Initiator => b"weft-v4 initiator",
            Role::Responder => b"weft-v4 responder",
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
    /// This process's life as `node_id`: a restarted process has another (the engine uses
    /// the start time, [`incarnation_now`]).
    pub incarnation: u64,
    /// The job's shared key.
    pub key: JobKey,
    /// What the job runs, compared verbatim with every peer's (empty: nothing to compare).
    pub params: String,
    /// Ask for bulk messages to be authenticated too ([`super::mac`]); the connection does it
    /// if either end asks.
    pub bulk_mac: bool,
}

impl Identity {
    /// Node `node_id` of job `job_id`, in its first incarnation, with no parameters to
    /// compare and bulk messages unauthenticated.
    pub fn new(job_id: u64, node_id: NodeId, key: JobKey) -> Self {
        Self {
            job_id,
            node_id,
            incarnation: 0,
            key,
            params: String::new(),
            bulk_mac: false,
        }
    }
}

/// An incarnation for a process starting now: nanoseconds of the real-time clock, so a restart
/// (even on another host with a roughly set clock) has a larger one than the life it ends.
pub fn incarnation_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

/// An authenticated peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Its id.
    pub id: NodeId,
    /// Its incarnation.
    pub incarnation: u64,
}

/// One connection's handshake.
#[derive(Debug)]
pub struct Handshake {
    role: Role,
    me: Identity,
    nonce: [u8; 32],
    expect: Option<NodeId>,
    peer: Option<Hello>,
    done: bool,
    deferred: bool,
    /// The one Auth a deferred dialer may still send has come.
    swallowed: bool,
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
    rkyv::from_bytes::<T, BoxedError>(&aligned).map_err(|e| {
        HandshakeError::Wire(WireError::Malformed(super::msg::without_addresses(
            &e.to_string(),
        )))
    })
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
        if me.params.len() > MAX_PARAMS {
            return Err(HandshakeError::BadKey(format!(
                "job parameters longer than {MAX_PARAMS} bytes"
            )));
        }
        let hello = Hello {
            version: HANDSHAKE_VERSION,
            job_id: me.job_id,
            node_id: me.node_id.0,
            incarnation: me.incarnation,
            nonce,
            params: me.params.clone(),
            bulk_mac: me.bulk_mac,
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
            deferred: false,
            swallowed: false,
        })
    }

    /// Whether the peer is authenticated.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The id the peer's Hello named, once it came: a claim, not yet proved.
    pub fn claimed(&self) -> Option<NodeId> {
        self.peer.as_ref().map(|h| NodeId(h.node_id))
    }

    /// The id and incarnation the peer's Hello named, once it came: a claim, not yet proved.
    pub fn claimed_peer(&self) -> Option<Peer> {
        self.peer.as_ref().map(|h| Peer {
            id: NodeId(h.node_id),
            incarnation: h.incarnation,
        })
    }

    /// Answer the peer's Hello with Defer instead of the Auth [`Self::on_frame`] wrote (the
    /// caller drops that): our own dial to the peer it claims to be is under way and is the
    /// one the pair keeps. Only a responder that has the Hello and nothing after it defers;
    /// the connection then authenticates nothing, and the one Auth still to come from the
    /// peer (sent on our Hello, crossing the Defer) is taken without a look; anything more is
    /// out of order, so a stranger cannot keep the connection busy with them.
    pub fn defer(&mut self, out: &mut Vec<u8>) -> Result<(), HandshakeError> {
        if self.role != Role::Responder || self.peer.is_none() || self.done {
            return Err(HandshakeError::Unexpected(Kind::Defer));
        }
        self.deferred = true;
        write_frame(Kind::Defer, &[], out)?;
        Ok(())
    }

    /// Whether we answered with Defer ([`Self::defer`]): the connection's end is no failure.
    pub fn is_deferred(&self) -> bool {
        self.deferred
    }

    /// HMAC-SHA256 under the job key of `label` and the transcript T (module doc).
    fn keyed(&self, label: &[u8], peer: &Hello) -> Hmac<Sha256> {
        let mine = (
            self.me.node_id.0,
            self.me.incarnation,
            &self.nonce,
            self.me.bulk_mac,
        );
        let theirs = (peer.node_id, peer.incarnation, &peer.nonce, peer.bulk_mac);
        let (ini, res) = match self.role {
            Role::Initiator => (mine, theirs),
            Role::Responder => (theirs, mine),
        };
        // HMAC accepts keys of any length; 32 bytes cannot fail.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.me.key.0)
            .expect("HMAC takes any key length");
        mac.update(label);
        mac.update(&self.me.job_id.to_le_bytes());
        for (id, incarnation, nonce, bulk) in [ini, res] {
            mac.update(&id.to_le_bytes());
            mac.update(&incarnation.to_le_bytes());
            mac.update(nonce);
            mac.update(&[u8::from(bulk)]);
        }
        // Equal at both ends once the Hellos are checked; length-prefixed all the same.
        mac.update(&(self.me.params.len() as u64).to_le_bytes());
        mac.update(self.me.params.as_bytes());
        mac
    }

    /// The connection's session keys, once the peer is authenticated (see [`super::mac`]):
    /// each direction's key is the transcript's HMAC under the job key with the direction's
    /// label, so both ends derive the same pair and nobody without the key can.
    pub fn session(&self) -> Option<Session> {
        let peer = self.peer.as_ref().filter(|_| self.done)?;
        let key =
            |label: &[u8]| -> [u8; 32] { self.keyed(label, peer).finalize().into_bytes().into() };
        let (i2r, r2i) = (key(b"weft-v4 key i2r"), key(b"weft-v4 key r2i"));
        let (send, recv) = match self.role {
            Role::Initiator => (i2r, r2i),
            Role::Responder => (r2i, i2r),
        };
        Some(Session {
            send: FrameMac::new(&send),
            recv: FrameMac::new(&recv),
            bulk: self.me.bulk_mac || peer.bulk_mac,
        })
    }

    /// Feed one frame from the peer. Returns the peer once it is authenticated; anything
    /// wrong is an error and the connection must be closed.
    pub fn on_frame(
        &mut self,
        kind: Kind,
        body: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Peer>, HandshakeError> {
        if self.deferred {
            return match kind {
                Kind::Auth if !self.swallowed => {
                    self.swallowed = true;
                    Ok(None)
                }
                kind => Err(HandshakeError::Unexpected(kind)),
            };
        }
        match (kind, &self.peer) {
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
                if hello.params != self.me.params {
                    return Err(HandshakeError::WrongParams {
                        ours: self.me.params.clone(),
                        theirs: hello.params,
                    });
                }
                let label = self.role.label();
                let auth = Auth {
                    mac: self.keyed(label, &hello).finalize().into_bytes().into(),
                };
                self.peer = Some(hello);
                let body = rkyv::to_bytes::<BoxedError>(&auth)
                    .map_err(|e| WireError::Encode(e.to_string()))?;
                write_frame(Kind::Auth, &body, out)?;
                Ok(None)
            }
            (Kind::Auth, Some(hello)) if !self.done => {
                let auth: Auth = decode(body)?;
                let their_role = match self.role {
                    Role::Initiator => Role::Responder,
                    Role::Responder => Role::Initiator,
                };
                self.keyed(their_role.label(), hello)
                    .verify_slice(&auth.mac)
                    .map_err(|_| HandshakeError::BadProof)?;
                self.done = true;
                Ok(Some(Peer {
                    id: NodeId(hello.node_id),
                    incarnation: hello.incarnation,
                }))
            }
            (Kind::Defer, Some(hello)) if self.role == Role::Initiator && !self.done => {
                // Only the lower id of a pair keeps its dial (`engine::reactor::crossing`).
                if !body.is_empty() || hello.node_id >= self.me.node_id.0 {
                    return Err(HandshakeError::Unexpected(Kind::Defer));
                }
                Err(HandshakeError::Deferred(NodeId(hello.node_id)))
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
            incarnation: 100 + node,
            params: "test nodes=3".into(),
            ..Identity::new(job, NodeId(node), JobKey::from_bytes([key; 32]))
        }
    }

    /// Run both sides to completion over in-memory streams.
    type Outcome = Result<Option<Peer>, HandshakeError>;

    fn run(a: Identity, b: Identity, expect: Option<NodeId>) -> (Outcome, Outcome) {
        let (ra, rb, _) = run_keeping(a, b, expect);
        (ra, rb)
    }

    fn run_keeping(
        a: Identity,
        b: Identity,
        expect: Option<NodeId>,
    ) -> (Outcome, Outcome, (Handshake, Handshake)) {
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
        (ra, rb, (ha, hb))
    }

    fn peer(node: u64) -> Peer {
        Peer {
            id: NodeId(node),
            incarnation: 100 + node,
        }
    }

    #[test]
    fn same_job_same_key_authenticates_both_ways() {
        let (a, b) = run(id(7, 1, 9), id(7, 2, 9), Some(NodeId(2)));
        assert_eq!(a, Ok(Some(peer(2))));
        assert_eq!(b, Ok(Some(peer(1))));
    }

    /// Both ends derive the same two session keys, crosswise; another handshake (other nonces)
    /// derives others, and bulk integrity is on when either end asks.
    #[test]
    fn sessions_pair_up_and_differ_per_connection() {
        let (_, _, (ha, hb)) = run_keeping(id(7, 1, 9), id(7, 2, 9), None);
        let (mut a, mut b) = (ha.session().unwrap(), hb.session().unwrap());
        assert!(!a.bulk && !b.bulk);
        let t = a.send.seal([&b"frame"[..]]);
        b.recv.verify([&b"frame"[..]], &t).unwrap();
        let t = b.send.seal([&b"back"[..]]);
        a.recv.verify([&b"back"[..]], &t).unwrap();
        // The same peers with other nonces: other keys.
        let (mut to_b, mut to_a) = (Vec::new(), Vec::new());
        let mut hc =
            Handshake::with_nonce(Role::Initiator, id(7, 1, 9), None, [5; 32], &mut to_b).unwrap();
        let mut hd =
            Handshake::with_nonce(Role::Responder, id(7, 2, 9), None, [6; 32], &mut to_a).unwrap();
        assert!(hc.session().is_none(), "no session before authentication");
        let feed = |h: &mut Handshake, bytes: &[u8], out: &mut Vec<u8>| {
            let mut d = FrameDecoder::new(MAX_HANDSHAKE_BODY);
            d.push(bytes);
            while let Some(f) = d.next_frame().unwrap() {
                h.on_frame(f.kind, f.body(), out).unwrap();
            }
        };
        let (hello_c, hello_d) = (to_b.clone(), to_a.clone());
        let (mut auth_c, mut auth_d) = (Vec::new(), Vec::new());
        feed(&mut hd, &hello_c, &mut auth_d);
        feed(&mut hc, &hello_d, &mut auth_c);
        feed(&mut hd, &auth_c, &mut Vec::new());
        feed(&mut hc, &auth_d, &mut Vec::new());
        let c = hc.session().unwrap();
        let t = c.send.clone().seal([&b"frame"[..]]);
        assert!(
            ha.session().unwrap().send.seal([&b"frame"[..]]) != t,
            "a key of one connection is not another's"
        );
        let mut bulky = id(7, 2, 9);
        bulky.bulk_mac = true;
        let (_, _, (ha, _)) = run_keeping(id(7, 1, 9), bulky, None);
        assert!(ha.session().unwrap().bulk, "either end asks");
    }

    /// Node `me`'s handshake in `role`, having taken node `peer`'s Hello (the other role's).
    fn having_hello(role: Role, me: u64, peer: u64) -> Handshake {
        let other = match role {
            Role::Initiator => Role::Responder,
            Role::Responder => Role::Initiator,
        };
        let mut h =
            Handshake::with_nonce(role, id(7, me, 9), None, [3; 32], &mut Vec::new()).unwrap();
        let mut hello = Vec::new();
        Handshake::with_nonce(other, id(7, peer, 9), None, [4; 32], &mut hello).unwrap();
        let mut d = FrameDecoder::new(MAX_HANDSHAKE_BODY);
        d.push(&hello);
        let f = d.next_frame().unwrap().unwrap();
        assert_eq!(h.on_frame(f.kind, f.body(), &mut Vec::new()), Ok(None));
        h
    }

    /// A responder that defers answers the Hello with Defer, not Auth: its dialer learns who
    /// keeps the connection and authenticates nothing; the dialer's Auth that crossed the
    /// Defer is taken quietly. Only a responder with a Hello in hand may defer, and a
    /// responder never takes a Defer.
    #[test]
    fn a_deferred_dial_authenticates_nothing_and_names_the_keeper() {
        let (mut to_b, mut to_a) = (Vec::new(), Vec::new());
        let mut ha =
            Handshake::with_nonce(Role::Initiator, id(7, 2, 9), None, [1; 32], &mut to_b).unwrap();
        let mut hb =
            Handshake::with_nonce(Role::Responder, id(7, 1, 9), None, [2; 32], &mut to_a).unwrap();
        assert_eq!(
            hb.defer(&mut Vec::new()),
            Err(HandshakeError::Unexpected(Kind::Defer)),
            "no Hello yet"
        );
        let frames = |bytes: &mut Vec<u8>| {
            let mut d = FrameDecoder::new(MAX_HANDSHAKE_BODY);
            d.push(&std::mem::take(bytes));
            let mut v = Vec::new();
            while let Some(f) = d.next_frame().unwrap() {
                v.push((f.kind, f.body().to_vec()));
            }
            v
        };
        for (k, b) in frames(&mut to_b) {
            let mut auth = Vec::new();
            assert_eq!(hb.on_frame(k, &b, &mut auth), Ok(None));
        }
        hb.defer(&mut to_a).unwrap();
        assert!(hb.is_deferred());
        let got = frames(&mut to_a);
        assert_eq!(
            got.iter().map(|f| f.0).collect::<Vec<_>>(),
            [Kind::Hello, Kind::Defer]
        );
        assert_eq!(ha.on_frame(got[0].0, &got[0].1, &mut to_b), Ok(None));
        assert_eq!(
            ha.on_frame(got[1].0, &got[1].1, &mut Vec::new()),
            Err(HandshakeError::Deferred(NodeId(1)))
        );
        assert!(!ha.is_done() && ha.session().is_none());
        // The dialer's Auth, sent on the Hello before the Defer came, is taken without a look.
        for (k, b) in frames(&mut to_b) {
            assert_eq!(
                (k, hb.on_frame(k, &b, &mut Vec::new())),
                (Kind::Auth, Ok(None))
            );
        }
        assert!(!hb.is_done() && hb.session().is_none());
        assert_eq!(
            hb.on_frame(Kind::Auth, &[0; 40], &mut Vec::new()),
            Err(HandshakeError::Unexpected(Kind::Auth)),
            "one Auth, not a stream of them"
        );
        assert_eq!(
            hb.on_frame(Kind::Msg, &[], &mut Vec::new()),
            Err(HandshakeError::Unexpected(Kind::Msg))
        );
        // A Defer to a responder, or with a body, is out of order.
        let mut hc = having_hello(Role::Responder, 1, 2);
        assert_eq!(
            hc.on_frame(Kind::Defer, &[], &mut Vec::new()),
            Err(HandshakeError::Unexpected(Kind::Defer))
        );
        let mut hd = having_hello(Role::Initiator, 2, 1);
        assert_eq!(
            hd.on_frame(Kind::Defer, &[0], &mut Vec::new()),
            Err(HandshakeError::Unexpected(Kind::Defer))
        );
        // A higher id may not defer: the lower one's dial is the pair's.
        let mut he = having_hello(Role::Initiator, 1, 2);
        assert_eq!(
            he.on_frame(Kind::Defer, &[], &mut Vec::new()),
            Err(HandshakeError::Unexpected(Kind::Defer))
        );
    }

    #[test]
    fn other_job_parameters_are_refused_naming_both() {
        let mut other = id(7, 2, 9);
        other.params = "test nodes=8".into();
        let (a, b) = run(id(7, 1, 9), other, None);
        assert_eq!(
            a,
            Err(HandshakeError::WrongParams {
                ours: "test nodes=3".into(),
                theirs: "test nodes=8".into()
            })
        );
        assert!(matches!(b, Err(HandshakeError::WrongParams { .. })));
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
        // A sign where a digit belongs: `from_str_radix` alone reads "+f" as 15.
        assert!(JobKey::from_hex(&("+f".to_string() + &"00".repeat(31))).is_err());
        assert!(
            JobKey::from_hex(&format!(" {hex}\n")).is_ok(),
            "whitespace around"
        );
        assert_eq!(format!("{k:?}"), "JobKey(..)");
        assert_ne!(JobKey::generate().unwrap(), JobKey::generate().unwrap());
    }

    /// A key file is read only as far as a key can go: `/dev/zero` is refused at once.
    #[test]
    fn key_files_are_read_no_further_than_a_key() {
        let dir = std::env::temp_dir().join(format!("weft-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let hex = dir.join("hex");
        std::fs::write(&hex, "ab".repeat(32) + "\n").unwrap();
        assert_eq!(
            JobKey::from_file(&hex).unwrap(),
            JobKey::from_bytes([0xab; 32])
        );
        let raw = dir.join("raw");
        std::fs::write(&raw, [7u8; 32]).unwrap();
        assert_eq!(
            JobKey::from_file(&raw).unwrap(),
            JobKey::from_bytes([7; 32])
        );
        match JobKey::from_file(Path::new("/dev/zero")) {
            Err(HandshakeError::BadKey(why)) => assert!(why.contains("more than"), "{why}"),
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
