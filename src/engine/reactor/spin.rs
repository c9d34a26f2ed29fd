//! Whether a reactor spins this turn or may block: always ([`WaitMode::Busy`]), never
//! ([`WaitMode::Block`]), or for [`SPIN`] after the last turn that found work
//! ([`WaitMode::Adaptive`]).
//!
//! Adaptive waiting reads the clock only every [`ADAPTIVE_CHECK`]th spinning turn (a read is
//! ~30 ns here, a fair part of a turn), and notes the time of work then, not per message: the
//! spell ends a few turns late at most. A turn after the spell ended always reads it (it is a
//! blocking turn, long anyway).

use crate::engine::{WaitMode, SPIN};
use crate::proto::Time;

/// A spinning adaptive reactor reads the clock every this many turns.
pub(super) const ADAPTIVE_CHECK: u32 = 16;

/// The spin state of one reactor's loop.
#[derive(Debug)]
pub(super) struct Spin {
    mode: WaitMode,
    /// When work was last noted.
    last_work: Time,
    /// Whether the last check found the spell still on.
    on: bool,
    /// Work came since the clock was last read.
    unrecorded: bool,
    /// Spinning turns since the clock was last read.
    unchecked: u32,
}

impl Spin {
    /// A loop that starts at `now`, spinning if its mode ever spins.
    pub(super) fn new(mode: WaitMode, now: Time) -> Self {
        Spin {
            mode,
            last_work: now,
            on: true,
            unrecorded: false,
            unchecked: 0,
        }
    }

    /// Whether this turn spins; `now` is called only when the clock must be read.
    pub(super) fn this_turn(&mut self, now: impl FnOnce() -> Time) -> bool {
        match self.mode {
            WaitMode::Busy => true,
            WaitMode::Block => false,
            WaitMode::Adaptive => {
                self.unchecked += 1;
                if !self.on || self.unchecked >= ADAPTIVE_CHECK {
                    self.unchecked = 0;
                    let now = now();
                    if std::mem::take(&mut self.unrecorded) {
                        self.last_work = now;
                    }
                    self.on = now.since(self.last_work) < SPIN;
                }
                self.on
            }
        }
    }

    /// The turn found work (`active`): what an event brought, not the event itself (a poll
    /// reactor about to block is told its connections are writable at once, and counting that
    /// kept an idle adaptive reactor spinning for good).
    pub(super) fn worked(&mut self, active: bool) {
        self.unrecorded |= active && self.mode == WaitMode::Adaptive;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Turns of `spin` with the clock at `clock`, counting the reads.
    fn turns(spin: &mut Spin, clock: &Cell<Time>, reads: &Cell<u32>, n: u32) -> Vec<bool> {
        (0..n)
            .map(|_| {
                spin.this_turn(|| {
                    reads.set(reads.get() + 1);
                    clock.get()
                })
            })
            .collect()
    }

    #[test]
    fn busy_always_spins_and_block_never_does_without_reading_the_clock() {
        let (clock, reads) = (Cell::new(Time::ZERO), Cell::new(0));
        let mut busy = Spin::new(WaitMode::Busy, Time::ZERO);
        let mut block = Spin::new(WaitMode::Block, Time::ZERO);
        clock.set(Time::ZERO + SPIN * 10);
        assert!(turns(&mut busy, &clock, &reads, 40).iter().all(|&s| s));
        assert!(turns(&mut block, &clock, &reads, 40).iter().all(|&s| !s));
        assert_eq!(reads.get(), 0);
    }

    #[test]
    fn adaptive_spins_for_spin_after_the_last_work_reading_the_clock_every_few_turns() {
        let (clock, reads) = (Cell::new(Time::ZERO), Cell::new(0));
        let mut spin = Spin::new(WaitMode::Adaptive, Time::ZERO);
        // Within the spell: every turn spins, the clock read once per ADAPTIVE_CHECK turns.
        assert!(turns(&mut spin, &clock, &reads, 4 * ADAPTIVE_CHECK)
            .iter()
            .all(|&s| s));
        assert_eq!(reads.get(), 4);
        // Work, then the clock past the spell measured from the start but not from the work:
        // still spinning once the work was noted.
        clock.set(Time::ZERO + SPIN / 2);
        spin.worked(true);
        turns(&mut spin, &clock, &reads, ADAPTIVE_CHECK);
        clock.set(Time::ZERO + SPIN + SPIN / 4);
        assert!(turns(&mut spin, &clock, &reads, ADAPTIVE_CHECK)
            .iter()
            .all(|&s| s));
        // Past the spell since the work: the spell ends at the next read, and every turn after
        // reads the clock (a blocking turn).
        clock.set(Time::ZERO + SPIN * 2);
        let t = turns(&mut spin, &clock, &reads, ADAPTIVE_CHECK);
        assert!(!t[ADAPTIVE_CHECK as usize - 1], "{t:?}");
        let before = reads.get();
        assert!(turns(&mut spin, &clock, &reads, 3).iter().all(|&s| !s));
        assert_eq!(reads.get(), before + 3);
        // Events that brought nothing do not start a spell; work does.
        spin.worked(false);
        assert!(!turns(&mut spin, &clock, &reads, 1)[0]);
        spin.worked(true);
        assert!(turns(&mut spin, &clock, &reads, 1)[0]);
    }
}
