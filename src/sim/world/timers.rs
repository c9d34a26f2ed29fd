//! A process's pending timers in the round-counted simulator, 16 bytes while it has at most
//! one (every process of the overlay has exactly one), instead of a `Vec`'s 24 and its heap
//! block: at 2^24 processes that is most of a gigabyte.

use crate::proto::TimerId;

/// Pending timers of one process: `(timer, due round)`, at most one entry per timer.
#[derive(Clone, Debug, Default)]
pub(super) enum Timers {
    /// None pending.
    #[default]
    None,
    /// One pending.
    One(TimerId, u64),
    /// Two or more. Boxed (a thin pointer) to keep the enum at 16 bytes: a `Vec` or a boxed
    /// slice inline would make it 24 or 32.
    #[allow(clippy::box_collection)]
    Many(Box<Vec<(TimerId, u64)>>),
}

impl Timers {
    /// Arm `timer` for round `due`, replacing its pending entry.
    pub(super) fn set(&mut self, timer: TimerId, due: u64) {
        self.cancel(timer);
        *self = match std::mem::take(self) {
            Timers::None => Timers::One(timer, due),
            Timers::One(t, d) => Timers::Many(Box::new(vec![(t, d), (timer, due)])),
            Timers::Many(mut v) => {
                v.push((timer, due));
                Timers::Many(v)
            }
        };
    }

    /// Forget `timer`, if pending.
    pub(super) fn cancel(&mut self, timer: TimerId) {
        match self {
            Timers::None => {}
            Timers::One(t, _) => {
                if *t == timer {
                    *self = Timers::None;
                }
            }
            Timers::Many(v) => {
                v.retain(|&(t, _)| t != timer);
                self.shrink();
            }
        }
    }

    /// The earliest due round among timers due by `round`.
    pub(super) fn due_since(&self, round: u64) -> Option<u64> {
        self.entries().map(|(_, d)| d).filter(|&d| d <= round).min()
    }

    /// Remove and return the timer due by `round` that is due first (ties: the lower id).
    pub(super) fn take_due(&mut self, round: u64) -> Option<TimerId> {
        let (t, _) = self
            .entries()
            .filter(|&(_, due)| due <= round)
            .min_by_key(|&(t, due)| (due, t))?;
        self.cancel(t);
        Some(t)
    }

    fn entries(&self) -> impl Iterator<Item = (TimerId, u64)> + '_ {
        let (one, many) = match self {
            Timers::None => (None, &[][..]),
            Timers::One(t, d) => (Some((*t, *d)), &[][..]),
            Timers::Many(v) => (None, &v[..]),
        };
        one.into_iter().chain(many.iter().copied())
    }

    fn shrink(&mut self) {
        if let Timers::Many(v) = self {
            *self = match v.len() {
                0 => Timers::None,
                1 => Timers::One(v[0].0, v[0].1),
                _ => return,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_timer_stays_inline_and_many_behave_as_a_set() {
        assert_eq!(std::mem::size_of::<Timers>(), 16);
        let mut t = Timers::default();
        t.set(TimerId(3), 10);
        assert!(matches!(t, Timers::One(TimerId(3), 10)));
        t.set(TimerId(3), 12);
        assert!(
            matches!(t, Timers::One(TimerId(3), 12)),
            "re-arming replaces"
        );
        t.set(TimerId(1), 12);
        t.set(TimerId(2), 5);
        assert_eq!(t.due_since(4), None);
        assert_eq!(t.due_since(20), Some(5));
        assert_eq!(t.take_due(20), Some(TimerId(2)));
        // Equal due rounds: the lower id first.
        assert_eq!(t.take_due(20), Some(TimerId(1)));
        assert!(matches!(t, Timers::One(TimerId(3), 12)), "back inline");
        assert_eq!(t.take_due(11), None);
        t.cancel(TimerId(3));
        assert!(matches!(t, Timers::None));
        assert_eq!(t.take_due(u64::MAX), None);
    }
}
