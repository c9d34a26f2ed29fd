//! The reactor's clock: nanoseconds since the cluster's epoch, read straight from
//! `CLOCK_MONOTONIC`.
//!
//! A reactor reads the clock once per turn that delivers messages, so once per message in a
//! ping-pong. `Instant::elapsed` costs about 90 instructions there (a `Timespec` subtraction
//! with its checks, a `Duration`, a 128-bit `as_nanos`); this is the vDSO call and a multiply.
//! `Instant` is `CLOCK_MONOTONIC` on Linux, so the two agree: the offset between them is taken
//! once, when the clock is made.

use crate::proto::Time;
use std::time::Instant;

/// A monotonic clock whose zero is a given [`Instant`].
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// `CLOCK_MONOTONIC` nanoseconds at the epoch.
    origin: u64,
}

impl Clock {
    /// A clock that reads zero at `epoch` (which may be in the past).
    pub fn since(epoch: Instant) -> Self {
        let raw = monotonic_ns();
        let elapsed = epoch.elapsed().as_nanos() as u64;
        Self {
            origin: raw.saturating_sub(elapsed),
        }
    }

    /// Nanoseconds since the epoch.
    #[inline]
    pub fn now(&self) -> Time {
        Time(monotonic_ns().saturating_sub(self.origin))
    }
}

#[inline]
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn agrees_with_instant_and_moves_forward() {
        let epoch = Instant::now() - Duration::from_millis(50);
        let clock = Clock::since(epoch);
        let a = clock.now();
        let reference = epoch.elapsed().as_nanos() as u64;
        std::thread::sleep(Duration::from_millis(2));
        let b = clock.now();
        // Taken just after `a`, the Instant reading is within a millisecond of it.
        assert!(a.0 >= 50_000_000, "{a:?}");
        assert!(a.0.abs_diff(reference) < 1_000_000, "{a:?} vs {reference}");
        assert!(b.0 >= a.0 + 2_000_000, "{a:?} then {b:?}");
    }
}
