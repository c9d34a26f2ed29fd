//! The io_uring backend: accepts, connects, receives and sends go through the ring; this is
//! what each completion means (receives into provided buffers or straight into a frame's
//! buffer, sends, connects, accepts) and how receives are armed again. epoll only watches
//! the ring's eventfd (and the commands' waker), so a blocked reactor wakes for either.

use super::conn::{Conn, Ending, SendOp, MAX_IOV};
use super::driver::Driver;
use super::{EngineError, Reactor, ReactorConfig, BURY_PER_TURN, HOT_MAX, RING};
use crate::engine::uring::Uring;
use crate::id::IdMap;
use crate::proto::Protocol;
use crate::wire::handshake::Role;
use crate::wire::WireMsg;
use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Poll};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// io_uring `user_data`: the kind of request in the top four bits. A connection's receive and
/// connect carry its slot and generation, a send its entry in the reactor's send table, an
/// accept its hosted node.
pub(super) const OP_SHIFT: u32 = 60;
pub(super) const OP_RECV: u64 = 0;
pub(super) const OP_SEND: u64 = 1;
pub(super) const OP_CONNECT: u64 = 2;
pub(super) const OP_ACCEPT: u64 = 3;
pub(super) const OP_RECV_DIRECT: u64 = 4;
pub(super) const OP_CANCEL: u64 = 5;

/// A frame missing at least this many bytes is received straight into the decoder's buffer
/// (one receive of exactly that much) instead of through the provided buffers and a copy.
pub(super) const DIRECT_MIN: usize = 64 * 1024;

/// How long the kernel may refuse to take what is queued before sockets close (see
/// `before_closing_fds`); past that the reactor ends rather than close them.
const CLOSE_PATIENCE: Duration = Duration::from_millis(100);

/// How long a blocking reactor waits before it enters a ring whose last enter the kernel
/// refused (see [`crate::engine::uring::Uring::work_due`]); a spinning one tries every turn.
const REFUSED_PAUSE: Duration = Duration::from_millis(1);

/// Generations are kept to 28 bits so that slot, generation and kind fit one `user_data`.
pub(super) const GEN_MASK: u32 = (1 << 28) - 1;

/// io_uring: a turn's first send of at most this many bytes is written directly. Measured
/// (per-round ratios to the std peer, busy): through the ring, 4 KiB payloads (4 144-byte
/// frames) were 1.17x against 1.06x direct, 16 KiB 1.13x against 1.07x, 256 KiB 1.09x
/// against 1.02x. Re-measured with both sides on CUBIC, one binary switching between the two
/// (2026-11-24, 1 MiB p50 ratio): 1.002 direct against 1.013 through the ring (busy, 4
/// alternations), 1.003 against 1.011 (adaptive, 3); 2 MiB came out alike (1.006); 4 MiB,
/// more than a socket's send buffer holds, was better through the ring (0.97 against
/// 1.02). A frame is its payload plus about 40 bytes, so the cap sits between the payload
/// sizes, not on one.
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

/// The io_uring driver's own state: the ring, and what the kernel holds of ours until it
/// completes a request.
pub(super) struct Ring {
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
    /// Scratch lists of `uring_step`: connections that received bytes, receives to re-arm.
    touched: Vec<(usize, u32)>,
    rearm: Vec<(usize, u32)>,
    /// This turn has sent once without the ring (see `push_out`).
    sent_direct: bool,
}

impl Drop for Ring {
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

/// The connection open in `slot` if it is still the one of `generation` (an io_uring completion
/// can arrive after its connection closed and the slot was reused).
pub(super) fn live(conns: &mut [Option<Conn>], slot: usize, generation: u32) -> Option<&mut Conn> {
    conns
        .get_mut(slot)
        .and_then(|c| c.as_mut())
        .filter(|c| c.generation == generation)
}

/// The io_uring `user_data` of a connection's request `op`: kind, generation and slot (a
/// listener's accept: its hosted node in the slot's place, generation 0).
pub(super) fn tag(op: u64, slot: usize, generation: u32) -> u64 {
    op << OP_SHIFT | ((generation & GEN_MASK) as u64) << 32 | slot as u64
}

impl<P: Protocol> Driver<P> for Ring
where
    P::Msg: WireMsg,
{
    fn new(cfg: &ReactorConfig, poll: &Poll) -> Result<Self, EngineError> {
        let (count, size) = cfg.recv_buffers;
        if !count.is_power_of_two() || size == 0 {
            return Err(EngineError::Config(format!(
                "{count} receive buffers of {size} bytes: need a power of two of non-empty buffers"
            )));
        }
        if !(1..=32768).contains(&cfg.ring_entries) {
            return Err(EngineError::Config(format!(
                "{} submission queue entries: need 1 to 32768",
                cfg.ring_entries
            )));
        }
        let mut ring = Uring::new(cfg.ring_entries, count, size)?;
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
            touched: Vec::new(),
            rearm: Vec::new(),
            sent_direct: false,
        })
    }

    /// Accepts go through the ring (a multishot accept); epoll never sees the listener.
    fn listen(
        &mut self,
        _poll: &Poll,
        listener: &mut TcpListener,
        h: usize,
    ) -> std::io::Result<()> {
        self.ring
            .arm_accept(listener.as_raw_fd(), tag(OP_ACCEPT, h, 0))
    }

    /// A multishot accept again; one the ring will not take rests the listener.
    fn listen_again(r: &mut Reactor<P, Self>, h: usize) -> Result<(), EngineError> {
        let Some(host) = r.hosts.get(h).and_then(|x| x.as_ref()) else {
            return Ok(());
        };
        let fd = host.listener.as_raw_fd();
        if let Err(e) = r.io.ring.arm_accept(fd, tag(OP_ACCEPT, h, 0)) {
            r.rest_listener(h, &e, true);
        }
        Ok(())
    }

    /// What the last turn queued in the ring (sends, connects, re-armed receives) goes out
    /// in one submission, before any wait.
    fn turn_start(r: &mut Reactor<P, Self>) -> Result<(), EngineError> {
        r.io.sent_direct = false;
        r.io.ring.submit_pending()?;
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

    /// epoll only watches the commands' waker and the ring's eventfd, which is off while
    /// spinning: a spinning reactor never asks it.
    fn asks_epoll(spinning: bool, _look: bool) -> bool {
        !spinning
    }

    fn spin(r: &mut Reactor<P, Self>, look: bool, idle: bool) -> Result<bool, EngineError> {
        if look {
            r.commands()?;
            if r.burial_due(idle) {
                r.bury_lost(Ending::Close, BURY_PER_TURN)?;
            }
        }
        r.io.ring.set_wakeups(false);
        Ok(false)
    }

    /// Every hot connection is received on by the ring again, armed and submitted before
    /// the wait, and the ring signals its eventfd again.
    fn before_block(r: &mut Reactor<P, Self>) -> Result<(), EngineError> {
        for (slot, generation) in std::mem::take(&mut r.hot) {
            r.cool(slot, generation)?;
        }
        r.io.ring.submit_pending()?;
        r.io.ring.set_wakeups(true);
        Ok(())
    }

    fn work_due(&mut self) -> Option<Duration> {
        self.ring.work_due(REFUSED_PAUSE)
    }

    /// The completions; then, spinning, the hot connections' direct reads. After the
    /// completions: a finished send lets go of the receive buffer its payload shared, which
    /// the direct read can then reuse (read before, a large frame found it still shared and
    /// took fresh memory: a page fault per 4 KiB of every message).
    fn after_wait(r: &mut Reactor<P, Self>, spinning: bool) -> Result<bool, EngineError> {
        let mut active = r.uring_step()?;
        if spinning {
            active |= r.read_hot()?;
        }
        Ok(active)
    }

    /// Listeners and connections are not in epoll.
    fn on_event(
        _r: &mut Reactor<P, Self>,
        _token: usize,
        _readable: bool,
        _writable: bool,
        _error: bool,
    ) -> Result<bool, EngineError> {
        Ok(false)
    }

    /// The ring receives (once connected) and sends; epoll never sees the socket.
    fn watch_new(&mut self, _poll: &Poll, conn: &mut Conn, slot: usize) -> std::io::Result<()> {
        if conn.connecting {
            return Ok(());
        }
        self.ring
            .arm(conn.stream.as_raw_fd(), tag(OP_RECV, slot, conn.generation))
    }

    fn forget(&mut self, _poll: &Poll, _stream: &mut TcpStream) {}

    /// io_uring names a socket by its fd number and looks the number up when it submits
    /// the request (see `Reactor::before_closing_fds`): everything queued goes first, through
    /// the kernel's passing refusals.
    fn before_closing_fds(&mut self) -> Result<(), EngineError> {
        Ok(self.ring.submit_all(CLOSE_PATIENCE)?)
    }

    fn resume(r: &mut Reactor<P, Self>, slot: usize) -> std::io::Result<()> {
        r.arm_receive(slot)
    }

    fn after_hot_read(_r: &mut Reactor<P, Self>, _slot: usize) -> Result<(), EngineError> {
        Ok(())
    }

    /// A send handed to the ring unless one is in flight; a turn's first one is written at
    /// once instead, unless it is very large or zero-copy ([`writes_direct`]).
    fn push_out(r: &mut Reactor<P, Self>, slot: usize) -> Result<(), String> {
        let Some(conn) = r.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return Ok(());
        };
        let io = &mut r.io;
        if conn.connecting || conn.sending || conn.out.is_empty() {
            return Ok(());
        }
        if writes_direct(io.sent_direct, conn.out.len(), r.cfg.zerocopy_min) {
            io.sent_direct = true;
            conn.flush().map_err(|e| e.to_string())?;
            if conn.out.is_empty() {
                return Ok(());
            }
        }
        let mut op = io.spare_sends.pop().unwrap_or_else(|| {
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
        let zerocopy = op.writes() >= r.cfg.zerocopy_min;
        io.next_send = (io.next_send + 1) & ((1 << OP_SHIFT) - 1);
        let id = io.next_send;
        // SAFETY: the op is boxed (its header, iovecs and chunks do not move) and stays in
        // `sends`, unchanged, until its last completion; the driver's `Drop` frees the table
        // only once the kernel has let go of every request.
        unsafe {
            io.ring.send_msg(
                conn.stream.as_raw_fd(),
                &op.hdr,
                zerocopy,
                OP_SEND << OP_SHIFT | id,
            )
        }
        .map_err(|e| format!("io_uring send: {e}"))?;
        conn.sending = true;
        io.sends.insert(id, op);
        Ok(())
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
        r: &mut Reactor<P, Self>,
        slot: usize,
        addr: SocketAddr,
    ) -> Result<bool, EngineError> {
        let Some(conn) = r.conns.get(slot).and_then(|c| c.as_ref()) else {
            return Ok(false);
        };
        let tagged = tag(OP_CONNECT, slot, conn.generation);
        let sa = Box::new(socket2::SockAddr::from(addr));
        // SAFETY: the address is boxed and kept in `connects` until the connect completes
        // (the driver's `Drop` frees the table only once the kernel has let go of it).
        let queued = unsafe {
            r.io.ring.connect(
                conn.stream.as_raw_fd(),
                sa.as_ptr().cast(),
                sa.len(),
                tagged,
            )
        };
        if let Err(e) = queued {
            r.close(slot, format!("connect {addr}: {e}"))?;
            return Ok(false);
        }
        r.io.connects.insert(tagged, sa);
        Ok(true)
    }

    fn finish(&mut self) {
        self.ring.cancel_all(Duration::from_secs(1));
    }
}

impl<P: Protocol> Reactor<P, Ring>
where
    P::Msg: WireMsg,
{
    /// A completion of hosted node `h`'s multishot accept: `raw` is the new connection's fd or
    /// a negative errno; `more` false means the accept must be armed again (unless the node
    /// stopped, which is what ended it).
    pub(super) fn accepted(&mut self, h: usize, raw: i32, more: bool) -> Result<(), EngineError> {
        let alive = self.hosts.get(h).is_some_and(|x| x.is_some());
        if raw >= 0 {
            use std::os::fd::FromRawFd;
            // SAFETY: a successful accept returns a new connected socket that nothing else
            // owns; wrapping it gives it exactly one owner, which closes it when dropped.
            let stream = unsafe { std::net::TcpStream::from_raw_fd(raw) };
            if alive {
                self.accepted_one(h);
                match stream.set_nonblocking(true) {
                    Ok(()) => {
                        self.open(h, TcpStream::from_std(stream), Role::Responder, None, false)?;
                    }
                    Err(e) => self.not_opened(h, None, format!("socket options: {e}")),
                }
            }
        } else if raw != -libc::ECANCELED && alive {
            let e = std::io::Error::from_raw_os_error(-raw);
            if super::accept::classify(&e) == super::accept::AcceptFailure::Rest
                && !self.make_room(h, &e)?
            {
                // Armed again at once, the accept would fail again at once, every turn.
                self.rest_listener(h, &e, !more);
                return Ok(());
            }
        }
        if !more && alive {
            <Ring as Driver<P>>::listen_again(self, h)?;
        }
        Ok(())
    }

    /// io_uring: send `id` completed: `res` bytes went out (or the error). What it did not
    /// send goes back to the front of the queue and the next send starts. A zero-copy send's
    /// buffers are kept until its notification (`notif`); `more` says one is still coming.
    pub(super) fn sent(
        &mut self,
        id: u64,
        res: i32,
        more: bool,
        notif: bool,
    ) -> Result<(), EngineError> {
        let Some(op) = self.io.sends.get(&id) else {
            return Ok(());
        };
        let slot = op.slot;
        // What the connection does next: nothing (closed meanwhile, or this is only the
        // notification), send on, or close.
        let mut next = None;
        if let (false, Some(conn)) = (notif, live(&mut self.conns, slot, op.generation)) {
            conn.sending = false;
            next = Some(if res < 0 {
                Err(std::io::Error::from_raw_os_error(-res).to_string())
            } else if res == 0 && op.len() > 0 {
                Err("the socket took no bytes".to_string())
            } else {
                conn.out.unshift(op.unsent(res as usize).into_iter());
                Ok(())
            });
        }
        if !more {
            if let Some(mut op) = self.io.sends.remove(&id) {
                op.chunks.clear();
                self.io.spare_sends.push(op);
            }
        }
        match next {
            Some(Ok(())) => self.flush(slot),
            Some(Err(why)) => self.close(slot, why),
            None => Ok(()),
        }
    }

    /// io_uring: the connect of `slot` finished with `res` (0 or a negative errno).
    pub(super) fn connected(
        &mut self,
        tagged: u64,
        slot: usize,
        res: i32,
    ) -> Result<(), EngineError> {
        let addr = self.io.connects.remove(&tagged);
        let generation = (tagged >> 32) as u32 & GEN_MASK;
        let Some(conn) = live(&mut self.conns, slot, generation) else {
            return Ok(()); // closed while connecting
        };
        if res < 0 {
            let to = addr.and_then(|a| a.as_socket());
            let e = std::io::Error::from_raw_os_error(-res);
            return self.close(slot, format!("connect {to:?}: {e}"));
        }
        conn.connecting = false;
        if let Err(e) = self.arm_receive(slot) {
            // The connection's failure, not the reactor's (as in `insert`).
            return self.close(slot, format!("receive: {e}"));
        }
        self.flush(slot)
    }

    /// io_uring path: run pending completion work, feed received bytes to decoders, re-arm
    /// receives that stopped. Returns whether anything arrived.
    pub(super) fn uring_step(&mut self) -> Result<bool, EngineError> {
        let u = &mut self.io.ring;
        u.poke()?;
        // Most turns of a spinning reactor find nothing: skip the lists below (about 250
        // instructions a turn, and a turn's length is how late a spinning reactor notices a
        // message, on average by half).
        if !u.has_completions() {
            return Ok(false);
        }
        // Reused lists (this runs on every spin of a busy reactor). Connections are named by
        // slot and generation: a slot closed and reused within the turn is not confused.
        let mut touched = std::mem::take(&mut self.io.touched);
        let mut rearm = std::mem::take(&mut self.io.rearm);
        let mut failed: Vec<(usize, u32, String)> = Vec::new();
        let mut accepted: Vec<(usize, i32, bool)> = Vec::new();
        let mut sent: Vec<(u64, i32, bool, bool)> = Vec::new();
        let mut connected: Vec<(u64, usize, i32)> = Vec::new();
        let mut direct: Vec<(u64, usize, u32, i32)> = Vec::new();
        let mut cancel: Vec<u64> = Vec::new();
        let conns = &mut self.conns;
        let (limited, mut unlimit) = (u.recv_limit().is_some(), false);
        // A spinning reactor reads active connections itself (see `read_hot`): their
        // multishot receives are ended, and the final completion hands them over.
        let take_over = self.spinning && self.hot.len() < HOT_MAX;
        u.drain(|c| {
            let low = c.user_data & ((1 << OP_SHIFT) - 1);
            let (slot, generation) = ((low & 0xffff_ffff) as usize, (low >> 32) as u32);
            match c.user_data >> OP_SHIFT {
                OP_RECV => {}
                OP_RECV_DIRECT => return direct.push((c.user_data, slot, generation, c.raw)),
                OP_SEND => return sent.push((low, c.raw, c.more, c.notif)),
                OP_CONNECT => return connected.push((c.user_data, slot, c.raw)),
                OP_ACCEPT => return accepted.push((low as usize, c.raw, c.more)),
                _ => return, // a cancellation's own completion
            }
            let Some(conn) = live(conns, slot, generation) else {
                return; // a closed connection's last word
            };
            match c.result {
                Ok([]) => failed.push((slot, generation, "closed by peer".into())),
                Ok(bytes) => {
                    conn.decoder.push(bytes);
                    touched.push((slot, generation));
                    if !c.more {
                        rearm.push((slot, generation));
                    } else if !conn.ending && (take_over || conn.decoder.missing() >= DIRECT_MIN) {
                        // A large frame is under way (the rest can go straight into the
                        // decoder), or the reactor will read the socket itself: end the
                        // multishot receive (see `rearm` below).
                        conn.ending = true;
                        cancel.push(c.user_data);
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => rearm.push((slot, generation)),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) && limited => {
                    // A kernel without multishot receive limits (before 6.16): arm without.
                    unlimit = true;
                    rearm.push((slot, generation))
                }
                Err(e) if conn.ending && e.raw_os_error() == Some(libc::ECANCELED) => {
                    rearm.push((slot, generation))
                }
                Err(e) => failed.push((slot, generation, e.to_string())),
            }
        });
        let any = !touched.is_empty()
            || !failed.is_empty()
            || !accepted.is_empty()
            || !sent.is_empty()
            || !connected.is_empty()
            || !direct.is_empty();
        if unlimit {
            self.io.ring.set_recv_limit(None);
        }
        for target in cancel {
            self.io.ring.cancel(target, OP_CANCEL << OP_SHIFT)?;
        }
        // New connections now; failed accepts last, once the connections this step ends are
        // on the lost list, whose descriptors `make_room` may free.
        for &(h, raw, more) in accepted.iter().filter(|a| a.1 >= 0) {
            self.accepted(h, raw, more)?;
        }
        for (tagged, slot, res) in connected {
            self.connected(tagged, slot, res)?;
        }
        for (id, res, more, notif) in sent {
            self.sent(id, res, more, notif)?;
        }
        for (tagged, slot, generation, res) in direct {
            let lent = self.io.lent.remove(&tagged);
            let Some(conn) = live(&mut self.conns, slot, generation) else {
                continue; // closed meanwhile; the loan's memory goes now
            };
            let why = match (res, lent) {
                (n, Some(lent)) if n > 0 => {
                    // SAFETY: the receive completed and wrote `n` bytes at the loan's start.
                    match unsafe { conn.decoder.commit(lent, n as usize) } {
                        Ok(()) => {
                            touched.push((slot, generation));
                            rearm.push((slot, generation));
                            continue;
                        }
                        Err(e) => e.to_string(),
                    }
                }
                (0, _) => "closed by peer".into(),
                (n, _) if n < 0 => std::io::Error::from_raw_os_error(-n).to_string(),
                _ => "a receive completed without its buffer".into(),
            };
            failed.push((slot, generation, why));
        }
        touched.sort_unstable();
        touched.dedup();
        let mut result = Ok(());
        for &(slot, generation) in &touched {
            if self.generation_of(slot) != Some(generation) {
                continue;
            }
            if let Err(why) = self.frames(slot) {
                result = result.and(self.close(slot, why));
            }
        }
        // Re-arm after the frames are cut, so a loan is taken on a buffer no frame shares.
        // A spinning reactor reads the connection itself instead, until it cools.
        for &(slot, generation) in &rearm {
            if self.generation_of(slot) == Some(generation) {
                if self.spinning {
                    if let Some(conn) = live(&mut self.conns, slot, generation) {
                        conn.ending = false;
                    }
                    result = result.and(self.heat(slot, generation));
                } else if let Err(e) = self.arm_receive(slot) {
                    result = result.and(self.close(slot, e.to_string()));
                }
            }
        }
        touched.clear();
        rearm.clear();
        self.io.touched = touched;
        self.io.rearm = rearm;
        result?;
        for (slot, generation, why) in failed {
            if self.generation_of(slot) == Some(generation) {
                let _ = self.frames(slot);
                self.close(slot, why)?;
            }
        }
        for &(h, raw, more) in accepted.iter().filter(|a| a.1 < 0) {
            self.accepted(h, raw, more)?;
        }
        Ok(any)
    }

    /// io_uring: arm `slot`'s next receive. While a frame of [`DIRECT_MIN`] or more bytes is
    /// still missing, one receive of exactly that much straight into the decoder's buffer
    /// (no copy out of the provided buffers); otherwise the multishot receive again.
    pub(super) fn arm_receive(&mut self, slot: usize) -> std::io::Result<()> {
        let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return Ok(());
        };
        let u = &mut self.io.ring;
        let fd = conn.stream.as_raw_fd();
        conn.ending = false;
        if conn.decoder.missing() >= DIRECT_MIN {
            if let Some(lent) = conn.decoder.lend() {
                let tagged = tag(OP_RECV_DIRECT, slot, conn.generation);
                let len = u32::try_from(lent.len).unwrap_or(u32::MAX);
                // SAFETY: the loan keeps its allocation alive in `lent` until the completion,
                // even if the connection closes first, and the decoder is not written until it
                // comes back (`ending` stays false and no multishot is armed meanwhile).
                unsafe { u.recv_into(fd, lent.ptr, len, tagged) }?;
                self.io.lent.insert(tagged, lent);
                return Ok(());
            }
        }
        u.arm(fd, tag(OP_RECV, slot, conn.generation))
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
