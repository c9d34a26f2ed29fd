//! A hosted node's *strangers*: the connections it accepted that have not authenticated yet,
//! oldest first.
//!
//! The handshake deadline alone lets anyone who opens connections and says nothing hold them
//! for its full length (10 s by default), and while they hold every descriptor, or the
//! listener's backlog, a real peer waits behind them. So a node bounds its strangers, as
//! sshd's `MaxStartups` does, with two differences:
//!
//! - It closes the *oldest* stranger rather than refusing the newest: a real handshake is one
//!   round trip and a hash, so the connection that has said nothing the longest is the least
//!   likely to be real.
//! - Only a stranger that has waited past a grace period ([`grace`]) is closed for crowding.
//!   A real burst (a thousand peers dialing the root at once) is never cut short: it may pass
//!   the bound for as long as its handshakes take.
//!
//! A stranger is closed for crowding when a new connection makes more than the bound wait, when
//! the oldest reaches its grace while more than the bound still wait (a timer), or when
//! `accept` finds no descriptor free.

use super::conn::Ending;
use super::conns::Conns;
use super::driver::Driver;
use super::error::ConnError;
use super::{Due, EngineError, Reactor};
use crate::proto::{Protocol, Time};
use crate::wire::Framed;
use std::collections::VecDeque;
use std::time::Duration;

/// How long a stranger may wait before it can be closed to make room: a tenth of the
/// handshake deadline (1 s by default, hundreds of round trips even for a loaded peer).
pub(super) fn grace(handshake_timeout: Duration) -> Duration {
    handshake_timeout / 10
}

/// The accepted, unauthenticated connections of one hosted node.
///
/// Entries are `(slot, generation, accepted at)`. A connection that authenticates or closes
/// is counted out at once ([`Self::left`]) but its entry stays until it reaches the front or
/// the queue is compacted; `waiting` asks the reactor whether an entry still names a stranger.
#[derive(Debug, Default)]
pub(super) struct Strangers {
    queue: VecDeque<(usize, u32, Time)>,
    waiting: usize,
}

impl Strangers {
    /// A connection was accepted into `slot` (its `generation`) at `at`.
    pub(super) fn arrived(
        &mut self,
        slot: usize,
        generation: u32,
        at: Time,
        waiting: impl Fn(usize, u32) -> bool,
    ) {
        self.waiting += 1;
        // Entries of connections that have left pile up behind a long-waiting one; dropping
        // them when they outnumber the live ones keeps the queue within twice the count.
        if self.queue.len() >= 2 * self.waiting + 16 {
            self.queue.retain(|&(s, g, _)| waiting(s, g));
        }
        self.queue.push_back((slot, generation, at));
    }

    /// A stranger authenticated or closed.
    pub(super) fn left(&mut self) {
        self.waiting = self.waiting.saturating_sub(1);
    }

    /// How many strangers wait.
    pub(super) fn count(&self) -> usize {
        self.waiting
    }

    /// When the oldest stranger still waiting arrived.
    pub(super) fn oldest(&mut self, waiting: impl Fn(usize, u32) -> bool) -> Option<Time> {
        while let Some(&(slot, generation, at)) = self.queue.front() {
            if waiting(slot, generation) {
                return Some(at);
            }
            self.queue.pop_front();
        }
        None
    }

    /// The oldest stranger's slot and arrival, if it arrived at `before` or earlier; it is
    /// taken off the queue (the caller closes it, which counts it out).
    pub(super) fn overdue(
        &mut self,
        before: Time,
        waiting: impl Fn(usize, u32) -> bool,
    ) -> Option<(usize, Time)> {
        while let Some(&(slot, generation, at)) = self.queue.front() {
            if !waiting(slot, generation) {
                self.queue.pop_front();
                continue;
            }
            if at > before {
                return None;
            }
            self.queue.pop_front();
            return Some((slot, at));
        }
        None
    }
}

/// Whether `slot` of `conns` holds hosted node `h`'s connection of `generation`, still
/// unauthenticated.
fn is_stranger(conns: &Conns, h: usize, slot: usize, generation: u32) -> bool {
    conns
        .get(slot)
        .is_some_and(|c| c.host == h && c.generation == generation && c.peer.is_none())
}

impl<P: Protocol, B: Driver> Reactor<P, B>
where
    P::Msg: Framed,
{
    /// Hosted node `h` accepted the connection in `slot` at `now`.
    pub(super) fn stranger_arrived(&mut self, h: usize, slot: usize, now: Time) {
        let conns = &self.conns;
        if let Some(host) = self.hosts.get_mut(h).and_then(|x| x.as_mut()) {
            let generation = conns.generation_of(slot).unwrap_or(0);
            host.strangers
                .arrived(slot, generation, now, |s, g| is_stranger(conns, h, s, g));
        }
    }

    /// More strangers wait on hosted node `h` than [`super::ReactorConfig::max_strangers`]: close
    /// the oldest while they are past their grace (younger ones are let be: a real burst), and
    /// if too many still wait, come back when the next oldest reaches its grace.
    pub(super) fn crowd_out(&mut self, h: usize) -> Result<(), EngineError> {
        loop {
            let waiting = match self.hosts.get(h).and_then(|x| x.as_ref()) {
                Some(host) => host.strangers.count(),
                None => return Ok(()),
            };
            if waiting <= self.cfg.options.max_strangers {
                return Ok(());
            }
            let Some((slot, age)) = self.overdue_stranger(h) else {
                // Nobody is past the grace yet: the oldest will be then.
                let conns = &self.conns;
                let oldest = self
                    .hosts
                    .get_mut(h)
                    .and_then(|x| x.as_mut())
                    .and_then(|host| host.strangers.oldest(|s, g| is_stranger(conns, h, s, g)));
                if let Some(at) = oldest {
                    self.timers.set(
                        Due::Crowd(h),
                        at + grace(self.cfg.options.handshake_timeout),
                    );
                }
                return Ok(());
            };
            let why = ConnError::CrowdedOut {
                waited_ms: age.as_millis(),
                why: format!(
                    "with {waiting} connections waiting (most {})",
                    self.cfg.options.max_strangers
                ),
            };
            self.close(slot, why)?;
        }
    }

    /// `accept` found no descriptor free (`e`): free the descriptors of connections that
    /// already ended, or else close hosted node `h`'s oldest stranger past its grace, at
    /// once, so that the connection next in the backlog gets its descriptor. Whether any was
    /// freed.
    pub(super) fn make_room(&mut self, h: usize, e: &std::io::Error) -> Result<bool, EngineError> {
        if !super::accept::out_of_descriptors(e) {
            return Ok(false);
        }
        if !self.lost.is_empty() {
            // They would be closed on the next idle turn anyway (see `bury_lost`).
            self.bury_lost(Ending::Close, usize::MAX)?;
            return Ok(true);
        }
        let Some((slot, age)) = self.overdue_stranger(h) else {
            return Ok(false);
        };
        let why = ConnError::CrowdedOut {
            waited_ms: age.as_millis(),
            why: format!("and no descriptor free ({e})"),
        };
        self.close(slot, why)?;
        // `close` put its socket last on the lost list: shut and free that one now.
        self.bury_lost(Ending::Close, 1)?;
        Ok(true)
    }

    /// Hosted node `h`'s oldest stranger if it has waited past its grace, and how long.
    fn overdue_stranger(&mut self, h: usize) -> Option<(usize, Duration)> {
        let now = self.now();
        let grace = grace(self.cfg.options.handshake_timeout);
        let before = Time(now.0.saturating_sub(grace.as_nanos() as u64));
        let conns = &self.conns;
        let host = self.hosts.get_mut(h)?.as_mut()?;
        let (slot, at) = host
            .strangers
            .overdue(before, |s, g| is_stranger(conns, h, s, g))?;
        Some((slot, now.since(at)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashSet;

    #[test]
    fn the_oldest_stranger_past_the_grace_goes_first_and_peers_are_skipped() {
        let live: RefCell<HashSet<(usize, u32)>> = RefCell::default();
        let waiting = |s, g| live.borrow().contains(&(s, g));
        let mut st = Strangers::default();
        for (slot, at) in [(3, 10), (1, 20), (4, 30), (2, 40)] {
            live.borrow_mut().insert((slot, 7));
            st.arrived(slot, 7, Time(at), waiting);
        }
        assert_eq!(st.count(), 4);
        // Slot 3 authenticates; slot 1 is now the oldest.
        live.borrow_mut().remove(&(3, 7));
        st.left();
        assert_eq!(st.count(), 3);
        // Nobody has waited since 15 or earlier but the one that left.
        assert_eq!(st.overdue(Time(15), waiting), None);
        assert_eq!(st.overdue(Time(25), waiting), Some((1, Time(20))));
        // The caller closes it.
        live.borrow_mut().remove(&(1, 7));
        st.left();
        // A reused slot with a new generation is a new connection, not the old entry.
        live.borrow_mut().insert((3, 8));
        st.arrived(3, 8, Time(50), waiting);
        assert_eq!(st.overdue(Time(45), waiting), Some((4, Time(30))));
        assert_eq!(st.overdue(Time(45), waiting), Some((2, Time(40))));
        assert_eq!(st.overdue(Time(45), waiting), None);
        assert_eq!(st.overdue(Time(50), waiting), Some((3, Time(50))));
    }

    #[test]
    fn peers_that_authenticate_behind_a_silent_stranger_do_not_pile_up() {
        let live: RefCell<HashSet<(usize, u32)>> = RefCell::default();
        let waiting = |s, g| live.borrow().contains(&(s, g));
        let mut st = Strangers::default();
        live.borrow_mut().insert((0, 0));
        st.arrived(0, 0, Time(0), waiting);
        for g in 1..10_000u32 {
            live.borrow_mut().insert((1, g));
            st.arrived(1, g, Time(g as u64), waiting);
            live.borrow_mut().remove(&(1, g));
            st.left();
            // Two waited at most: the queue stays near 2 * 2 + 16 entries, not 10 000.
            assert!(st.queue.len() <= 21, "{}", st.queue.len());
        }
        assert_eq!(st.count(), 1);
        assert_eq!(st.overdue(Time(0), waiting), Some((0, Time(0))));
        assert_eq!(st.overdue(Time(u64::MAX), waiting), None);
    }
}
