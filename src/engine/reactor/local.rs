//! The reactor's side of in-process delivery (`engine::link::inproc`): sending to a node of
//! this process without a connection, receiving what other reactors handed over, and telling
//! the nodes a stopped one talked with, as a lost connection would.

use super::driver::Driver;
use super::{NodeEvent, Reactor};
use crate::engine::link::inproc::{Envelope, Place};
use crate::engine::EngineError;
use crate::proto::Protocol;
use crate::wire::Framed;
use crate::NodeId;

/// Envelopes taken from each other reactor per turn: enough for a wave, few enough that the
/// turn's sockets and timers are not kept waiting behind a stream.
const RECEIVE_PER_TURN: usize = 256;

impl<P: Protocol, B: Driver> Reactor<P, B>
where
    P::Msg: Framed,
{
    /// Send `msg` from hosted node `h` to `to` in-process, if `to` is a running node of this
    /// process; else hand `msg` back for a connection (a node that stopped is dialed, and
    /// refused, as over TCP).
    #[inline]
    pub(super) fn send_local(&mut self, h: usize, to: NodeId, msg: P::Msg) -> Option<P::Msg> {
        let Some(port) = self.local.as_mut() else {
            return Some(msg);
        };
        let Some(place) = port.exchange().place(to) else {
            return Some(msg);
        };
        let from = self.hosts.get(h)?.as_ref()?.identity.node_id;
        if place.reactor == port.reactor() {
            if self.hosts.get(place.host).is_none_or(|x| x.is_none()) {
                return Some(msg);
            }
            self.link(h, to);
            self.link(place.host, from);
            self.inbox.push((place.host, from, msg));
            return None;
        }
        if !port.exchange().alive(to) {
            return Some(msg);
        }
        port.push(
            place.reactor,
            Envelope::Msg {
                to: place.host,
                from,
                msg,
            },
        );
        self.link(h, to);
        None
    }

    /// Hosted node `h` talks with `peer` in-process: said once, as a connection's
    /// authentication is.
    #[inline]
    fn link(&mut self, h: usize, peer: NodeId) {
        let Some(host) = self.hosts.get_mut(h).and_then(|x| x.as_mut()) else {
            return;
        };
        if host.links.insert(peer, ()).is_none() {
            let _ = self
                .events
                .send((host.identity.node_id, NodeEvent::Authenticated(peer)));
        }
    }

    /// Take what other reactors handed over: messages into the inbox, stopped peers
    /// suspected. Whether anything came.
    pub(super) fn receive_local(&mut self) -> Result<bool, EngineError> {
        let Some(mut port) = self.local.take() else {
            return Ok(false);
        };
        port.flush();
        let me = port.reactor();
        // (The node that loses a peer, the peer.)
        let mut gone: Vec<(Place, NodeId)> = Vec::new();
        let any = port.receive(RECEIVE_PER_TURN, |ex, e| match e {
            Envelope::Msg { to, from, msg } => {
                if self.hosts.get(to).is_some_and(|x| x.is_some()) {
                    self.inbox.push((to, from, msg));
                    self.link_from(to, from);
                } else if let (Some(place), Some(dead)) = (ex.place(from), ex.hosted(me, to)) {
                    // Stopped before it heard of the sender: refused, as at a closed port.
                    gone.push((place, dead));
                }
            }
            Envelope::Gone { to, from } => gone.push((
                Place {
                    reactor: me,
                    host: to,
                },
                from,
            )),
        });
        // Refusals of senders elsewhere go back to their reactors.
        for &(place, dead) in &gone {
            if place.reactor != me {
                let e = Envelope::Gone {
                    to: place.host,
                    from: dead,
                };
                port.push(place.reactor, e);
            }
        }
        self.local = Some(port);
        if gone.iter().any(|(p, _)| p.reactor == me) {
            // A suspicion comes after the messages that came before it (data before a FIN).
            self.deliver()?;
            for (place, dead) in gone {
                if place.reactor == me {
                    self.lost_local(place.host, dead)?;
                }
            }
        }
        Ok(any)
    }

    /// [`Self::link`] for a message that came from another reactor.
    #[inline]
    fn link_from(&mut self, h: usize, from: NodeId) {
        let new = self
            .hosts
            .get(h)
            .and_then(|x| x.as_ref())
            .is_some_and(|x| !x.links.contains_key(&from));
        if new {
            self.link(h, from);
        }
    }

    /// Hosted node `h` lost `peer`, a node of this process that stopped: suspected, once per
    /// time they talked, as when a connection drops.
    pub(super) fn lost_local(&mut self, h: usize, peer: NodeId) -> Result<(), EngineError> {
        let now = self.now();
        let Some(host) = self.hosts.get_mut(h).and_then(|x| x.as_mut()) else {
            return Ok(());
        };
        if host.links.remove(&peer).is_none() {
            return Ok(());
        }
        host.proto.on_suspect(now, peer, &mut self.outbox);
        self.emit(h, NodeEvent::Suspect(peer));
        self.apply_outbox(h)
    }

    /// Hosted node `h` (`id`) stopped, having talked with `links`: each of them loses it, on
    /// this reactor now (unless the whole reactor stops), on others through their queues,
    /// behind what `h` sent them.
    pub(super) fn stopped_local(
        &mut self,
        h: usize,
        id: NodeId,
        links: impl Iterator<Item = NodeId>,
    ) -> Result<(), EngineError> {
        let Some(port) = self.local.as_mut() else {
            return Ok(());
        };
        port.stopped(h);
        let me = port.reactor();
        let mut here = Vec::new();
        for peer in links {
            let Some(place) = port.exchange().place(peer) else {
                continue;
            };
            if place.reactor == me {
                here.push(place.host);
            } else {
                port.push(
                    place.reactor,
                    Envelope::Gone {
                        to: place.host,
                        from: id,
                    },
                );
            }
        }
        if self.stop {
            return Ok(());
        }
        for x in here {
            self.lost_local(x, id)?;
        }
        Ok(())
    }
}
