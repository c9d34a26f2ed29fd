//! Released connections: a node closes a connection on purpose, and neither end takes the
//! close for a failure ([`ReactorOptions::reconnect`], every message on a connection of its
//! own, as on the Process Order paper's hosts, whose 64 descriptors could not hold one per
//! peer).
//!
//! The end that releases queues a goodbye ([`Kind::Bye`]) behind what it sent and stops
//! routing to the peer; the peer answers with its own goodbye behind what it still had queued
//! and stops routing too; the first end then closes, and the second closes on the end of
//! the stream. Both read everything sent before the goodbyes, so nothing is lost.
//!
//! FIFO holds across a release: while a released connection to a peer is still closing,
//! what the node sends that peer waits here, and goes on a new connection (or one the peer
//! opened) only once the old one is closed, that is once the peer has read all of it.
//!
//! A release is clean only when the goodbyes were exchanged: the end that said it first closes
//! on the peer's answer, the other on the end of the stream after its answer. A connection
//! that ends otherwise (the peer killed before it answered, a reset) is a failure as any
//! other, and its peer is suspected. A peer that hangs during it (no answer) holds at most [`HELD_MAX`] messages
//! here; the next one closes the connection as stalled, and the peer is suspected. Once
//! released, a peer is not watched: with no connection open, its failure is found when a
//! message is next sent to it (the dial fails), or by a protocol's own heartbeats.
//!
//! [`ReactorOptions::reconnect`]: crate::engine::ReactorOptions::reconnect
//! [`Kind::Bye`]: crate::wire::Kind::Bye

use super::conn::{Ending, Goodbye};
use super::driver::Driver;
use super::error::ConnError;
use super::{EngineError, Reactor};
use crate::proto::Protocol;
use crate::wire::Framed;
use crate::NodeId;

/// Most messages held for one peer while its released connections close: a live peer
/// answers a goodbye within a round trip, so reaching this means it stopped reading.
pub(super) const HELD_MAX: usize = 4096;

/// A peer whose released connections are closing: how many, and what waits for them.
pub(super) struct Releasing<M> {
    closing: u32,
    held: Vec<M>,
}

impl<M> Default for Releasing<M> {
    fn default() -> Self {
        Self {
            closing: 0,
            held: Vec::new(),
        }
    }
}

impl<P: Protocol, B: Driver> Reactor<P, B>
where
    P::Msg: Framed,
{
    /// Say goodbye on `slot` (`who`: first, or answering the peer's), stop routing to its
    /// peer over it, and hold what is sent to that peer until it is closed.
    pub(super) fn say_goodbye(&mut self, slot: usize, who: Goodbye) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        let Some(peer) = conn.peer else {
            return;
        };
        conn.goodbye = Some(who);
        let mac = conn
            .session
            .as_mut()
            .filter(|s| s.covers(false))
            .map(|s| &mut s.send);
        conn.out.push_bye(mac);
        let h = conn.host;
        self.unroute(h, peer, slot);
        self.releasing.entry((h, peer)).or_default().closing += 1;
    }

    /// The peer's goodbye arrived on `slot`: answer it, or, if it answers ours, end the
    /// connection (the error closes it quietly, see [`Self::close`]).
    pub(super) fn goodbye_heard(&mut self, slot: usize) -> Result<(), ConnError> {
        match self.conns.get(slot).and_then(|c| c.goodbye) {
            Some(Goodbye::Ours) => Err(ConnError::Released),
            Some(Goodbye::Theirs) => Err(ConnError::Unexpected(crate::wire::Kind::Bye)),
            None => {
                self.say_goodbye(slot, Goodbye::Theirs);
                self.io.push_out(&self.poll, &mut self.conns, slot)
            }
        }
    }

    /// A message for `to` while a released connection to it is closing: held (`None`), or
    /// handed back when nothing is closing. Past [`HELD_MAX`], `Err` names the stall.
    pub(super) fn held_for_release(
        &mut self,
        h: usize,
        to: NodeId,
        msg: P::Msg,
    ) -> Result<Option<P::Msg>, usize> {
        let Some(r) = self.releasing.get_mut(&(h, to)) else {
            return Ok(Some(msg));
        };
        if r.held.len() >= HELD_MAX {
            return Err(r.held.len());
        }
        r.held.push(msg);
        Ok(None)
    }

    /// The stalled peer's closing connections end as failures: their goodbyes are forgotten,
    /// so closing them suspects the peer.
    pub(super) fn release_stalled(&mut self, h: usize, to: NodeId) -> Result<(), EngineError> {
        let slots: Vec<usize> = self
            .conns
            .of_host(h)
            .into_iter()
            .filter(|&s| {
                self.conns
                    .get(s)
                    .is_some_and(|c| c.peer == Some(to) && c.goodbye.is_some())
            })
            .collect();
        let held = self.releasing.remove(&(h, to)).map_or(0, |r| r.held.len());
        for s in slots {
            if let Some(c) = self.conns.get_mut(s) {
                c.goodbye = None;
            }
            self.close(s, ConnError::Stalled(held))?;
        }
        Ok(())
    }

    /// A released connection of hosted node `h` to `peer` was closed (its socket in
    /// `self.lost`): shut it down now, so that the peer sees the end, and once the last one
    /// to `peer` is closed, send what waited.
    pub(super) fn released(&mut self, h: usize, peer: NodeId) -> Result<(), EngineError> {
        self.bury_lost(Ending::Close, 1)?;
        let Some(r) = self.releasing.get_mut(&(h, peer)) else {
            return Ok(());
        };
        r.closing = r.closing.saturating_sub(1);
        if r.closing > 0 {
            return Ok(());
        }
        let held = self
            .releasing
            .remove(&(h, peer))
            .map_or(Vec::new(), |r| r.held);
        for msg in held {
            self.send(h, peer, msg)?;
        }
        Ok(())
    }
}
