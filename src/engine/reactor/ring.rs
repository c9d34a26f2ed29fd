//! The io_uring backend: accepts, connects, receives and sends go through the ring, and each
//! completion becomes an [`IoEvent`] (receives into provided buffers or straight into a
//! frame's buffer, sends, connects, accepts). epoll only watches the ring's eventfd (and the
//! commands' waker), so a blocked reactor wakes for either.

use super::conn::{SendOp, MAX_IOV};
use super::conns::{ConnId, Conns, GEN_MASK};
use super::driver::{Driver, Events, IoEvent, Turn};
use super::error::ConnError;
use super::{EngineError, ReactorConfig, RING};
use crate::engine::uring::Uring;
use crate::id::IdMap;
use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Poll};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// io_uring `user_data`: the kind of request in the top four bits. A connection's receive and
/// connect carry its slot and generation, a send its entry in the send table, an accept its
/// hosted node.
const OP_SHIFT: u32 = 60;
const OP_RECV: u64 = 0;
const OP_SEND: u64 = 1;
const OP_CONNECT: u64 = 2;
const OP_ACCEPT: u64 = 3;
const OP_RECV_DIRECT: u64 = 4;
const OP_CANCEL: u64 = 5;

/// A frame missing at least this many bytes is received straight into the decoder's buffer
/// (one receive of exactly that much) instead of through the provided buffers and a copy.
const DIRECT_MIN: usize = 64 * 1024;

/// How long the kernel may refuse to take what is queued before sockets close (see
/// `before_closing_fds`); past that the reactor ends rather than close them.
const CLOSE_PATIENCE: Duration = Duration::from_millis(100);

/// How long a blocking reactor waits before it enters a ring whose last enter the kernel
/// refused (see [`crate::engine::uring::Uring::work_due`]); a spinning one tries every turn.
const REFUSED_PAUSE: Duration = Duration::from_millis(1);

/// io_uring: a turn's first send of at most this many bytes is written directly (see
/// [`writes_direct`] and `bluegene_notes/engine-latency.md#a-turns-first-send-goes-direct`):
/// through the ring, small and mid-size frames paid 6–11% more one-way; 4 MiB, more than a
/// socket's send buffer holds, was better through the ring. A frame is its payload plus about
/// 40 bytes, so the cap sits between the payload sizes, not on one.
const DIRECT_SEND_MAX: usize = 3 << 20;

/// Whether a send of `len` bytes goes out at once with a plain `writev` rather than through
/// the ring: a turn's first (`sent_direct` still false) does, unless it is larger than
/// [`DIRECT_SEND_MAX`] or at least `zerocopy_min` (zero-copy sends only exist in the ring).
/// A request and its answer then cost no ring submission, no completion and no send record,
/// and do not wait for the next turn's submission. The turn's other sends still go through
/// the ring in one submission (a fan-out keeps its batching), and so does whatever the socket
/// does not take at once.
#[inline]
fn writes_direct(sent_direct: bool, len: usize, zerocopy_min: usize) -> bool {
    !sent_direct && len <= DIRECT_SEND_MAX && len < zerocopy_min
}

/// The io_uring backend's state: the ring, and what the kernel holds of ours until it
/// completes a request.
pub(super) struct UringDriver {
    /// The tables below hold memory the kernel uses until a request completes; see `Drop`.
    ring: Uring,
    /// Sends in flight, by id (they outlive their connection if it closes first).
    sends: IdMap<u64, Box<SendOp>>,
    next_send: u64,
    /// Connects in flight: the address each was given, kept until it completes.
    connects: IdMap<u64, Box<socket2::SockAddr>>,
    /// Receives straight into decoders in flight: the room each was lent.
    lent: IdMap<u64, crate::wire::decoder::Lent>,
    /// Finished send records, reused. Boxed because an op in flight must not move, and a
    /// reused box goes back into `sends` without a new allocation.
    #[allow(clippy::vec_box)]
    spare_sends: Vec<Box<SendOp>>,
    /// Each hosted node's listener while it accepts (its multishot accept is re-armed when it
    /// ends, unless the node stopped).
    listening: Vec<Option<RawFd>>,
    /// Scratch lists of `complete`: connections that received bytes, receives that ended.
    touched: Vec<ConnId>,
    ended: Vec<ConnId>,
    /// A turn's completions other than receives, and the receives to end (kept between
    /// turns: a turn with completions would otherwise allocate them).
    done: Vec<Done>,
    cancel: Vec<u64>,
    /// This turn has sent once without the ring (see `push_out`).
    sent_direct: bool,
    zerocopy_min: usize,
}

impl Drop for UringDriver {
    /// The tables hold memory the ring's requests use: they are freed only once the kernel
    /// has let go of every request ([`Uring::let_go`]), and leaked, like the ring's own
    /// buffers, if it has not.
    fn drop(&mut self) {
        if !self.ring.let_go() {
            std::mem::forget(std::mem::take(&mut self.sends));
            std::mem::forget(std::mem::take(&mut self.connects));
            std::mem::forget(std::mem::take(&mut self.lent));
        }
    }
}

/// The io_uring `user_data` of a connection's request `op`: kind, generation and slot (a
/// listener's accept: its hosted node in the slot's place, generation 0).
fn tag(op: u64, slot: usize, generation: u32) -> u64 {
    op << OP_SHIFT | ((generation & GEN_MASK) as u64) << 32 | slot as u64
}

/// A completion of the turn, sorted out of the queue for handling after the drain.
enum Done {
    Accept(usize, i32, bool),
    Send(u64, i32, bool, bool),
    Connect(u64, usize, i32),
    Direct(u64, ConnId, i32),
    Failed(ConnId, Box<ConnError>),
}

impl Driver for UringDriver {
    /// epoll only watches the commands' waker and the ring's eventfd, which is off while
    /// spinning: a spinning reactor never asks it.
    const EPOLL_WATCHES_SOCKETS: bool = false;

    fn new(cfg: &ReactorConfig, poll: &Poll) -> Result<Self, EngineError> {
        let (count, size) = cfg.options.recv_buffers;
        if !count.is_power_of_two() || size == 0 {
            return Err(EngineError::Config(format!(
                "{count} receive buffers of {size} bytes: need a power of two of non-empty buffers"
            )));
        }
        if !(1..=32768).contains(&cfg.options.ring_entries) {
            return Err(EngineError::Config(format!(
                "{} submission queue entries: need 1 to 32768",
                cfg.options.ring_entries
            )));
        }
        let mut ring = Uring::new(cfg.options.ring_entries, count, size)?;
        // A multishot receive that runs on into a large frame copies it through the
        // provided buffers; ending it after DIRECT_MIN bytes lets the rest of the frame go
        // straight into its buffer (see `arm_receive`).
        ring.set_recv_limit(Some(DIRECT_MIN as u32));
        poll.registry().register(
            &mut mio::unix::SourceFd(&ring.fd()),
            RING,
            Interest::READABLE,
        )?;
        Ok(Self {
            ring,
            sends: IdMap::default(),
            next_send: 0,
            connects: IdMap::default(),
            lent: IdMap::default(),
            spare_sends: Vec::new(),
            listening: Vec::new(),
            touched: Vec::new(),
            ended: Vec::new(),
            done: Vec::new(),
            cancel: Vec::new(),
            sent_direct: false,
            zerocopy_min: cfg.options.zerocopy_min,
        })
    }

    /// Accepts go through the ring (a multishot accept); epoll never sees the listener.
    fn listen(&mut self, _: &Poll, listener: &mut TcpListener, h: usize) -> std::io::Result<()> {
        if self.listening.len() <= h {
            self.listening.resize(h + 1, None);
        }
        self.listening[h] = Some(listener.as_raw_fd());
        self.ring
            .arm_accept(listener.as_raw_fd(), tag(OP_ACCEPT, h, 0))
    }

    fn listen_again(&mut self, listener: &TcpListener, h: usize, events: &mut Events) {
        if let Err(error) = self
            .ring
            .arm_accept(listener.as_raw_fd(), tag(OP_ACCEPT, h, 0))
        {
            events.push_back(IoEvent::AcceptFailed {
                host: h,
                error,
                armed: false,
            });
        }
    }

    fn unlisten(&mut self, _: &Poll, _: &mut TcpListener, h: usize) {
        if let Some(l) = self.listening.get_mut(h) {
            *l = None;
        }
    }

    /// What the last turn queued in the ring (sends, connects, re-armed receives) goes out
    /// in one submission, before any wait.
    fn turn_start(&mut self) -> Result<(), EngineError> {
        self.sent_direct = false;
        self.ring.submit_pending()?;
        Ok(())
    }

    /// The completion queue is shared memory, read every turn without a syscall; the
    /// commands are read every 32nd turn (an `epoll_wait` there was 18% of a spinning
    /// reactor's time).
    fn look_every(_hot: usize) -> u32 {
        32
    }

    fn must_look(_hot: usize) -> bool {
        false
    }

    fn spinning(&mut self) {
        self.ring.set_wakeups(false);
    }

    fn after_hot_read(&mut self, _: &Poll, _: &mut Conns, _: ConnId) -> Result<(), ConnError> {
        Ok(())
    }

    /// The receives the reactor handed back are armed; submitted before the wait, and the
    /// ring signals its eventfd again.
    fn before_block(&mut self) -> Result<(), EngineError> {
        self.ring.submit_pending()?;
        self.ring.set_wakeups(true);
        Ok(())
    }

    fn work_due(&mut self) -> Option<Duration> {
        self.ring.work_due(REFUSED_PAUSE)
    }

    /// The completions, as events: new connections first, then sends and connects (whose
    /// follow-up sends go out from here), then what was received, then the receives that
    /// ended, then failures, failed accepts last (once the connections this turn ends are on
    /// the reactor's lost list, whose descriptors it may free to accept).
    /// Epoll sees none of the ring's sockets: `ready` holds only the reactor's own tokens.
    fn gather(
        &mut self,
        conns: &mut Conns,
        _: &[Option<TcpListener>],
        _: &mio::Events,
        turn: Turn,
        events: &mut Events,
    ) -> Result<bool, EngineError> {
        let u = &mut self.ring;
        u.poke()?;
        // Most turns of a spinning reactor find nothing: skip the lists below (about 250
        // instructions a turn, and a turn's length is how late a spinning reactor notices a
        // message, on average by half).
        if !u.has_completions() {
            return Ok(false);
        }
        let mut touched = std::mem::take(&mut self.touched);
        let mut ended = std::mem::take(&mut self.ended);
        let mut done = std::mem::take(&mut self.done);
        let mut cancel = std::mem::take(&mut self.cancel);
        let (limited, mut unlimit) = (u.recv_limit().is_some(), false);
        // A spinning reactor reads active connections itself (see `Reactor::read_hot`):
        // their multishot receives are ended, and the final completion hands them over.
        let take_over = turn.spinning && turn.hot_room;
        u.drain(|c| {
            let low = c.user_data & ((1 << OP_SHIFT) - 1);
            let id = ((low & 0xffff_ffff) as usize, (low >> 32) as u32);
            match c.user_data >> OP_SHIFT {
                OP_RECV => {}
                OP_RECV_DIRECT => return done.push(Done::Direct(c.user_data, id, c.raw)),
                OP_SEND => return done.push(Done::Send(low, c.raw, c.more, c.notif)),
                OP_CONNECT => return done.push(Done::Connect(c.user_data, id.0, c.raw)),
                OP_ACCEPT => return done.push(Done::Accept(low as usize, c.raw, c.more)),
                _ => return, // a cancellation's own completion
            }
            let Some(conn) = conns.live(id.0, id.1) else {
                return; // a closed connection's last word
            };
            match c.result {
                Ok([]) => done.push(Done::Failed(id, Box::new(ConnError::ClosedByPeer))),
                Ok(bytes) => {
                    conn.decoder.push(bytes);
                    touched.push(id);
                    if !c.more {
                        ended.push(id);
                    } else if !conn.ending && (take_over || conn.decoder.missing() >= DIRECT_MIN) {
                        // A large frame is under way (the rest can go straight into the
                        // decoder), or the reactor will read the socket itself: end the
                        // multishot receive (see `ended` below).
                        conn.ending = true;
                        cancel.push(c.user_data);
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => ended.push(id),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) && limited => {
                    // A kernel without multishot receive limits (before 6.16): arm without.
                    unlimit = true;
                    ended.push(id)
                }
                Err(e) if conn.ending && e.raw_os_error() == Some(libc::ECANCELED) => {
                    ended.push(id)
                }
                Err(e) => done.push(Done::Failed(id, Box::new(ConnError::io("recv", &e)))),
            }
        });
        let any = !touched.is_empty() || !done.is_empty();
        if unlimit {
            self.ring.set_recv_limit(None);
        }
        for target in cancel.drain(..) {
            self.ring.cancel(target, OP_CANCEL << OP_SHIFT)?;
        }
        self.cancel = cancel;
        let mut failed: Vec<(ConnId, Box<ConnError>)> = Vec::new();
        let mut accept_failed = Vec::new();
        for d in done.drain(..) {
            match d {
                Done::Accept(h, raw, more) => {
                    self.accepted(h, raw, more, events, &mut accept_failed)
                }
                Done::Connect(tagged, slot, res) => {
                    if let Err((id, why)) = self.connected(conns, tagged, slot, res) {
                        failed.push((id, Box::new(why)));
                    }
                }
                Done::Send(id, res, more, notif) => {
                    if let Err((id, why)) = self.sent(conns, id, res, more, notif) {
                        failed.push((id, Box::new(why)));
                    }
                }
                Done::Direct(tagged, id, res) => match self.received_direct(conns, tagged, id, res)
                {
                    Ok(true) => {
                        touched.push(id);
                        ended.push(id);
                    }
                    Ok(false) => {}
                    Err(why) => failed.push((id, Box::new(why))),
                },
                Done::Failed(id, why) => failed.push((id, why)),
            }
        }
        self.done = done;
        touched.sort_unstable();
        touched.dedup();
        // One by one: `extend` costs more per call than a turn's few events (it reserves and
        // sets up on every call, empty ones included).
        for id in touched.drain(..) {
            events.push_back(IoEvent::Received(id));
        }
        for id in ended.drain(..) {
            if let Some(conn) = conns.live(id.0, id.1) {
                conn.ending = false;
                events.push_back(IoEvent::ReceiveEnded(id));
            }
        }
        for (id, why) in failed {
            events.push_back(IoEvent::Failed(id, why));
        }
        for ev in accept_failed {
            events.push_back(ev);
        }
        self.touched = touched;
        self.ended = ended;
        Ok(any)
    }

    /// Listeners and connections are not in epoll.
    /// The ring receives (once connected) and sends; epoll never sees the socket.
    fn watch_new(
        &mut self,
        _: &Poll,
        stream: &mut TcpStream,
        connecting: bool,
        (slot, generation): ConnId,
    ) -> std::io::Result<()> {
        if connecting {
            return Ok(());
        }
        self.ring
            .arm(stream.as_raw_fd(), tag(OP_RECV, slot, generation))
    }

    /// Its armed receive is cancelled by name, now: one look in the kernel's hash of armed
    /// requests. Left to the teardown's cancel-everything ([`Driver::finish`]), each
    /// receive cost the kernel a scan of all that were left, and stopping a 512-node
    /// cluster took a second. A receive that was not armed answers `ENOENT`, ignored.
    fn forget(&mut self, _: &Poll, _: &mut TcpStream, (slot, generation): ConnId) {
        let _ = self
            .ring
            .cancel(tag(OP_RECV, slot, generation), OP_CANCEL << OP_SHIFT);
    }

    fn before_closing_fds(&mut self) -> Result<(), EngineError> {
        Ok(self.ring.submit_all(CLOSE_PATIENCE)?)
    }

    fn resume(&mut self, _: &Poll, conns: &mut Conns, (slot, _): ConnId) -> std::io::Result<()> {
        self.arm_receive(conns, slot)
    }

    fn push_out(&mut self, _: &Poll, conns: &mut Conns, slot: usize) -> Result<(), ConnError> {
        self.send_queued(conns, slot)
    }

    /// A bare socket the ring will connect ([`Self::connect`]).
    fn dial_socket(addr: SocketAddr) -> std::io::Result<(TcpStream, bool)> {
        let sock = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        sock.set_nonblocking(true)?;
        Ok((TcpStream::from_std(sock.into()), true))
    }

    fn connect(
        &mut self,
        conns: &Conns,
        (slot, generation): ConnId,
        addr: SocketAddr,
    ) -> Result<(), ConnError> {
        let Some(conn) = conns.get(slot) else {
            return Ok(());
        };
        let tagged = tag(OP_CONNECT, slot, generation);
        let sa = Box::new(socket2::SockAddr::from(addr));
        // SAFETY: the address is boxed and kept in `connects` until the connect completes
        // (`Drop` frees the table only once the kernel has let go of it).
        unsafe {
            self.ring.connect(
                conn.stream.as_raw_fd(),
                sa.as_ptr().cast(),
                sa.len(),
                tagged,
            )
        }
        .map_err(|e| ConnError::io(format!("connect {addr}"), &e))?;
        self.connects.insert(tagged, sa);
        Ok(())
    }

    fn finish(&mut self) {
        self.ring.cancel_all(Duration::from_secs(1));
    }
}

impl UringDriver {
    /// A send handed to the ring unless one is in flight; a turn's first one is written at
    /// once instead, unless it is very large or zero-copy ([`writes_direct`]).
    fn send_queued(&mut self, conns: &mut Conns, slot: usize) -> Result<(), ConnError> {
        let Some(conn) = conns.get_mut(slot) else {
            return Ok(());
        };
        if conn.connecting || conn.sending || conn.out.is_empty() {
            return Ok(());
        }
        if writes_direct(self.sent_direct, conn.out.len(), self.zerocopy_min) {
            self.sent_direct = true;
            conn.flush().map_err(|e| ConnError::io("send", &e))?;
            if conn.out.is_empty() {
                return Ok(());
            }
        }
        let mut op = self.spare_sends.pop().unwrap_or_else(|| {
            Box::new(SendOp {
                slot,
                generation: 0,
                chunks: Vec::new(),
                iov: Vec::new(),
                // SAFETY: msghdr is plain integers and pointers; all-zero bytes are valid.
                hdr: unsafe { std::mem::zeroed() },
            })
        });
        op.slot = slot;
        op.generation = conn.generation;
        let last_write_max = conn.last_write_max();
        conn.out.take(&mut op.chunks, MAX_IOV);
        op.prepare(last_write_max);
        let zerocopy = op.writes() >= self.zerocopy_min;
        self.next_send = (self.next_send + 1) & ((1 << OP_SHIFT) - 1);
        let id = self.next_send;
        // SAFETY: the op is boxed (its header, iovecs and chunks do not move) and stays in
        // `sends`, unchanged, until its last completion; `Drop` frees the table only once
        // the kernel has let go of every request.
        unsafe {
            self.ring.send_msg(
                conn.stream.as_raw_fd(),
                &op.hdr,
                zerocopy,
                OP_SEND << OP_SHIFT | id,
            )
        }
        .map_err(|e| ConnError::io("io_uring send", &e))?;
        conn.sending = true;
        self.sends.insert(id, op);
        Ok(())
    }

    /// A completion of hosted node `h`'s multishot accept: `raw` is the new connection's fd or
    /// a negative errno; `more` false means the accept must be armed again (unless the node
    /// stopped, which is what ended it).
    fn accepted(
        &mut self,
        h: usize,
        raw: i32,
        more: bool,
        events: &mut Events,
        failed: &mut Vec<IoEvent>,
    ) {
        let listener = self.listening.get(h).copied().flatten();
        if raw >= 0 {
            use std::os::fd::FromRawFd;
            // SAFETY: a successful accept returns a new connected socket that nothing else
            // owns; wrapping it gives it exactly one owner, which closes it when dropped.
            let stream = unsafe { std::net::TcpStream::from_raw_fd(raw) };
            if listener.is_some() {
                match stream.set_nonblocking(true) {
                    Ok(()) => events.push_back(IoEvent::Accepted {
                        host: h,
                        stream: TcpStream::from_std(stream),
                    }),
                    Err(error) => failed.push(IoEvent::AcceptFailed {
                        host: h,
                        error,
                        armed: true,
                    }),
                }
            }
        } else if raw != -libc::ECANCELED && listener.is_some() {
            // The reactor decides when to accept again (rest, or at once).
            failed.push(IoEvent::AcceptFailed {
                host: h,
                error: std::io::Error::from_raw_os_error(-raw),
                armed: more,
            });
            return;
        }
        if let (false, Some(fd)) = (more, listener) {
            if let Err(error) = self.ring.arm_accept(fd, tag(OP_ACCEPT, h, 0)) {
                failed.push(IoEvent::AcceptFailed {
                    host: h,
                    error,
                    armed: false,
                });
            }
        }
    }

    /// Send `id` completed: `res` bytes went out (or the error). What it did not send goes back
    /// to the front of the queue and the next send starts. A zero-copy send's buffers are kept
    /// until its notification (`notif`); `more` says one is still coming.
    fn sent(
        &mut self,
        conns: &mut Conns,
        id: u64,
        res: i32,
        more: bool,
        notif: bool,
    ) -> Result<(), (ConnId, ConnError)> {
        let Some(op) = self.sends.get(&id) else {
            return Ok(());
        };
        let conn_id = (op.slot, op.generation);
        // What the connection does next: nothing (closed meanwhile, or this is only the
        // notification), send on, or close.
        let mut next = None;
        if let (false, Some(conn)) = (notif, conns.live(op.slot, op.generation)) {
            conn.sending = false;
            next = Some(if res < 0 {
                Err(ConnError::errno("send", res))
            } else if res == 0 && op.len() > 0 {
                Err(ConnError::NoProgress)
            } else {
                conn.out.unshift(op.unsent(res as usize).into_iter());
                Ok(())
            });
        }
        if !more {
            if let Some(mut op) = self.sends.remove(&id) {
                op.chunks.clear();
                self.spare_sends.push(op);
            }
        }
        match next {
            Some(Ok(())) => self
                .send_queued(conns, conn_id.0)
                .map_err(|why| (conn_id, why)),
            Some(Err(why)) => Err((conn_id, why)),
            None => Ok(()),
        }
    }

    /// The connect of `slot` finished with `res` (0 or a negative errno): receive, and send
    /// what waited.
    fn connected(
        &mut self,
        conns: &mut Conns,
        tagged: u64,
        slot: usize,
        res: i32,
    ) -> Result<(), (ConnId, ConnError)> {
        let addr = self.connects.remove(&tagged);
        let generation = (tagged >> 32) as u32 & GEN_MASK;
        let id = (slot, generation);
        let Some(conn) = conns.live(slot, generation) else {
            return Ok(()); // closed while connecting
        };
        if res < 0 {
            let to = addr
                .and_then(|a| a.as_socket())
                .map_or("?".to_string(), |a| a.to_string());
            return Err((id, ConnError::errno(format!("connect {to}"), res)));
        }
        conn.connecting = false;
        self.arm_receive(conns, slot)
            .map_err(|e| (id, ConnError::io("receive", &e)))?;
        self.send_queued(conns, slot).map_err(|why| (id, why))
    }

    /// A receive straight into a decoder completed with `res`: whether bytes arrived (the
    /// connection's receive then ended), or why it failed.
    fn received_direct(
        &mut self,
        conns: &mut Conns,
        tagged: u64,
        (slot, generation): ConnId,
        res: i32,
    ) -> Result<bool, ConnError> {
        let lent = self.lent.remove(&tagged);
        let Some(conn) = conns.live(slot, generation) else {
            return Ok(false); // closed meanwhile; the loan's memory goes now
        };
        match (res, lent) {
            (n, Some(lent)) if n > 0 => {
                // SAFETY: the receive completed and wrote `n` bytes at the loan's start.
                unsafe { conn.decoder.commit(lent, n as usize) }?;
                Ok(true)
            }
            (0, _) => Err(ConnError::ClosedByPeer),
            (n, _) if n < 0 => Err(ConnError::errno("recv", n)),
            _ => Err(ConnError::LostLoan),
        }
    }

    /// Arm `slot`'s next receive. While a frame of [`DIRECT_MIN`] or more bytes is still
    /// missing, one receive of exactly that much straight into the decoder's buffer (no copy
    /// out of the provided buffers); otherwise the multishot receive again.
    fn arm_receive(&mut self, conns: &mut Conns, slot: usize) -> std::io::Result<()> {
        let Some(conn) = conns.get_mut(slot) else {
            return Ok(());
        };
        let fd = conn.stream.as_raw_fd();
        conn.ending = false;
        if conn.decoder.missing() >= DIRECT_MIN {
            if let Some(lent) = conn.decoder.lend() {
                let tagged = tag(OP_RECV_DIRECT, slot, conn.generation);
                let len = u32::try_from(lent.len).unwrap_or(u32::MAX);
                // SAFETY: the loan keeps its allocation alive in `lent` until the completion,
                // even if the connection closes first, and the decoder is not written until it
                // comes back (`ending` stays false and no multishot is armed meanwhile).
                unsafe { self.ring.recv_into(fd, lent.ptr, len, tagged) }?;
                self.lent.insert(tagged, lent);
                return Ok(());
            }
        }
        self.ring.arm(fd, tag(OP_RECV, slot, conn.generation))
    }
}

#[cfg(test)]
mod tests {
    use super::{writes_direct, DIRECT_SEND_MAX};

    #[test]
    fn a_turns_first_send_is_written_directly_unless_large_or_zero_copy() {
        let off = usize::MAX;
        let frame_1mib = (1 << 20) + 64;
        assert!(writes_direct(false, 48, off));
        assert!(
            writes_direct(false, frame_1mib, off),
            "1 MiB frames go direct"
        );
        assert!(
            !writes_direct(true, 48, off),
            "a turn's second send batches in the ring"
        );
        assert!(
            !writes_direct(false, (4 << 20) + 64, off),
            "4 MiB goes through the ring"
        );
        assert!(writes_direct(false, DIRECT_SEND_MAX, off));
        assert!(!writes_direct(false, DIRECT_SEND_MAX + 1, off));
        // Zero-copy is a ring request: a send at or above the threshold never goes direct.
        assert!(!writes_direct(false, 0, 0));
        assert!(!writes_direct(false, 64 << 10, 64 << 10));
        assert!(writes_direct(false, (64 << 10) - 1, 64 << 10));
    }
}
