//! A connection of a hosted node, and an io_uring send's pinned buffers: what the reactor
//! keeps per socket, and how a connection ends.

use super::last_write;
use crate::buf::Payload;
use crate::wire::handshake::Handshake;
use crate::wire::sendq::first_bytes;
use crate::wire::{FrameDecoder, SendQueue};
use crate::NodeId;
use mio::net::TcpStream;
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// How a stopped node's connections end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ending {
    /// FIN, as when a process dies: its peers see the connection close.
    Close,
    /// RST: the job is over, and nothing may linger in TIME_WAIT.
    Reset,
}

/// One connection of a hosted node: its socket, what it has received and has to send, and
/// where its handshake stands.
pub(super) struct Conn {
    /// The hosted node this connection belongs to.
    pub(super) host: usize,
    /// Distinguishes this connection from earlier ones in the same slot (io_uring completions
    /// of a closed connection can arrive after its slot was reused).
    pub(super) generation: u32,
    pub(super) stream: TcpStream,
    pub(super) decoder: FrameDecoder,
    pub(super) out: SendQueue,
    pub(super) handshake: Handshake,
    /// The authenticated peer.
    pub(super) peer: Option<NodeId>,
    /// The authenticated peer's incarnation.
    pub(super) incarnation: u64,
    /// Whom we dialed, for connections we opened.
    pub(super) dialed: Option<NodeId>,
    /// The session keys, once the peer has authenticated (`wire::mac`).
    /// Boxed: the keyed ciphers hold a kilobyte per direction, which would otherwise sit
    /// between the fields every message touches.
    pub(super) session: Option<Box<crate::wire::mac::Session>>,
    /// poll: epoll watches the socket (a hot connection with nothing to send leaves it, see
    /// `epoll.rs`).
    pub(super) watched: bool,
    /// io_uring: our connect has not completed yet (nothing is received or sent before).
    pub(super) connecting: bool,
    /// io_uring: the multishot receive was asked to end (a large frame is under way).
    pub(super) ending: bool,
    /// io_uring: a send of this connection is in flight. One at a time keeps the byte order
    /// (a second send could overtake a short first one).
    pub(super) sending: bool,
    /// Bytes arrived since the reactor's last sweep of quiet connections' buffers.
    pub(super) received: bool,
    /// [`Conn::last_write_max`] of a long queue, once asked.
    pub(super) last_write: Option<usize>,
    /// Released: a goodbye was said (`release.rs`); its end is no failure.
    pub(super) goodbye: Option<Goodbye>,
}

/// Who said goodbye first on a released connection (`release.rs`). A connection's own state,
/// kept here so that the connection table needs nothing of the reactor's release rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Goodbye {
    /// This end released it and waits for the peer's answer.
    Ours,
    /// The peer released it; this end answered and waits for the end of the stream.
    Theirs,
}

/// A send handed to io_uring: the chunks and the `msghdr` and iovecs naming them, boxed so
/// their addresses stay put until the kernel's last completion for the send (which may come
/// after the connection is closed; the reactor keeps it until then).
pub(super) struct SendOp {
    pub(super) slot: usize,
    pub(super) generation: u32,
    pub(super) chunks: Vec<Payload>,
    pub(super) iov: Vec<libc::iovec>,
    pub(super) hdr: libc::msghdr,
}

impl SendOp {
    /// Point the header at the chunks' bytes, as many as the next write of them should carry
    /// when the write that ends them may carry `last_write_max`
    /// ([`last_write::next_write_len`]); the completion hands back what the write did not take.
    pub(super) fn prepare(&mut self, last_write_max: usize) {
        self.iov.clear();
        let len = last_write::next_write_len(self.len(), last_write_max);
        let chunks = self.chunks.iter().map(|c| &c[..]);
        self.iov
            .extend(first_bytes(chunks, len).map(|part| libc::iovec {
                iov_base: part.as_ptr() as *mut libc::c_void,
                iov_len: part.len(),
            }));
        // SAFETY: msghdr is plain integers and pointers, for which all-zero bytes are valid.
        self.hdr = unsafe { std::mem::zeroed() };
        self.hdr.msg_iov = self.iov.as_mut_ptr();
        self.hdr.msg_iovlen = self.iov.len() as _;
    }

    pub(super) fn len(&self) -> usize {
        self.chunks.iter().map(|c| c.len()).sum()
    }

    /// Bytes the prepared write carries.
    pub(super) fn writes(&self) -> usize {
        self.iov.iter().map(|v| v.iov_len).sum()
    }

    /// What the first `sent` bytes left unsent, as new handles on the same memory.
    pub(super) fn unsent(&self, mut sent: usize) -> Vec<Payload> {
        let mut rest = Vec::new();
        for c in &self.chunks {
            if sent >= c.len() {
                sent -= c.len();
            } else {
                let mut c = c.clone();
                c.advance(sent);
                rest.push(c);
                sent = 0;
            }
        }
        rest
    }
}

/// Chunks handed to one gather write through io_uring.
pub(super) const MAX_IOV: usize = 64;

/// Chunks handed to one direct gather write ([`Conn::flush`] writes again while more are
/// queued). A frame with a large payload is two or three chunks; the array is filled on every
/// such send, and 64 entries took ~180 instructions of a 32 KiB echo's ~2 800 to set up.
const FLUSH_IOV: usize = 16;

impl Conn {
    /// Write as much of `out` as the socket takes, large payloads from where they lie.
    pub(super) fn flush(&mut self) -> std::io::Result<()> {
        let last = self.last_write_max();
        flush_queue(self.stream.as_raw_fd(), &mut self.out, last)
    }

    /// The most bytes the write that ends what is queued may carry ([`last_write`]):
    /// unbounded while the queue is short, 16 of the kernel's segment buffers otherwise, from
    /// the MSS asked the first time (a long queue comes after the handshake, so the
    /// connection is established by then).
    pub(super) fn last_write_max(&mut self) -> usize {
        if self.out.len() <= last_write::SHORT_QUEUE {
            return usize::MAX;
        }
        *self
            .last_write
            .get_or_insert_with(|| last_write::of_socket(&self.stream))
    }
}

/// Write as much of `out` to non-blocking socket `fd` as it takes: one `send` when the queue
/// is one chunk, gather writes of up to [`FLUSH_IOV`] chunks otherwise, the last
/// `last_write_max` bytes of a longer queue in a write of their own.
fn flush_queue(
    fd: std::os::fd::RawFd,
    out: &mut SendQueue,
    last_write_max: usize,
) -> std::io::Result<()> {
    while !out.is_empty() {
        let len = last_write::next_write_len(out.len(), last_write_max);
        let written = match out.contiguous() {
            Some(bytes) => crate::sys::send(fd, &bytes[..len]),
            None => {
                let mut iov = [std::io::IoSlice::new(&[]); FLUSH_IOV];
                let n = out.slices(&mut iov, len);
                crate::sys::send_gather(fd, &iov[..n])
            }
        };
        match crate::sys::result(written) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(k) => out.consume(k),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Make a connection fail, and so its peer be suspected, once the peer's kernel has been
/// silent for about `limit`. A process that dies is noticed at once (its kernel resets the
/// connection), but a host that vanishes (power lost, link cut, kernel panic) sends nothing
/// more, and by the kernel's defaults an idle connection to it stays up for 2 h 11 min of
/// keepalive and one with data in flight for about 15 min of retransmissions.
///
/// Keepalive probes start after `limit / 2` of silence and repeat every `limit / 4` (whole
/// seconds, at least one: the kernel's unit); `TCP_USER_TIMEOUT` fails the connection once
/// probes or data have gone unacknowledged for `limit`. So an idle or busy connection to a
/// vanished host fails within about `limit` to `limit * 5 / 4`. A probe is a bare ACK,
/// answered by the peer's kernel, not its process: a stopped or busy process is not
/// suspected, unless it leaves so much unread that its receive window stays shut for `limit`
/// (the kernel counts zero-window probes against the user timeout too): a peer that has not
/// read for that long, with data waiting for it, is as good as gone to its senders.
pub(super) fn bound_silence(stream: &TcpStream, limit: Duration) -> std::io::Result<()> {
    let sock = socket2::SockRef::from(stream);
    let at_least_a_second = |d: Duration| d.max(Duration::from_secs(1));
    sock.set_tcp_keepalive(
        &socket2::TcpKeepalive::new()
            .with_time(at_least_a_second(limit / 2))
            .with_interval(at_least_a_second(limit / 4))
            .with_retries(4),
    )?;
    sock.set_tcp_user_timeout(Some(limit))
}

/// Abort a connection: one RST, no FIN exchange, no TIME_WAIT. `connect(AF_UNSPEC)`
/// disconnects the socket itself. A close with SO_LINGER 0 would do the same only once the
/// last reference to the file goes, and an armed io_uring receive holds one until its
/// completion runs: with deferred task work, after both sides' FINs have crossed and put the
/// socket in TIME_WAIT (every connection of every finished job did, 250 per 64-node trial).
pub(super) fn reset(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let sock = socket2::SockRef::from(stream);
    let _ = sock.set_linger(Some(Duration::ZERO));
    // SAFETY: a zeroed `sockaddr` with family AF_UNSPEC is a valid argument of its size; the
    // fd is the stream's, open for the whole call.
    let failed = unsafe {
        let mut addr: libc::sockaddr = std::mem::zeroed();
        addr.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
        libc::connect(
            stream.as_raw_fd(),
            &addr,
            std::mem::size_of::<libc::sockaddr>() as libc::socklen_t,
        ) != 0
    };
    if failed {
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unprepared io_uring send of `chunks`.
    fn op_of(chunks: Vec<Payload>) -> SendOp {
        SendOp {
            slot: 0,
            generation: 0,
            chunks,
            iov: Vec::new(),
            // SAFETY: msghdr is plain integers and pointers; all-zero bytes are valid.
            hdr: unsafe { std::mem::zeroed() },
        }
    }

    /// After a short send, exactly the bytes the kernel did not take go back to the queue, at
    /// every boundary (inside a chunk, on a chunk's end, all, none), whatever each chunk is:
    /// in place, shared bytes, or a part of a receive buffer.
    #[test]
    fn a_short_send_leaves_exactly_the_rest() {
        let mut received = rkyv::util::AlignedVec::new();
        received.extend_from_slice(b"xijx");
        let received = Payload::received(std::sync::Arc::new(received), 1..3).unwrap();
        let chunks = vec![
            Payload::from(&b"abc"[..]),
            Payload::from_bytes(bytes::Bytes::from_static(b"defgh")),
            received,
        ];
        let mut op = op_of(chunks);
        op.prepare(usize::MAX);
        assert_eq!(op.hdr.msg_iovlen, 3);
        assert_eq!(op.len(), 10);
        let all = b"abcdefghij";
        for sent in 0..=10 {
            let rest: Vec<u8> = op.unsent(sent).iter().flat_map(|b| b.to_vec()).collect();
            assert_eq!(rest, &all[sent..], "after {sent} bytes");
        }
    }

    /// An io_uring send of a long queue carries its head only, cut inside a chunk; the
    /// completion gives back the rest, which then goes in one write.
    #[test]
    fn a_ring_send_of_a_long_queue_carries_its_head() {
        const LAST: usize = 100_000;
        let big: Vec<u8> = (0..LAST).map(|j| (j % 251) as u8).collect();
        let chunks = vec![
            Payload::from(&b"head"[..]),
            Payload::from_bytes(bytes::Bytes::from(big.clone())),
            Payload::from(&b"tail"[..]),
        ];
        let mut op = op_of(chunks);
        op.prepare(LAST);
        assert_eq!(op.len(), LAST + 8);
        assert_eq!(op.writes(), 8, "the head: all but the last LAST bytes");
        assert_eq!(
            op.hdr.msg_iovlen, 2,
            "the first chunk and 4 bytes of the second"
        );
        let mut rest = op_of(op.unsent(op.writes()));
        rest.prepare(LAST);
        assert_eq!(rest.writes(), LAST, "then the rest, whole");
        let bytes: Vec<u8> = rest.chunks.iter().flat_map(|b| b.to_vec()).collect();
        assert_eq!(bytes[..big.len() - 4], big[4..]);
        assert_eq!(&bytes[big.len() - 4..], b"tail");
    }

    /// A queue of more chunks than one gather write takes (each large payload is a chunk of
    /// its own) reaches the peer whole and in order, through short writes too, and so does
    /// a queue of copied payloads (one chunk); both are longer than 16 loopback segments, so
    /// their last part is written on its own.
    #[test]
    fn flushing_many_chunks_delivers_every_frame_in_order() {
        use crate::buf::SHARE_MIN;
        const LAST: usize = 16 * 65_483;
        // Not constant bytes: a part sent from the wrong place in its chunk must show.
        let bytes =
            |i: usize, len: usize| -> Vec<u8> { (0..len).map(|j| (i + j % 251) as u8).collect() };
        let spliced = (0..3 * FLUSH_IOV).map(|i| bytes(i, 3 * SHARE_MIN + i));
        let copied = (0..200).map(|i| bytes(i, SHARE_MIN - 1 - i));
        for (payloads, one_chunk) in [
            (spliced.collect::<Vec<_>>(), false),
            (copied.collect(), true),
        ] {
            let mut out = SendQueue::new();
            for p in &payloads {
                let ping = crate::proto::ping::PingMsg::Ping {
                    seq: 0,
                    payload: p.clone().into(),
                };
                out.push_msg(&ping, None).unwrap();
            }
            assert_eq!(out.contiguous().is_some(), one_chunk);
            assert!(out.len() > LAST);
            assert_eq!(flushed_payloads(out, payloads.len(), LAST), payloads);
        }
    }

    /// Flush `out` into a socket pair, its last `last_write_max` bytes apart, and read back
    /// the payloads of its `count` ping frames.
    fn flushed_payloads(mut out: SendQueue, count: usize, last_write_max: usize) -> Vec<Vec<u8>> {
        use crate::proto::ping::PingMsg;
        use crate::wire::Framed;
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let reader = std::thread::spawn(move || {
            let mut d = FrameDecoder::default();
            d.authenticated(crate::wire::frame::DEFAULT_MAX_BODY);
            let mut got = Vec::new();
            let mut buf = vec![0u8; 64 * 1024];
            while got.len() < count {
                let n = std::io::Read::read(&mut b, &mut buf).unwrap();
                assert!(n > 0, "stream ended after {} frames", got.len());
                d.push(&buf[..n]);
                while let Some(f) = d.next_frame().unwrap() {
                    match PingMsg::read(&f).unwrap() {
                        PingMsg::Ping { payload, .. } => got.push(payload.to_vec()),
                        other => panic!("unexpected {other:?}"),
                    }
                }
            }
            got
        });
        while !out.is_empty() {
            flush_queue(a.as_raw_fd(), &mut out, last_write_max).unwrap();
        }
        reader.join().unwrap()
    }

    /// The silence bound lands on the socket as keepalive after half of it, probes every
    /// quarter, and a user timeout of all of it; short bounds keep whole-second probes.
    #[test]
    fn bound_silence_sets_keepalive_and_user_timeout() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let std_stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let stream = TcpStream::from_std(std_stream);
        let sock = socket2::SockRef::from(&stream);
        assert!(!sock.keepalive().unwrap());
        bound_silence(&stream, Duration::from_secs(10)).unwrap();
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), Duration::from_secs(5));
        // The kernel counts keepalive in whole seconds: 2.5 s is 2 s.
        assert_eq!(
            sock.tcp_keepalive_interval().unwrap(),
            Duration::from_secs(2)
        );
        assert_eq!(sock.tcp_keepalive_retries().unwrap(), 4);
        assert_eq!(
            sock.tcp_user_timeout().unwrap(),
            Some(Duration::from_secs(10))
        );
        bound_silence(&stream, Duration::from_millis(1500)).unwrap();
        assert_eq!(sock.tcp_keepalive_time().unwrap(), Duration::from_secs(1));
        assert_eq!(
            sock.tcp_keepalive_interval().unwrap(),
            Duration::from_secs(1)
        );
        assert_eq!(
            sock.tcp_user_timeout().unwrap(),
            Some(Duration::from_millis(1500))
        );
    }
}
