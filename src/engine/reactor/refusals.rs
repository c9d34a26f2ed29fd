//! How often a hosted node reports refusals. Each refusal used to be one event, so a stranger
//! that dialed in a loop grew the (unbounded) event channel as fast as it could dial, and a
//! `weft node` printed a line per attempt. A node now reports the first [`BURST`] refusals of a
//! [`WINDOW`] one by one, counts the rest, and when the window ends reports how many there
//! were and the last one's reason ([`NodeEvent::RefusedMore`]): at most `BURST + 1` refusal
//! events per node per window, and the counts add up to every refusal. Suspicions and
//! protocol events are never held: they are bounded by the job, not by strangers.
//!
//! [`NodeEvent::RefusedMore`]: super::NodeEvent::RefusedMore

use crate::proto::Time;
use std::time::Duration;

/// How long a window of refusal reports lasts.
pub(super) const WINDOW: Duration = Duration::from_secs(1);

/// Refusals a node reports one by one per window.
pub(super) const BURST: u32 = 16;

/// One hosted node's refusal reports in the current window.
#[derive(Debug, Default)]
pub(super) struct Refusals {
    /// Whether a window is open (its end is a reactor timer).
    open: bool,
    /// Refusals reported one by one in this window.
    reported: u32,
    /// Refusals held back in this window, and the last one's reason.
    held: u64,
    last: String,
}

/// What to do with a refusal.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Report it now; if `until` is set, a window just opened and ends then.
    Report { until: Option<Time> },
    /// It is counted, to be reported when the window ends.
    Held,
}

impl Refusals {
    /// A refusal at `now`, for `why`.
    pub(super) fn refused(&mut self, now: Time, why: &str) -> Verdict {
        if !self.open {
            self.open = true;
            self.reported = 1;
            return Verdict::Report {
                until: Some(now + WINDOW),
            };
        }
        if self.reported < BURST {
            self.reported += 1;
            return Verdict::Report { until: None };
        }
        self.held += 1;
        self.last.clear();
        self.last.push_str(why);
        Verdict::Held
    }

    /// The window ended at `now`: the refusals held in it, if any, and when the next window
    /// ends (one opens at once when some were held: the flood may go on).
    pub(super) fn window_ended(&mut self, now: Time) -> Option<(u64, String, Time)> {
        let (count, last) = self.take()?;
        self.open = true;
        Some((count, last, now + WINDOW))
    }

    /// The refusals held so far, if any, to report now (the node stops); the window closes.
    pub(super) fn take(&mut self) -> Option<(u64, String)> {
        self.open = false;
        self.reported = 0;
        if self.held == 0 {
            return None;
        }
        Some((
            std::mem::take(&mut self.held),
            std::mem::take(&mut self.last),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_reported_the_rest_counted_and_every_refusal_accounted_for() {
        let mut r = Refusals::default();
        let t0 = Time(5);
        assert_eq!(
            r.refused(t0, "a"),
            Verdict::Report {
                until: Some(t0 + WINDOW)
            }
        );
        for _ in 1..BURST {
            assert_eq!(r.refused(t0, "b"), Verdict::Report { until: None });
        }
        for i in 0..100 {
            assert_eq!(r.refused(t0, &format!("c{i}")), Verdict::Held);
        }
        let end = t0 + WINDOW;
        assert_eq!(r.window_ended(end), Some((100, "c99".into(), end + WINDOW)));
        // The flood goes on: a new window reports a burst again.
        assert_eq!(r.refused(end, "d"), Verdict::Report { until: None });
        // A window with nothing held closes; the next refusal opens one.
        assert_eq!(r.window_ended(end + WINDOW), None);
        let later = end + WINDOW + WINDOW;
        assert_eq!(
            r.refused(later, "e"),
            Verdict::Report {
                until: Some(later + WINDOW)
            }
        );
    }

    #[test]
    fn a_stopping_node_hands_over_what_it_held() {
        let mut r = Refusals::default();
        for _ in 0..BURST + 3 {
            r.refused(Time(0), "x");
        }
        assert_eq!(r.take(), Some((3, "x".into())));
        assert_eq!(r.take(), None);
    }
}
