//! Start-up is not a failure ([`ReactorOptions::startup_grace`]); nor is a dial the peer
//! deferred to its own (`crossing.rs`), whose messages wait here for the peer's connection.
//!
//! A launcher (or a shell loop) starts a job's processes milliseconds to seconds apart. With a
//! fixed peer list, a node dials a peer that is not listening yet, is refused, and would
//! suspect it: five `weft node`s started by a loop each excluded whoever came after them before
//! anything had failed. So during the grace, a dial to a peer this node has never reached
//! that finds nothing listening is tried again with backoff, and what the protocol sent that
//! peer waits with it. A peer once reached is suspected at once as always: a process that was
//! there and is gone has failed. Past the grace, a refused dial is a suspicion again.
//!
//! [`ReactorOptions::startup_grace`]: crate::engine::ReactorOptions::startup_grace

use super::crossing::DEFER_WAIT;
use super::driver::Driver;
use super::error::ConnError;
use super::{Due, EngineError, Reactor};
use crate::proto::{Protocol, Time};
use crate::wire::Framed;
use crate::NodeId;
use std::time::Duration;

/// First pause before dialing again; it doubles with each try.
const FIRST_PAUSE: Duration = Duration::from_millis(10);

/// Longest pause between tries: a peer that starts a second late is reached within a second
/// or so, and a grace of minutes costs a few dials a second per missing peer.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// A peer hosted node `h` keeps trying to reach: how many tries failed, and what waits for it
/// while no dial is under way.
pub(super) struct Redial<M> {
    tries: u32,
    /// When the peer first deferred our dial to its own (`crossing.rs`).
    deferred_since: Option<Time>,
    pub(super) held: Vec<M>,
    /// The last try was a shared-memory link (`shm.rs`): the next one is TCP's, so a peer on
    /// this host that takes no links is still reached.
    pub(super) link_tried: bool,
}

impl<M> Redial<M> {
    fn new() -> Self {
        Self {
            tries: 0,
            deferred_since: None,
            held: Vec::new(),
            link_tried: false,
        }
    }
}

/// The pause after `tries` failed tries.
fn pause(tries: u32) -> Duration {
    FIRST_PAUSE
        .saturating_mul(1u32 << tries.min(16))
        .min(MAX_PAUSE)
}

/// Whether `why` is what a peer that has not started yet looks like: nothing listens on its
/// port, or its host has no route yet.
fn not_there_yet(why: &ConnError) -> bool {
    match why {
        ConnError::Io(f) => matches!(
            f.errno,
            Some(libc::ECONNREFUSED | libc::ENETUNREACH | libc::EHOSTUNREACH | libc::ETIMEDOUT)
        ),
        _ => false,
    }
}

impl<P: Protocol, B: Driver> Reactor<P, B>
where
    P::Msg: Framed,
{
    /// Hosted node `h`'s dial to `to` failed with `why`, `held` waiting for it. During the
    /// start-up grace, for a peer never reached and a peer that is not there yet: keep `held`,
    /// dial again after a pause, and say so (`true`); the caller then suspects nobody.
    pub(super) fn redial_later(
        &mut self,
        h: usize,
        to: NodeId,
        held: Vec<P::Msg>,
        why: &ConnError,
    ) -> bool {
        let now = self.now();
        if why.deferred() {
            let r = self.redial.entry((h, to)).or_insert_with(Redial::new);
            let since = *r.deferred_since.get_or_insert(now);
            // The peer's own dial lives a handshake's timeout at most: past that, deferring
            // is no longer the peer waiting for its connection.
            if now.since(since) >= self.cfg.options.handshake_timeout {
                self.redial.remove(&(h, to));
                return false;
            }
            r.held.extend(held);
            self.timers.set(Due::Redial(h, to), now + DEFER_WAIT);
            return true;
        }
        let within = now.since(self.started) < self.cfg.options.startup_grace;
        if !within || !not_there_yet(why) || self.cold[h].reached(to) {
            self.redial.remove(&(h, to));
            return false;
        }
        let r = self.redial.entry((h, to)).or_insert_with(Redial::new);
        r.held.extend(held);
        let after = pause(r.tries);
        r.tries += 1;
        self.timers.set(Due::Redial(h, to), now + after);
        true
    }

    /// Time for hosted node `h` to dial `to` again, with what waited for it.
    pub(super) fn redial_now(&mut self, h: usize, to: NodeId) -> Result<(), EngineError> {
        let Some(r) = self.redial.get_mut(&(h, to)) else {
            return Ok(());
        };
        let waiting = std::mem::take(&mut r.held);
        let routed = self
            .hosts
            .get(h)
            .and_then(|x| x.as_ref())
            .is_some_and(|x| x.route.contains_key(&to));
        if routed {
            // The peer dialed us meanwhile: what waited goes that way.
            self.redial.remove(&(h, to));
            for msg in waiting {
                self.send(h, to, msg)?;
            }
            return Ok(());
        }
        // A peer on this host is tried over a shared-memory link first, then over TCP, in
        // turns (see `shm.rs`).
        let mut waiting = waiting;
        let link_next = !std::mem::replace(&mut r.link_tried, false);
        if link_next && self.shm_redial(h, to, &mut waiting)? {
            if let Some(r) = self.redial.get_mut(&(h, to)) {
                r.link_tried = true;
            }
            return Ok(());
        }
        match self.dial(h, to)? {
            Some(slot) => self.held.entry(slot).or_default().extend(waiting),
            // Refused at once: either waiting again (`redial_later`) or suspected.
            None => {
                if let Some(r) = self.redial.get_mut(&(h, to)) {
                    r.held.extend(waiting);
                }
            }
        }
        Ok(())
    }

    /// A message for `to` that hosted node `h` has no connection for: kept for the next dial
    /// if one is to come (`None`), else handed back.
    pub(super) fn waits_for_redial(&mut self, h: usize, to: NodeId, msg: P::Msg) -> Option<P::Msg> {
        match self.redial.get_mut(&(h, to)) {
            Some(r) => {
                r.held.push(msg);
                None
            }
            None => Some(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::reactor::error::IoFailure;

    #[test]
    fn pauses_double_up_to_a_second() {
        let p: Vec<u128> = (0..10).map(|t| pause(t).as_millis()).collect();
        assert_eq!(p, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
        assert_eq!(pause(u32::MAX), MAX_PAUSE);
    }

    #[test]
    fn only_a_peer_that_is_not_listening_yet_is_tried_again() {
        let io = |errno| {
            ConnError::Io(IoFailure {
                op: "connect".into(),
                errno: Some(errno),
                text: String::new(),
            })
        };
        assert!(not_there_yet(&io(libc::ECONNREFUSED)));
        assert!(not_there_yet(&io(libc::EHOSTUNREACH)));
        assert!(!not_there_yet(&io(libc::EMFILE)));
        assert!(!not_there_yet(&ConnError::ClosedByPeer));
        assert!(!not_there_yet(&ConnError::NoAddress(NodeId(3))));
    }
}
