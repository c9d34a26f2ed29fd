//! The reactor's side of shared-memory links (`engine::link::shm`): which peers a hosted node
//! reaches through one, their set-up off the reactor thread, the rings read each turn, and a
//! link's end told to the protocol as a lost connection's is.
//!
//! A link's set-up blocks (a handshake on a Unix socket, then the segment handed over), so it
//! runs on a set-up thread (`setups.rs`) and comes back through a channel; messages to the
//! peer wait for it meanwhile, in order, and go over TCP if it fails. A node dials a link when
//! it has no route to the peer yet and the peer's address is on this host; a link the peer
//! dialed becomes the route only when the node has none, so each direction keeps one route
//! for as long as it lasts and stays FIFO.
//!
//! Every descriptor of every link (bells, pidfds, set-up sockets) and the node's link
//! listeners sit in one poll set of their own, itself in the reactor's (token [`super::SHM`]):
//! its readiness means "some link needs a look", whichever backend the reactor runs.
//! The rings themselves are read on every turn; a reactor about to block raises each ring's
//! sleeper flag first, so writers ring its bell.

use super::driver::Driver;
use super::error::ConnError;
use super::setups::Setups;
use super::{NodeEvent, Reactor};
use crate::engine::link::shm::{self, Link, ShmError, RING_BYTES};
use crate::engine::EngineError;
use crate::id::IdMap;
use crate::proto::Protocol;
use crate::wire::handshake::Identity;
use crate::wire::{FrameDecoder, Framed, Kind, SendQueue};
use crate::NodeId;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use std::io::IoSlice;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

/// The inner poll's token for set-ups that finished.
const SET_UP: Token = Token(0);
/// Hosted node `h`'s link listener has token `LISTEN + h`; link `i`'s bell has
/// [`bell_token`], its peer's pidfd and its set-up socket [`life_token`].
const LISTEN: usize = 1 << 40;

/// Link `id`'s bell: it only wakes the reactor, which reads every ring each turn (the bell is
/// not even drained: the poll set is edge-triggered, and each ring is an edge of its own).
fn bell_token(id: usize) -> Token {
    Token(1 + 2 * id)
}

/// Link `id`'s peer process and set-up socket: readable when the peer may be gone.
fn life_token(id: usize) -> Token {
    Token(2 + 2 * id)
}

/// Bytes read from one ring per turn: a 1 MiB message in one turn, while other links and
/// sockets wait for one such bite at most.
const READ_PER_TURN: usize = 1 << 20;

/// Set-ups a node accepts at once; more strangers are turned away until some finish (each
/// takes a thread for at most the handshake timeout).
const ACCEPTING_MAX: usize = 64;

/// A link in use: where its bytes go in and come out.
struct Wire {
    host: usize,
    link: Link,
    decoder: FrameDecoder,
    out: SendQueue,
}

/// A finished set-up, from its thread.
enum SetUp {
    Dialed {
        host: usize,
        to: NodeId,
        link: Result<Link, ShmError>,
    },
    Accepted {
        host: usize,
        link: Result<Link, ShmError>,
    },
}

/// One reactor's shared-memory links, for messages of type `M`.
pub(super) struct Links<M> {
    poll: Poll,
    events: Events,
    waker: Arc<Waker>,
    setups: Setups,
    done: Sender<SetUp>,
    finished: Receiver<SetUp>,
    /// Each hosted node's listener (`None`: could not bind, or stopped).
    listeners: Vec<Option<UnixListener>>,
    /// Set-ups each hosted node is accepting.
    accepting: Vec<usize>,
    wires: Vec<Option<Wire>>,
    free: Vec<usize>,
    /// The link each (hosted node, peer) sends on.
    route: IdMap<(usize, NodeId), usize>,
    /// Dials under way, with what waits for them.
    dialing: IdMap<(usize, NodeId), Vec<M>>,
    /// Links with bytes queued that the ring did not take.
    backlog: Vec<usize>,
    /// Addresses of this host's nodes: a peer listening on one of them (or on loopback) is
    /// on this host.
    here: Vec<IpAddr>,
    handshake_timeout: Duration,
}

impl<M> Links<M> {
    /// Links for the hosted nodes, each given as the address its TCP listener is bound to
    /// and its link listener (or why it has none: it then dials only), in a poll set
    /// registered in `outer` as `token`. The listeners that cannot be watched come back.
    pub(super) fn new(
        outer: &Poll,
        token: Token,
        me: Vec<(Option<IpAddr>, std::io::Result<UnixListener>)>,
        handshake_timeout: Duration,
    ) -> std::io::Result<(Self, Vec<Option<std::io::Error>>)> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), SET_UP)?);
        outer
            .registry()
            .register(&mut SourceFd(&poll.as_raw_fd()), token, Interest::READABLE)?;
        let (done, finished) = channel();
        let mut listeners = Vec::with_capacity(me.len());
        let mut failed = Vec::with_capacity(me.len());
        let mut here = host_addresses();
        for (h, (ip, bound)) in me.into_iter().enumerate() {
            here.extend(ip.filter(|ip| !ip.is_unspecified()));
            match bound.and_then(|l| watch(&poll, l, h)) {
                Ok(l) => {
                    listeners.push(Some(l));
                    failed.push(None);
                }
                Err(e) => {
                    listeners.push(None);
                    failed.push(Some(e));
                }
            }
        }
        here.sort();
        here.dedup();
        Ok((
            Self {
                poll,
                events: Events::with_capacity(64),
                waker,
                setups: Setups::new(),
                done,
                finished,
                accepting: vec![0; listeners.len()],
                listeners,
                wires: Vec::new(),
                free: Vec::new(),
                route: IdMap::default(),
                dialing: IdMap::default(),
                backlog: Vec::new(),
                here,
                handshake_timeout,
            },
            failed,
        ))
    }

    /// Whether a peer listening at `addr` runs on this host.
    fn on_this_host(&self, addr: &SocketAddr) -> bool {
        addr.ip().is_loopback() || self.here.contains(&addr.ip())
    }

    /// Set up a link on a set-up thread (`setups.rs`); the result comes back through `done`.
    /// With no thread to be had, the set-up fails at once (`failed`), as a refused one does.
    fn set_up(
        &self,
        job: impl FnOnce() -> SetUp + Send + 'static,
        failed: impl FnOnce(ShmError) -> SetUp,
    ) {
        let (done, waker) = (self.done.clone(), self.waker.clone());
        let ran = self.setups.run(Box::new(move || {
            let _ = done.send(job());
            let _ = waker.wake();
        }));
        if let Err((_, e)) = ran {
            let _ = self.done.send(failed(ShmError::Io(e)));
            let _ = self.waker.wake();
        }
    }

    /// Start hosted node `h`'s (`me`'s) dial of a link to `to`, `held` waiting for it.
    fn dial(&mut self, h: usize, to: NodeId, me: Identity, held: Vec<M>) {
        let timeout = self.handshake_timeout;
        self.dialing.insert((h, to), held);
        self.set_up(
            move || SetUp::Dialed {
                host: h,
                to,
                link: shm::dial(&me, to, RING_BYTES, timeout),
            },
            |e| SetUp::Dialed {
                host: h,
                to,
                link: Err(e),
            },
        );
    }

    /// A link of hosted node `h` with `peer`, whichever end dialed it.
    fn link_with(&self, h: usize, peer: NodeId) -> Option<usize> {
        self.wires.iter().position(|w| {
            w.as_ref()
                .is_some_and(|w| w.host == h && w.link.peer.id == peer)
        })
    }

    /// Take a link into the table and the poll set; its id.
    fn insert(&mut self, host: usize, link: Link, max_body: u32) -> std::io::Result<usize> {
        let id = self.free.pop().unwrap_or(self.wires.len());
        let reg = self.poll.registry();
        for (fd, token) in [
            (link.bell.fd().as_raw_fd(), bell_token(id)),
            (link.pidfd.as_raw_fd(), life_token(id)),
            (link.socket.as_raw_fd(), life_token(id)),
        ] {
            if let Err(e) = reg.register(&mut SourceFd(&fd), token, Interest::READABLE) {
                self.forget(&link);
                self.free.push(id);
                return Err(e);
            }
        }
        let mut decoder = FrameDecoder::new(max_body);
        decoder.authenticated(max_body);
        let wire = Wire {
            host,
            link,
            decoder,
            out: SendQueue::new(),
        };
        if id == self.wires.len() {
            self.wires.push(Some(wire));
        } else {
            self.wires[id] = Some(wire);
        }
        Ok(id)
    }

    fn forget(&self, link: &Link) {
        let reg = self.poll.registry();
        for fd in [
            link.bell.fd().as_raw_fd(),
            link.pidfd.as_raw_fd(),
            link.socket.as_raw_fd(),
        ] {
            let _ = reg.deregister(&mut SourceFd(&fd));
        }
    }

    /// Take link `id` out; its descriptors close when the wire drops.
    fn remove(&mut self, id: usize) -> Option<Wire> {
        let wire = self.wires.get_mut(id)?.take()?;
        self.forget(&wire.link);
        self.free.push(id);
        self.backlog.retain(|&b| b != id);
        let key = (wire.host, wire.link.peer.id);
        if self.route.get(&key) == Some(&id) {
            self.route.remove(&key);
        }
        Some(wire)
    }

    /// The ids of hosted node `h`'s links.
    fn of_host(&self, h: usize) -> Vec<usize> {
        (0..self.wires.len())
            .filter(|&i| self.wires[i].as_ref().is_some_and(|w| w.host == h))
            .collect()
    }

    /// About to block: every ring's reader says it sleeps, and every backlogged writer that it
    /// waits for room. Whether something came meanwhile (then the reactor must not block).
    pub(super) fn before_block(&mut self) -> bool {
        let mut busy = false;
        for wire in self.wires.iter().flatten() {
            wire.link.reader.raise();
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        for wire in self.wires.iter_mut().flatten() {
            // A broken ring is found by the turn's read, which ends the link.
            busy |= !wire.link.reader.look_after_raise().unwrap_or(false);
            if !wire.out.is_empty() {
                busy |= !wire.link.writer.wait_for_room().unwrap_or(false);
            }
        }
        busy
    }

    /// Awake again: writers stop ringing.
    pub(super) fn awake(&self) {
        for wire in self.wires.iter().flatten() {
            wire.link.reader.awake();
        }
    }
}

/// Node `me`'s link listener, bound now.
pub(super) fn bind(me: &Identity) -> std::io::Result<UnixListener> {
    Ok(shm::Listener::bind(me)?.into_socket())
}

/// Hosted node `h`'s listener `l`, non-blocking, in `poll`.
fn watch(poll: &Poll, l: UnixListener, h: usize) -> std::io::Result<UnixListener> {
    l.set_nonblocking(true)?;
    poll.registry().register(
        &mut SourceFd(&l.as_raw_fd()),
        Token(LISTEN + h),
        Interest::READABLE,
    )?;
    Ok(l)
}

/// The addresses of this host's interfaces (in this network namespace, which is what a link
/// reaches): a peer listening on one of them is here. Empty if they cannot be listed.
fn host_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `getifaddrs` fills `list` with a list it allocated, freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return out;
    }
    let mut at = list;
    while !at.is_null() {
        // SAFETY: `at` is an entry of the list, valid until `freeifaddrs`.
        let entry = unsafe { &*at };
        if !entry.ifa_addr.is_null() {
            // SAFETY: `ifa_addr` points to a socket address of the family it names.
            unsafe {
                match i32::from((*entry.ifa_addr).sa_family) {
                    libc::AF_INET => {
                        let a = &*(entry.ifa_addr as *const libc::sockaddr_in);
                        out.push(IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()));
                    }
                    libc::AF_INET6 => {
                        let a = &*(entry.ifa_addr as *const libc::sockaddr_in6);
                        out.push(IpAddr::from(a.sin6_addr.s6_addr));
                    }
                    _ => {}
                }
            }
        }
        at = entry.ifa_next;
    }
    // SAFETY: `list` came from `getifaddrs` and is freed once.
    unsafe { libc::freeifaddrs(list) };
    out
}

impl<P: Protocol, B: Driver> Reactor<P, B>
where
    P::Msg: Framed,
{
    /// Send `msg` from hosted node `h` to `to` over a shared-memory link, if `to` is reached
    /// by one (or by one being set up, which holds it); else hand `msg` back for TCP.
    #[inline]
    pub(super) fn send_shm(
        &mut self,
        h: usize,
        to: NodeId,
        msg: P::Msg,
    ) -> Result<Option<P::Msg>, EngineError> {
        let Some(links) = self.shm.as_mut() else {
            return Ok(Some(msg));
        };
        if let Some(&id) = links.route.get(&(h, to)) {
            let Some(wire) = links.wires[id].as_mut() else {
                return Ok(Some(msg));
            };
            if let Err(e) = wire.out.push_msg(&msg, None) {
                self.refuse(h, Some(to), e.into());
                return Ok(None);
            }
            self.write_shm(id)?;
            return Ok(None);
        }
        if let Some(held) = links.dialing.get_mut(&(h, to)) {
            held.push(msg);
            return Ok(None);
        }
        let Some(host) = self.hosts.get(h).and_then(|x| x.as_ref()) else {
            return Ok(None);
        };
        // A route over TCP (or a dial waiting for the start-up grace) keeps its order.
        if host.route.contains_key(&to) || self.redial.contains_key(&(h, to)) {
            return Ok(Some(msg));
        }
        if !host.peers.get(&to).is_some_and(|a| links.on_this_host(a)) {
            return Ok(Some(msg));
        }
        links.dial(h, to, host.identity.clone(), vec![msg]);
        Ok(None)
    }

    /// Copy what link `id` has queued into its ring, ring the peer if it sleeps, and keep the
    /// rest for when the peer made room; a peer that stopped reading with more than
    /// `max_queued` waiting loses the link, as a stalled connection does.
    fn write_shm(&mut self, id: usize) -> Result<(), EngineError> {
        let Some(links) = self.shm.as_mut() else {
            return Ok(());
        };
        let Some(wire) = links.wires[id].as_mut() else {
            return Ok(());
        };
        let mut failed = None;
        while !wire.out.is_empty() {
            let mut iov = [IoSlice::new(&[]); 8];
            let n = wire.out.slices(&mut iov, usize::MAX);
            let mut wrote = 0;
            let mut full = false;
            for part in &iov[..n] {
                match wire.link.writer.write(part) {
                    Ok(k) => {
                        wrote += k;
                        if k < part.len() {
                            full = true;
                            break;
                        }
                    }
                    Err(e) => {
                        failed = Some(ConnError::Shm(e.to_string()));
                        break;
                    }
                }
            }
            wire.out.consume(wrote);
            if failed.is_some() || full || wrote == 0 {
                break;
            }
        }
        if wire.link.writer.must_ring() {
            wire.link.peer_bell.ring();
        }
        let queued = wire.out.len();
        let backlogged = links.backlog.contains(&id);
        if queued > 0 && !backlogged {
            links.backlog.push(id);
        } else if queued == 0 && backlogged {
            links.backlog.retain(|&b| b != id);
        }
        if let Some(why) = failed {
            return self.end_shm(id, why);
        }
        if queued > self.cfg.options.max_queued {
            return self.end_shm(id, ConnError::Stalled(queued));
        }
        Ok(())
    }

    /// Read every link's ring and turn its frames into messages; send what waited for room;
    /// act on the links' descriptors (set-ups done, strangers at a listener, peers gone) when
    /// `look`. Whether anything came.
    pub(super) fn shm_turn(&mut self, look: bool) -> Result<bool, EngineError> {
        if self.shm.is_none() {
            return Ok(false);
        }
        let mut any = false;
        if look {
            any |= self.shm_events()?;
        }
        let count = self.shm.as_ref().map_or(0, |l| l.wires.len());
        for id in 0..count {
            any |= self.read_shm(id)?;
        }
        // Links whose queue waits for room (rare: a 256 KiB ring full); a copy, since a write
        // that ends its link changes the list.
        if self.shm.as_ref().is_some_and(|l| !l.backlog.is_empty()) {
            let backlog = self
                .shm
                .as_ref()
                .map(|l| l.backlog.clone())
                .unwrap_or_default();
            for id in backlog {
                self.write_shm(id)?;
            }
        }
        Ok(any)
    }

    /// Read link `id`'s ring into its decoder and its frames into the inbox. Whether bytes
    /// came.
    fn read_shm(&mut self, id: usize) -> Result<bool, EngineError> {
        let Some(links) = self.shm.as_mut() else {
            return Ok(false);
        };
        let Some(wire) = links.wires.get_mut(id).and_then(|w| w.as_mut()) else {
            return Ok(false);
        };
        // The usual case of a turn: nothing came (one load of the writer's position, a
        // cache line that stays ours until the writer writes).
        match wire.link.reader.has_data() {
            Ok(false) => return Ok(false),
            Ok(true) => {}
            Err(e) => {
                return self
                    .end_shm(id, ConnError::Shm(e.to_string()))
                    .map(|()| false)
            }
        }
        let mut got = 0;
        let mut failed = None;
        while got < READ_PER_TURN {
            let reader = &mut wire.link.reader;
            let mut corrupt = None;
            // SAFETY: `read_into` initializes exactly the bytes it reports, inside the room.
            let read = unsafe {
                wire.decoder.receive(READ_PER_TURN - got, |room| {
                    reader.read_into(room).map_err(|e| {
                        corrupt = Some(e);
                        std::io::Error::other("corrupt ring")
                    })
                })
            };
            match (read, corrupt) {
                (_, Some(e)) => {
                    failed = Some(ConnError::Shm(e.to_string()));
                    break;
                }
                (Ok((n, drained)), None) => {
                    got += n;
                    if n == 0 || drained {
                        break;
                    }
                }
                (Err(e), None) => {
                    failed = Some(ConnError::io("shared-memory read", &e));
                    break;
                }
            }
        }
        if got > 0 && wire.link.reader.must_ring() {
            wire.link.peer_bell.ring();
        }
        let (h, peer) = (wire.host, wire.link.peer.id);
        if failed.is_none() && got > 0 {
            loop {
                match wire.decoder.next_frame() {
                    Ok(None) => break,
                    Ok(Some(frame)) if frame.kind == Kind::Msg => match P::Msg::read(&frame) {
                        Ok(m) => self.inbox.push((h, peer, m)),
                        Err(e) => {
                            failed = Some(e.into());
                            break;
                        }
                    },
                    Ok(Some(frame)) => {
                        failed = Some(ConnError::Unexpected(frame.kind));
                        break;
                    }
                    Err(e) => {
                        failed = Some(e.into());
                        break;
                    }
                }
            }
        }
        if let Some(why) = failed {
            // What came before the bad bytes is delivered first, as over a socket.
            self.end_shm(id, why)?;
        }
        Ok(got > 0)
    }

    /// Act on the inner poll set: finished set-ups, strangers at listeners, links whose peer
    /// may be gone. Whether anything was there.
    fn shm_events(&mut self) -> Result<bool, EngineError> {
        let mut any = false;
        loop {
            let Some(links) = self.shm.as_mut() else {
                return Ok(any);
            };
            match links.poll.poll(&mut links.events, Some(Duration::ZERO)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
            let tokens: Vec<usize> = links.events.iter().map(|e| e.token().0).collect();
            let full = tokens.len() == links.events.capacity();
            any |= !tokens.is_empty();
            for t in tokens {
                if t == SET_UP.0 {
                    self.shm_set_ups_done()?;
                } else if t >= LISTEN {
                    self.shm_accept(t - LISTEN);
                } else if t % 2 == 0 {
                    self.shm_look(t / 2 - 1)?;
                }
            }
            if !full {
                return Ok(any);
            }
        }
    }

    /// Link `id`'s peer's pidfd or set-up socket woke: the peer may be gone.
    fn shm_look(&mut self, id: usize) -> Result<(), EngineError> {
        let Some(wire) = self
            .shm
            .as_ref()
            .and_then(|l| l.wires.get(id))
            .and_then(|w| w.as_ref())
        else {
            return Ok(());
        };
        if wire.link.peer_gone() {
            // What the peer wrote before it went is delivered before its loss.
            self.read_shm(id)?;
            self.deliver()?;
            return self.end_shm(id, ConnError::ClosedByPeer);
        }
        Ok(())
    }

    /// Accept what waits at hosted node `h`'s listener, each link set up on its own thread.
    fn shm_accept(&mut self, h: usize) {
        let Some(me) = self
            .hosts
            .get(h)
            .and_then(|x| x.as_ref())
            .map(|x| x.identity.clone())
        else {
            return;
        };
        let Some(links) = self.shm.as_mut() else {
            return;
        };
        let Some(Some(listener)) = links.listeners.get(h) else {
            return;
        };
        let mut refused = Vec::new();
        while let Ok((sock, _)) = listener.accept() {
            if links.accepting[h] >= ACCEPTING_MAX {
                refused.push(ConnError::Shm(format!(
                    "{ACCEPTING_MAX} link set-ups under way: one more turned away"
                )));
                continue;
            }
            links.accepting[h] += 1;
            let (me, timeout) = (me.clone(), links.handshake_timeout);
            links.set_up(
                move || SetUp::Accepted {
                    host: h,
                    link: shm::accept_on(sock, &me, timeout),
                },
                |e| SetUp::Accepted {
                    host: h,
                    link: Err(e),
                },
            );
        }
        for why in refused {
            self.refuse(h, None, why);
        }
    }

    /// Take in the set-ups that finished.
    fn shm_set_ups_done(&mut self) -> Result<(), EngineError> {
        loop {
            let Some(done) = self.shm.as_ref().and_then(|l| l.finished.try_recv().ok()) else {
                return Ok(());
            };
            match done {
                SetUp::Dialed { host, to, link } => self.shm_dialed(host, to, link)?,
                SetUp::Accepted { host, link } => {
                    if let Some(links) = self.shm.as_mut() {
                        links.accepting[host] = links.accepting[host].saturating_sub(1);
                    }
                    match link {
                        Ok(link) => {
                            self.shm_admit(host, link, false)?;
                        }
                        Err(e) => self.refuse(host, None, ConnError::Shm(e.to_string())),
                    }
                }
            }
        }
    }

    /// Hosted node `h`'s dial to `to` finished: the link becomes the route and what waited
    /// goes on it; or, if it failed, what waited goes by TCP (or by a link the peer dialed
    /// meanwhile).
    fn shm_dialed(
        &mut self,
        h: usize,
        to: NodeId,
        link: Result<Link, ShmError>,
    ) -> Result<(), EngineError> {
        let held = self
            .shm
            .as_mut()
            .and_then(|l| l.dialing.remove(&(h, to)))
            .unwrap_or_default();
        let id = match link {
            Ok(link) if link.peer.id == to => self.shm_admit(h, link, true)?,
            Ok(_) | Err(_) => None,
        };
        let id = id.or_else(|| self.shm.as_ref().and_then(|l| l.link_with(h, to)));
        match id {
            Some(id) => {
                if let Some(l) = self.shm.as_mut() {
                    l.route.insert((h, to), id);
                }
                self.shm_take_redial(h, to, id)?;
                self.send_on(id, h, to, &held)
            }
            None => {
                // A try of the start-up grace's: what waited goes back to it, and TCP is
                // tried at once (`startup.rs`).
                if let Some(r) = self.redial.get_mut(&(h, to)) {
                    r.held.splice(0..0, held);
                    let now = self.now();
                    self.timers.set(super::Due::Redial(h, to), now);
                    return Ok(());
                }
                // By TCP, whose dial, if refused during the start-up grace (a peer process
                // still starting), tries a link first next time.
                for msg in held {
                    self.send_tcp(h, to, msg)?;
                }
                Ok(())
            }
        }
    }

    /// Time for hosted node `h` to try `to` again (start-up grace): over a shared-memory link
    /// if `to` is on this host, with `waiting` (a link `to` dialed meanwhile takes them at
    /// once). Whether it took them; if not, they are the caller's to send by TCP.
    pub(super) fn shm_redial(
        &mut self,
        h: usize,
        to: NodeId,
        waiting: &mut Vec<P::Msg>,
    ) -> Result<bool, EngineError> {
        let Some(links) = self.shm.as_mut() else {
            return Ok(false);
        };
        let Some(host) = self.hosts.get(h).and_then(|x| x.as_ref()) else {
            return Ok(false);
        };
        if !host.peers.get(&to).is_some_and(|a| links.on_this_host(a)) {
            return Ok(false);
        }
        if links.dialing.contains_key(&(h, to)) {
            links
                .dialing
                .get_mut(&(h, to))
                .expect("there")
                .append(waiting);
            return Ok(true);
        }
        if let Some(id) = links.link_with(h, to) {
            links.route.insert((h, to), id);
            self.shm_take_redial(h, to, id)?;
            let waiting = std::mem::take(waiting);
            self.send_on(id, h, to, &waiting)?;
            return Ok(true);
        }
        links.dial(h, to, host.identity.clone(), std::mem::take(waiting));
        Ok(true)
    }

    /// A link set up for hosted node `h`: admitted (another incarnation of the peer's id
    /// holding a connection here is refused), watched, and said as an authentication. Its id,
    /// or `None` if it was refused. An accepted link becomes the route only when the node has
    /// none, nor a dial under way.
    fn shm_admit(
        &mut self,
        h: usize,
        link: Link,
        dialed: bool,
    ) -> Result<Option<usize>, EngineError> {
        let peer = link.peer;
        let Some(host) = self.hosts.get(h).and_then(|x| x.as_ref()) else {
            return Ok(None);
        };
        // A TCP route keeps its order (a dial of the start-up grace's waits for this link).
        let routed = host.route.contains_key(&peer.id);
        let node = host.identity.node_id;
        if let Err(why) = self.cold[h].admit(peer) {
            self.refuse(h, Some(peer.id), why);
            return Ok(None);
        }
        self.cold[h].reach(peer.id);
        let max_body = self.cfg.options.max_body;
        let Some(links) = self.shm.as_mut() else {
            return Ok(None);
        };
        let id = match links.insert(h, link, max_body) {
            Ok(id) => id,
            Err(e) => {
                self.cold[h].left(peer.id);
                self.refuse(h, Some(peer.id), ConnError::io("watch a link", &e));
                return Ok(None);
            }
        };
        let key = (h, peer.id);
        let route = !dialed
            && !routed
            && !links.route.contains_key(&key)
            && !links.dialing.contains_key(&key);
        if route {
            links.route.insert(key, id);
        }
        let _ = self.events.send((node, NodeEvent::Authenticated(peer.id)));
        // The start-up grace waited for this peer: what waited goes on the link first, and
        // nothing more waits (as when the peer's connection comes first, `dispatch.rs`).
        if route || dialed {
            self.shm_take_redial(h, peer.id, id)?;
        }
        // Bytes the peer wrote before the link was watched.
        self.read_shm(id)?;
        Ok(Some(id))
    }

    /// Hosted node `h` has a link to `peer` (`id`, its route or about to be): the start-up
    /// grace's wait for `peer` ends, and what waited goes on the link ahead of anything a dial
    /// under way holds (sent later).
    fn shm_take_redial(&mut self, h: usize, peer: NodeId, id: usize) -> Result<(), EngineError> {
        let Some(r) = self.redial.remove(&(h, peer)) else {
            return Ok(());
        };
        self.timers.cancel(super::Due::Redial(h, peer));
        if r.held.is_empty() {
            return Ok(());
        }
        let Some(links) = self.shm.as_mut() else {
            return Ok(());
        };
        if let Some(later) = links.dialing.get_mut(&(h, peer)) {
            later.splice(0..0, r.held);
            return Ok(());
        }
        self.send_on(id, h, peer, &r.held)
    }

    /// Queue `msgs` from hosted node `h` to `peer` on link `id`, in order, and write them. A
    /// message that cannot be framed is refused and ends the batch; what came before it goes.
    fn send_on(
        &mut self,
        id: usize,
        h: usize,
        peer: NodeId,
        msgs: &[P::Msg],
    ) -> Result<(), EngineError> {
        let Some(wire) = self.shm.as_mut().and_then(|l| l.wires[id].as_mut()) else {
            return Ok(());
        };
        for msg in msgs {
            if let Err(e) = wire.out.push_msg(msg, None) {
                self.refuse(h, Some(peer), e.into());
                break;
            }
        }
        self.write_shm(id)
    }

    /// Link `id` ended (`why`): its peer is suspected, as when a connection drops.
    pub(super) fn end_shm(&mut self, id: usize, why: ConnError) -> Result<(), EngineError> {
        let Some(wire) = self.shm.as_mut().and_then(|l| l.remove(id)) else {
            return Ok(());
        };
        let (h, peer) = (wire.host, wire.link.peer.id);
        drop(wire);
        self.cold[h].left(peer);
        let now = self.now();
        let Some(host) = self.hosts.get_mut(h).and_then(|x| x.as_mut()) else {
            return Ok(());
        };
        host.proto.on_suspect(now, peer, &mut self.outbox);
        self.emit(h, NodeEvent::Suspect(peer));
        let carried_out = self.apply_outbox(h);
        self.refuse(h, Some(peer), why);
        carried_out
    }

    /// Hosted node `h` stopped: its links close (their peers see the set-up sockets end) and
    /// its listener with them.
    pub(super) fn stop_shm(&mut self, h: usize) {
        let Some(links) = self.shm.as_mut() else {
            return;
        };
        for id in links.of_host(h) {
            links.remove(id);
        }
        links.dialing.retain(|&(x, _), _| x != h);
        if let Some(l) = links.listeners.get_mut(h).and_then(|l| l.take()) {
            let _ = links
                .poll
                .registry()
                .deregister(&mut SourceFd(&l.as_raw_fd()));
        }
    }
}
