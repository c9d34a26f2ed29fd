//! How often a hosted node reports refusals. Each refusal used to be one event, so a stranger
//! that dialed in a loop grew the (unbounded) event channel as fast as it could dial, and a
//! `weft node` printed a line per attempt. Now a node makes at most [`BURST`] refusal reports
//! in any [`WINDOW`] (a sliding one: the bound holds over every second, not only over
//! fixed ones). A refusal past the bound is counted, and the count, with the last one's
//! reason, is reported as one event ([`NodeEvent::RefusedMore`]) as soon as the window allows
//! another report. Every refusal is either reported or counted in one such event.
//! Suspicions and protocol events are never held: they are bounded by the job, not by
//! strangers.
//!
//! [`NodeEvent::RefusedMore`]: super::NodeEvent::RefusedMore

use super::error::Refusal;
use crate::proto::Time;
use std::collections::VecDeque;
use std::time::Duration;

/// The window the bound holds over.
pub(super) const WINDOW: Duration = Duration::from_secs(1);

/// Refusal reports (one by one or counted) a node makes in any window.
pub(super) const BURST: usize = 16;

/// One hosted node's refusal reports.
#[derive(Debug, Default)]
pub(super) struct Refusals {
    /// When the last reports (at most [`BURST`]) were made, oldest first.
    reported: VecDeque<Time>,
    /// Refusals held back, and the last one.
    held: u64,
    last: Option<Refusal>,
    /// A timer is armed to report what is held.
    armed: bool,
}

/// What to do with a refusal.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Report it now.
    Report,
    /// It is counted; if `until` is set, arm a timer then to report the count.
    Held {
        /// When the window allows the next report (set once per count).
        until: Option<Time>,
    },
}

impl Refusals {
    /// Forget the reports older than a window at `now`.
    fn slide(&mut self, now: Time) {
        while self
            .reported
            .front()
            .is_some_and(|&t| now.since(t) >= WINDOW)
        {
            self.reported.pop_front();
        }
    }

    /// A refusal at `now`.
    pub(super) fn refused(&mut self, now: Time, refusal: &Refusal) -> Verdict {
        self.slide(now);
        if self.reported.len() < BURST && self.held == 0 {
            self.reported.push_back(now);
            return Verdict::Report;
        }
        self.held += 1;
        self.last = Some(refusal.clone());
        let until = (!std::mem::replace(&mut self.armed, true)).then(|| self.next_slot(now));
        Verdict::Held { until }
    }

    /// When the window next allows a report.
    fn next_slot(&self, now: Time) -> Time {
        match self.reported.front() {
            Some(&t) if self.reported.len() >= BURST => t + WINDOW,
            _ => now,
        }
    }

    /// The timer armed by a held refusal went off at `now`: the count and the last one to
    /// report, if the window allows (else, when to try again).
    pub(super) fn window_ended(&mut self, now: Time) -> Option<(u64, Refusal, Option<Time>)> {
        self.armed = false;
        self.slide(now);
        if self.held == 0 {
            return None;
        }
        if self.reported.len() >= BURST {
            self.armed = true;
            let again = self.next_slot(now);
            return self.last.clone().map(|l| (0, l, Some(again)));
        }
        self.reported.push_back(now);
        let (count, last) = self.take()?;
        Some((count, last, None))
    }

    /// The refusals held so far, if any, to report now (the node stops, or their slot came).
    pub(super) fn take(&mut self) -> Option<(u64, Refusal)> {
        let held = std::mem::take(&mut self.held);
        let last = self.last.take()?;
        (held > 0).then_some((held, last))
    }
}

#[cfg(test)]
mod tests {
    use super::super::error::ConnError;
    use super::*;

    fn r(i: usize) -> Refusal {
        Refusal {
            peer: None,
            why: ConnError::HandshakeTimeout(i as u128),
        }
    }

    /// Whatever the pace of refusals, no window of a second holds more than `BURST` reports,
    /// and every refusal is reported or counted.
    #[test]
    fn no_sliding_window_holds_more_than_the_burst() {
        for step_ms in [0u64, 1, 3, 37, 59, 400] {
            let mut refusals = Refusals::default();
            let mut reports: Vec<(Time, u64)> = Vec::new(); // (when, how many it stands for)
            let mut timer: Option<Time> = None;
            let mut now = Time(1_000_000_000);
            for i in 0..400 {
                // Fire the timer if it is due before this refusal.
                while let Some(t) = timer.filter(|&t| t <= now) {
                    timer = None;
                    if let Some((count, _, again)) = refusals.window_ended(t) {
                        if count > 0 {
                            reports.push((t, count));
                        }
                        timer = again;
                    }
                }
                match refusals.refused(now, &r(i)) {
                    Verdict::Report => reports.push((now, 1)),
                    Verdict::Held { until } => timer = until.or(timer),
                }
                now = now + Duration::from_millis(step_ms);
            }
            let total: u64 =
                reports.iter().map(|r| r.1).sum::<u64>() + refusals.take().map_or(0, |t| t.0);
            assert_eq!(total, 400, "{step_ms} ms apart");
            for (i, &(t, _)) in reports.iter().enumerate() {
                let within = reports[i..]
                    .iter()
                    .take_while(|&&(u, _)| u.since(t) < WINDOW)
                    .count();
                assert!(
                    within <= BURST,
                    "{step_ms} ms apart: {within} reports in a second"
                );
            }
        }
    }

    #[test]
    fn a_stopping_node_hands_over_what_it_held() {
        let mut rf = Refusals::default();
        for i in 0..BURST + 3 {
            rf.refused(Time(0), &r(i));
        }
        assert_eq!(rf.take().map(|t| t.0), Some(3));
        assert_eq!(rf.take(), None);
    }
}
