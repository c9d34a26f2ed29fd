//! The timers of one reactor: a binary heap of deadlines with lazy cancellation (re-arming
//! a timer bumps its generation, and stale heap entries are skipped when they surface). A
//! reactor keys its hosted nodes' protocol timers by (node, timer), beside its own deadlines
//! (handshakes, resting listeners).

use crate::id::IdMap;
use crate::proto::{Time, TimerId};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

/// Pending timers, named by `K`. Keys are the reactor's own (never chosen by a peer), hashed
/// with the id hasher.
#[derive(Debug)]
pub struct Timers<K = TimerId> {
    heap: BinaryHeap<Reverse<(Time, u64, K)>>,
    live: IdMap<K, u64>,
    next_gen: u64,
}

impl<K> Default for Timers<K> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            live: IdMap::default(),
            next_gen: 0,
        }
    }
}

impl<K: Copy + Ord + std::hash::Hash> Timers<K> {
    /// Arm `timer` at `at`, replacing any pending one.
    pub fn set(&mut self, timer: K, at: Time) {
        self.next_gen += 1;
        self.live.insert(timer, self.next_gen);
        self.heap.push(Reverse((at, self.next_gen, timer)));
    }

    /// Whether any timer is armed.
    pub fn has_pending(&self) -> bool {
        !self.live.is_empty()
    }

    /// Forget `timer`.
    pub fn cancel(&mut self, timer: K) {
        self.live.remove(&timer);
    }

    /// Forget every timer `which` selects (a node leaving a shared reactor).
    pub fn cancel_where(&mut self, mut which: impl FnMut(&K) -> bool) {
        self.live.retain(|k, _| !which(k));
    }

    /// The next timer due at or before `now`, removed. A spinning reactor asks on every turn,
    /// so the usual answer (the earliest entry is not due) costs a peek and no hash lookup: a
    /// stale entry that is not due either waits until it surfaces.
    #[inline]
    pub fn pop_due(&mut self, now: Time) -> Option<K> {
        while let Some(&Reverse((at, generation, timer))) = self.heap.peek() {
            if at > now {
                return None;
            }
            if self.live.get(&timer) != Some(&generation) {
                self.heap.pop();
                continue;
            }
            self.heap.pop();
            self.live.remove(&timer);
            return Some(timer);
        }
        None
    }

    /// Time until the next live deadline (zero if overdue), `None` if nothing is pending.
    pub fn next_in(&mut self, now: Time) -> Option<Duration> {
        while let Some(&Reverse((at, generation, timer))) = self.heap.peek() {
            if self.live.get(&timer) != Some(&generation) {
                self.heap.pop();
                continue;
            }
            return Some(at.since(now));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rearm_replaces_and_cancel_forgets() {
        let mut t: Timers = Timers::default();
        t.set(TimerId(1), Time(100));
        t.set(TimerId(2), Time(50));
        t.set(TimerId(1), Time(200)); // replaces the first arming
        assert_eq!(t.next_in(Time(0)), Some(Duration::from_nanos(50)));
        assert_eq!(t.pop_due(Time(150)), Some(TimerId(2)));
        assert_eq!(t.pop_due(Time(150)), None, "timer 1 was moved to 200");
        t.cancel(TimerId(1));
        assert_eq!(t.pop_due(Time(1000)), None);
        assert_eq!(t.next_in(Time(0)), None);
    }
}
