//! The nodes a reactor hosts, and their life: what each one is, whom it may reach, how it
//! reports, how its peers' incarnations are kept apart, and how it stops.

use super::conn::{reset, Ending};
use super::driver::Driver;
use super::error::{ConnError, Refusal};
use super::refusals::{Refusals, Verdict};
use super::strangers::Strangers;
use super::{Command, Due, NodeEvent, Reactor};
use crate::id::IdMap;
use crate::proto::Protocol;
use crate::wire::handshake::{Identity, Peer};
use crate::wire::Framed;
use crate::NodeId;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::mpsc::Sender;

/// A hosted node: what the message path reads (its protocol, its routes) and little else, so
/// that a node's hot fields stay together.
pub(super) struct Host<P> {
    pub(super) identity: Identity,
    pub(super) peers: HashMap<NodeId, SocketAddr>,
    /// The connection each peer's messages are sent on.
    pub(super) route: IdMap<NodeId, usize>,
    pub(super) proto: P,
    pub(super) retire: Sender<P>,
    /// An accept failed and was reported; cleared by the next one that succeeds.
    pub(super) accept_failing: bool,
    /// Accepted connections not yet authenticated.
    pub(super) strangers: Strangers,
    /// Nodes of this process it talks with in-process (see `local.rs`): each loses it when
    /// it stops, and it each of them.
    pub(super) links: IdMap<NodeId, ()>,
}

/// A hosted node's state that only refusals and handshakes touch, kept beside [`Host`] (in a
/// `Host` it moved the protocol's fields and cost the poll backend's 16 KiB ping-pong ~2.5%).
#[derive(Default)]
pub(super) struct Cold {
    /// Refusal reports in the current window.
    pub(super) refusals: Refusals,
    /// Each authenticated peer's incarnation and how many connections it has open here.
    pub(super) incarnations: IdMap<NodeId, (u64, u32)>,
    /// Every peer that ever authenticated here (the start-up grace retries only the others).
    reached: IdMap<NodeId, ()>,
}

impl Cold {
    /// `peer` authenticated on a new connection: refused if another incarnation of its id
    /// holds a connection here (an impostor, or a restart whose old life this node still
    /// hears: either way the live one is kept); counted otherwise.
    pub(super) fn admit(&mut self, peer: Peer) -> Result<(), ConnError> {
        match self.incarnations.get_mut(&peer.id) {
            Some((live, open)) if *live == peer.incarnation => {
                *open += 1;
                Ok(())
            }
            Some((live, _)) => Err(ConnError::Impostor {
                peer: peer.id,
                live: *live,
                other: peer.incarnation,
            }),
            None => {
                self.incarnations.insert(peer.id, (peer.incarnation, 1));
                Ok(())
            }
        }
    }

    /// `peer` authenticated here.
    pub(super) fn reach(&mut self, peer: NodeId) {
        self.reached.insert(peer, ());
    }

    /// Whether `peer` ever authenticated here.
    pub(super) fn reached(&self, peer: NodeId) -> bool {
        self.reached.contains_key(&peer)
    }

    /// An admitted connection of `peer` closed.
    pub(super) fn left(&mut self, peer: NodeId) {
        if let Some((_, open)) = self.incarnations.get_mut(&peer) {
            *open -= 1;
            if *open == 0 {
                self.incarnations.remove(&peer);
            }
        }
    }
}

impl<P: Protocol, B: Driver> Reactor<P, B>
where
    P::Msg: Framed,
{
    /// The id of hosted node `h` (stopped nodes have none).
    pub(super) fn id_of(&self, h: usize) -> Option<NodeId> {
        self.hosts
            .get(h)
            .and_then(|x| x.as_ref())
            .map(|x| x.identity.node_id)
    }

    pub(super) fn emit(&self, h: usize, e: NodeEvent<P::Event>) {
        if let Some(id) = self.id_of(h) {
            let _ = self.events.send((id, e));
        }
    }

    /// Hosted node `h` refused or dropped a connection (to `peer`, if it had one), for `why`:
    /// reported now, or counted and reported when its window ends (see `refusals.rs`). Cold:
    /// kept out of the message path its callers are inlined into.
    #[cold]
    #[inline(never)]
    pub(super) fn refuse(&mut self, h: usize, peer: Option<NodeId>, why: ConnError) {
        let now = self.now();
        if self.id_of(h).is_none() {
            return;
        }
        let refusal = Refusal { peer, why };
        match self.cold[h].refusals.refused(now, &refusal) {
            Verdict::Held { until } => {
                if let Some(at) = until {
                    self.timers.set(Due::Refusals(h), at);
                }
            }
            Verdict::Report => self.emit(h, NodeEvent::Refused(refusal)),
        }
    }

    /// Hosted node `h`'s window of refusal reports has ended: report what it held, if any.
    pub(super) fn refusals_window_ended(&mut self, h: usize) {
        let now = self.now();
        if self.id_of(h).is_none() {
            return;
        }
        if let Some((count, last, until)) = self.cold[h].refusals.window_ended(now) {
            if let Some(at) = until {
                self.timers.set(Due::Refusals(h), at);
            }
            if count > 0 {
                self.emit(h, NodeEvent::RefusedMore { count, last });
            }
        }
    }

    pub(super) fn commands(&mut self) -> Result<(), crate::engine::EngineError> {
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
                Command::Wake(id) => {
                    if let Some(&h) = self.by_id.get(&id) {
                        self.wake_protocol(h)?;
                    }
                }
                Command::Request { node, req } => {
                    if let Some(&h) = self.by_id.get(&node) {
                        self.request_protocol(h, req)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Kill hosted node `h`: its listener and connections close, its timers and undelivered
    /// messages go, and its protocol is handed back.
    pub(super) fn stop_node(
        &mut self,
        h: usize,
        ending: Ending,
    ) -> Result<(), crate::engine::EngineError> {
        if self.id_of(h).is_some() {
            if let Some((count, last)) = self.cold[h].refusals.take() {
                self.emit(h, NodeEvent::RefusedMore { count, last });
            }
        }
        let Some(host) = self.hosts.get_mut(h).and_then(|x| x.take()) else {
            return Ok(());
        };
        self.by_id.remove(&host.identity.node_id);
        self.io.before_closing_fds()?;
        if let Some(mut listener) = self.listeners.get_mut(h).and_then(|l| l.take()) {
            self.io.unlisten(&self.poll, &mut listener, h);
            // An armed io_uring accept holds the listener open; shutting it down ends the
            // request and stops the socket listening now, so dialers are refused as by a dead
            // process.
            let _ = socket2::SockRef::from(&listener).shutdown(std::net::Shutdown::Both);
        }
        for slot in self.conns.of_host(h) {
            if let Some(mut conn) = self.conns.take(slot) {
                self.io
                    .forget(&self.poll, &mut conn.stream, (slot, conn.generation));
                match ending {
                    Ending::Close => {
                        let _ = conn.stream.shutdown(std::net::Shutdown::Both);
                    }
                    Ending::Reset => reset(&conn.stream),
                }
                self.timers.cancel(Due::Handshake(slot));
                self.held.remove(&slot);
            }
        }
        self.stop_shm(h);
        self.cold[h] = Cold::default();
        self.timers.cancel_where(|d| {
            matches!(*d, Due::Protocol(x, _) | Due::Listener(x) | Due::Refusals(x) | Due::Crowd(x)
                | Due::Redial(x, _) if x == h)
        });
        self.inbox.retain(|&(x, _, _)| x != h);
        self.redial.retain(|&(x, _), _| x != h);
        let _ = host.retire.send(host.proto);
        self.stopped_local(h, host.identity.node_id, host.links.into_keys())
    }

    /// The listener of hosted node `h` could not accept (`e`): report it unless already
    /// reported, and, if `retry`, accept again after [`super::accept::ACCEPT_RETRY`].
    pub(super) fn rest_listener(&mut self, h: usize, e: &std::io::Error, retry: bool) {
        let at = self.now() + super::accept::ACCEPT_RETRY;
        let Some(host) = self.hosts.get_mut(h).and_then(|x| x.as_mut()) else {
            return;
        };
        let first = !std::mem::replace(&mut host.accept_failing, true);
        if retry {
            self.timers.set(Due::Listener(h), at);
        }
        if first {
            let why =
                ConnError::AcceptRests(e.to_string(), super::accept::ACCEPT_RETRY.as_millis());
            self.refuse(h, None, why);
        }
    }

    /// Hosted node `h`'s listener has rested: accept again.
    pub(super) fn wake_listener(&mut self, h: usize) -> Result<(), crate::engine::EngineError> {
        if let Some(Some(l)) = self.listeners.get(h) {
            self.io.listen_again(l, h, &mut self.io_events);
        }
        self.handle_io_events()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second incarnation of a connected id is refused, the live one kept; once the live
    /// one's connections are gone, a new incarnation (a restart) is admitted.
    #[test]
    fn an_impostor_is_refused_and_a_restart_admitted() {
        let mut cold = Cold::default();
        let peer = |incarnation| Peer {
            id: NodeId(3),
            incarnation,
        };
        cold.admit(peer(10)).unwrap();
        cold.admit(peer(10)).unwrap();
        assert_eq!(
            cold.admit(peer(11)),
            Err(ConnError::Impostor {
                peer: NodeId(3),
                live: 10,
                other: 11
            })
        );
        cold.left(NodeId(3));
        assert!(cold.admit(peer(11)).is_err(), "one connection still open");
        cold.left(NodeId(3));
        cold.admit(peer(11)).unwrap();
    }
}
