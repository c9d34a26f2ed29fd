//! The readiness backend: epoll (through mio) says which sockets are ready; this accepts and
//! writes them (`accept`, `writev`) and tells the reactor which have bytes to read. While the
//! reactor reads its hot connections itself, the ones with nothing left to send leave epoll:
//! a watched socket costs every arriving segment a callback into epoll, under its lock, in the
//! sender's delivery path (+0.2 µs one-way at 32 B, measured on a std ping-pong).

use super::accept::{self, AcceptFailure};
use super::conns::{ConnId, Conns};
use super::driver::{Driver, Events, IoEvent, Turn};
use super::error::ConnError;
use super::{EngineError, ReactorConfig, FIRST_CONN, LISTENERS};
use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Poll, Token};
use std::io::ErrorKind;
use std::net::SocketAddr;

/// The epoll backend's own state: none beyond the registrations the kernel keeps.
pub(super) struct EpollDriver;

/// What epoll says of one socket.
#[derive(Clone, Copy)]
struct Readiness {
    readable: bool,
    writable: bool,
    error: bool,
}

/// One socket epoll reported, as events: whether it brought work. A listener: accept until
/// it would block. A connection: the socket's pending error is asked for (a `getsockopt`) only
/// when epoll flags one, as for a refused dial (every ACK of a send makes the socket writable
/// again, and that must not cost a syscall); room to write sends what waits; bytes to read are
/// the reactor's.
fn on_ready(
    conns: &mut Conns,
    listeners: &[Option<TcpListener>],
    token: usize,
    Readiness {
        readable,
        writable,
        error,
    }: Readiness,
    events: &mut Events,
) -> bool {
    if token >= LISTENERS {
        let h = token - LISTENERS;
        if let Some(Some(l)) = listeners.get(h) {
            accept_all(l, h, events);
        }
        return true;
    }
    let slot = token - FIRST_CONN;
    let Some(conn) = conns.get_mut(slot) else {
        return false;
    };
    let id = (slot, conn.generation);
    // Whether the event brought work: data, an error, or room for queued bytes.
    let mut work = readable || error;
    if writable || error {
        work |= !conn.out.is_empty();
        let pending = error
            .then(|| conn.stream.take_error().unwrap_or_else(Some))
            .flatten();
        let failed = match pending {
            Some(e) => Some(ConnError::io("socket", &e)),
            None => conn.flush().err().map(|e| ConnError::io("send", &e)),
        };
        if let Some(why) = failed {
            events.push_back(IoEvent::Failed(id, Box::new(why)));
            return true;
        }
    }
    if readable {
        events.push_back(IoEvent::Readable(id));
    }
    work
}

/// Have epoll report `slot`'s socket, readable and writable, edge-triggered.
fn register_conn(poll: &Poll, stream: &mut TcpStream, slot: usize) -> std::io::Result<()> {
    poll.registry().register(
        stream,
        Token(slot + FIRST_CONN),
        Interest::READABLE | Interest::WRITABLE,
    )
}

impl Driver for EpollDriver {
    const EPOLL_WATCHES_SOCKETS: bool = true;

    fn new(_: &ReactorConfig, _: &Poll) -> Result<Self, EngineError> {
        Ok(Self)
    }

    fn listen(&mut self, poll: &Poll, listener: &mut TcpListener, h: usize) -> std::io::Result<()> {
        poll.registry()
            .register(listener, Token(LISTENERS + h), Interest::READABLE)
    }

    /// Accept what waits now: the listener's edge has passed while it rested.
    fn listen_again(&mut self, listener: &TcpListener, h: usize, events: &mut Events) {
        accept_all(listener, h, events);
    }

    fn unlisten(&mut self, poll: &Poll, listener: &mut TcpListener, _: usize) {
        let _ = poll.registry().deregister(listener);
    }

    fn turn_start(&mut self) -> Result<(), EngineError> {
        Ok(())
    }

    /// About 32 direct reads between looks, however many connections share them.
    fn look_every(hot: usize) -> u32 {
        match hot {
            0 => 1,
            hot => (32 / hot).max(1) as u32,
        }
    }

    /// With nothing hot, only epoll can say what came: every turn asks it.
    fn must_look(hot: usize) -> bool {
        hot == 0
    }

    fn spinning(&mut self) {}

    /// What the socket did not take is offered again every turn, as a spinning writer would,
    /// not when epoll is next asked (every 32nd turn); a connection with nothing to send
    /// leaves epoll while the reactor reads it. Inlined into the spinning turn, as the hot
    /// reads are.
    #[inline(always)]
    fn after_hot_read(
        &mut self,
        poll: &Poll,
        conns: &mut Conns,
        (slot, generation): ConnId,
    ) -> Result<(), ConnError> {
        let Some(conn) = conns.live(slot, generation) else {
            return Ok(());
        };
        if !conn.out.is_empty() {
            conn.flush().map_err(|e| ConnError::io("send", &e))?;
            if !conn.out.is_empty() {
                return Ok(()); // still watched: its writable edge sends the rest
            }
        }
        if conn.watched {
            conn.watched = poll.registry().deregister(&mut conn.stream).is_err();
        }
        Ok(())
    }

    fn before_block(&mut self) -> Result<(), EngineError> {
        Ok(())
    }

    fn work_due(&mut self) -> Option<std::time::Duration> {
        None
    }

    /// Each socket epoll reported, in the kernel's order (see [`on_ready`]).
    fn gather(
        &mut self,
        conns: &mut Conns,
        listeners: &[Option<TcpListener>],
        ready: &mio::Events,
        _: Turn,
        events: &mut Events,
    ) -> Result<bool, EngineError> {
        let mut work = false;
        for ev in ready.iter().filter(|ev| ev.token().0 >= FIRST_CONN) {
            work |= on_ready(
                conns,
                listeners,
                ev.token().0,
                Readiness {
                    readable: ev.is_readable(),
                    writable: ev.is_writable(),
                    error: ev.is_error(),
                },
                events,
            );
        }
        Ok(work)
    }

    /// ENOSPC past fs.epoll.max_user_watches, ENOMEM.
    fn watch_new(
        &mut self,
        poll: &Poll,
        stream: &mut TcpStream,
        _: bool,
        (slot, _): ConnId,
    ) -> std::io::Result<()> {
        register_conn(poll, stream, slot)
    }

    fn forget(&mut self, poll: &Poll, stream: &mut TcpStream, _: ConnId) {
        let _ = poll.registry().deregister(stream);
    }

    fn before_closing_fds(&mut self) -> Result<(), EngineError> {
        Ok(())
    }

    /// Watched again. Registering reports readiness that is already there, so nothing that
    /// arrived while unwatched is missed.
    fn resume(&mut self, poll: &Poll, conns: &mut Conns, (slot, _): ConnId) -> std::io::Result<()> {
        let Some(conn) = conns.get_mut(slot) else {
            return Ok(());
        };
        if !conn.watched {
            register_conn(poll, &mut conn.stream, slot)?;
            conn.watched = true;
        }
        Ok(())
    }

    /// A `writev` now; what the socket did not take waits for its writable edge.
    fn push_out(&mut self, poll: &Poll, conns: &mut Conns, slot: usize) -> Result<(), ConnError> {
        let Some(conn) = conns.get_mut(slot) else {
            return Ok(());
        };
        conn.flush().map_err(|e| ConnError::io("send", &e))?;
        if !conn.out.is_empty() && !conn.watched {
            register_conn(poll, &mut conn.stream, slot)
                .map_err(|e| ConnError::io("watch the connection", &e))?;
            conn.watched = true;
        }
        Ok(())
    }

    /// A non-blocking `connect` already under way: epoll says when it is done.
    fn dial_socket(addr: SocketAddr) -> std::io::Result<(TcpStream, bool)> {
        Ok((TcpStream::connect(addr)?, false))
    }

    fn connect(&mut self, _: &Conns, _: ConnId, _: SocketAddr) -> Result<(), ConnError> {
        Ok(())
    }

    fn finish(&mut self) {}
}

/// Accept what hosted node `h`'s listener has, until it would block or fails in a way that
/// rests it.
fn accept_all(listener: &TcpListener, h: usize, events: &mut Events) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => events.push_back(IoEvent::Accepted { host: h, stream }),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => match accept::classify(&e) {
                AcceptFailure::NextConnection => {}
                AcceptFailure::Rest => {
                    events.push_back(IoEvent::AcceptFailed {
                        host: h,
                        error: e,
                        armed: false,
                    });
                    return;
                }
            },
        }
    }
}
