//! The one trait both backends stand behind: every place where a reactor's I/O differs
//! between the readiness path (epoll, [`super::epoll::Epoll`]) and the completion path
//! (io_uring, [`super::ring::Ring`]). Everything else (hosted nodes, connections, frames,
//! handshakes, timers, protocols, the loop itself) is the same reactor for both.
//!
//! A reactor is generic over its driver, so each backend's reactor is compiled on its own:
//! the loop pays no test of which backend it runs per turn or per message. The methods that
//! need the reactor's connections take the reactor itself (`r`); the rest take the driver.

use super::conn::Conn;
use super::{EngineError, Reactor, ReactorConfig};
use crate::proto::Protocol;
use crate::wire::WireMsg;
use mio::net::{TcpListener, TcpStream};
use mio::Poll;
use std::net::SocketAddr;

pub(super) trait Driver<P: Protocol>: Sized
where
    P::Msg: WireMsg,
{
    /// Set up, on the reactor's thread (a ring belongs to the thread that submits to it).
    /// `poll` is the reactor's epoll, which watches at least the commands' waker.
    fn new(cfg: &ReactorConfig, poll: &Poll) -> Result<Self, EngineError>;

    /// Start accepting connections on hosted node `h`'s listener.
    fn listen(&mut self, poll: &Poll, listener: &mut TcpListener, h: usize) -> std::io::Result<()>;

    /// Hosted node `h`'s listener rested after a failed accept: accept again.
    fn listen_again(r: &mut Reactor<P, Self>, h: usize) -> Result<(), EngineError>;

    /// A turn begins.
    fn turn_start(r: &mut Reactor<P, Self>) -> Result<(), EngineError>;

    /// A spinning reactor looks beyond its `hot` connections every this many turns.
    fn look_every(hot: usize) -> u32;

    /// Whether a spinning reactor with `hot` hot connections looks beyond them this turn
    /// whatever the countdown says.
    fn must_look(hot: usize) -> bool;

    /// Whether this turn asks epoll (`spinning`, and whether it `look`s beyond the hot
    /// connections).
    fn asks_epoll(spinning: bool, look: bool) -> bool;

    /// A spinning turn's work before any wait; `idle`: the last turn found none. Whether it
    /// found some.
    fn spin(r: &mut Reactor<P, Self>, look: bool, idle: bool) -> Result<bool, EngineError>;

    /// About to block: whatever the reactor read itself while spinning goes back to the
    /// kernel's watch (see `Reactor::read_hot`).
    fn before_block(r: &mut Reactor<P, Self>) -> Result<(), EngineError>;

    /// How soon work is due that a blocking wait would not wake for: `Some(ZERO)` at once,
    /// a pause when the kernel refused the last try, `None` if the reactor may block.
    fn work_due(&mut self) -> Option<std::time::Duration>;

    /// After the wait: what the kernel completed. Whether anything came.
    fn after_wait(r: &mut Reactor<P, Self>, spinning: bool) -> Result<bool, EngineError>;

    /// An epoll event for a listener or a connection (`token`). Whether it brought work.
    fn on_event(
        r: &mut Reactor<P, Self>,
        token: usize,
        readable: bool,
        writable: bool,
        error: bool,
    ) -> Result<bool, EngineError>;

    /// Watch (or receive on) a new connection about to take `slot`. An error is the
    /// connection's.
    fn watch_new(&mut self, poll: &Poll, conn: &mut Conn, slot: usize) -> std::io::Result<()>;

    /// A connection closes: stop watching its socket.
    fn forget(&mut self, poll: &Poll, stream: &mut TcpStream);

    /// Descriptors are about to close (see `Reactor::before_closing_fds`). An error ends the
    /// reactor, which then closes nothing more.
    fn before_closing_fds(&mut self) -> Result<(), EngineError>;

    /// The connection in `slot` is no longer read by the reactor itself.
    fn resume(r: &mut Reactor<P, Self>, slot: usize) -> std::io::Result<()>;

    /// After a spinning reactor read the hot connection in `slot` itself.
    fn after_hot_read(r: &mut Reactor<P, Self>, slot: usize) -> Result<(), EngineError>;

    /// Start writing what `slot` has queued. An error is the connection's.
    fn push_out(r: &mut Reactor<P, Self>, slot: usize) -> Result<(), String>;

    /// A socket for a dial to `addr`, and whether its connect is still to be started
    /// ([`Self::connect`]).
    fn dial_socket(addr: SocketAddr) -> std::io::Result<(TcpStream, bool)>;

    /// Start the connect of the dial just opened in `slot`. Whether it started (if not,
    /// the connection is closed and its peer suspected).
    fn connect(
        r: &mut Reactor<P, Self>,
        slot: usize,
        addr: SocketAddr,
    ) -> Result<bool, EngineError>;

    /// The job is over and every socket reset, or the loop failed with the sockets still
    /// open: wait (up to a second) for the kernel to let go of whatever it was lent.
    fn finish(&mut self);
}
