//! The seam between a reactor and its I/O (monoio's habit): the driver of a backend
//! ([`crate::engine::Backend`]: io_uring or epoll) owns its kernel-facing
//! state (an io_uring ring, or epoll registrations), works on connections only through the
//! connection table it is handed, and tells the reactor what happened as typed [`IoEvent`]s.
//! It never sees hosted nodes, handshakes, protocols or timers, and the reactor never sees a
//! completion queue.
//!
//! A reactor is generic over its backend, so each backend's reactor is compiled on its own:
//! the loop pays no test of which backend it runs per turn or per message.

use super::conns::{ConnId, Conns};
use super::error::ConnError;
use super::ReactorConfig;
use crate::engine::EngineError;
use mio::net::{TcpListener, TcpStream};
use mio::Poll;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

/// The events a backend reports, in the order the reactor acts on them (new ones it causes
/// while acting go to the back and are acted on in the same pass).
pub(super) type Events = VecDeque<IoEvent>;

/// What a backend saw, for the reactor to act on, in the order it must act.
#[derive(Debug)]
pub(super) enum IoEvent {
    /// Hosted node `host` accepted `stream` (non-blocking already).
    Accepted {
        /// The hosted node.
        host: usize,
        /// The new connection's socket.
        stream: TcpStream,
    },
    /// Hosted node `host`'s accept failed with `error`. `armed`: the backend still accepts
    /// (its multishot accept goes on); otherwise the reactor decides when to accept again.
    AcceptFailed {
        /// The hosted node.
        host: usize,
        /// Why.
        error: std::io::Error,
        /// Whether the backend still accepts.
        armed: bool,
    },
    /// The socket has bytes: the reactor reads it (readiness backends).
    Readable(ConnId),
    /// Bytes arrived in the connection's decoder: the reactor cuts its frames (completion
    /// backends). Every `Received` of a turn comes before its `ReceiveEnded`s.
    Received(ConnId),
    /// The connection's receive has ended (a multishot that stopped, a direct receive that
    /// completed): the reactor reads it itself (spinning) or has the backend [`Driver::resume`]
    /// it. Comes after the turn's frames were cut, so that a receive straight into the decoder
    /// is lent a buffer no frame still shares.
    ReceiveEnded(ConnId),
    /// The connection failed; the reactor closes it. Boxed: a failure is rare, and a large
    /// variant would make every event as large (each `Received` is moved twice per message).
    Failed(ConnId, Box<ConnError>),
}

// Events are moved through a queue once or twice per message on a completion backend.
const _EVENTS_STAY_SMALL: () = assert!(std::mem::size_of::<IoEvent>() <= 32);

/// What the reactor tells a backend about the turn.
#[derive(Clone, Copy, Debug)]
pub(super) struct Turn {
    /// The reactor spins this turn (busy, or adaptive shortly after work).
    pub spinning: bool,
    /// It would read more connections itself (its hot set has room).
    pub hot_room: bool,
}

pub(super) trait Driver: Sized {
    /// Set up, on the reactor's thread (a ring belongs to the thread that submits to it).
    /// `poll` is the reactor's epoll, which watches at least the commands' waker.
    fn new(cfg: &ReactorConfig, poll: &Poll) -> Result<Self, EngineError>;

    /// Start accepting on hosted node `h`'s listener.
    fn listen(&mut self, poll: &Poll, listener: &mut TcpListener, h: usize) -> std::io::Result<()>;

    /// Accept again on hosted node `h`'s listener after it rested. A failure is reported as
    /// an [`IoEvent::AcceptFailed`].
    fn listen_again(&mut self, listener: &TcpListener, h: usize, events: &mut Events);

    /// Hosted node `h` stopped: forget its listener.
    fn unlisten(&mut self, poll: &Poll, listener: &mut TcpListener, h: usize);

    /// A turn begins: whatever the last one queued goes to the kernel.
    fn turn_start(&mut self) -> Result<(), EngineError>;

    /// A spinning reactor looks beyond its `hot` connections every this many turns.
    fn look_every(hot: usize) -> u32;

    /// Whether a spinning reactor with `hot` hot connections looks beyond them this turn
    /// whatever the countdown says.
    fn must_look(hot: usize) -> bool;

    /// Whether the reactor's epoll watches the sockets (readiness), or only the commands'
    /// waker and the driver's own wake-up (completions). A blocking turn always asks epoll; a
    /// spinning turn that looks beyond its hot connections asks it only if it watches the
    /// sockets, and otherwise reads the commands itself.
    const EPOLL_WATCHES_SOCKETS: bool;

    /// A spinning turn is under way: the backend stops signalling the kernel's wake-ups (the
    /// reactor polls anyway).
    fn spinning(&mut self);

    /// The reactor read the hot connection `id` itself: let go of it (readiness backends stop
    /// watching a socket with nothing left to send), or send what waits. An error is the
    /// connection's.
    fn after_hot_read(
        &mut self,
        poll: &Poll,
        conns: &mut Conns,
        id: ConnId,
    ) -> Result<(), ConnError>;

    /// About to block: the kernel signals wake-ups again (what was read directly is handed
    /// back by [`Self::resume`] before this).
    fn before_block(&mut self) -> Result<(), EngineError>;

    /// How soon work is due that a blocking wait would not wake for: `Some(ZERO)` at once, a
    /// pause when the kernel refused the last try, `None` if the reactor may block.
    fn work_due(&mut self) -> Option<Duration>;

    /// After the wait: what the kernel has for the connections and listeners, as events — the
    /// ring's completions, or the readiness epoll reported in `ready` (whose tokens below
    /// `FIRST_CONN` are the reactor's own, not the driver's). Whether any of it brought work.
    fn gather(
        &mut self,
        conns: &mut Conns,
        listeners: &[Option<TcpListener>],
        ready: &mio::Events,
        turn: Turn,
        events: &mut Events,
    ) -> Result<bool, EngineError>;

    /// Watch (or receive on) a new connection that takes `id`. An error is the connection's.
    fn watch_new(
        &mut self,
        poll: &Poll,
        stream: &mut TcpStream,
        connecting: bool,
        id: ConnId,
    ) -> std::io::Result<()>;

    /// Connection `id` closes: stop watching its socket.
    fn forget(&mut self, poll: &Poll, stream: &mut TcpStream, id: ConnId);

    /// Descriptors are about to close: io_uring names a socket by its number and looks it up
    /// when it submits a request, not when it is queued, so whatever is queued goes first. An
    /// error ends the reactor, which then closes nothing more.
    fn before_closing_fds(&mut self) -> Result<(), EngineError>;

    /// The connection `id` is no longer read by the reactor itself: watched again (epoll) or
    /// received on again (io_uring).
    fn resume(&mut self, poll: &Poll, conns: &mut Conns, id: ConnId) -> std::io::Result<()>;

    /// Start writing what `slot` has queued. An error is the connection's.
    fn push_out(&mut self, poll: &Poll, conns: &mut Conns, slot: usize) -> Result<(), ConnError>;

    /// A socket for a dial to `addr`, and whether its connect is still to be started
    /// ([`Self::connect`]).
    fn dial_socket(addr: SocketAddr) -> std::io::Result<(TcpStream, bool)>;

    /// Start the connect of the dial just opened in `id`. An error is the connection's.
    fn connect(&mut self, conns: &Conns, id: ConnId, addr: SocketAddr) -> Result<(), ConnError>;

    /// The job is over and every socket reset, or the loop failed with the sockets still
    /// open: wait (up to a second) for the kernel to let go of whatever it was lent.
    fn finish(&mut self);
}
