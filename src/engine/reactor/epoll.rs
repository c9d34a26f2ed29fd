//! The readiness backend: epoll (through mio) says which sockets are ready, and the reactor
//! accepts, reads and writes them itself (`accept`, `read`, `writev`). A spinning reactor
//! reads its hot connections every turn and takes them out of epoll meanwhile.

use super::accept::{self, AcceptFailure};
use super::driver::Driver;
use super::{EngineError, Reactor, ReactorConfig, FIRST_CONN, LISTENERS};
use crate::proto::Protocol;
use crate::wire::handshake::Role;
use crate::wire::WireMsg;
use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Poll, Token};
use std::io::ErrorKind;
use std::net::SocketAddr;

/// The epoll driver's own state.
pub(super) struct Epoll {
    /// Some hot connection may be out of epoll (see [`super::conn::Conn::watched`]).
    unwatched: bool,
}

/// Have epoll report `slot`'s socket, readable and writable, edge-triggered.
fn register_conn(poll: &Poll, stream: &mut TcpStream, slot: usize) -> std::io::Result<()> {
    poll.registry().register(
        stream,
        Token(slot + FIRST_CONN),
        Interest::READABLE | Interest::WRITABLE,
    )
}

impl<P: Protocol> Driver<P> for Epoll
where
    P::Msg: WireMsg,
{
    fn new(_cfg: &ReactorConfig, _poll: &Poll) -> Result<Self, EngineError> {
        Ok(Self { unwatched: false })
    }

    fn listen(&mut self, poll: &Poll, listener: &mut TcpListener, h: usize) -> std::io::Result<()> {
        poll.registry()
            .register(listener, Token(LISTENERS + h), Interest::READABLE)
    }

    fn listen_again(r: &mut Reactor<P, Self>, h: usize) -> Result<(), EngineError> {
        r.accept(h)
    }

    fn turn_start(_r: &mut Reactor<P, Self>) -> Result<(), EngineError> {
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

    fn asks_epoll(spinning: bool, look: bool) -> bool {
        !spinning || look
    }

    fn spin(r: &mut Reactor<P, Self>, _look: bool, _idle: bool) -> Result<bool, EngineError> {
        let active = r.read_hot()?;
        r.unwatch_hot();
        Ok(active)
    }

    /// Every hot connection is watched by epoll again; they stay hot.
    fn before_block(r: &mut Reactor<P, Self>) -> Result<(), EngineError> {
        if std::mem::take(&mut r.io.unwatched) {
            for i in 0..r.hot.len() {
                let (slot, generation) = r.hot[i];
                r.cool(slot, generation)?;
            }
        }
        Ok(())
    }

    fn work_due(&mut self) -> Option<std::time::Duration> {
        None
    }

    fn after_wait(_r: &mut Reactor<P, Self>, _spinning: bool) -> Result<bool, EngineError> {
        Ok(false)
    }

    fn on_event(
        r: &mut Reactor<P, Self>,
        token: usize,
        readable: bool,
        writable: bool,
        error: bool,
    ) -> Result<bool, EngineError> {
        if token >= LISTENERS {
            r.accept(token - LISTENERS)?;
            return Ok(true);
        }
        r.service(token - FIRST_CONN, readable, writable, error)
    }

    /// ENOSPC past fs.epoll.max_user_watches, ENOMEM.
    fn watch_new(
        &mut self,
        poll: &Poll,
        conn: &mut super::conn::Conn,
        slot: usize,
    ) -> std::io::Result<()> {
        register_conn(poll, &mut conn.stream, slot)
    }

    fn forget(&mut self, poll: &Poll, stream: &mut TcpStream) {
        let _ = poll.registry().deregister(stream);
    }

    fn before_closing_fds(&mut self) -> Result<(), EngineError> {
        Ok(())
    }

    fn resume(r: &mut Reactor<P, Self>, slot: usize) -> std::io::Result<()> {
        r.watch(slot)
    }

    /// What the socket did not take is offered again every turn, as a spinning writer
    /// would, not when epoll is next asked (every 32nd turn).
    fn after_hot_read(r: &mut Reactor<P, Self>, slot: usize) -> Result<(), EngineError> {
        let unsent = r.conns.get(slot).and_then(|c| c.as_ref());
        if unsent.is_some_and(|c| !c.out.is_empty()) {
            r.flush(slot)?;
        }
        Ok(())
    }

    /// A `writev` now; what the socket did not take waits for its writable edge.
    fn push_out(r: &mut Reactor<P, Self>, slot: usize) -> Result<(), String> {
        let Some(conn) = r.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return Ok(());
        };
        conn.flush().map_err(|e| e.to_string())?;
        if !conn.out.is_empty() {
            r.watch(slot).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// A non-blocking `connect` already under way: epoll says when it is done.
    fn dial_socket(addr: SocketAddr) -> std::io::Result<(TcpStream, bool)> {
        Ok((TcpStream::connect(addr)?, false))
    }

    fn connect(
        _r: &mut Reactor<P, Self>,
        _slot: usize,
        _addr: SocketAddr,
    ) -> Result<bool, EngineError> {
        Ok(true)
    }

    fn finish(&mut self) {}
}

impl<P: Protocol> Reactor<P, Epoll>
where
    P::Msg: WireMsg,
{
    /// Accept what hosted node `h`'s listener has, until it would block.
    fn accept(&mut self, h: usize) -> Result<(), EngineError> {
        loop {
            let Some(host) = self.hosts.get(h).and_then(|x| x.as_ref()) else {
                return Ok(());
            };
            match host.listener.accept() {
                Ok((stream, _)) => {
                    self.accepted_one(h);
                    self.open(h, stream, Role::Responder, None, false)?;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => match accept::classify(&e) {
                    AcceptFailure::NextConnection => {}
                    AcceptFailure::Rest => {
                        if !self.make_room(h, &e)? {
                            self.rest_listener(h, &e, true);
                            return Ok(());
                        }
                    }
                },
            }
        }
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
    ) -> Result<bool, EngineError> {
        // Whether the event brought work: data, an error, or room for queued bytes.
        let mut work = readable || error;
        if writable || error {
            let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
                return Ok(false);
            };
            work |= !conn.out.is_empty();
            let pending = error
                .then(|| conn.stream.take_error().unwrap_or_else(Some))
                .flatten();
            let failed = match pending {
                Some(e) => Some(e.to_string()),
                None => conn.flush().err().map(|e| e.to_string()),
            };
            if let Some(why) = failed {
                return self.close(slot, why).map(|()| true);
            }
        }
        if readable {
            if let Err(why) = self.read(slot) {
                return self.close(slot, why).map(|()| true);
            }
        }
        Ok(work)
    }

    /// Spinning: take the hot connections that have nothing left to send out of epoll (see
    /// [`super::conn::Conn::watched`]); [`Reactor::read_hot`] reads them every turn, which
    /// sees data, the end of the stream and errors alike. Inlined, as `read_hot` is.
    #[inline(always)]
    fn unwatch_hot(&mut self) {
        for i in 0..self.hot.len() {
            let (slot, generation) = self.hot[i];
            let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
                continue;
            };
            if conn.generation == generation && conn.watched && conn.out.is_empty() {
                conn.watched = self.poll.registry().deregister(&mut conn.stream).is_err();
                self.io.unwatched |= !conn.watched;
            }
        }
    }

    /// Have epoll watch `slot` again (a reactor about to block, a connection no longer
    /// hot). Registering reports readiness that is already there, so nothing that arrived
    /// while unwatched is missed.
    fn watch(&mut self, slot: usize) -> std::io::Result<()> {
        let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return Ok(());
        };
        if !conn.watched {
            register_conn(&self.poll, &mut conn.stream, slot)?;
            conn.watched = true;
        }
        Ok(())
    }
}
