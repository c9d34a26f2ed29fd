//! Protocol timers of one reactor: a binary heap of deadlines with lazy cancellation (re-arming
//! a timer bumps its generation, and stale heap entries are skipped when they surface).

use crate::proto::{Time, TimerId};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

/// Pending timers.
#[derive(Debug, Default)]
pub struct Timers {
    heap: BinaryHeap<Reverse<(Time, u64, TimerId)>>,
    live: HashMap<TimerId, u64>,
    next_gen: u64,
}

impl Timers {
    /// Arm `timer` at `at`, replacing any pending one.
    pub fn set(&mut self, timer: TimerId, at: Time) {
        self.next_gen += 1;
        self.live.insert(timer, self.next_gen);
        self.heap.push(Reverse((at, self.next_gen, timer)));
    }

    /// Whether any timer is armed.
    pub fn has_pending(&self) -> bool {
        !self.live.is_empty()
    }

    /// Forget `timer`.
    pub fn cancel(&mut self, timer: TimerId) {
        self.live.remove(&timer);
    }

    /// The next timer due at or before `now`, removed.
    pub fn pop_due(&mut self, now: Time) -> Option<TimerId> {
        while let Some(&Reverse((at, generation, timer))) = self.heap.peek() {
            if self.live.get(&timer) != Some(&generation) {
                self.heap.pop();
                continue;
            }
            if at > now {
                return None;
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
        let mut t = Timers::default();
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
