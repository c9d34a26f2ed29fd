//! The message path of a reactor: connections opened and closed, bytes read and cut into
//! frames, handshakes, authenticated messages handed to protocols, and what protocols send
//! framed and routed. Everything here is the same for both backends; what differs goes
//! through [`Driver`].

use super::conn::{bound_silence, Conn, Goodbye};
use super::conns::ConnId;
use super::driver::{Driver, IoEvent};
use super::error::ConnError;
use super::{Due, NodeEvent, Reactor};
use crate::engine::EngineError;
use crate::proto::{Action, Protocol};
use crate::wire::handshake::{Handshake, Role, MAX_HANDSHAKE_BODY};
use crate::wire::{FrameDecoder, Framed, Kind, SendQueue, WireError};
use crate::NodeId;
use mio::net::TcpStream;
use std::io::ErrorKind;
use std::os::fd::AsRawFd;

/// Most bytes an unauthenticated connection may have sent that its handshake did not use: a
/// Hello and an Auth frame at their largest. Its socket is read in bites this size, and a
/// stranger that sends more than a handshake before finishing one is closed, so that what it
/// streams never grows a buffer (it took 19 MiB per connection before).
pub(super) const PREAUTH_MAX: usize = 2 * (16 + MAX_HANDSHAKE_BODY as usize);

/// Rounds of in-process messages among one reactor's nodes handled in one turn before the
/// turn goes on to sockets and timers: a wave over a reactor's subtree takes a round per
/// level, and a ping-pong between two of its nodes never ends on its own.
const DELIVER_ROUNDS: u32 = 64;

impl<P: Protocol, B: Driver> Reactor<P, B>
where
    P::Msg: Framed,
{
    /// Act on what the backend reported, in its order (and on what acting on it reported).
    pub(super) fn handle_io_events(&mut self) -> Result<(), EngineError> {
        let mut result = Ok(());
        while let Some(ev) = self.io_events.pop_front() {
            let done = match ev {
                IoEvent::Accepted { host, stream } => self.accepted(host, stream),
                IoEvent::AcceptFailed { host, error, armed } => {
                    self.accept_failed(host, &error, armed)
                }
                IoEvent::Readable((slot, generation)) => {
                    if self.conns.generation_of(slot) != Some(generation) {
                        continue;
                    }
                    match self.read(slot) {
                        Ok(_) => Ok(()),
                        Err(why) => self.close(slot, why),
                    }
                }
                IoEvent::Received((slot, generation)) => {
                    if self.conns.generation_of(slot) != Some(generation) {
                        continue;
                    }
                    match self.frames(slot) {
                        Ok(()) => Ok(()),
                        Err(why) => self.close(slot, why),
                    }
                }
                IoEvent::ReceiveEnded(id) => {
                    if self.conns.generation_of(id.0) != Some(id.1) {
                        continue;
                    }
                    // A spinning reactor reads the connection itself instead, until it cools.
                    if self.spinning {
                        self.heat(id)
                    } else {
                        self.cool(id)
                    }
                }
                IoEvent::Failed((slot, generation), why) => {
                    if self.conns.generation_of(slot) != Some(generation) {
                        continue;
                    }
                    // What arrived before the failure (the frames ahead of a FIN) counts; a
                    // goodbye's answer among them makes the end a release.
                    self.read_hello_before_failing(slot);
                    let why = match self.frames(slot) {
                        Err(ConnError::Released) => ConnError::Released,
                        _ => *why,
                    };
                    self.close(slot, why)
                }
            };
            if let (Ok(()), Err(e)) = (&result, done) {
                result = Err(e);
            }
        }
        result
    }

    /// Hosted node `h` accepted `stream`.
    fn accepted(&mut self, h: usize, stream: TcpStream) -> Result<(), EngineError> {
        let Some(host) = self.hosts.get_mut(h).and_then(|x| x.as_mut()) else {
            return Ok(()); // stopped meanwhile: the stream closes
        };
        host.accept_failing = false;
        self.open(h, stream, Role::Responder, None, false).map(drop)
    }

    /// Hosted node `h`'s accept failed with `e`: make room if descriptors ran out, and accept
    /// again at once if that freed one; else rest the listener (accepting again after the rest
    /// unless the backend still accepts).
    fn accept_failed(
        &mut self,
        h: usize,
        e: &std::io::Error,
        armed: bool,
    ) -> Result<(), EngineError> {
        if self.hosts.get(h).is_none_or(|x| x.is_none()) {
            return Ok(());
        }
        if super::accept::classify(e) == super::accept::AcceptFailure::Rest
            && !self.make_room(h, e)?
        {
            // Accepted again at once, it would fail again at once, every turn.
            self.rest_listener(h, e, !armed);
            return Ok(());
        }
        if !armed {
            if let Some(Some(l)) = self.listeners.get(h) {
                self.io.listen_again(l, h, &mut self.io_events);
            }
        }
        Ok(())
    }

    /// Hosted node `h` could not open a connection (`why`): a dial's peer is suspected, as
    /// when the connect itself fails; an accepted stranger's is refused. Either way the
    /// reactor and its other connections go on.
    pub(super) fn not_opened(&mut self, h: usize, dialed: Option<NodeId>, why: ConnError) {
        let Some(to) = dialed else {
            self.refuse(h, None, why);
            return;
        };
        if self.redial_later(h, to, Vec::new(), &why) {
            self.refuse(h, Some(to), why);
            return;
        }
        self.emit(h, NodeEvent::Suspect(to));
        let now = self.now();
        if let Some(host) = self.hosts[h].as_mut() {
            host.proto.on_suspect(now, to, &mut self.outbox);
        }
        self.refuse(h, Some(to), why);
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
            .and_then(|()| match self.cfg.options.dead_after {
                Some(limit) => bound_silence(&stream, limit),
                None => Ok(()),
            });
        if let Err(e) = options {
            self.not_opened(h, dialed, ConnError::io("socket options", &e));
            return Ok(None);
        }
        crate::engine::congestion::apply(&stream, self.cfg.options.congestion.as_deref());
        let mut hello = Vec::new();
        let handshake = match Handshake::start(role, identity, dialed, &mut hello) {
            Ok(hs) => hs,
            Err(e) => {
                self.not_opened(h, dialed, e.into());
                return Ok(None);
            }
        };
        let mut conn = Conn {
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
            incarnation: 0,
            session: None,
            dialed,
            watched: true,
            connecting,
            ending: false,
            sending: false,
            received: false,
            last_write: None,
            goodbye: None,
        };
        let id = self.conns.reserve();
        if let Err(e) = self
            .io
            .watch_new(&self.poll, &mut conn.stream, connecting, id)
        {
            self.conns.unreserve(id);
            self.not_opened(h, dialed, ConnError::io("watch the connection", &e));
            return Ok(None);
        }
        self.conns.put(id, conn);
        let (slot, _) = id;
        let now = self.now();
        self.timers.set(
            Due::Handshake(slot),
            now + self.cfg.options.handshake_timeout,
        );
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

    /// Close one connection; tell its node's protocol if a known peer is lost, and carry out
    /// what the protocol answers.
    ///
    /// The socket itself is shut down and closed later, by [`Self::bury_lost`], when the
    /// reactor has nothing else to do. Its FIN exchange costs as much CPU as a message, and a
    /// lost connection rarely comes alone: when a process dies, its peers on this reactor lose
    /// theirs in one turn, and the reports of the failure wait behind every teardown.
    pub(super) fn close(&mut self, slot: usize, why: ConnError) -> Result<(), EngineError> {
        let Some(conn) = self.detach(slot) else {
            return Ok(());
        };
        let held = self.held.remove(&slot).unwrap_or_default();
        let h = conn.host;
        // A released connection's end is no failure when the goodbyes were exchanged: ours
        // answered, or theirs answered and their end of the stream come (`release.rs`). Any
        // other end of it is the peer failing during the goodbye, suspected below.
        if let (Some(bye), Some(peer)) = (conn.goodbye, conn.peer) {
            let clean = matches!(
                (bye, &why),
                (Goodbye::Ours, ConnError::Released) | (Goodbye::Theirs, ConnError::ClosedByPeer)
            );
            if clean {
                self.cold[h].left(peer);
                self.unroute(h, peer, slot);
                self.lost.push(conn.stream);
                return self.released(h, peer);
            }
            // What waited for the peer goes with it, as a lost connection's queue does.
            self.releasing.remove(&(h, peer));
        }
        // A higher id's dial that yielded to ours, or that we deferred, ends with no failure
        // (`crossing.rs`).
        let yielded = self.yielded_to_us(&conn, slot, &why);
        let (who, authenticated) = (conn.peer.or(conn.dialed), conn.peer.is_some());
        // A dial closed before it authenticated: say what that likely means.
        let why = match (why, authenticated, conn.dialed) {
            (ConnError::ClosedByPeer, false, Some(_)) => ConnError::ClosedInHandshake,
            (why, ..) => why,
        };
        // A dial to a peer not listening yet, during the start-up grace, or one the peer
        // deferred to its own: tried again later, unless the peer's connection comes first.
        if let (None, Some(to)) = (conn.peer, conn.dialed) {
            let deferred = why.deferred();
            if self.redial_later(h, to, held, &why) {
                self.lost.push(conn.stream);
                self.unroute(h, to, slot);
                if !deferred {
                    self.refuse(h, Some(to), why);
                }
                return Ok(());
            }
        }
        if let Some(peer) = conn.peer {
            self.cold[h].left(peer);
        } else if conn.dialed.is_none() {
            if let Some(host) = self.hosts.get_mut(h).and_then(|x| x.as_mut()) {
                host.strangers.left();
            }
        }
        self.lost.push(conn.stream);
        if yielded {
            return Ok(());
        }
        // An authenticated peer's reason is said after the protocol heard of the loss (below):
        // the suspicion is what is timed, the words are for whoever reads the events.
        let why = if authenticated {
            Some(why)
        } else {
            self.refuse(h, who, why);
            None
        };
        let now = self.now();
        let Some(host) = self.hosts.get_mut(h).and_then(|x| x.as_mut()) else {
            return Ok(());
        };
        // A stranger's end concerns nobody; a dial's is its peer's suspicion.
        let Some(peer) = who else {
            return Ok(());
        };
        unroute(host, peer, slot);
        host.proto.on_suspect(now, peer, &mut self.outbox);
        self.emit(h, NodeEvent::Suspect(peer));
        let carried_out = self.apply_outbox(h);
        if let Some(why) = why {
            self.refuse(h, Some(peer), why);
        }
        carried_out
    }

    /// Take `slot`'s connection out of the reactor, with its handshake deadline and its
    /// backend's interest; its socket is the caller's to bury.
    pub(super) fn detach(&mut self, slot: usize) -> Option<Conn> {
        let mut conn = self.conns.take(slot)?;
        self.timers.cancel(Due::Handshake(slot));
        self.io
            .forget(&self.poll, &mut conn.stream, (slot, conn.generation));
        Some(conn)
    }

    /// Read everything the socket has (readiness, or a hot connection), then cut the frames.
    /// Whether anything came.
    pub(super) fn read(&mut self, slot: usize) -> Result<bool, ConnError> {
        let Some(conn) = self.conns.get_mut(slot) else {
            return Ok(false);
        };
        let (mut closed, mut got) = (false, false);
        // A stranger may send a handshake's bytes and no more before it has proved the key:
        // read in handshake-sized bites, so that what it streams stays in its socket.
        let stranger = conn.peer.is_none();
        let at_most = if stranger { PREAUTH_MAX } else { usize::MAX };
        loop {
            match read_from(&mut conn.decoder, conn.stream.as_raw_fd(), at_most) {
                Ok((0, _)) => {
                    closed = true;
                    break;
                }
                Ok((_, drained)) => {
                    got = true;
                    // A short read drained the socket; more data will raise a new edge, so
                    // the extra read that would only say WouldBlock is skipped.
                    if drained || stranger {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(ConnError::io("recv", &e)),
            }
        }
        if got {
            let id = (slot, conn.generation);
            self.heat(id)
                .map_err(|e| ConnError::io("watch", &std::io::Error::other(e)))?;
            // Nothing new, no new frame: a spinning reactor's empty reads skip the look.
            self.frames(slot)?;
            // The handshake is done: read the rest now (an edge may not come again).
            if stranger && !closed && self.conns.get(slot).is_some_and(|c| c.peer.is_some()) {
                return self.read(slot).map(|_| true);
            }
        }
        if closed {
            return Err(ConnError::ClosedByPeer);
        }
        Ok(got)
    }

    /// Add `id` to the hot connections, making room by cooling the oldest.
    pub(super) fn heat(&mut self, id: ConnId) -> Result<(), EngineError> {
        match self.hot.heat(id) {
            Some(cooled) => self.cool(cooled),
            None => Ok(()),
        }
    }

    /// The connection `id` is no longer read by the reactor itself: the backend takes it back.
    /// One closed since is left alone (its slot may hold a new connection, taken back already);
    /// one the backend cannot take back is closed.
    pub(super) fn cool(&mut self, id: ConnId) -> Result<(), EngineError> {
        if self.conns.generation_of(id.0) != Some(id.1) {
            return Ok(());
        }
        match self.io.resume(&self.poll, &mut self.conns, id) {
            Ok(()) => Ok(()),
            Err(e) => self.close(id.0, ConnError::io("watch the connection", &e)),
        }
    }

    /// Spinning: read the connections that received last, directly (see `hot.rs`). Whether
    /// anything came. Inlined into the spinning turn: out of line (as a larger loop made it)
    /// it cost the poll backend's 32 B one-way ~2%.
    #[inline(always)]
    pub(super) fn read_hot(&mut self) -> Result<bool, EngineError> {
        let mut any = false;
        let mut i = 0;
        while let Some(id) = self.hot.get(i) {
            if self.conns.generation_of(id.0) != Some(id.1) {
                self.hot.forget(i);
                continue;
            }
            match self.read(id.0) {
                Ok(got) => any |= got,
                Err(why) => self.close(id.0, why)?,
            }
            if let Err(why) = self.io.after_hot_read(&self.poll, &mut self.conns, id) {
                self.close(id.0, why)?;
            }
            i += 1;
        }
        Ok(any)
    }

    /// Turn complete frames into handshake steps or messages.
    pub(super) fn frames(&mut self, slot: usize) -> Result<(), ConnError> {
        let Some(conn) = self.conns.get_mut(slot) else {
            return Ok(());
        };
        conn.received = true;
        let (mut answered, mut bye, mut release) = (false, false, false);
        let (mut crossing, mut hello) = (None, None);
        while let Some(frame) = conn.decoder.next_frame()? {
            let Some(peer) = conn.peer else {
                let mut reply = Vec::new();
                let authenticated =
                    conn.handshake
                        .on_frame(frame.kind, frame.body(), &mut reply)?;
                answered = true;
                // A Hello from a higher id we may be dialing ourselves: answered below, with
                // Defer if our dial is under way (`crossing.rs`).
                let claimed = conn
                    .handshake
                    .claimed()
                    .filter(|_| frame.kind == Kind::Hello);
                let host = self.hosts.get(conn.host).and_then(|x| x.as_ref());
                let dial = match (claimed, host) {
                    (Some(p), Some(host))
                        if conn.dialed.is_none()
                            && p > host.identity.node_id
                            && !self.cfg.options.reconnect =>
                    {
                        host.route.get(&p).copied().filter(|&s| s != slot)
                    }
                    _ => None,
                };
                if let Some(dial) = dial {
                    hello = Some((dial, reply));
                    break;
                }
                conn.out.push_bytes(&reply);
                let Some(peer) = authenticated else {
                    continue;
                };
                self.cold[conn.host].admit(peer)?;
                self.cold[conn.host].reach(peer.id);
                // What waited for a new dial to this peer (start-up grace) goes here.
                if let Some(r) = self.redial.remove(&(conn.host, peer.id)) {
                    self.timers.cancel(Due::Redial(conn.host, peer.id));
                    if !r.held.is_empty() {
                        self.held.entry(slot).or_default().extend(r.held);
                    }
                }
                conn.peer = Some(peer.id);
                conn.incarnation = peer.incarnation;
                conn.session = conn.handshake.session().map(Box::new);
                conn.decoder.authenticated(self.cfg.options.max_body);
                self.timers.cancel(Due::Handshake(slot));
                // A peer's connection becomes our route to it if we have none.
                if let Some(host) = self.hosts.get_mut(conn.host).and_then(|x| x.as_mut()) {
                    if conn.dialed.is_none() {
                        host.strangers.left();
                    }
                    let route = host.route.entry(peer.id).or_insert(slot);
                    // Crossing dials: the peer dialed us while our dial to it is still in
                    // its handshake. The connection dialed by the lower id is kept, so the
                    // higher one's dial yields (`yield_dial`) if it has carried nothing.
                    if *route != slot
                        && conn.dialed.is_none()
                        && peer.id < host.identity.node_id
                        && !self.cfg.options.reconnect
                    {
                        crossing = Some(*route);
                    }
                    let _ = self
                        .events
                        .send((host.identity.node_id, NodeEvent::Authenticated(peer.id)));
                }
                // Our own connection: frame what waited for the session.
                if let Some(held) = self.held.remove(&slot) {
                    for msg in &held {
                        push(conn, msg)?;
                    }
                    release = self.cfg.options.reconnect && !held.is_empty();
                    answered |= release;
                }
                continue;
            };
            if frame.kind == Kind::Bye {
                if let Some(session) = conn.session.as_mut().filter(|s| s.covers(false)) {
                    let mac = frame.mac().ok_or(WireError::MacMissing("goodbye"))?;
                    session.recv.verify(frame.authenticated_parts(), mac)?;
                }
                if !frame.body().is_empty() {
                    return Err(ConnError::Unexpected(Kind::Bye));
                }
                // Nothing follows a goodbye.
                bye = true;
                break;
            }
            if frame.kind != Kind::Msg {
                return Err(ConnError::Unexpected(frame.kind));
            }
            if let Some(session) = conn.session.as_mut() {
                match frame.mac() {
                    Some(mac) => session.recv.verify(frame.authenticated_parts(), mac)?,
                    // A tag this node does not read is refused below, by the read.
                    None => match P::Msg::reads(frame.tag) {
                        Some((name, bulk)) if session.covers(bulk) => {
                            return Err(WireError::MacMissing(name).into())
                        }
                        _ => {}
                    },
                }
            }
            let m = P::Msg::read(&frame)?;
            self.inbox.push((conn.host, peer, m));
        }
        if conn.peer.is_none() && conn.decoder.buffered() > PREAUTH_MAX {
            return Err(ConnError::Chatty(conn.decoder.buffered(), PREAUTH_MAX));
        }
        if !self.sweeping && conn.decoder.capacity() > super::SWEEP_ABOVE {
            // A large buffer: give it back once the connection has gone quiet.
            self.sweeping = true;
            let at = self.now() + super::SWEEP_EVERY;
            self.timers.set(Due::Sweep, at);
        }
        if release {
            self.say_goodbye(slot, Goodbye::Ours);
        }
        if let Some(own) = crossing {
            answered |= self.yield_dial(own, slot)?;
        }
        let answer = hello.map(|(dial, auth)| self.answer_hello(slot, dial, auth));
        if answered {
            self.push_out(slot)?;
        }
        if bye {
            return self.goodbye_heard(slot);
        }
        match answer {
            // Whatever came after the Hello.
            Some(answered) => answered.and_then(|()| self.frames(slot)),
            None => Ok(()),
        }
    }

    /// Start writing what `slot` has queued. An error is the connection's.
    #[inline]
    fn push_out(&mut self, slot: usize) -> Result<(), ConnError> {
        self.io.push_out(&self.poll, &mut self.conns, slot)
    }

    /// [`Self::push_out`], closing the connection if it fails.
    pub(super) fn flush(&mut self, slot: usize) -> Result<(), EngineError> {
        match self.push_out(slot) {
            Ok(()) => Ok(()),
            Err(why) => {
                self.read_hello_before_failing(slot);
                self.close(slot, why)
            }
        }
    }

    /// Hand received messages to their nodes' protocols, in arrival order, and what they
    /// send each other in-process on this reactor meanwhile, for up to [`DELIVER_ROUNDS`]
    /// rounds.
    pub(super) fn deliver(&mut self) -> Result<(), EngineError> {
        if self.inbox.is_empty() {
            return Ok(());
        }
        let mut inbox = std::mem::take(&mut self.inbox);
        for round in 1.. {
            let now = self.now();
            for (h, from, m) in inbox.drain(..) {
                // A node stopped by an earlier message's consequences gets nothing more.
                let Some(host) = self.hosts.get_mut(h).and_then(|x| x.as_mut()) else {
                    continue;
                };
                host.proto.on_message(now, from, m, &mut self.outbox);
                self.apply_outbox(h)?;
            }
            if self.inbox.is_empty() || round == DELIVER_ROUNDS {
                break;
            }
            // The next round's messages, in the drained allocation's place.
            std::mem::swap(&mut inbox, &mut self.inbox);
        }
        // Keep the allocation; anything queued meanwhile waits for the next turn.
        inbox.append(&mut self.inbox);
        self.inbox = inbox;
        Ok(())
    }

    /// Carry out what hosted node `h`'s protocol asked for.
    ///
    /// Not again from within: a send that fails on the way closes its connection, and the
    /// protocol, told of the suspicion there (`close`), may answer with messages of its own.
    /// Carried out at once, they would overtake what it had queued before them (a peer would
    /// get a later message before an earlier one, breaking FIFO per pair, which protocols
    /// rely on); they wait in the outbox until the loop below reaches them.
    pub(super) fn apply_outbox(&mut self, h: usize) -> Result<(), EngineError> {
        if self.applying {
            return Ok(());
        }
        self.applying = true;
        let done = self.apply_queued(h);
        self.applying = false;
        done
    }

    fn apply_queued(&mut self, h: usize) -> Result<(), EngineError> {
        while !self.outbox.is_empty() {
            // Work on the outbox's own storage (no allocation per call); anything the protocol
            // adds meanwhile lands in the fresh one and goes next round.
            let mut outbox = std::mem::take(&mut self.outbox);
            for a in outbox.drain() {
                match a {
                    Action::Send { to, msg } => self.send(h, to, msg)?,
                    Action::SetTimer { timer, after } => {
                        let at = self.now() + after;
                        self.timers.set(Due::Protocol(h, timer), at);
                    }
                    Action::CancelTimer(t) => self.timers.cancel(Due::Protocol(h, t)),
                    Action::Report(e) => self.emit(h, NodeEvent::Protocol(e)),
                }
            }
            let added = std::mem::replace(&mut self.outbox, outbox);
            self.outbox.append(added);
        }
        Ok(())
    }

    /// Send `msg` from hosted node `h` to `to`: in-process, over a shared-memory link, or
    /// over TCP, whichever reaches it (see `local.rs`, `shm.rs`).
    pub(super) fn send(&mut self, h: usize, to: NodeId, msg: P::Msg) -> Result<(), EngineError> {
        let Some(msg) = self.send_local(h, to, msg) else {
            return Ok(());
        };
        let Some(msg) = self.send_shm(h, to, msg)? else {
            return Ok(());
        };
        self.send_tcp(h, to, msg)
    }

    /// [`Self::send`] over `to`'s TCP route, dialing one if there is none.
    pub(super) fn send_tcp(
        &mut self,
        h: usize,
        to: NodeId,
        msg: P::Msg,
    ) -> Result<(), EngineError> {
        let msg = if self.releasing.is_empty() {
            msg
        } else {
            match self.held_for_release(h, to, msg) {
                Ok(Some(msg)) => msg,
                Ok(None) => return Ok(()),
                Err(_) => return self.release_stalled(h, to),
            }
        };
        let Some(host) = self.hosts.get(h).and_then(|x| x.as_ref()) else {
            return Ok(());
        };
        let slot = match host.route.get(&to) {
            Some(&s) => s,
            None => {
                let Some(msg) = self.waits_for_redial(h, to, msg) else {
                    return Ok(());
                };
                match self.dial(h, to)? {
                    Some(s) => {
                        self.held.entry(s).or_default().push(msg);
                        return Ok(());
                    }
                    None => {
                        // Refused at once: it waits if the peer is tried again later.
                        let _ = self.waits_for_redial(h, to, msg);
                        return Ok(());
                    }
                }
            }
        };
        let Some(conn) = self.conns.get_mut(slot) else {
            return Ok(());
        };
        if conn.peer.is_none() {
            self.held.entry(slot).or_default().push(msg);
            return Ok(());
        }
        if let Err(e) = push(conn, &msg) {
            self.refuse(h, Some(to), e.into());
            return Ok(());
        }
        let generation = conn.generation;
        if self.cfg.options.reconnect {
            self.say_goodbye(slot, Goodbye::Ours);
        }
        self.flush(slot)?;
        // What the kernel did not take: a peer that stopped reading (a stalled process whose
        // kernel still acknowledges and answers probes) would have it grow without bound.
        let queued = self.conns.live(slot, generation).map_or(0, |c| c.out.len());
        if queued > self.cfg.options.max_queued {
            return self.close(slot, ConnError::Stalled(queued));
        }
        Ok(())
    }

    /// Open hosted node `h`'s connection to `to`. A peer it has no address for is suspected,
    /// as one whose dial is refused: no process can reach it, and its failure would otherwise
    /// go unseen for good.
    pub(super) fn dial(&mut self, h: usize, to: NodeId) -> Result<Option<usize>, EngineError> {
        let addr = self
            .hosts
            .get(h)
            .and_then(|x| x.as_ref())
            .and_then(|x| x.peers.get(&to))
            .copied();
        let Some(addr) = addr else {
            self.not_opened(h, Some(to), ConnError::NoAddress(to));
            return Ok(None);
        };
        let (stream, connecting) = match B::dial_socket(addr) {
            Ok(s) => s,
            Err(e) => {
                self.not_opened(h, Some(to), ConnError::io(format!("connect {addr}"), &e));
                return Ok(None);
            }
        };
        let Some(slot) = self.open(h, stream, Role::Initiator, Some(to), connecting)? else {
            return Ok(None);
        };
        let Some(generation) = self.conns.generation_of(slot) else {
            return Ok(None);
        };
        if let Err(why) = self.io.connect(&self.conns, (slot, generation), addr) {
            self.close(slot, why)?;
            return Ok(None);
        }
        if let Some(host) = self.hosts[h].as_mut() {
            host.route.insert(to, slot);
        }
        Ok(Some(slot))
    }

    /// Hosted node `h` no longer routes to `peer` over `slot`.
    pub(super) fn unroute(&mut self, h: usize, peer: NodeId, slot: usize) {
        if let Some(host) = self.hosts.get_mut(h).and_then(|x| x.as_mut()) {
            unroute(host, peer, slot);
        }
    }

    /// The connection in `slot` has not authenticated in time: close it.
    pub(super) fn handshake_overdue(&mut self, slot: usize) -> Result<(), EngineError> {
        let pending = self.conns.get(slot).is_some_and(|c| c.peer.is_none());
        if !pending {
            return Ok(());
        }
        let why = ConnError::HandshakeTimeout(self.cfg.options.handshake_timeout.as_millis());
        self.close(slot, why)
    }
}

/// `host` no longer routes to `peer` over `slot` (a route over another connection stays).
fn unroute<P>(host: &mut super::hosts::Host<P>, peer: NodeId, slot: usize) {
    if host.route.get(&peer) == Some(&slot) {
        host.route.remove(&peer);
    }
}

/// Append `msg` to an authenticated connection's queue as a frame, with a MAC when its
/// session covers the protocol's messages.
#[inline]
pub(super) fn push<M: Framed>(conn: &mut Conn, msg: &M) -> Result<(), WireError> {
    let mac = conn
        .session
        .as_mut()
        .filter(|s| s.covers(msg.bulk()))
        .map(|s| &mut s.send);
    conn.out.push_msg(msg, mac)
}

/// Receive once from socket `fd` straight into `decoder`, at most `at_most` bytes (see
/// [`FrameDecoder::receive`]): the bytes read (0: end of stream), and whether the socket is
/// drained for now.
///
/// `recv`, not `read`: it goes to the socket without the file layer's checks, about 100 ns
/// less per call here (an empty receive: 440 ns against 550 ns), and a spinning reactor makes
/// this call on every turn.
#[inline]
pub(super) fn read_from(
    decoder: &mut FrameDecoder,
    fd: std::os::fd::RawFd,
    at_most: usize,
) -> std::io::Result<(usize, bool)> {
    // SAFETY: `recv` initializes exactly the bytes it reports, inside the room it is given.
    unsafe {
        decoder.receive(at_most, |room| {
            crate::sys::result(crate::sys::recv(fd, room.as_mut_ptr().cast(), room.len()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `read_from` reads a socket straight into the buffer, a large frame in as few reads as
    /// the socket allows, and says when the socket is drained.
    #[test]
    fn reads_straight_from_a_socket() {
        use crate::proto::ping::PingMsg;
        use std::io::Write;
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let mut stream = Vec::new();
        let ping = PingMsg::Ping {
            seq: 0,
            payload: vec![5; 300_000].into(),
        };
        crate::wire::write_frame(&ping, &mut stream).unwrap();
        let writer = std::thread::spawn(move || a.write_all(&stream).map(|()| (a, stream.len())));
        let mut d = FrameDecoder::default();
        let mut got = None;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while got.is_none() && std::time::Instant::now() < deadline {
            match read_from(&mut d, b.as_raw_fd(), usize::MAX) {
                Ok((0, _)) => break,
                Ok(_) => got = d.next_frame().unwrap(),
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        let (_a, sent) = writer.join().unwrap().unwrap();
        let f = got.expect("the whole frame arrived");
        assert_eq!(16 + crate::wire::frame::padded(f.body().len()), sent);
        assert_eq!(PingMsg::read(&f).unwrap(), ping);
        assert!(
            matches!(read_from(&mut d, b.as_raw_fd(), usize::MAX), Err(e) if e.kind() == ErrorKind::WouldBlock)
        );
    }

    /// A read offers all the room the buffer has: once a frame larger than the read chunk has
    /// grown the buffer, the next such frame (whose header no read has seen yet) comes in one
    /// receive, not a chunk and then the rest; and a stranger's read takes a handshake's worth.
    #[test]
    fn a_grown_buffer_takes_a_large_frame_in_one_receive() {
        use crate::proto::ping::PingMsg;
        use std::io::Write;
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let mut stream = Vec::new();
        let ping = PingMsg::Ping {
            seq: 0,
            payload: vec![7; 2 * 16 * 1024 + 100].into(),
        };
        crate::wire::write_frame(&ping, &mut stream).unwrap();
        let mut d = FrameDecoder::default();
        let mut receives = Vec::new();
        for _ in 0..3 {
            a.write_all(&stream).unwrap();
            let mut n = 0;
            let frame = loop {
                match read_from(&mut d, b.as_raw_fd(), usize::MAX) {
                    Ok((0, _)) => panic!("end of stream"),
                    Ok(_) => n += 1,
                    Err(e) => panic!("the frame was written whole before reading: {e}"),
                }
                if let Some(f) = d.next_frame().unwrap() {
                    break f;
                }
            };
            assert_eq!(
                16 + crate::wire::frame::padded(frame.body().len()),
                stream.len()
            );
            receives.push(n);
        }
        assert!(
            receives[0] > 1,
            "a fresh buffer has only a chunk of room: {receives:?}"
        );
        assert_eq!(&receives[1..], &[1, 1]);
        a.write_all(&stream).unwrap();
        let mut stranger = FrameDecoder::new(MAX_HANDSHAKE_BODY);
        let (n, _) = read_from(&mut stranger, b.as_raw_fd(), PREAUTH_MAX).unwrap();
        assert_eq!(
            n, PREAUTH_MAX,
            "a stranger is read in handshake-sized bites"
        );
        assert!(stranger.capacity() < 64 * 1024);
    }
}
