//! Shared-memory links between two processes of one host: a byte pipe per direction in one
//! sealed `memfd` segment ([`segment`], [`pipe`]), carrying the frames a TCP connection would,
//! a bell (eventfd) per end rung only when that end sleeps, and the peer process's pidfd, which
//! says it died however it died.
//!
//! A link is set up over a Unix socket in the abstract namespace ([`address`]: no file to clean
//! up, and only reachable from the same network namespace, which is what "the same host" means
//! to a socket): the two ends run weft's handshake on it ([`crate::wire::handshake`]), and only
//! after the peer proved the job key does the dialer hand over the segment and the bells
//! (SCM_RIGHTS). The accepting end maps nothing a stranger sent. The socket then stays open as
//! the link's liveness: its end (or the pidfd) is the link's end, as a reset is a connection's.
//!
//! Nothing of a link has a name in a file system: the segment, bells, pidfd and socket are
//! freed by the kernel with the last process that holds them, whatever kills the job.

pub mod blocking;
pub mod fds;
pub mod pipe;
pub mod segment;

use crate::wire::frame::{FrameHeader, HEADER_LEN};
use crate::wire::handshake::{Handshake, HandshakeError, Identity, Peer, Role, MAX_HANDSHAKE_BODY};
use crate::NodeId;
use fds::Bell;
use pipe::{Place, Reader, Writer};
use segment::{Segment, SegmentError};
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of each direction's ring. 256 KiB: a 1 MiB message streams through in four fills, a
/// wave's small messages never fill it, and the pair's two rings stay within a core's L2 on
/// the CPUs weft is measured on. Pages are touched (and so allocated) only as the ring wraps.
pub const RING_BYTES: usize = 256 << 10;

/// Smallest and largest ring a peer may offer.
const RING_RANGE: std::ops::RangeInclusive<usize> = 4096..=(64 << 20);

/// The offer's magic and version, and the accepting end's answer.
const OFFER_MAGIC: &[u8; 8] = b"WEFTSHM1";
const ACCEPTED: &[u8; 8] = b"WEFTSHMA";

/// Why a shared-memory link could not be set up (or ended at once).
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// A system call failed (or the peer hung up, or did not answer in time).
    #[error("shared-memory link: {0}")]
    Io(#[from] io::Error),
    /// The peer did not prove it belongs to the job (nothing was mapped).
    #[error("shared-memory link refused: {0}")]
    Handshake(#[from] HandshakeError),
    /// The segment the peer offered is unsafe to map.
    #[error(transparent)]
    Segment(#[from] SegmentError),
    /// The peer's offer is malformed.
    #[error("shared-memory link: bad offer: {0}")]
    Offer(String),
}

/// The abstract Unix address node `node` of job `job_id` accepts links on: the job id, a tag
/// derived from the job key (jobs that share an id, such as concurrent tests or two users'
/// runs, do not meet), and the node. It names no secret: abstract names are listed in
/// `/proc/net/unix`, the tag reveals nothing of the key, and whoever connects must still pass
/// the handshake before anything is shared.
pub fn address(me: &Identity, node: NodeId) -> io::Result<SocketAddr> {
    let tag = me.key.tag(b"weft-shm address", &[]);
    let tag = u64::from_le_bytes(tag[..8].try_into().expect("8 bytes"));
    let name = format!("weft-shm.{:x}.{tag:016x}.{}", me.job_id, node.0);
    SocketAddr::from_abstract_name(name.as_bytes())
}

/// The segment's length for rings of `capacity` bytes: a page of control blocks, then the two
/// data areas.
fn segment_len(capacity: usize) -> usize {
    crate::buf::PAGE + 2 * capacity
}

/// Where direction `d` (0: acceptor to dialer, 1: dialer to acceptor) lives.
fn place(d: usize, capacity: usize) -> Place {
    Place {
        control: d * pipe::CONTROL,
        data: crate::buf::PAGE + d * capacity,
        capacity,
    }
}

/// One end of a shared-memory link to a peer process.
pub struct Link {
    /// Who is at the other end, authenticated.
    pub peer: Peer,
    /// Its process id.
    pub pid: u32,
    /// What we send.
    pub writer: Writer,
    /// What we receive.
    pub reader: Reader,
    /// The bell we sleep on (rung when bytes come or room frees).
    pub bell: Bell,
    /// The bell the peer sleeps on.
    pub peer_bell: Bell,
    /// The peer process: readable when it exited.
    pub pidfd: OwnedFd,
    /// The set-up socket, kept open: its end is the link's.
    pub socket: UnixStream,
    _segment: Arc<Segment>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("peer", &self.peer)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

impl Link {
    /// The segment both ends map: for tools and tests that look at (or, playing a hostile
    /// peer, scribble on) the rings' control blocks. Direction 0 (acceptor to dialer) has its
    /// control block at offset 0, direction 1 (dialer to acceptor) at [`pipe::CONTROL`]; each
    /// starts with the writer's position, then the reader's 128 bytes on.
    pub fn segment(&self) -> &Segment {
        &self._segment
    }

    /// Whether the peer is gone: its process exited, or it closed the link (a node of a
    /// process that goes on). A peer that writes on the set-up socket breaks the link too.
    pub fn peer_gone(&self) -> bool {
        if fds::exited(&self.pidfd) {
            return true;
        }
        let mut b = [0u8; 1];
        // SAFETY: one writable byte; a non-blocking peek.
        let r = unsafe {
            libc::recv(
                std::os::fd::AsRawFd::as_raw_fd(&self.socket),
                b.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        match r {
            0 => true,
            n if n > 0 => true,
            _ => !matches!(
                io::Error::last_os_error().kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ),
        }
    }
}

/// Where a node accepts shared-memory links.
#[derive(Debug)]
pub struct Listener(UnixListener);

impl Listener {
    /// Listen at [`address`]`(me, me.node_id)`. Fails (address in use) when another process
    /// of the job already listens as this node.
    pub fn bind(me: &Identity) -> io::Result<Listener> {
        Ok(Listener(UnixListener::bind_addr(&address(
            me, me.node_id,
        )?)?))
    }

    /// The socket, for a poll set (set it non-blocking there).
    pub fn socket(&self) -> &UnixListener {
        &self.0
    }

    /// The socket, for a caller that accepts on its own (and hands each stream to
    /// [`accept_on`]).
    pub fn into_socket(self) -> UnixListener {
        self.0
    }

    /// Accept one link: the handshake and the segment's check take at most `timeout` of
    /// waiting on the peer.
    pub fn accept(&self, me: &Identity, timeout: Duration) -> Result<Link, ShmError> {
        let (sock, _) = self.0.accept()?;
        accept_on(sock, me, timeout)
    }
}

/// The accepting side of a link on `sock`, just accepted.
pub fn accept_on(mut sock: UnixStream, me: &Identity, timeout: Duration) -> Result<Link, ShmError> {
    sock.set_nonblocking(false)?;
    sock.set_read_timeout(Some(timeout))?;
    sock.set_write_timeout(Some(timeout))?;
    let (pidfd, pid) = fds::peer_pidfd(&sock)?;
    let peer = handshake(&mut sock, Role::Responder, me, None)?;
    let mut offer = [0u8; 32];
    let (n, mut fds) = fds::recv_fds(&sock, &mut offer)?;
    if n != offer.len() || &offer[..8] != OFFER_MAGIC || fds.len() != 3 {
        return Err(ShmError::Offer(format!(
            "{n} bytes and {} descriptors, not a weft offer",
            fds.len()
        )));
    }
    let word = |i: usize| u64::from_le_bytes(offer[i..i + 8].try_into().expect("8 bytes"));
    let capacity = usize::try_from(word(8)).unwrap_or(0);
    if !capacity.is_power_of_two() || !RING_RANGE.contains(&capacity) {
        return Err(ShmError::Offer(format!("ring of {capacity} bytes")));
    }
    if word(16) != segment_len(capacity) as u64 {
        return Err(ShmError::Offer(format!(
            "segment of {} bytes for rings of {capacity}",
            word(16)
        )));
    }
    let (mine, theirs) = (fds.pop().expect("3"), fds.pop().expect("3"));
    let seg = Arc::new(Segment::open(fds.pop().expect("3"), segment_len(capacity))?);
    sock.write_all(ACCEPTED)?;
    finish(
        sock,
        peer,
        pid,
        pidfd,
        seg,
        capacity,
        1,
        Bell::from_fd(mine),
        Bell::from_fd(theirs),
    )
}

/// Dial node `peer`'s [`Listener`] and set up a link with rings of `capacity` bytes (a power
/// of two, at least a page), waiting at most `timeout` on the peer at each step.
pub fn dial(
    me: &Identity,
    peer: NodeId,
    capacity: usize,
    timeout: Duration,
) -> Result<Link, ShmError> {
    dial_at(&address(me, peer)?, me, peer, capacity, timeout)
}

/// [`dial`] at the address `at`: where a stranger that read the name in `/proc/net/unix`
/// (without the key the name is derived from) would knock; the handshake still turns it away.
pub fn dial_at(
    at: &SocketAddr,
    me: &Identity,
    peer: NodeId,
    capacity: usize,
    timeout: Duration,
) -> Result<Link, ShmError> {
    assert!(capacity.is_power_of_two() && RING_RANGE.contains(&capacity));
    let mut sock = UnixStream::connect_addr(at)?;
    sock.set_read_timeout(Some(timeout))?;
    sock.set_write_timeout(Some(timeout))?;
    let (pidfd, pid) = fds::peer_pidfd(&sock)?;
    let who = handshake(&mut sock, Role::Initiator, me, Some(peer))?;
    let seg = Arc::new(Segment::create(segment_len(capacity))?);
    let (mine, theirs) = (Bell::new()?, Bell::new()?);
    let mut offer = [0u8; 32];
    offer[..8].copy_from_slice(OFFER_MAGIC);
    offer[8..16].copy_from_slice(&(capacity as u64).to_le_bytes());
    offer[16..24].copy_from_slice(&(seg.len() as u64).to_le_bytes());
    // The acceptor's bell last: it pops its own first.
    fds::send_fds(&sock, &offer, &[seg.fd(), mine.fd(), theirs.fd()])?;
    let mut ack = [0u8; 8];
    sock.read_exact(&mut ack)?;
    if &ack != ACCEPTED {
        return Err(ShmError::Offer("the peer did not take the segment".into()));
    }
    finish(sock, who, pid, pidfd, seg, capacity, 0, mine, theirs)
}

#[allow(clippy::too_many_arguments)]
fn finish(
    sock: UnixStream,
    peer: Peer,
    pid: u32,
    pidfd: OwnedFd,
    seg: Arc<Segment>,
    capacity: usize,
    inbound: usize,
    bell: Bell,
    peer_bell: Bell,
) -> Result<Link, ShmError> {
    sock.set_nonblocking(true)?;
    Ok(Link {
        peer,
        pid,
        writer: pipe::writer(&seg, place(1 - inbound, capacity)),
        reader: pipe::reader(&seg, place(inbound, capacity)),
        bell,
        peer_bell,
        pidfd,
        socket: sock,
        _segment: seg,
    })
}

/// weft's handshake on a blocking socket: the peer, once it proved the job key.
fn handshake(
    sock: &mut UnixStream,
    role: Role,
    me: &Identity,
    expect: Option<NodeId>,
) -> Result<Peer, ShmError> {
    let mut out = Vec::new();
    let mut hs = Handshake::start(role, me.clone(), expect, &mut out)?;
    sock.write_all(&out)?;
    loop {
        let mut head = [0u8; HEADER_LEN];
        sock.read_exact(&mut head)?;
        let h = FrameHeader::parse(&head, MAX_HANDSHAKE_BODY)
            .map_err(HandshakeError::Wire)?
            .ok_or_else(|| ShmError::Offer("a frame header cut short".into()))?;
        let mut body = vec![0u8; h.frame_len() - HEADER_LEN];
        sock.read_exact(&mut body)?;
        out.clear();
        let got = hs.on_frame(h.kind, &body[..h.body_len as usize], &mut out)?;
        sock.write_all(&out)?;
        if let Some(p) = got {
            return Ok(p);
        }
    }
}
