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
//! The two backends stand behind one trait (`Driver`), and the reactor is compiled for each.
//! On the io_uring backend everything goes through the ring: accepts, connects, receives and
//! sends (a gather `sendmsg`, zero-copy above [`ReactorConfig::zerocopy_min`]); epoll only
//! watches the ring's eventfd and the waker, so a blocked reactor wakes for either. On the poll
//! backend epoll watches everything and sends are `writev`s.
//!
//! Either backend, while it spins, reads its few most active connections itself (`read_hot`),
//! as a busy-polling loop would. On poll they leave epoll meanwhile; on io_uring their
//! multishot receives are ended and armed again when they cool or the reactor is about to
//! block. A ring receive costs each message a wake-up callback in the sender's delivery path
//! and deferred work in the receiver's next `io_uring_enter`; a `read` on a socket that
//! nothing watches costs neither (32 B one-way: 1.34× the std peer before, 1.02× after, in
//! one A/B sitting). That includes large frames: handing their rest back to the ring, for one
//! receive straight into the frame, measured slower (1 MiB: 1.21× against 1.08×).
//!
//! Files: this one has the loop, the hosted nodes and connections' life; `driver.rs` the
//! trait both backends stand behind, `epoll.rs` the readiness backend and `ring.rs` the
//! io_uring one; `conn.rs` a connection and an io_uring send; `accept.rs` what a failed accept
//! means; `strangers.rs` which unauthenticated connection makes room when they crowd a node.

mod accept;
mod conn;
mod driver;
mod epoll;
mod last_write;
mod refusals;
mod ring;
mod strangers;

use super::clock::Clock;
use super::timers::Timers;
use super::{Backend, EngineError, WaitMode, SPIN};
use crate::id::IdMap;
use crate::proto::{Action, Event, Outbox, Protocol, Time, TimerId};
use crate::wire::handshake::{Handshake, Identity, Role, MAX_HANDSHAKE_BODY};
use crate::wire::{FrameDecoder, Kind, Msg, SendQueue, WireMsg};
use crate::NodeId;
use accept::ACCEPT_RETRY;
use conn::{reset, Conn, Ending};
use driver::Driver;
use epoll::Epoll;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Poll, Token};
use refusals::{Refusals, Verdict};
use ring::{live, Ring, GEN_MASK};
use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};
use strangers::Strangers;

/// The token of the waker that interrupts a blocked poll for commands.
pub const WAKER: Token = Token(0);
/// The io_uring ring's eventfd, signalled when completions or completion work wait (lets a
/// blocked reactor wake).
const RING: Token = Token(1);
const FIRST_CONN: usize = 2;
/// Recently active connections a spinning reactor reads directly.
const HOT_MAX: usize = 8;

/// Lost connections an idle reactor shuts down per turn (each costs a FIN exchange, ~25 µs
/// here).
const BURY_PER_TURN: usize = 2;

/// Turns with work after which lost connections are shut down anyway (see
/// [`Reactor::burial_due`]): about a millisecond of spinning turns, so a reactor under a
/// steady stream spends at most a few percent on teardowns, and their peers see the end.
const BURY_AFTER: u32 = 1024;

/// An adaptive reactor that spins reads the clock every this many turns (see `run`).
const ADAPTIVE_CHECK: u32 = 16;

/// Hosted node `h` listens with token `LISTENERS + h`; connections use the tokens below.
const LISTENERS: usize = 1 << 40;

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
    /// An authenticated peer's connection that ends says so after its `Suspect`, as
    /// "`peer`: reason" (closed by the peer, reset, a bad frame, too much queued for it).
    /// A node reports at most 16 of these a second one by one; the rest come as
    /// [`RefusedMore`](Self::RefusedMore) (see `refusals.rs`).
    Refused(String),
    /// `count` more refusals than were reported one by one in the last second (or, when the
    /// node stops, since the last report), and the last one's reason. Every refusal is either
    /// a [`Refused`](Self::Refused) or counted in one of these.
    RefusedMore {
        /// How many.
        count: u64,
        /// The last one's reason.
        last: String,
    },
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
    /// `backend` is an automatic choice: if this reactor may not have a ring here
    /// ([`crate::engine::uring::refused`]: no permission, too little lockable memory for one
    /// more ring), it runs on poll and the process says so once. A forced io_uring fails the
    /// start instead, with the reason.
    pub fallback: bool,
    /// io_uring provided buffers: how many (a power of two) and how large.
    pub recv_buffers: (u16, u32),
    /// io_uring submission queue entries (1 to 32768; the kernel rounds up to a power of
    /// two): requests a turn queues before the ring is entered in the middle of it.
    pub ring_entries: u32,
    /// io_uring sends of at least this many bytes are zero-copy (`SENDMSG_ZC`: the kernel pins
    /// the pages instead of copying them, and reports when it is done with them).
    pub zerocopy_min: usize,
    /// How long a peer's kernel may stay silent before its connection fails (see
    /// `conn::bound_silence`); `None` leaves the kernel's defaults.
    pub dead_after: Option<Duration>,
    /// TCP congestion control of every connection ([`crate::engine::congestion`]); `None`
    /// leaves the system's default.
    pub congestion: Option<String>,
    /// How long a connection may take from its start (accepted, or dialed: the connect
    /// included) to an authenticated handshake before it is closed: a silent stranger is
    /// refused, a peer that never answers is suspected.
    pub handshake_timeout: Duration,
    /// Most bytes a connection may have queued (not yet taken by the kernel); a send past it
    /// closes the connection and the peer is suspected: it has stopped reading.
    pub max_queued: usize,
    /// Most accepted connections a hosted node lets wait for their handshake; past it, the
    /// oldest that has waited a tenth of `handshake_timeout` is closed (see `strangers.rs`).
    pub max_strangers: usize,
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
    route: IdMap<NodeId, usize>,
    proto: P,
    retire: Sender<P>,
    /// An accept failed and was reported; cleared by the next one that succeeds.
    accept_failing: bool,
    /// Accepted connections not yet authenticated.
    strangers: Strangers,
}

/// What a reactor timer is for: a hosted node's protocol timer, or one of the engine's own
/// deadlines, which share the heap (and so the blocking turn's timeout) with them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Due {
    /// Hosted node `h`'s protocol timer.
    Protocol(usize, TimerId),
    /// The connection in this slot must have authenticated by now
    /// ([`ReactorConfig::handshake_timeout`]); cancelled when it does, or closes.
    Handshake(usize),
    /// Hosted node `h`'s listener has rested long enough ([`accept::AcceptFailure::Rest`]).
    Listener(usize),
    /// Hosted node `h`'s window of refusal reports ends (see `refusals.rs`).
    Refusals(usize),
}

/// The event loop of one thread and the nodes it hosts, doing its I/O through `D` (see
/// `driver.rs`).
struct Reactor<P: Protocol, D> {
    cfg: ReactorConfig,
    poll: Poll,
    hosts: Vec<Option<Host<P>>>,
    /// Each hosted node's refusal reports in the current window (beside `hosts`, not in
    /// [`Host`]: a larger `Host` moved the protocol's fields and cost the poll backend's
    /// 16 KiB ping-pong ~2.5%).
    refusals: Vec<Refusals>,
    by_id: IdMap<NodeId, usize>,
    conns: Vec<Option<Conn>>,
    /// Empty slots of `conns`, reused before the vector grows (a reactor hosting hundreds of
    /// nodes opens thousands of connections: no scan for a free slot per connection).
    free: Vec<usize>,
    outbox: Outbox<P::Msg>,
    timers: Timers<Due>,
    /// Nanoseconds since the cluster's epoch, for protocols and timers.
    clock: Clock,
    commands: Receiver<Command>,
    events: Sender<(NodeId, NodeEvent)>,
    /// Received messages: (hosted node, sender, message).
    inbox: Vec<(usize, NodeId, P::Msg)>,
    stop: bool,
    /// The backend's own state. Dropped after the connections (their sockets close first)
    /// and, for a ring, before the buffers its requests use (see [`Ring`]).
    io: D,
    generation: u32,
    /// The connections that received most recently, which a spinning reactor reads itself
    /// (see `read_hot`). On io_uring they have no ring receive armed meanwhile.
    hot: Vec<(usize, u32)>,
    /// This turn spins (busy, or adaptive shortly after work).
    spinning: bool,
    /// Sockets of connections that ended, not yet shut down (see [`Self::close`]).
    lost: Vec<TcpStream>,
    /// Turns since lost sockets were last shut down, counted while some wait.
    lost_waited: u32,
}

/// A reactor set up on the calling thread for `cfg.backend`, ready to [`run`](Self::run).
pub struct Started<P: Protocol>(Either<P>);

/// The reactor of one backend or the other, each compiled for its own. One per reactor
/// thread, moved once into its `run`: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Either<P: Protocol> {
    Poll(Reactor<P, Epoll>),
    Uring(Reactor<P, Ring>),
}

impl<P: Protocol> Started<P>
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
        if cfg.backend == Backend::Uring {
            let refusal = match <Ring as Driver<P>>::new(&cfg, &poll) {
                Ok(io) => {
                    let r = Reactor::new(io, cfg, poll, hosts, commands, events)?;
                    return Ok(Self(Either::Uring(r)));
                }
                Err(EngineError::Io(e)) if crate::engine::uring::refused(&e) => {
                    crate::engine::uring::refusal(&e)
                }
                Err(e) => return Err(e),
            };
            if !cfg.fallback {
                return Err(EngineError::Backend(Backend::Uring, refusal));
            }
            crate::engine::say_fallback(&refusal, "a reactor without a ring uses poll (epoll)");
        }
        let cfg = ReactorConfig {
            backend: Backend::Poll,
            ..cfg
        };
        let io = <Epoll as Driver<P>>::new(&cfg, &poll)?;
        let r = Reactor::new(io, cfg, poll, hosts, commands, events)?;
        Ok(Self(Either::Poll(r)))
    }

    /// The backend it runs on: the one asked for, or poll if it fell back
    /// ([`ReactorConfig::fallback`]).
    pub fn backend(&self) -> Backend {
        match self.0 {
            Either::Poll(_) => Backend::Poll,
            Either::Uring(_) => Backend::Uring,
        }
    }

    /// Run until [`Command::Stop`]; every node's protocol goes back through its `retire`.
    pub fn run(self) -> Result<(), EngineError> {
        match self.0 {
            Either::Poll(r) => r.run(),
            Either::Uring(r) => r.run(),
        }
    }
}

impl<P: Protocol, D: Driver<P>> Reactor<P, D>
where
    P::Msg: WireMsg,
{
    fn new(
        mut io: D,
        cfg: ReactorConfig,
        poll: Poll,
        hosts: Vec<HostSpec<P>>,
        commands: Receiver<Command>,
        events: Sender<(NodeId, NodeEvent)>,
    ) -> Result<Self, EngineError> {
        let mut hosted = Vec::with_capacity(hosts.len());
        let mut by_id = IdMap::default();
        for (h, spec) in hosts.into_iter().enumerate() {
            spec.listener.set_nonblocking(true)?;
            let mut listener = TcpListener::from_std(spec.listener);
            io.listen(&poll, &mut listener, h)?;
            by_id.insert(spec.identity.node_id, h);
            hosted.push(Some(Host {
                identity: spec.identity,
                peers: spec.peers,
                listener,
                route: IdMap::default(),
                proto: spec.proto,
                retire: spec.retire,
                accept_failing: false,
                strangers: Strangers::default(),
            }));
        }
        let clock = Clock::since(cfg.epoch);
        Ok(Self {
            cfg,
            poll,
            refusals: hosted.iter().map(|_| Refusals::default()).collect(),
            hosts: hosted,
            by_id,
            conns: Vec::new(),
            free: Vec::new(),
            outbox: Outbox::new(),
            timers: Timers::default(),
            clock,
            commands,
            events,
            inbox: Vec::new(),
            stop: false,
            io,
            generation: 0,
            hot: Vec::new(),
            spinning: false,
            lost: Vec::new(),
            lost_waited: 0,
        })
    }

    fn now(&self) -> Time {
        self.clock.now()
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

    /// Hosted node `h` refused or dropped a connection, for `why`: reported now, or counted
    /// and reported when its window ends (see `refusals.rs`). Cold: kept out of the message
    /// path its callers are inlined into.
    #[cold]
    #[inline(never)]
    fn refuse(&mut self, h: usize, why: String) {
        let now = self.now();
        if self.id_of(h).is_none() {
            return;
        }
        match self.refusals[h].refused(now, &why) {
            Verdict::Held => {}
            Verdict::Report { until } => {
                if let Some(at) = until {
                    self.timers.set(Due::Refusals(h), at);
                }
                self.emit(h, NodeEvent::Refused(why));
            }
        }
    }

    /// Hosted node `h`'s window of refusal reports has ended: report what it held, if any.
    fn refusals_window_ended(&mut self, h: usize) {
        let now = self.now();
        if self.id_of(h).is_none() {
            return;
        }
        if let Some((count, last, until)) = self.refusals[h].window_ended(now) {
            self.timers.set(Due::Refusals(h), until);
            self.emit(h, NodeEvent::RefusedMore { count, last });
        }
    }

    /// Run until [`Command::Stop`]; every node's protocol goes back through its `retire`.
    /// If the loop fails, the backend still has the kernel let go of its requests before the
    /// reactor is dropped: the sockets are open then, so what was queued for them reaches
    /// them and no socket that later reuses a number.
    fn run(mut self) -> Result<(), EngineError> {
        let ran = self.turns();
        if ran.is_err() {
            self.io.finish();
        }
        ran
    }

    /// The loop of [`Self::run`].
    fn turns(&mut self) -> Result<(), EngineError> {
        let now = self.now();
        for h in 0..self.hosts.len() {
            if let Some(host) = self.hosts[h].as_mut() {
                host.proto.on_start(now, &mut self.outbox);
            }
            self.apply_outbox(h)?;
        }
        let mut events = Events::with_capacity(256);
        // Adaptive waiting spins for `SPIN` after the last work. It reads the clock only every
        // `ADAPTIVE_CHECK`th spinning turn (a read is ~30 ns here, a fair part of a turn), and
        // notes the time of work then, not per message: the spell ends a few turns late at
        // most. A blocking turn always checks (it is long anyway).
        let mut last_activity = self.now();
        let (mut still_spinning, mut unrecorded, mut unchecked) = (true, false, 0u32);
        // Turns to go before a spinning reactor looks beyond its hot connections.
        let mut until_look: u32 = 1;
        // Whether the last turn found no work.
        let mut idle = false;
        let timed = self.cfg.wait == WaitMode::Adaptive;
        while !self.stop {
            // Whether this turn found work.
            let mut active = false;
            D::turn_start(self)?;
            let spinning = match self.cfg.wait {
                WaitMode::Busy => true,
                WaitMode::Adaptive => {
                    unchecked += 1;
                    if !still_spinning || unchecked >= ADAPTIVE_CHECK {
                        unchecked = 0;
                        let now = self.now();
                        if std::mem::take(&mut unrecorded) {
                            last_activity = now;
                        }
                        still_spinning = now.since(last_activity) < SPIN;
                    }
                    still_spinning
                }
                WaitMode::Block => false,
            };
            // A spinning reactor looks beyond its hot connections every so many turns (see
            // each driver's `look_every`): other connections, accepts, commands.
            // A countdown, not a remainder: two divisions a turn were a visible part of it.
            until_look = until_look.saturating_sub(1);
            let look = until_look == 0 || D::must_look(self.hot.len());
            if look {
                until_look = D::look_every(self.hot.len());
            }
            let ask_epoll = D::asks_epoll(spinning, look);
            self.spinning = spinning;
            if spinning {
                active |= D::spin(self, look, idle)?;
            } else {
                D::before_block(self)?;
            }
            if ask_epoll {
                let mut timeout = if spinning {
                    Some(Duration::ZERO)
                } else {
                    match self.io.work_due() {
                        Some(Duration::ZERO) => Some(Duration::ZERO),
                        due => {
                            let now = self.now();
                            match (self.timers.next_in(now), due) {
                                (Some(t), Some(d)) => Some(t.min(d)),
                                (t, d) => t.or(d),
                            }
                        }
                    }
                };
                // Lost connections are torn down once the reactor has nothing else to do
                // (instead of blocking, or on a spinning turn after one that found no work),
                // a few per turn, so that work arriving meanwhile waits for a few at most.
                let blocking = timeout != Some(Duration::ZERO);
                if (blocking && !self.lost.is_empty()) || self.burial_due(idle) {
                    self.bury_lost(Ending::Close, BURY_PER_TURN)?;
                    timeout = Some(Duration::ZERO);
                }
                match self.poll.poll(&mut events, timeout) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e.into()),
                }
            } else {
                events.clear();
            }
            active |= D::after_wait(self, spinning)?;
            // Work, for adaptive waiting, is what an event brought, not the event: registering a
            // connection again (a poll reactor about to block) reports it writable at once, and
            // counting that kept an idle adaptive reactor spinning for good. The ring's event
            // is counted by `after_wait`, which takes its completions.
            for ev in events.iter() {
                active |= match ev.token() {
                    WAKER => {
                        self.commands()?;
                        true
                    }
                    RING => false,
                    Token(t) => {
                        D::on_event(self, t, ev.is_readable(), ev.is_writable(), ev.is_error())?
                    }
                };
            }
            self.deliver()?;
            if self.timers.has_pending() {
                let now = self.now();
                while let Some(due) = self.timers.pop_due(now) {
                    match due {
                        Due::Protocol(h, t) => {
                            if let Some(host) = self.hosts[h].as_mut() {
                                host.proto.on_timer(now, t, &mut self.outbox);
                            }
                            self.apply_outbox(h)?;
                        }
                        Due::Handshake(slot) => self.handshake_overdue(slot)?,
                        Due::Listener(h) => self.wake_listener(h)?,
                        Due::Refusals(h) => self.refusals_window_ended(h),
                    }
                    active = true;
                }
            }
            unrecorded |= active && timed;
            idle = !active;
            if !self.lost.is_empty() {
                self.lost_waited = self.lost_waited.saturating_add(1);
            }
        }
        // The job is over: abort the connections instead of closing them in order, so
        // thousands of them per run do not sit in TIME_WAIT holding local ports (a benchmark
        // that starts many jobs in a row would run out of ephemeral ports).
        for h in 0..self.hosts.len() {
            self.stop_node(h, Ending::Reset)?;
        }
        self.bury_lost(Ending::Reset, usize::MAX)?;
        // The sockets are reset; wait for the kernel to let go of every buffer it was given.
        self.io.finish();
        Ok(())
    }

    /// The listener of hosted node `h` could not accept (`e`, see [`accept::AcceptFailure::Rest`]):
    /// report it unless already reported, and, if `retry`, accept again after
    /// [`ACCEPT_RETRY`] (io_uring: when its multishot accept has ended).
    pub(super) fn rest_listener(&mut self, h: usize, e: &std::io::Error, retry: bool) {
        let at = self.now() + ACCEPT_RETRY;
        let Some(host) = self.hosts.get_mut(h).and_then(|x| x.as_mut()) else {
            return;
        };
        let first = !std::mem::replace(&mut host.accept_failing, true);
        if retry {
            self.timers.set(Due::Listener(h), at);
        }
        if first {
            let why = format!(
                "accept: {e}; the listener tries again every {} ms",
                ACCEPT_RETRY.as_millis()
            );
            self.refuse(h, why);
        }
    }

    /// Hosted node `h`'s listener has rested: accept again.
    fn wake_listener(&mut self, h: usize) -> Result<(), EngineError> {
        if self.hosts.get(h).is_some_and(|x| x.is_some()) {
            D::listen_again(self, h)?;
        }
        Ok(())
    }

    /// The connection in `slot` has not authenticated in time: close it.
    fn handshake_overdue(&mut self, slot: usize) -> Result<(), EngineError> {
        let pending = self
            .conns
            .get(slot)
            .and_then(|c| c.as_ref())
            .is_some_and(|c| c.peer.is_none());
        if !pending {
            return Ok(());
        }
        let why = format!(
            "no handshake within {} ms",
            self.cfg.handshake_timeout.as_millis()
        );
        self.close(slot, why)
    }

    fn commands(&mut self) -> Result<(), EngineError> {
        while let Ok(c) = self.commands.try_recv() {
            match c {
                Command::Stop => self.stop = true,
                Command::StopNode(id) => {
                    if let Some(&h) = self.by_id.get(&id) {
                        self.stop_node(h, Ending::Close)?;
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
    fn stop_node(&mut self, h: usize, ending: Ending) -> Result<(), EngineError> {
        if self.id_of(h).is_some() {
            if let Some((count, last)) = self.refusals[h].take() {
                self.emit(h, NodeEvent::RefusedMore { count, last });
            }
        }
        let Some(mut host) = self.hosts.get_mut(h).and_then(|x| x.take()) else {
            return Ok(());
        };
        self.by_id.remove(&host.identity.node_id);
        self.before_closing_fds()?;
        let _ = self.poll.registry().deregister(&mut host.listener);
        // An armed io_uring accept holds the listener open; shutting it down ends the request
        // and stops the socket listening now, so dialers are refused as by a dead process.
        let _ = socket2::SockRef::from(&host.listener).shutdown(std::net::Shutdown::Both);
        for (i, slot) in self.conns.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(|c| c.host == h) {
                if let Some(mut conn) = slot.take() {
                    self.io.forget(&self.poll, &mut conn.stream);
                    match ending {
                        Ending::Close => {
                            let _ = conn.stream.shutdown(std::net::Shutdown::Both);
                        }
                        Ending::Reset => reset(&conn.stream),
                    }
                    self.free.push(i);
                    self.timers.cancel(Due::Handshake(i));
                }
            }
        }
        self.timers.cancel_where(
            |d| matches!(*d, Due::Protocol(x, _) | Due::Listener(x) | Due::Refusals(x) if x == h),
        );
        self.inbox.retain(|&(x, _, _)| x != h);
        let _ = host.retire.send(host.proto);
        Ok(())
    }

    /// Shut down (or, when the job is over, reset) and close the sockets of at most `most`
    /// lost connections. Either also ends an armed io_uring receive (its last completion is
    /// recognized as stale).
    fn bury_lost(&mut self, ending: Ending, most: usize) -> Result<(), EngineError> {
        if self.lost.is_empty() {
            return Ok(());
        }
        self.lost_waited = 0;
        self.before_closing_fds()?;
        let from = self.lost.len().saturating_sub(most);
        for stream in self.lost.drain(from..) {
            match ending {
                Ending::Close => {
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                }
                Ending::Reset => reset(&stream),
            }
        }
        Ok(())
    }

    /// Whether a spinning turn shuts down lost connections: after a turn without work, or
    /// after [`BURY_AFTER`] turns that all had some. A reactor under a steady stream (or
    /// whose timers are always due) never has a turn without work, and would otherwise hold
    /// the sockets for good: refused strangers and dropped peers would never see the end.
    fn burial_due(&self, idle: bool) -> bool {
        !self.lost.is_empty() && (idle || self.lost_waited >= BURY_AFTER)
    }

    /// io_uring names a socket by its fd number and looks the number up when it submits the
    /// request, not when we queue it. A request queued this turn for a socket we are about to
    /// close would, after the close, reach whatever socket reuses the number (an accept in the
    /// same turn): another connection's stream, corrupted. So everything queued is submitted
    /// before any fd is closed; submitted requests hold their own reference to the socket.
    /// If the kernel refuses to take them for long (see the ring's `CLOSE_PATIENCE`), the
    /// reactor ends instead.
    fn before_closing_fds(&mut self) -> Result<(), EngineError> {
        self.io.before_closing_fds()
    }

    /// Put `conn` in a slot and have the backend watch it (epoll) or receive on it (the
    /// ring). An error is the connection's, and leaves the table as it was.
    fn insert(&mut self, conn: Conn) -> std::io::Result<usize> {
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
        if let Err(e) = self.io.watch_new(&self.poll, &mut conn, slot) {
            self.free.push(slot);
            return Err(e);
        }
        self.conns[slot] = Some(conn);
        Ok(slot)
    }

    /// Hosted node `h` could not open a connection (`why`): a dial's peer is suspected, as
    /// when the connect itself fails; an accepted stranger's is refused. Either way the
    /// reactor and its other connections go on.
    pub(super) fn not_opened(&mut self, h: usize, dialed: Option<NodeId>, why: String) {
        let Some(to) = dialed else {
            self.refuse(h, why);
            return;
        };
        self.emit(h, NodeEvent::Suspect(to));
        let now = self.now();
        if let Some(host) = self.hosts[h].as_mut() {
            host.proto.on_suspect(now, to, &mut self.outbox);
        }
        self.refuse(h, format!("{to}: {why}"));
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
        let options = stream
            .set_nodelay(true)
            .and_then(|()| match self.cfg.dead_after {
                Some(limit) => conn::bound_silence(&stream, limit),
                None => Ok(()),
            });
        if let Err(e) = options {
            self.not_opened(h, dialed, format!("socket options: {e}"));
            return Ok(None);
        }
        crate::engine::congestion::apply(&stream, self.cfg.congestion.as_deref());
        let mut hello = Vec::new();
        let handshake = match Handshake::start(role, identity, dialed, &mut hello) {
            Ok(hs) => hs,
            Err(e) => {
                self.not_opened(h, dialed, e.to_string());
                return Ok(None);
            }
        };
        let inserted = self.insert(Conn {
            host: h,
            generation: 0,
            stream,
            // Handshake frames only, until the peer has proved the key.
            decoder: FrameDecoder::new(MAX_HANDSHAKE_BODY),
            out: {
                let mut q = SendQueue::new();
                q.push_bytes(&hello);
                q
            },
            handshake,
            peer: None,
            dialed,
            queued: SendQueue::new(),
            watched: true,
            connecting,
            ending: false,
            sending: false,
            last_write: None,
        });
        let slot = match inserted {
            Ok(slot) => slot,
            Err(e) => {
                self.not_opened(h, dialed, format!("watch the connection: {e}"));
                return Ok(None);
            }
        };
        let now = self.now();
        self.timers
            .set(Due::Handshake(slot), now + self.cfg.handshake_timeout);
        if dialed.is_none() {
            // The newest stranger is never the one crowded out: it has not waited.
            self.stranger_arrived(h, slot, now);
            self.crowd_out(h)?;
        }
        if !connecting {
            self.flush(slot)?;
        }
        Ok(Some(slot))
    }

    /// Hosted node `h` accepted a connection: a failure reported earlier is over.
    fn accepted_one(&mut self, h: usize) {
        if let Some(host) = self.hosts.get_mut(h).and_then(|x| x.as_mut()) {
            host.accept_failing = false;
        }
    }

    /// Close one connection; tell its node's protocol if a known peer is lost, and carry out
    /// what the protocol answers.
    ///
    /// The socket itself is shut down and closed later, by [`Self::bury_lost`], when the
    /// reactor has nothing else to do. Its FIN exchange costs as much CPU as a message, and a
    /// lost connection rarely comes alone: when a process dies, its peers on this reactor lose
    /// theirs in one turn, and the reports of the failure wait behind every teardown.
    fn close(&mut self, slot: usize, why: String) -> Result<(), EngineError> {
        let Some(mut conn) = self.conns.get_mut(slot).and_then(|c| c.take()) else {
            return Ok(());
        };
        self.free.push(slot);
        self.timers.cancel(Due::Handshake(slot));
        let h = conn.host;
        self.io.forget(&self.poll, &mut conn.stream);
        let (who, authenticated) = (conn.peer.or(conn.dialed), conn.peer.is_some());
        if !authenticated && conn.dialed.is_none() {
            if let Some(host) = self.hosts.get_mut(h).and_then(|x| x.as_mut()) {
                host.strangers.left();
            }
        }
        self.lost.push(conn.stream);
        // An authenticated peer's reason is said after the protocol heard of the loss (below):
        // the suspicion is what is timed, the words are for whoever reads the events.
        let why = if authenticated {
            Some(why)
        } else {
            self.refuse(h, why);
            None
        };
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
        let carried_out = self.apply_outbox(h);
        if let Some(why) = why {
            self.refuse(h, format!("{peer}: {why}"));
        }
        carried_out
    }

    /// Read everything the socket has (readiness, or a hot connection), then cut the frames.
    fn read(&mut self, slot: usize) -> Result<bool, String> {
        let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return Ok(false);
        };
        let (mut closed, mut got) = (false, false);
        loop {
            use std::os::fd::AsRawFd;
            match conn.decoder.read_from(conn.stream.as_raw_fd()) {
                Ok((0, _)) => {
                    closed = true;
                    break;
                }
                Ok((_, drained)) => {
                    got = true;
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
        if got {
            let generation = conn.generation;
            self.heat(slot, generation).map_err(|e| e.to_string())?;
            // Nothing new, no new frame: a spinning reactor's empty reads skip the look.
            self.frames(slot)?;
        }
        if closed {
            return Err("closed by peer".into());
        }
        Ok(got)
    }

    /// The generation of the connection in `slot`, if one is open there.
    fn generation_of(&self, slot: usize) -> Option<u32> {
        self.conns
            .get(slot)
            .and_then(|c| c.as_ref())
            .map(|c| c.generation)
    }

    /// Add `slot` to the hot connections, making room by cooling the oldest.
    fn heat(&mut self, slot: usize, generation: u32) -> Result<(), EngineError> {
        if self.hot.contains(&(slot, generation)) {
            return Ok(());
        }
        if self.hot.len() == HOT_MAX {
            let (cold, cold_generation) = self.hot.remove(0);
            self.cool(cold, cold_generation)?;
        }
        self.hot.push((slot, generation));
        Ok(())
    }

    /// The connection of `generation` in `slot` is no longer read by the reactor itself:
    /// epoll watches it again (poll), or the ring receives on it again (io_uring). One closed
    /// since is left alone (its slot may hold a new connection, armed already); one that
    /// cannot be watched or armed is closed.
    fn cool(&mut self, slot: usize, generation: u32) -> Result<(), EngineError> {
        if self.generation_of(slot) != Some(generation) {
            return Ok(());
        }
        match D::resume(self, slot) {
            Ok(()) => Ok(()),
            Err(e) => self.close(slot, e.to_string()),
        }
    }

    /// Spinning: read the connections that received last, directly, as a busy-polling loop
    /// reads its socket. On poll an `epoll_wait` per turn would add a syscall to every
    /// message; on io_uring a ring receive costs each message a wake-up callback in the
    /// sender's delivery path and deferred completion work in ours, which a direct `read`
    /// does not (see `ring.rs`). Whether anything came. Inlined into the spinning turn: out
    /// of line (as a larger loop made it) it cost the poll backend's 32 B one-way ~2%.
    #[inline(always)]
    fn read_hot(&mut self) -> Result<bool, EngineError> {
        let mut any = false;
        let mut i = 0;
        while i < self.hot.len() {
            let (slot, generation) = self.hot[i];
            if self.generation_of(slot) != Some(generation) {
                self.hot.swap_remove(i);
                continue;
            }
            match self.read(slot) {
                Ok(got) => any |= got,
                Err(why) => self.close(slot, why)?,
            }
            D::after_hot_read(self, slot)?;
            i += 1;
        }
        Ok(any)
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
                        conn.decoder.set_max_body(self.cfg.max_body);
                        self.timers.cancel(Due::Handshake(slot));
                        // Our own connection: release what waited for authentication.
                        conn.out.append(&mut conn.queued);
                        // A peer's connection becomes our route to it if we have none.
                        if let Some(host) = self.hosts.get_mut(conn.host).and_then(|x| x.as_mut()) {
                            if conn.dialed.is_none() {
                                host.strangers.left();
                            }
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

    /// Start writing what `slot` has queued (see [`Driver::push_out`]). An error is the
    /// connection's.
    fn push_out(&mut self, slot: usize) -> Result<(), String> {
        D::push_out(self, slot)
    }

    /// [`Self::push_out`], closing the connection if it fails.
    fn flush(&mut self, slot: usize) -> Result<(), EngineError> {
        match self.push_out(slot) {
            Ok(()) => Ok(()),
            Err(why) => self.close(slot, why),
        }
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
                    self.timers.set(Due::Protocol(h, timer), at);
                }
                Action::CancelTimer(t) => self.timers.cancel(Due::Protocol(h, t)),
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
            self.refuse(h, e.to_string());
            return Ok(());
        }
        let generation = conn.generation;
        if conn.peer.is_some() {
            self.flush(slot)?;
        }
        // What the kernel did not take: a peer that stopped reading (a stalled process whose
        // kernel still acknowledges and answers probes) would have it grow without bound.
        let queued =
            live(&mut self.conns, slot, generation).map_or(0, |c| c.out.len() + c.queued.len());
        if queued > self.cfg.max_queued {
            let why = format!("{queued} bytes queued for a peer that does not read");
            return self.close(slot, why);
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
            self.refuse(h, format!("no address for {to}"));
            return Ok(None);
        };
        let (stream, connecting) = match D::dial_socket(addr) {
            Ok(s) => s,
            Err(e) => {
                self.not_opened(h, Some(to), format!("connect {addr}: {e}"));
                return Ok(None);
            }
        };
        let Some(slot) = self.open(h, stream, Role::Initiator, Some(to), connecting)? else {
            return Ok(None);
        };
        if !D::connect(self, slot, addr)? {
            return Ok(None);
        }
        if let Some(host) = self.hosts[h].as_mut() {
            host.route.insert(to, slot);
        }
        Ok(Some(slot))
    }
}
