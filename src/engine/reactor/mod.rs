//! A reactor: one thread that hosts one or many nodes (thread per core, not per node) and does
//! their I/O: accept, connect, handshake, frame, deliver, time. Every hosted node keeps its own
//! listener, connections, peers and protocol, so killing one closes exactly its sockets; nodes
//! of one reactor talk to each other over real loopback connections like any other peers.
//!
//! A node sends to a peer on one connection, its *route*, kept until that connection closes: the
//! one it dialed, or the one the peer dialed and authenticated first. Answers thus usually ride
//! the connection the question came on (TCP ACKs piggyback, half the sockets), and every
//! direction stays FIFO, which is what the papers' channels assume. A connection that fails
//! (refused, reset, closed, or a frame that does not check) is closed alone; if its peer was
//! known, the protocol hears `on_suspect(peer)`.
//!
//! Files, along the reactor's seams: this one has the loop and the public types;
//! `driver.rs` the seam to the I/O, a `Driver` per [`Backend`] (typed events in, connections
//! through the table), with `ring.rs` (io_uring) and `epoll.rs` behind it; `conns.rs` the connection table and
//! `conn.rs` a connection; `hot.rs` the connections a spinning reactor reads itself;
//! `hosts.rs` the hosted nodes' life; `dispatch.rs` frames, handshakes, messages and routes;
//! `strangers.rs` which unauthenticated connection makes room when they crowd a node;
//! `lost.rs` when the sockets of ended connections are shut down;
//! `release.rs` connections closed on purpose (goodbyes, no suspicion);
//! `refusals.rs` how often refusals are reported; `accept.rs` what a failed accept means;
//! `error.rs` why a connection ends; `last_write.rs` how a long queue's last write is cut.

mod accept;
mod alarm;
mod conn;
mod conns;
mod crossing;
mod dispatch;
mod driver;
mod epoll;
mod error;
mod hosts;
mod hot;
mod last_write;
mod local;
mod lost;
mod refusals;
mod release;
mod ring;
mod setups;
mod shm;
mod spin;
mod startup;
mod strangers;

pub use error::{ConnError, IoFailure, Refusal};

use super::clock::Clock;
use super::link::inproc::Port;
use super::timers::Timers;
use super::{Backend, EngineError, ReactorOptions};
use crate::id::IdMap;
use crate::proto::{Outbox, Protocol, Time, TimerId};
use crate::wire::handshake::Identity;
use crate::wire::Framed;
use crate::NodeId;
use conn::Ending;
use conns::Conns;
use driver::{Driver, Turn};
use epoll::EpollDriver;
use hosts::{Cold, Host};
use hot::Hot;
use lost::BURY_PER_TURN;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Poll, Token};
use ring::UringDriver;
use spin::Spin;
use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};
use strangers::Strangers;

/// The token of the waker that interrupts a blocked poll for commands.
pub(crate) const WAKER: Token = Token(0);
/// The io_uring ring's eventfd, signalled when completions or completion work wait (lets a
/// blocked reactor wake).
const RING: Token = Token(1);
/// The poll set of the shared-memory links (see `shm.rs`): readable when one needs a look.
const SHM: Token = Token(2);
/// The alarm of a reactor its caller drives ([`Driven`]): readable when a timer is due.
const ALARM: Token = Token(3);
const FIRST_CONN: usize = 4;
/// Hosted node `h` listens with token `LISTENERS + h`; connections use the tokens below.
const LISTENERS: usize = 1 << 40;

/// How often a reactor gives back the receive buffers of connections gone quiet
/// ([`crate::wire::FrameDecoder::shrink`]), while some connection holds more than
/// [`SWEEP_ABOVE`]. (Armed only then: a pending timer costs a spinning reactor a clock read
/// per turn.)
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Receive buffers larger than this are given back when their connection goes quiet.
const SWEEP_ABOVE: usize = 64 * 1024;

/// Orders from outside the reactor; `R` is its protocol's [`crate::proto::Protocol::Request`].
#[derive(Debug)]
pub(crate) enum Command<R> {
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
    /// Call hosted node `node`'s [`crate::proto::Protocol::on_wake`]: its application left
    /// it work.
    Wake(NodeId),
    /// Hand hosted node `node`'s protocol its application's request
    /// ([`crate::proto::Protocol::on_request`]).
    Request {
        /// The hosted node.
        node: NodeId,
        /// What its application asks.
        req: R,
    },
}

/// What a reactor tells the outside world.
///
/// `E` is the events its protocol reports ([`crate::proto::Protocol::Event`]; weft's own
/// protocols report [`crate::proto::Event`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeEvent<E = crate::proto::Event> {
    /// A peer proved it belongs to the job.
    Authenticated(NodeId),
    /// A connection was refused or dropped (bad frame, failed handshake, a peer's connection
    /// that ended: after its `Suspect`). At most 16 of these and [`RefusedMore`]s a second
    /// (see `refusals.rs`).
    ///
    /// [`RefusedMore`]: Self::RefusedMore
    Refused(Refusal),
    /// `count` more refusals than were reported one by one, and the last one's reason. Every
    /// refusal is either a [`Refused`](Self::Refused) or counted in one of these.
    RefusedMore {
        /// How many.
        count: u64,
        /// The last one.
        last: Refusal,
    },
    /// A connection to a known peer failed: reported to the protocol as a suspected failure.
    Suspect(NodeId),
    /// The protocol reported an event.
    Protocol(E),
}

/// Static settings of one reactor: the user's ([`ReactorOptions`]) and what the start chose.
#[derive(Debug, Clone)]
pub(crate) struct ReactorConfig {
    /// What the user set.
    pub options: ReactorOptions,
    /// Receive path: io_uring multishot receive, or epoll readiness + `recv`.
    pub backend: Backend,
    /// Time zero of the protocol's clock. Nodes of one process that share it report times
    /// that can be compared (a detection on one node, a stabilization on another).
    pub epoch: Instant,
    /// Hosted nodes reach peers on this host through shared-memory links (see `shm.rs`),
    /// and accept them.
    pub shm: bool,
    /// `backend` is an automatic choice: if this reactor may not have a ring here
    /// ([`crate::engine::uring::refused`]: no permission, too little lockable memory for one
    /// more ring), it runs on poll and the process says so once. A forced io_uring fails the
    /// start instead, with the reason.
    pub fallback: bool,
}

/// A node to host.
pub(crate) struct HostSpec<P> {
    /// Who the node is in the job.
    pub identity: Identity,
    /// Known peers (the knowledge-network model: a node sends only to ids it knows).
    pub peers: HashMap<NodeId, SocketAddr>,
    /// Its bound listener.
    pub listener: std::net::TcpListener,
    /// Its shared-memory link listener, when the reactor uses links
    /// ([`ReactorConfig::shm`]): bound before any node of the job runs, so that a peer that
    /// starts first finds it (`None`: bound by the reactor; `Some(Err)`: taken, the node
    /// dials links but accepts none).
    pub shm_listener: Option<std::io::Result<std::os::unix::net::UnixListener>>,
    /// Its protocol.
    pub proto: P,
    /// Where its protocol goes when the node stops.
    pub retire: Sender<P>,
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
    /// Hosted node `h`'s refusals may be reported again (see `refusals.rs`).
    Refusals(usize),
    /// Hosted node `h`'s oldest stranger is past its grace: crowd out if still too many.
    Crowd(usize),
    /// Give back the buffers of quiet connections.
    Sweep,
    /// Hosted node `h` dials this peer again (start-up grace, see `startup.rs`).
    Redial(usize, NodeId),
}

/// The event loop of one thread and the nodes it hosts, doing its I/O through the driver `B`
/// (see `driver.rs`).
struct Reactor<P: Protocol, B> {
    cfg: ReactorConfig,
    poll: Poll,
    hosts: Vec<Option<Host<P>>>,
    /// Each hosted node's listener (handed to the backend, which accepts on it).
    listeners: Vec<Option<TcpListener>>,
    /// Each hosted node's refusals and peers' incarnations (see [`Cold`]).
    cold: Vec<Cold>,
    by_id: IdMap<NodeId, usize>,
    conns: Conns,
    outbox: Outbox<P::Msg, P::Event>,
    /// Whether [`Reactor::apply_outbox`] is carrying out actions (see there).
    applying: bool,
    timers: Timers<Due>,
    /// Nanoseconds since the cluster's epoch, for protocols and timers.
    clock: Clock,
    commands: Receiver<Command<P::Request>>,
    events: Sender<(NodeId, NodeEvent<P::Event>)>,
    /// Received messages: (hosted node, sender, message).
    inbox: Vec<(usize, NodeId, P::Msg)>,
    /// Messages for connections still in their handshake, by slot: they are framed (and
    /// authenticated) with the session the handshake gives.
    held: IdMap<usize, Vec<P::Msg>>,
    /// What the backend reported and the reactor has yet to act on.
    io_events: driver::Events,
    stop: bool,
    /// The backend's own state. Dropped after the connections (their sockets close first)
    /// and, for a ring, before the buffers its requests use (see [`UringDriver`]).
    io: B,
    /// The connections a spinning reactor reads itself.
    hot: Hot,
    /// This turn spins (busy, or adaptive shortly after work).
    spinning: bool,
    /// The sweep of quiet connections' buffers is armed.
    sweeping: bool,
    /// Sockets of connections that ended, not yet shut down (see [`Self::close`]).
    lost: Vec<TcpStream>,
    /// Turns since lost sockets were last shut down, counted while some wait.
    lost_waited: u32,
    /// When the reactor started: the start-up grace runs from here (see `startup.rs`).
    started: Time,
    /// Peers hosted nodes keep trying to reach during the start-up grace.
    redial: IdMap<(usize, NodeId), startup::Redial<P::Msg>>,
    /// Peers of hosted nodes whose released connections are closing (see `release.rs`).
    releasing: IdMap<(usize, NodeId), release::Releasing<P::Msg>>,
    /// This reactor's end of the process's in-process exchange, if its nodes use one (see
    /// `local.rs`).
    local: Option<Port<P::Msg>>,
    /// The hosted nodes' shared-memory links, if they use them (see `shm.rs`).
    shm: Option<shm::Links<P::Msg>>,
    /// The alarm a reactor its caller drives sets before the caller waits (see `alarm.rs`).
    alarm: Option<alarm::Alarm>,
}

/// What a reactor's loop carries from one turn to the next.
struct Loop {
    /// What epoll reported.
    events: Events,
    spin: Spin,
    /// Turns to go before a spinning reactor looks beyond its hot connections.
    until_look: u32,
    /// Whether the last turn found no work.
    idle: bool,
}

/// A reactor set up on the calling thread for `cfg.backend`, ready to [`run`](Self::run).
pub(crate) struct Started<P: Protocol>(Either<P>);

/// The reactor of one backend or the other, each compiled for its own. One per reactor
/// thread, moved once into its `run`: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Either<P: Protocol> {
    Poll(Reactor<P, EpollDriver>),
    Uring(Reactor<P, UringDriver>),
}

impl<P: Protocol> Started<P>
where
    P::Msg: Framed,
{
    /// A reactor hosting `hosts`. `poll` must be the one the caller's [`mio::Waker`] (token
    /// [`WAKER`]) was registered with. `local`: this reactor's end of the in-process exchange
    /// among the process's reactors, whose slots are `hosts`' order.
    pub fn new(
        cfg: ReactorConfig,
        poll: Poll,
        hosts: Vec<HostSpec<P>>,
        commands: Receiver<Command<P::Request>>,
        events: Sender<(NodeId, NodeEvent<P::Event>)>,
        local: Option<Port<P::Msg>>,
    ) -> Result<Self, EngineError> {
        let mut local = local;
        if cfg.backend == Backend::Uring {
            let refusal = match UringDriver::new(&cfg, &poll) {
                Ok(io) => {
                    let r = Reactor::new(io, cfg, poll, hosts, commands, events, local.take())?;
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
        let io = EpollDriver::new(&cfg, &poll)?;
        let r = Reactor::new(io, cfg, poll, hosts, commands, events, local)?;
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

/// A reactor its caller drives, on the caller's thread, instead of a thread of its own: each
/// [`Driven::progress`] is one turn that never waits; a caller with nothing to do arms it
/// ([`Driven::arm`]) and waits on [`Driven::fd`], which is readable when I/O, a due timer or
/// the waker wants a turn. Requests go straight to the protocol ([`Driven::request`]): no
/// command queue and no thread between the application and its sockets.
pub(crate) struct Driven<P: Protocol> {
    r: Either<P>,
    lp: Loop,
    /// Armed since the last turn: the next turn polls epoll (which the caller's wait left
    /// ready) and wakes the links' senders' flags.
    armed: bool,
}

/// `$body` on the reactor of either backend.
macro_rules! either {
    ($e:expr, $r:ident => $body:expr) => {
        match $e {
            Either::Poll($r) => $body,
            Either::Uring($r) => $body,
        }
    };
}

impl<P: Protocol> Started<P>
where
    P::Msg: Framed,
{
    /// Drive this reactor from the calling thread (which must be the one it was set up on:
    /// a ring has a single issuer). Starts every hosted node's protocol.
    pub fn drive(mut self) -> Result<Driven<P>, EngineError> {
        let lp = either!(&mut self.0, r => {
            r.alarm = Some(alarm::Alarm::new(&r.poll, ALARM)?);
            r.begin()?
        });
        Ok(Driven {
            r: self.0,
            lp,
            armed: false,
        })
    }
}

impl<P: Protocol> Driven<P>
where
    P::Msg: Framed,
{
    /// One turn, without waiting: whether it found work (a caller drains it to `false`
    /// before it arms).
    pub fn progress(&mut self) -> Result<bool, EngineError> {
        let spinning = !std::mem::take(&mut self.armed);
        either!(&mut self.r, r => r.turn(&mut self.lp, spinning, false))
    }

    /// Get ready for the caller to wait on [`Self::fd`]: `true` if it may (nothing is
    /// pending, and the descriptor will be readable when something is), `false` if work is
    /// pending (call [`Self::progress`] instead).
    pub fn arm(&mut self) -> Result<bool, EngineError> {
        self.armed = true;
        either!(&mut self.r, r => r.arm())
    }

    /// Hand hosted node `node`'s protocol its application's request, now.
    pub fn request(&mut self, node: NodeId, req: P::Request) -> Result<(), EngineError> {
        either!(&mut self.r, r => match r.by_id.get(&node) {
            Some(&h) => r.request_protocol(h, req),
            None => Err(EngineError::Gone),
        })
    }

    /// The descriptor to wait on after [`Self::arm`] (the reactor's epoll; level-triggered:
    /// readable until a turn takes what it reports).
    pub fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        either!(&self.r, r => r.poll.as_raw_fd())
    }

    /// The backend it runs on.
    pub fn backend(&self) -> Backend {
        match self.r {
            Either::Poll(_) => Backend::Poll,
            Either::Uring(_) => Backend::Uring,
        }
    }

    /// Stop: every node's connections are reset and its protocol goes back through its
    /// `retire`.
    pub fn end(mut self) -> Result<(), EngineError> {
        either!(&mut self.r, r => r.end())
    }
}

impl<P: Protocol, B: Driver> Reactor<P, B>
where
    P::Msg: Framed,
{
    fn new(
        mut io: B,
        cfg: ReactorConfig,
        poll: Poll,
        specs: Vec<HostSpec<P>>,
        commands: Receiver<Command<P::Request>>,
        events: Sender<(NodeId, NodeEvent<P::Event>)>,
        local: Option<Port<P::Msg>>,
    ) -> Result<Self, EngineError> {
        let (mut hosts, mut listeners) = (Vec::new(), Vec::new());
        let mut shm_listeners = Vec::new();
        let mut by_id = IdMap::default();
        for (h, spec) in specs.into_iter().enumerate() {
            shm_listeners.push(spec.shm_listener);
            spec.listener.set_nonblocking(true)?;
            let mut listener = TcpListener::from_std(spec.listener);
            io.listen(&poll, &mut listener, h)?;
            by_id.insert(spec.identity.node_id, h);
            listeners.push(Some(listener));
            hosts.push(Some(Host {
                identity: spec.identity,
                peers: spec.peers,
                route: IdMap::default(),
                proto: spec.proto,
                retire: spec.retire,
                accept_failing: false,
                strangers: Strangers::default(),
                links: IdMap::default(),
            }));
        }
        let clock = Clock::since(cfg.epoch);
        let mut unbound = Vec::new();
        let shm = if cfg.shm {
            let me: Vec<_> = hosts
                .iter_mut()
                .zip(&listeners)
                .zip(shm_listeners)
                .map(|((h, l), bound)| {
                    let at = l.as_ref().and_then(|l| l.local_addr().ok());
                    let h = h.as_ref().expect("every host starts");
                    let bound = bound.unwrap_or_else(|| shm::bind(&h.identity));
                    (at.map(|a| a.ip()), bound)
                })
                .collect();
            let (links, failed) = shm::Links::new(&poll, SHM, me, cfg.options.handshake_timeout)?;
            unbound = failed;
            Some(links)
        } else {
            None
        };
        let mut reactor = Self {
            cfg,
            poll,
            cold: hosts.iter().map(|_| Cold::default()).collect(),
            hosts,
            listeners,
            by_id,
            conns: Conns::default(),
            outbox: Outbox::new(),
            applying: false,
            timers: Timers::default(),
            clock,
            commands,
            events,
            inbox: Vec::new(),
            held: IdMap::default(),
            io_events: driver::Events::new(),
            stop: false,
            io,
            hot: Hot::default(),
            spinning: false,
            sweeping: false,
            lost: Vec::new(),
            lost_waited: 0,
            started: Time::ZERO,
            redial: IdMap::default(),
            releasing: IdMap::default(),
            local,
            shm,
            alarm: None,
        };
        // A node whose link name is taken (another process of the job runs as it) dials
        // links but accepts none: said once, as a refusal.
        for (h, e) in unbound.into_iter().enumerate() {
            if let Some(e) = e {
                reactor.refuse(h, None, ConnError::io("listen for shared-memory links", &e));
            }
        }
        Ok(reactor)
    }

    fn now(&self) -> Time {
        self.clock.now()
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
        let mut lp = self.begin()?;
        while !self.stop {
            let spinning = lp.spin.this_turn(|| self.clock.now());
            self.turn(&mut lp, spinning, true)?;
        }
        self.end()
    }

    /// Start every hosted node's protocol; the loop's state for [`Self::turn`].
    fn begin(&mut self) -> Result<Loop, EngineError> {
        let now = self.now();
        self.started = now;
        for h in 0..self.hosts.len() {
            if let Some(host) = self.hosts[h].as_mut() {
                host.proto.on_start(now, &mut self.outbox);
            }
            self.apply_outbox(h)?;
        }
        Ok(Loop {
            events: Events::with_capacity(256),
            spin: Spin::new(self.cfg.options.wait, self.now()),
            until_look: 1,
            idle: false,
        })
    }

    /// One turn of the loop: I/O, commands, deliveries, timers. `spinning`: read the hot
    /// connections and do not wait; `may_block`: a turn that does not spin may wait in epoll
    /// for work (a reactor its caller drives never waits here: the caller waits on
    /// [`Driven::fd`]). Whether the turn found work.
    fn turn(
        &mut self,
        lp: &mut Loop,
        spinning: bool,
        may_block: bool,
    ) -> Result<bool, EngineError> {
        // Whether this turn found work.
        let mut active = false;
        self.io.turn_start()?;
        // A spinning reactor looks beyond its hot connections every so many turns (see
        // each backend's `look_every`): other connections, accepts, commands.
        // A countdown, not a remainder: two divisions a turn were a visible part of it.
        lp.until_look = lp.until_look.saturating_sub(1);
        let look = lp.until_look == 0 || B::must_look(self.hot.len());
        if look {
            lp.until_look = B::look_every(self.hot.len());
        }
        self.spinning = spinning;
        let events = &mut lp.events;
        if spinning {
            self.io.spinning();
            if look && !B::EPOLL_WATCHES_SOCKETS {
                self.commands()?;
                if self.burial_due(lp.idle) {
                    self.bury_lost(Ending::Close, BURY_PER_TURN)?;
                }
            }
        } else {
            // Whatever was read directly goes back to the kernel's watch before a wait.
            while let Some(id) = self.hot.pop() {
                self.cool(id)?;
            }
            self.io.before_block()?;
        }
        if !spinning || (look && B::EPOLL_WATCHES_SOCKETS) {
            // Messages to deliver, or a sender's backlog: no sleeping. Otherwise the
            // exchange's senders learn that this reactor sleeps.
            let must_run = !may_block
                || !self.inbox.is_empty()
                || self
                    .local
                    .as_ref()
                    .is_some_and(|p| p.backlogged() || (!spinning && !p.sleep()))
                || (!spinning && self.shm.as_mut().is_some_and(|l| l.before_block()));
            let mut timeout = if spinning || must_run {
                Some(Duration::ZERO)
            } else {
                self.wait_at_most()
            };
            // Lost connections are torn down once the reactor has nothing else to do
            // (instead of blocking, or on a spinning turn after one that found no work),
            // a few per turn, so that work arriving meanwhile waits for a few at most.
            let blocking = timeout != Some(Duration::ZERO);
            if (blocking && !self.lost.is_empty()) || self.burial_due(lp.idle) {
                self.bury_lost(Ending::Close, BURY_PER_TURN)?;
                timeout = Some(Duration::ZERO);
            }
            let polled = self.poll.poll(events, timeout);
            if let Some(p) = &self.local {
                p.awake();
            }
            if let Some(l) = &self.shm {
                l.awake();
            }
            match polled {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => return Ok(true),
                Err(e) => return Err(e.into()),
            }
            if let Some(a) = &self.alarm {
                if events.iter().any(|ev| ev.token() == ALARM) {
                    a.drain();
                }
            }
        } else {
            events.clear();
        }
        // Completions first: a finished send lets go of the receive buffer its payload
        // shared, which a direct read can then reuse (read before, a large frame found it
        // still shared and took fresh memory: a page fault per 4 KiB of every message).
        // Work, for adaptive waiting, is what an event brought, not the event (see
        // `Spin::worked`).
        let turn = Turn {
            spinning,
            hot_room: self.hot.has_room(),
        };
        active |= self.io.gather(
            &mut self.conns,
            &self.listeners,
            events,
            turn,
            &mut self.io_events,
        )?;
        // The commands after the I/O of the turn (epoll may report the waker anywhere
        // among the sockets); the ring's eventfd only woke the wait.
        if events.iter().any(|ev| ev.token() == WAKER) {
            self.commands()?;
            active = true;
        }
        let shm_ready = events.iter().any(|ev| ev.token() == SHM);
        self.handle_io_events()?;
        if spinning {
            active |= self.read_hot()?;
        }
        if self.local.is_some() {
            active |= self.receive_local()?;
        }
        if self.shm.is_some() {
            active |= self.shm_turn((spinning && look) || shm_ready)?;
        }
        active |= !self.inbox.is_empty();
        self.deliver()?;
        if self.timers.has_pending() {
            active |= self.fire_timers()?;
        }
        lp.spin.worked(active);
        lp.idle = !active;
        if !self.lost.is_empty() {
            self.lost_waited = self.lost_waited.saturating_add(1);
        }
        Ok(active)
    }

    /// Before the caller of a driven reactor waits (see [`Driven::arm`]): what a blocking
    /// turn does before its wait, and the alarm set to the next deadline. Whether it may wait.
    fn arm(&mut self) -> Result<bool, EngineError> {
        while let Some(id) = self.hot.pop() {
            self.cool(id)?;
        }
        self.io.before_block()?;
        let busy = !self.inbox.is_empty()
            || !self.lost.is_empty()
            || self
                .local
                .as_ref()
                .is_some_and(|p| p.backlogged() || !p.sleep())
            || self.shm.as_mut().is_some_and(|l| l.before_block());
        if busy {
            return Ok(false);
        }
        let wait = self.wait_at_most();
        if wait == Some(Duration::ZERO) {
            return Ok(false);
        }
        if let Some(a) = &self.alarm {
            a.set(wait)?;
        }
        Ok(true)
    }

    /// How long a blocking wait may last: until the next timer, or the backend's retry
    /// (`None`: until something happens).
    fn wait_at_most(&mut self) -> Option<Duration> {
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
    }

    /// The job is over: abort the connections instead of closing them in order, so
    /// thousands of them per run do not sit in TIME_WAIT holding local ports (a benchmark
    /// that starts many jobs in a row would run out of ephemeral ports).
    fn end(&mut self) -> Result<(), EngineError> {
        for h in 0..self.hosts.len() {
            self.stop_node(h, Ending::Reset)?;
        }
        self.bury_lost(Ending::Reset, usize::MAX)?;
        // The sockets are reset; wait for the kernel to let go of every buffer it was given.
        self.io.finish();
        Ok(())
    }

    /// Hand hosted node `h`'s protocol its application's request and carry out what it asks
    /// for.
    fn request_protocol(&mut self, h: usize, req: P::Request) -> Result<(), EngineError> {
        let now = self.now();
        if let Some(host) = self.hosts[h].as_mut() {
            host.proto.on_request(now, req, &mut self.outbox);
        }
        self.apply_outbox(h)
    }

    /// Call hosted node `h`'s `on_wake` and carry out what it asks for.
    fn wake_protocol(&mut self, h: usize) -> Result<(), EngineError> {
        let now = self.now();
        if let Some(host) = self.hosts[h].as_mut() {
            host.proto.on_wake(now, &mut self.outbox);
        }
        self.apply_outbox(h)
    }

    /// Run the timers that are due. Whether any was.
    fn fire_timers(&mut self) -> Result<bool, EngineError> {
        let now = self.now();
        let mut any = false;
        while let Some(due) = self.timers.pop_due(now) {
            any = true;
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
                Due::Crowd(h) => self.crowd_out(h)?,
                Due::Sweep => {
                    self.sweeping = self.conns.sweep(SWEEP_ABOVE);
                    if self.sweeping {
                        self.timers.set(Due::Sweep, now + SWEEP_EVERY);
                    }
                }
                Due::Redial(h, to) => self.redial_now(h, to)?,
            }
        }
        Ok(any)
    }
}
