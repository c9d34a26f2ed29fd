//! Start-up is not a failure, for the detectors inside protocols (heartbeats, probes) as for
//! the engine's dials (`engine::reactor::startup`).
//!
//! A launcher or a shell loop starts a job's processes milliseconds to seconds apart. A
//! process that watches one started later hears nothing from it, and its heartbeat or probe
//! deadline would exclude a process that has not failed: eight `weft node`s started 200 ms
//! apart installed 34 views lacking a process before anything had failed. So during the grace
//! (`--startup-timeout-ms`), a peer this process has never heard from is not suspected; its
//! deadline is the end of the grace. A peer heard once is watched as always: a process that
//! was there and went silent has failed.

use super::Time;
use crate::NodeId;
use std::collections::BTreeSet;
use std::time::Duration;

/// The start-up grace of one process: until when, and whom it has heard from meanwhile.
#[derive(Clone, Debug, Default)]
pub struct StartupGrace {
    /// The grace ends here (`Time::ZERO`: no grace).
    until: Time,
    /// The peers heard from before `until` (nothing is recorded after it).
    heard: BTreeSet<NodeId>,
}

impl StartupGrace {
    /// A grace of `grace` from `start` (the protocol's `on_start`).
    pub fn new(start: Time, grace: Duration) -> Self {
        Self {
            until: start + grace,
            heard: BTreeSet::new(),
        }
    }

    /// No grace: every silent peer is suspected at its deadline.
    pub fn none() -> Self {
        Self::default()
    }

    /// A message came from `from` at `now`.
    #[inline]
    pub fn heard(&mut self, now: Time, from: NodeId) {
        if now < self.until {
            self.heard.insert(from);
        }
    }

    /// Whether `peer` is spared at `now` (never heard from, within the grace): then the end
    /// of the grace, its first possible deadline.
    pub fn spares(&self, now: Time, peer: NodeId) -> Option<Time> {
        (now < self.until && !self.heard.contains(&peer)).then_some(self.until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_never_heard_is_spared_until_the_grace_ends_and_one_heard_is_not() {
        let mut g = StartupGrace::new(Time(1_000), Duration::from_nanos(9_000));
        assert_eq!(g.spares(Time(5_000), NodeId(1)), Some(Time(10_000)));
        g.heard(Time(6_000), NodeId(1));
        assert_eq!(g.spares(Time(7_000), NodeId(1)), None);
        assert_eq!(g.spares(Time(7_000), NodeId(2)), Some(Time(10_000)));
        // Past the grace nobody is spared, and nothing more is recorded.
        assert_eq!(g.spares(Time(10_000), NodeId(2)), None);
        g.heard(Time(11_000), NodeId(3));
        assert!(!g.heard.contains(&NodeId(3)));
        assert_eq!(StartupGrace::none().spares(Time(0), NodeId(1)), None);
    }
}
