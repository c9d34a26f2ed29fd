//! A reactor: one thread that hosts one or many nodes (thread per core, not per node) and does
//! their I/O: accept, connect, handshake, frame, deliver, time. Every hosted node keeps its own
//! listener, connections, peers and protocol, so killing one closes exactly its sockets; nodes
//! of one reactor talk to each other over real loopback connections like any other peers.
//!
//! A node sends to a peer on one connection, its *route*, kept until that connection closes: the
//! one it dialed, or the one the peer dialed and authenticated first. Answers thus usually ride
//! the connection the question came on (TCP ACKs piggyback, half the sockets), and every
//! direction stays FIFO, which is what the papers' channels assume. If both dial at once they
//! hold two connections and each side keeps sending on its own choice, still FIFO. A
//! connection that fails (refused, reset, closed, or a frame that does not check) is closed
//! alone; if its peer was known, the protocol hears `on_suspect(peer)`.
//!
//! On the io_uring backend everything goes through the ring: accepts, connects, receives and
//! sends (a gather `sendmsg`, zero-copy above [`ReactorConfig::zerocopy_min`]); epoll only
//! watches the ring's eventfd and the waker, so a blocked reactor wakes for either. On the poll
//! backend epoll watches everything and sends are `writev`s.

use super::timers::Timers;
use super::uring::Uring;
use super::{Backend, EngineError, WaitMode, SPIN};
use crate::proto::{Action, Event, Outbox, Protocol, Time, TimerId};
use crate::wire::handshake::{Handshake, Identity, Role};
use crate::wire::{FrameDecoder, Kind, Msg, SendQueue, WireMsg};
use crate::NodeId;
use bytes::Bytes;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::collections::HashMap;
use std::io::{ErrorKind, Write};
use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

/// How a stopped node's connections end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// FIN, as when a process dies: its peers see the connection close.
    Close,
    /// RST: the job is over, and nothing may linger in TIME_WAIT.
    Reset,
}

/// The token of the waker that interrupts a blocked poll for commands.
pub const WAKER: Token = Token(0);
/// The io_uring ring's eventfd, signalled when completions or completion work wait (lets a
/// blocked reactor wake).
const RING: Token = Token(1);
const FIRST_CONN: usize = 2;
/// Hosted node `h` listens with token `LISTENERS + h`; connections use the tokens below.
const LISTENERS: usize = 1 << 40;

/// io_uring `user_data`: the kind of request in the top four bits. A connection's receive and
/// connect carry its slot and generation, a send its entry in the reactor's send table, an
/// accept its hosted node.
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
/// Generations are kept to 28 bits so that slot, generation and kind fit one `user_data`.
const GEN_MASK: u32 = (1 << 28) - 1;

/// Orders from outside the reactor.
#[derive(Debug)]
pub enum Command {
    /// Close every socket and return, handing every node's protocol back.
    Stop,
    /// Kill one hosted node: close its listener and connections (its peers see them drop, as
    /// when a process dies) and hand its protocol back.
    StopNode(NodeId),
    /// Teach hosted node `node` a peer's address.
    AddPeer {
        /// The hosted node.
        node: NodeId,
        /// The peer.
        peer: NodeId,
        /// Where the peer listens.
        addr: SocketAddr,
    },
}

/// What a reactor tells the outside world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeEvent {
    /// A peer proved it belongs to the job.
    Authenticated(NodeId),
    /// A connection was refused or dropped for a reason (bad frame, failed handshake, ...).
    Refused(String),
    /// A connection to a known peer failed: reported to the protocol as a suspected failure.
    Suspect(NodeId),
    /// The protocol reported an event.
    Protocol(Event),
}

/// Static settings of one reactor.
#[derive(Debug, Clone)]
pub struct ReactorConfig {
    /// How to wait.
    pub wait: WaitMode,
    /// Largest frame body accepted.
    pub max_body: u32,
    /// Receive path: io_uring multishot receive, or epoll readiness + `read`.
    pub backend: Backend,
    /// Time zero of the protocol's clock. Nodes of one process that share it report times
    /// that can be compared (a detection on one node, a stabilization on another).
    pub epoch: Instant,
    /// io_uring provided buffers: how many (a power of two) and how large.
    pub recv_buffers: (u16, u32),
    /// io_uring sends of at least this many bytes are zero-copy (`SENDMSG_ZC`: the kernel pins
    /// the pages instead of copying them, and reports when it is done with them).
    pub zerocopy_min: usize,
}

/// A node to host.
pub struct HostSpec<P> {
    /// Who the node is in the job.
    pub identity: Identity,
    /// Known peers (the knowledge-network model: a node sends only to ids it knows).
    pub peers: HashMap<NodeId, SocketAddr>,
    /// Its bound listener.
    pub listener: std::net::TcpListener,
    /// Its protocol.
    pub proto: P,
    /// Where its protocol goes when the node stops.
    pub retire: Sender<P>,
}

/// A hosted node.
struct Host<P> {
    identity: Identity,
    peers: HashMap<NodeId, SocketAddr>,
    listener: TcpListener,
    /// The connection each peer's messages are sent on.
    route: HashMap<NodeId, usize>,
    proto: P,
    retire: Sender<P>,
}

struct Conn {
    /// The hosted node this connection belongs to.
    host: usize,
    /// Distinguishes this connection from earlier ones in the same slot (io_uring completions
    /// of a closed connection can arrive after its slot was reused).
    generation: u32,
    stream: TcpStream,
    decoder: FrameDecoder,
    out: SendQueue,
    handshake: Handshake,
    /// The authenticated peer.
    peer: Option<NodeId>,
    /// Whom we dialed, for connections we opened.
    dialed: Option<NodeId>,
    /// Frames waiting for authentication (our own connections only).
    queued: SendQueue,
    /// io_uring: our connect has not completed yet (nothing is received or sent before).
    connecting: bool,
    /// io_uring: the multishot receive was asked to end (a large frame is under way).
    ending: bool,
    /// io_uring: a send of this connection is in flight. One at a time keeps the byte order
    /// (a second send could overtake a short first one).
    sending: bool,
}

/// A send handed to io_uring: the chunks and the `msghdr` and iovecs naming them, boxed so
/// their addresses stay put until the kernel's last completion for the send (which may come
/// after the connection is closed; the reactor keeps it until then).
struct SendOp {
    slot: usize,
    generation: u32,
    chunks: Vec<Bytes>,
    iov: Vec<libc::iovec>,
    hdr: libc::msghdr,
}

impl SendOp {
    /// Point the header at the chunks.
    fn prepare(&mut self) {
        self.iov.clear();
        self.iov.extend(self.chunks.iter().map(|c| libc::iovec {
            iov_base: c.as_ptr() as *mut libc::c_void,
            iov_len: c.len(),
        }));
        // SAFETY: msghdr is plain integers and pointers, for which all-zero bytes are valid.
        self.hdr = unsafe { std::mem::zeroed() };
        self.hdr.msg_iov = self.iov.as_mut_ptr();
        self.hdr.msg_iovlen = self.iov.len() as _;
    }

    fn len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }

    /// What the first `sent` bytes left unsent, as new handles on the same memory.
    fn unsent(&self, mut sent: usize) -> Vec<Bytes> {
        let mut rest = Vec::new();
        for c in &self.chunks {
            if sent >= c.len() {
                sent -= c.len();
            } else {
                rest.push(c.slice(sent..));
                sent = 0;
            }
        }
        rest
    }
}

/// Chunks handed to one gather write.
const MAX_IOV: usize = 64;

impl Conn {
    /// Write as much of `out` as the socket takes, large payloads from where they lie.
    fn flush(&mut self) -> std::io::Result<()> {
        while !self.out.is_empty() {
            let mut iov = [std::io::IoSlice::new(&[]); MAX_IOV];
            let n = self.out.slices(&mut iov);
            let written = if n == 1 {
                self.stream.write(&iov[0])
            } else {
                self.stream.write_vectored(&iov[..n])
            };
            match written {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(k) => self.out.consume(k),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The event loop of one thread and the nodes it hosts.
pub struct Reactor<P: Protocol> {
    cfg: ReactorConfig,
    poll: Poll,
    hosts: Vec<Option<Host<P>>>,
    by_id: HashMap<NodeId, usize>,
    conns: Vec<Option<Conn>>,
    /// Empty slots of `conns`, reused before the vector grows (a reactor hosting hundreds of
    /// nodes opens thousands of connections: no scan for a free slot per connection).
    free: Vec<usize>,
    outbox: Outbox<P::Msg>,
    timers: Timers<(usize, TimerId)>,
    epoch: Instant,
    commands: Receiver<Command>,
    events: Sender<(NodeId, NodeEvent)>,
    /// Received messages: (hosted node, sender, message).
    inbox: Vec<(usize, NodeId, P::Msg)>,
    stop: bool,
    /// Declared before the tables below: dropping it waits for the kernel to let go of every
    /// request, and only then are the buffers those requests use dropped.
    uring: Option<Uring>,
    generation: u32,
    /// io_uring sends in flight, by id (they outlive their connection if it closes first).
    sends: HashMap<u64, Box<SendOp>>,
    next_send: u64,
    /// io_uring connects in flight: the address each was given, kept until it completes.
    connects: HashMap<u64, Box<socket2::SockAddr>>,
    /// io_uring receives straight into decoders in flight: the room each was lent.
    lent: HashMap<u64, crate::wire::decoder::Lent>,
    /// Finished send records, reused. Boxed because an op in flight must not move, and a
    /// reused box goes back into `sends` without a new allocation.
    #[allow(clippy::vec_box)]
    spare_sends: Vec<Box<SendOp>>,
    /// Scratch lists of `uring_step`: connections that received bytes, receives to re-arm.
    touched: Vec<(usize, u32)>,
    rearm: Vec<(usize, u32)>,
}

impl<P: Protocol> Reactor<P>
where
    P::Msg: WireMsg,
{
    /// A reactor hosting `hosts`. `poll` must be the one the caller's [`mio::Waker`] (token
    /// [`WAKER`]) was registered with.
    pub fn new(
        cfg: ReactorConfig,
        poll: Poll,
        hosts: Vec<HostSpec<P>>,
        commands: Receiver<Command>,
        events: Sender<(NodeId, NodeEvent)>,
    ) -> Result<Self, EngineError> {
        let mut uring = match cfg.backend {
            Backend::Uring => {
                let (count, size) = cfg.recv_buffers;
                if !count.is_power_of_two() || size == 0 {
                    return Err(EngineError::Config(format!(
                        "{count} receive buffers of {size} bytes: need a power of two of non-empty buffers"
                    )));
                }
                let mut u = Uring::new(256, count, size)?;
                // A multishot receive that runs on into a large frame copies it through the
                // provided buffers; ending it after DIRECT_MIN bytes lets the rest of the
                // frame go straight into its buffer (see `arm_receive`).
                u.set_recv_limit(Some(DIRECT_MIN as u32));
                poll.registry().register(
                    &mut mio::unix::SourceFd(&u.fd()),
                    RING,
                    Interest::READABLE,
                )?;
                Some(u)
            }
            Backend::Poll => None,
        };
        let mut hosted = Vec::with_capacity(hosts.len());
        let mut by_id = HashMap::new();
        for (h, spec) in hosts.into_iter().enumerate() {
            spec.listener.set_nonblocking(true)?;
            let mut listener = TcpListener::from_std(spec.listener);
            // io_uring accepts through the ring; epoll watches the listener otherwise.
            match &mut uring {
                Some(u) => {
                    use std::os::fd::AsRawFd;
                    u.arm_accept(listener.as_raw_fd(), OP_ACCEPT << OP_SHIFT | h as u64)?;
                }
                None => {
                    poll.registry().register(
                        &mut listener,
                        Token(LISTENERS + h),
                        Interest::READABLE,
                    )?;
                }
            }
            by_id.insert(spec.identity.node_id, h);
            hosted.push(Some(Host {
                identity: spec.identity,
                peers: spec.peers,
                listener,
                route: HashMap::new(),
                proto: spec.proto,
                retire: spec.retire,
            }));
        }
        let epoch = cfg.epoch;
        Ok(Self {
            cfg,
            poll,
            hosts: hosted,
            by_id,
            conns: Vec::new(),
            free: Vec::new(),
            outbox: Outbox::new(),
            timers: Timers::default(),
            epoch,
            commands,
            events,
            inbox: Vec::new(),
            stop: false,
            uring,
            generation: 0,
            sends: HashMap::new(),
            next_send: 0,
            connects: HashMap::new(),
            spare_sends: Vec::new(),
            lent: HashMap::new(),
            touched: Vec::new(),
            rearm: Vec::new(),
        })
    }

    fn now(&self) -> Time {
        Time(self.epoch.elapsed().as_nanos() as u64)
    }

    /// The id of hosted node `h` (stopped nodes have none).
    fn id_of(&self, h: usize) -> Option<NodeId> {
        self.hosts
            .get(h)
            .and_then(|x| x.as_ref())
            .map(|x| x.identity.node_id)
    }

    fn emit(&self, h: usize, e: NodeEvent) {
        if let Some(id) = self.id_of(h) {
            let _ = self.events.send((id, e));
        }
    }

    /// Run until [`Command::Stop`]; every node's protocol goes back through its `retire`.
    pub fn run(mut self) -> Result<(), EngineError> {
        let now = self.now();
        for h in 0..self.hosts.len() {
            if let Some(host) = self.hosts[h].as_mut() {
                host.proto.on_start(now, &mut self.outbox);
            }
            self.apply_outbox(h)?;
        }
        let mut events = Events::with_capacity(256);
        let mut last_activity = Instant::now();
        let mut spins: u32 = 0;
        while !self.stop {
            // What the last turn queued in the ring (sends, connects, re-armed receives) goes
            // out in one submission, before any wait.
            if let Some(u) = self.uring.as_mut() {
                u.submit_pending()?;
            }
            let spinning = match self.cfg.wait {
                WaitMode::Busy => true,
                WaitMode::Adaptive => last_activity.elapsed() < SPIN,
                WaitMode::Block => false,
            };
            // A spinning io_uring reactor watches its completion queue (shared memory, no
            // syscall) and asks epoll (commands) only every 32nd turn; it needs no signal from
            // the ring until it is about to block.
            spins = spins.wrapping_add(1);
            let ask_epoll = !spinning || self.uring.is_none() || spins.is_multiple_of(32);
            if let Some(u) = self.uring.as_mut() {
                u.set_wakeups(!spinning);
            }
            if ask_epoll {
                let timeout = if spinning || self.uring.as_mut().is_some_and(|u| u.has_work()) {
                    Some(Duration::ZERO)
                } else {
                    let now = self.now();
                    self.timers.next_in(now)
                };
                match self.poll.poll(&mut events, timeout) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e.into()),
                }
                if !events.is_empty() {
                    last_activity = Instant::now();
                }
            } else {
                events.clear();
            }
            if self.uring_step()? {
                last_activity = Instant::now();
            }
            for ev in events.iter() {
                match ev.token() {
                    WAKER => self.commands()?,
                    RING => {}
                    Token(t) if t >= LISTENERS => self.accept(t - LISTENERS)?,
                    Token(t) => self.service(
                        t - FIRST_CONN,
                        ev.is_readable(),
                        ev.is_writable(),
                        ev.is_error(),
                    )?,
                }
            }
            self.deliver()?;
            if self.timers.has_pending() {
                let now = self.now();
                while let Some((h, t)) = self.timers.pop_due(now) {
                    if let Some(host) = self.hosts[h].as_mut() {
                        host.proto.on_timer(now, t, &mut self.outbox);
                    }
                    self.apply_outbox(h)?;
                    last_activity = Instant::now();
                }
            }
        }
        // The job is over: abort the connections instead of closing them in order, so
        // thousands of them per run do not sit in TIME_WAIT holding local ports (a benchmark
        // that starts many jobs in a row would run out of ephemeral ports).
        for h in 0..self.hosts.len() {
            self.stop_node(h, Ending::Reset);
        }
        // The sockets are reset; wait for the ring to let go of every buffer it was given
        // (the send table and the provided buffers are freed after this).
        if let Some(u) = self.uring.as_mut() {
            u.cancel_all(Duration::from_secs(1));
        }
        Ok(())
    }

    fn commands(&mut self) -> Result<(), EngineError> {
        while let Ok(c) = self.commands.try_recv() {
            match c {
                Command::Stop => self.stop = true,
                Command::StopNode(id) => {
                    if let Some(&h) = self.by_id.get(&id) {
                        self.stop_node(h, Ending::Close);
                    }
                }
                Command::AddPeer { node, peer, addr } => {
                    if let Some(host) = self.by_id.get(&node).and_then(|&h| self.hosts[h].as_mut())
                    {
                        host.peers.insert(peer, addr);
                    }
                }
            }
        }
        Ok(())
    }

    /// Kill hosted node `h`: its listener and connections close, its timers and undelivered
    /// messages go, and its protocol is handed back.
    fn stop_node(&mut self, h: usize, ending: Ending) {
        let Some(mut host) = self.hosts.get_mut(h).and_then(|x| x.take()) else {
            return;
        };
        self.by_id.remove(&host.identity.node_id);
        self.before_closing_fds();
        let _ = self.poll.registry().deregister(&mut host.listener);
        // An armed io_uring accept holds the listener open; shutting it down ends the request
        // and stops the socket listening now, so dialers are refused as by a dead process.
        let _ = socket2::SockRef::from(&host.listener).shutdown(std::net::Shutdown::Both);
        let registered = self.uring.is_none();
        for (i, slot) in self.conns.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(|c| c.host == h) {
                if let Some(mut conn) = slot.take() {
                    if registered {
                        let _ = self.poll.registry().deregister(&mut conn.stream);
                    }
                    match ending {
                        Ending::Close => {
                            let _ = conn.stream.shutdown(std::net::Shutdown::Both);
                        }
                        Ending::Reset => reset(&conn.stream),
                    }
                    self.free.push(i);
                }
            }
        }
        self.timers.cancel_where(|&(x, _)| x == h);
        self.inbox.retain(|&(x, _, _)| x != h);
        let _ = host.retire.send(host.proto);
    }

    /// io_uring names a socket by its fd number and looks the number up when it submits the
    /// request, not when we queue it. A request queued this turn for a socket we are about to
    /// close would, after the close, reach whatever socket reuses the number (an accept in the
    /// same turn): another connection's stream, corrupted. So everything queued is submitted
    /// before any fd is closed; submitted requests hold their own reference to the socket.
    fn before_closing_fds(&mut self) {
        if let Some(u) = self.uring.as_mut() {
            let _ = u.submit_pending();
        }
    }

    fn insert(&mut self, conn: Conn) -> Result<usize, EngineError> {
        let slot = match self.free.pop() {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        let mut conn = conn;
        self.generation = (self.generation + 1) & GEN_MASK;
        conn.generation = self.generation;
        match &mut self.uring {
            // The ring receives (once connected) and sends; epoll never sees the socket.
            Some(u) => {
                if !conn.connecting {
                    use std::os::fd::AsRawFd;
                    u.arm(conn.stream.as_raw_fd(), tag(OP_RECV, slot, conn.generation))?;
                }
            }
            None => self.poll.registry().register(
                &mut conn.stream,
                Token(slot + FIRST_CONN),
                Interest::READABLE | Interest::WRITABLE,
            )?,
        }
        self.conns[slot] = Some(conn);
        Ok(slot)
    }

    /// Start hosted node `h`'s handshake on a new connection and register it; `None` if it
    /// cannot start. `connecting`: an io_uring connect is still under way.
    fn open(
        &mut self,
        h: usize,
        stream: TcpStream,
        role: Role,
        dialed: Option<NodeId>,
        connecting: bool,
    ) -> Result<Option<usize>, EngineError> {
        let Some(identity) = self.hosts[h].as_ref().map(|x| x.identity.clone()) else {
            return Ok(None);
        };
        stream.set_nodelay(true)?;
        let mut hello = Vec::new();
        let handshake = match Handshake::start(role, identity, dialed, &mut hello) {
            Ok(hs) => hs,
            Err(e) => {
                self.emit(h, NodeEvent::Refused(e.to_string()));
                return Ok(None);
            }
        };
        let slot = self.insert(Conn {
            host: h,
            generation: 0,
            stream,
            decoder: FrameDecoder::new(self.cfg.max_body),
            out: {
                let mut q = SendQueue::new();
                q.push_bytes(&hello);
                q
            },
            handshake,
            peer: None,
            dialed,
            queued: SendQueue::new(),
            connecting,
            ending: false,
            sending: false,
        })?;
        if !connecting {
            self.flush(slot)?;
        }
        Ok(Some(slot))
    }

    fn accept(&mut self, h: usize) -> Result<(), EngineError> {
        loop {
            let Some(host) = self.hosts.get(h).and_then(|x| x.as_ref()) else {
                return Ok(());
            };
            match host.listener.accept() {
                Ok((stream, _)) => {
                    self.open(h, stream, Role::Responder, None, false)?;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// A completion of hosted node `h`'s multishot accept: `raw` is the new connection's fd or
    /// a negative errno; `more` false means the accept must be armed again (unless the node
    /// stopped, which is what ended it).
    fn accepted(&mut self, h: usize, raw: i32, more: bool) -> Result<(), EngineError> {
        let alive = self.hosts.get(h).is_some_and(|x| x.is_some());
        if raw >= 0 {
            use std::os::fd::FromRawFd;
            // SAFETY: a successful accept returns a new connected socket that nothing else
            // owns; wrapping it gives it exactly one owner, which closes it when dropped.
            let stream = unsafe { std::net::TcpStream::from_raw_fd(raw) };
            if alive {
                stream.set_nonblocking(true)?;
                self.open(h, TcpStream::from_std(stream), Role::Responder, None, false)?;
            }
        } else if raw != -libc::ECANCELED && alive {
            let e = std::io::Error::from_raw_os_error(-raw);
            self.emit(h, NodeEvent::Refused(format!("accept: {e}")));
        }
        if !more && alive {
            if let (Some(u), Some(host)) = (self.uring.as_mut(), self.hosts[h].as_ref()) {
                use std::os::fd::AsRawFd;
                u.arm_accept(host.listener.as_raw_fd(), OP_ACCEPT << OP_SHIFT | h as u64)?;
            }
        }
        Ok(())
    }

    /// Close one connection; tell its node's protocol if a known peer is lost, and carry out
    /// what the protocol answers.
    fn close(&mut self, slot: usize, why: String) -> Result<(), EngineError> {
        let Some(mut conn) = self.conns.get_mut(slot).and_then(|c| c.take()) else {
            return Ok(());
        };
        self.free.push(slot);
        let h = conn.host;
        self.before_closing_fds();
        if self.uring.is_none() {
            let _ = self.poll.registry().deregister(&mut conn.stream);
        }
        // Ends an armed io_uring receive too (its last completion is recognized as stale).
        let _ = conn.stream.shutdown(std::net::Shutdown::Both);
        let who = conn.peer.or(conn.dialed);
        if conn.peer.is_none() {
            self.emit(h, NodeEvent::Refused(why));
        }
        let now = self.now();
        let Some(host) = self.hosts.get_mut(h).and_then(|x| x.as_mut()) else {
            return Ok(());
        };
        let Some(peer) = who else {
            return Ok(());
        };
        if host.route.get(&peer) == Some(&slot) {
            host.route.remove(&peer);
        }
        host.proto.on_suspect(now, peer, &mut self.outbox);
        self.emit(h, NodeEvent::Suspect(peer));
        self.apply_outbox(h)
    }

    /// An epoll event on a connection. The socket's pending error is asked for (a
    /// `getsockopt`) only when epoll flags one, as for a refused dial: every ACK of a send
    /// makes the socket writable again, and that must not cost a syscall.
    fn service(
        &mut self,
        slot: usize,
        readable: bool,
        writable: bool,
        error: bool,
    ) -> Result<(), EngineError> {
        if writable || error {
            let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
                return Ok(());
            };
            let pending = error
                .then(|| conn.stream.take_error().unwrap_or_else(Some))
                .flatten();
            let failed = match pending {
                Some(e) => Some(e.to_string()),
                None => conn.flush().err().map(|e| e.to_string()),
            };
            if let Some(why) = failed {
                return self.close(slot, why);
            }
        }
        if readable {
            if let Err(why) = self.read(slot) {
                return self.close(slot, why);
            }
        }
        Ok(())
    }

    /// Read everything available (epoll path), then process the frames.
    fn read(&mut self, slot: usize) -> Result<(), String> {
        let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return Ok(());
        };
        let mut closed = false;
        loop {
            use std::os::fd::AsRawFd;
            match conn.decoder.read_from(conn.stream.as_raw_fd()) {
                Ok((0, _)) => {
                    closed = true;
                    break;
                }
                Ok((_, drained)) => {
                    // A short read drained the socket; more data will raise a new edge, so
                    // the extra read that would only say WouldBlock is skipped.
                    if drained {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        self.frames(slot)?;
        if closed {
            return Err("closed by peer".into());
        }
        Ok(())
    }

    /// Turn complete frames into handshake steps or messages.
    fn frames(&mut self, slot: usize) -> Result<(), String> {
        let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return Ok(());
        };
        let mut answered = false;
        while let Some(frame) = conn.decoder.next_frame().map_err(|e| e.to_string())? {
            let (kind, bytes) = (frame.kind, frame.body());
            match conn.peer {
                None => {
                    let mut reply = Vec::new();
                    let authenticated = conn
                        .handshake
                        .on_frame(kind, bytes, &mut reply)
                        .map_err(|e| e.to_string())?;
                    conn.out.push_bytes(&reply);
                    if let Some(peer) = authenticated {
                        conn.peer = Some(peer);
                        // Our own connection: release what waited for authentication.
                        conn.out.append(&mut conn.queued);
                        // A peer's connection becomes our route to it if we have none.
                        if let Some(host) = self.hosts.get_mut(conn.host).and_then(|x| x.as_mut()) {
                            host.route.entry(peer).or_insert(slot);
                            let _ = self
                                .events
                                .send((host.identity.node_id, NodeEvent::Authenticated(peer)));
                        }
                    }
                    answered = true;
                }
                Some(peer) if kind == Kind::Msg => {
                    let msg = Msg::access(bytes).map_err(|e| e.to_string())?;
                    if let Some(m) = P::Msg::from_wire(msg, &frame) {
                        self.inbox.push((conn.host, peer, m));
                    }
                }
                Some(_) => return Err(format!("unexpected {kind:?} frame after the handshake")),
            }
        }
        if answered {
            self.push_out(slot)?;
        }
        Ok(())
    }

    /// Start writing what `slot` has queued: a `writev` now (poll), or a send handed to the
    /// ring unless one is in flight (io_uring). An error is the connection's.
    fn push_out(&mut self, slot: usize) -> Result<(), String> {
        let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return Ok(());
        };
        let Some(u) = self.uring.as_mut() else {
            return conn.flush().map_err(|e| e.to_string());
        };
        if conn.connecting || conn.sending || conn.out.is_empty() {
            return Ok(());
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
        conn.out.take(&mut op.chunks, MAX_IOV);
        op.prepare();
        let zerocopy = op.len() >= self.cfg.zerocopy_min;
        self.next_send = (self.next_send + 1) & ((1 << OP_SHIFT) - 1);
        let id = self.next_send;
        use std::os::fd::AsRawFd;
        // SAFETY: the op is boxed (its header, iovecs and chunks do not move) and stays in
        // `sends`, unchanged, until its last completion; `cancel_all` waits for that before
        // the reactor drops the table.
        unsafe {
            u.send_msg(
                conn.stream.as_raw_fd(),
                &op.hdr,
                zerocopy,
                OP_SEND << OP_SHIFT | id,
            )
        }
        .map_err(|e| format!("io_uring send: {e}"))?;
        conn.sending = true;
        self.sends.insert(id, op);
        Ok(())
    }

    /// [`Self::push_out`], closing the connection if it fails.
    fn flush(&mut self, slot: usize) -> Result<(), EngineError> {
        match self.push_out(slot) {
            Ok(()) => Ok(()),
            Err(why) => self.close(slot, why),
        }
    }

    /// io_uring: send `id` completed: `res` bytes went out (or the error). What it did not
    /// send goes back to the front of the queue and the next send starts. A zero-copy send's
    /// buffers are kept until its notification (`notif`); `more` says one is still coming.
    fn sent(&mut self, id: u64, res: i32, more: bool, notif: bool) -> Result<(), EngineError> {
        let Some(op) = self.sends.get(&id) else {
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
            if let Some(mut op) = self.sends.remove(&id) {
                op.chunks.clear();
                self.spare_sends.push(op);
            }
        }
        match next {
            Some(Ok(())) => self.flush(slot),
            Some(Err(why)) => self.close(slot, why),
            None => Ok(()),
        }
    }

    /// io_uring: the connect of `slot` finished with `res` (0 or a negative errno).
    fn connected(&mut self, tagged: u64, slot: usize, res: i32) -> Result<(), EngineError> {
        let addr = self.connects.remove(&tagged);
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
        if let Some(u) = self.uring.as_mut() {
            use std::os::fd::AsRawFd;
            u.arm(conn.stream.as_raw_fd(), tag(OP_RECV, slot, generation))?;
        }
        self.flush(slot)
    }

    /// io_uring path: run pending completion work, feed received bytes to decoders, re-arm
    /// receives that stopped. Returns whether anything arrived.
    fn uring_step(&mut self) -> Result<bool, EngineError> {
        let Some(u) = self.uring.as_mut() else {
            return Ok(false);
        };
        u.poke()?;
        // Reused lists (this runs on every spin of a busy reactor). Connections are named by
        // slot and generation: a slot closed and reused within the turn is not confused.
        let mut touched = std::mem::take(&mut self.touched);
        let mut rearm = std::mem::take(&mut self.rearm);
        let mut failed: Vec<(usize, u32, String)> = Vec::new();
        let mut accepted: Vec<(usize, i32, bool)> = Vec::new();
        let mut sent: Vec<(u64, i32, bool, bool)> = Vec::new();
        let mut connected: Vec<(u64, usize, i32)> = Vec::new();
        let mut direct: Vec<(u64, usize, u32, i32)> = Vec::new();
        let mut cancel: Vec<u64> = Vec::new();
        let conns = &mut self.conns;
        let (limited, mut unlimit) = (u.recv_limit().is_some(), false);
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
                    } else if !conn.ending && conn.decoder.missing() >= DIRECT_MIN {
                        // A large frame is under way: end the multishot receive, so the rest
                        // can go straight into the decoder (see `rearm` below).
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
        if let Some(u) = self.uring.as_mut() {
            if unlimit {
                u.set_recv_limit(None);
            }
            for target in cancel {
                u.cancel(target, OP_CANCEL << OP_SHIFT)?;
            }
        }
        for (h, raw, more) in accepted {
            self.accepted(h, raw, more)?;
        }
        for (tagged, slot, res) in connected {
            self.connected(tagged, slot, res)?;
        }
        for (id, res, more, notif) in sent {
            self.sent(id, res, more, notif)?;
        }
        for (tagged, slot, generation, res) in direct {
            let lent = self.lent.remove(&tagged);
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
        for &(slot, generation) in &rearm {
            if self.generation_of(slot) == Some(generation) {
                if let Err(e) = self.arm_receive(slot) {
                    result = result.and(self.close(slot, e.to_string()));
                }
            }
        }
        touched.clear();
        rearm.clear();
        self.touched = touched;
        self.rearm = rearm;
        result?;
        for (slot, generation, why) in failed {
            if self.generation_of(slot) == Some(generation) {
                let _ = self.frames(slot);
                self.close(slot, why)?;
            }
        }
        Ok(any)
    }

    /// The generation of the connection in `slot`, if one is open there.
    fn generation_of(&self, slot: usize) -> Option<u32> {
        self.conns
            .get(slot)
            .and_then(|c| c.as_ref())
            .map(|c| c.generation)
    }

    /// io_uring: arm `slot`'s next receive. While a frame of [`DIRECT_MIN`] or more bytes is
    /// still missing, one receive of exactly that much straight into the decoder's buffer
    /// (no copy out of the provided buffers); otherwise the multishot receive again.
    fn arm_receive(&mut self, slot: usize) -> std::io::Result<()> {
        let (Some(u), Some(conn)) = (
            self.uring.as_mut(),
            self.conns.get_mut(slot).and_then(|c| c.as_mut()),
        ) else {
            return Ok(());
        };
        use std::os::fd::AsRawFd;
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
                self.lent.insert(tagged, lent);
                return Ok(());
            }
        }
        u.arm(fd, tag(OP_RECV, slot, conn.generation))
    }

    /// Hand received messages to their nodes' protocols, in arrival order.
    fn deliver(&mut self) -> Result<(), EngineError> {
        if self.inbox.is_empty() {
            return Ok(());
        }
        let now = self.now();
        let mut inbox = std::mem::take(&mut self.inbox);
        for (h, from, m) in inbox.drain(..) {
            // A node stopped by an earlier message's consequences gets nothing more.
            let Some(host) = self.hosts.get_mut(h).and_then(|x| x.as_mut()) else {
                continue;
            };
            host.proto.on_message(now, from, m, &mut self.outbox);
            self.apply_outbox(h)?;
        }
        // Keep the allocation; anything queued meanwhile waits for the next turn.
        inbox.append(&mut self.inbox);
        self.inbox = inbox;
        Ok(())
    }

    /// Carry out what hosted node `h`'s protocol asked for.
    fn apply_outbox(&mut self, h: usize) -> Result<(), EngineError> {
        if self.outbox.is_empty() {
            return Ok(());
        }
        // Work on the outbox's own storage (no allocation per call); anything the protocol
        // adds meanwhile (on_suspect during a failed send) lands in the fresh one and is
        // carried over below.
        let mut outbox = std::mem::take(&mut self.outbox);
        for a in outbox.drain() {
            match a {
                Action::Send { to, msg } => self.send(h, to, msg.to_wire())?,
                Action::SetTimer { timer, after } => {
                    let at = self.now() + after;
                    self.timers.set((h, timer), at);
                }
                Action::CancelTimer(t) => self.timers.cancel((h, t)),
                Action::Report(e) => self.emit(h, NodeEvent::Protocol(e)),
            }
        }
        let added = std::mem::replace(&mut self.outbox, outbox);
        if !added.is_empty() {
            self.outbox.append(added);
            return self.apply_outbox(h);
        }
        Ok(())
    }

    fn send(&mut self, h: usize, to: NodeId, msg: Msg) -> Result<(), EngineError> {
        let Some(host) = self.hosts.get(h).and_then(|x| x.as_ref()) else {
            return Ok(());
        };
        let slot = match host.route.get(&to) {
            Some(&s) => s,
            None => match self.dial(h, to)? {
                Some(s) => s,
                None => return Ok(()),
            },
        };
        let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return Ok(());
        };
        let buf = if conn.peer.is_some() {
            &mut conn.out
        } else {
            &mut conn.queued
        };
        if let Err(e) = buf.push_msg(&msg) {
            self.emit(h, NodeEvent::Refused(e.to_string()));
            return Ok(());
        }
        if conn.peer.is_some() {
            return self.flush(slot);
        }
        Ok(())
    }

    /// Open hosted node `h`'s connection to `to`, if it knows the address.
    fn dial(&mut self, h: usize, to: NodeId) -> Result<Option<usize>, EngineError> {
        let Some(&addr) = self
            .hosts
            .get(h)
            .and_then(|x| x.as_ref())
            .and_then(|x| x.peers.get(&to))
        else {
            self.emit(h, NodeEvent::Refused(format!("no address for {to}")));
            return Ok(None);
        };
        let connecting = self.uring.is_some();
        let stream = match self.connect_socket(addr) {
            Ok(s) => s,
            Err(e) => {
                self.emit(h, NodeEvent::Suspect(to));
                let now = self.now();
                if let Some(host) = self.hosts[h].as_mut() {
                    host.proto.on_suspect(now, to, &mut self.outbox);
                }
                self.emit(h, NodeEvent::Refused(format!("connect {addr}: {e}")));
                return Ok(None);
            }
        };
        let Some(slot) = self.open(h, stream, Role::Initiator, Some(to), connecting)? else {
            return Ok(None);
        };
        if let (Some(u), Some(conn)) = (
            self.uring.as_mut(),
            self.conns.get(slot).and_then(|c| c.as_ref()),
        ) {
            use std::os::fd::AsRawFd;
            let tagged = tag(OP_CONNECT, slot, conn.generation);
            let sa = Box::new(socket2::SockAddr::from(addr));
            // SAFETY: the address is boxed and kept in `connects` until the connect completes
            // (`cancel_all` waits for that before the reactor drops the table).
            unsafe {
                u.connect(
                    conn.stream.as_raw_fd(),
                    sa.as_ptr().cast(),
                    sa.len(),
                    tagged,
                )
            }?;
            self.connects.insert(tagged, sa);
        }
        if let Some(host) = self.hosts[h].as_mut() {
            host.route.insert(to, slot);
        }
        Ok(Some(slot))
    }

    /// A socket for a dial: on poll, a non-blocking `connect` already under way (epoll says
    /// when it is done); on io_uring, a bare socket the ring will connect.
    fn connect_socket(&self, addr: SocketAddr) -> std::io::Result<TcpStream> {
        if self.uring.is_none() {
            return TcpStream::connect(addr);
        }
        let sock = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        sock.set_nonblocking(true)?;
        Ok(TcpStream::from_std(sock.into()))
    }
}

/// The connection open in `slot` if it is still the one of `generation` (an io_uring completion
/// can arrive after its connection closed and the slot was reused).
fn live(conns: &mut [Option<Conn>], slot: usize, generation: u32) -> Option<&mut Conn> {
    conns
        .get_mut(slot)
        .and_then(|c| c.as_mut())
        .filter(|c| c.generation == generation)
}

/// The io_uring `user_data` of a connection's request `op`: kind, generation and slot.
fn tag(op: u64, slot: usize, generation: u32) -> u64 {
    op << OP_SHIFT | ((generation & GEN_MASK) as u64) << 32 | slot as u64
}

/// Abort a connection: one RST, no FIN exchange, no TIME_WAIT. `connect(AF_UNSPEC)`
/// disconnects the socket itself. A close with SO_LINGER 0 would do the same only once the
/// last reference to the file goes, and an armed io_uring receive holds one until its
/// completion runs: with deferred task work, after both sides' FINs have crossed and put the
/// socket in TIME_WAIT (every connection of every finished job did, 250 per 64-node trial).
fn reset(stream: &TcpStream) {
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

    /// After a short send, exactly the bytes the kernel did not take go back to the queue, at
    /// every boundary (inside a chunk, on a chunk's end, all, none).
    #[test]
    fn a_short_send_leaves_exactly_the_rest() {
        let chunks = vec![
            Bytes::from_static(b"abc"),
            Bytes::from_static(b"defgh"),
            Bytes::from_static(b"ij"),
        ];
        let mut op = SendOp {
            slot: 0,
            generation: 0,
            chunks,
            iov: Vec::new(),
            // SAFETY: msghdr is plain integers and pointers; all-zero bytes are valid.
            hdr: unsafe { std::mem::zeroed() },
        };
        op.prepare();
        assert_eq!(op.hdr.msg_iovlen, 3);
        assert_eq!(op.len(), 10);
        let all = b"abcdefghij";
        for sent in 0..=10 {
            let rest: Vec<u8> = op.unsent(sent).iter().flat_map(|b| b.to_vec()).collect();
            assert_eq!(rest, &all[sent..], "after {sent} bytes");
        }
    }
}
