//! Ring heartbeats (Gendelman et al., 2000, section 5.1): each process sends a heartbeat to the
//! next process of the ring, `(POID + 1) mod n`, every period; the next process watches it and
//! suspects it once nothing came from it for `suspect_after` periods.
//!
//! This finds what a lost connection cannot: a process that hangs (stopped, swapping, stuck in
//! a kernel call) keeps its sockets open, and its peers' kernels keep acknowledging, so the
//! transport sees nothing until unacknowledged data times out (`dead_after`, 10 s by default).
//! A suspicion from here goes into the same path as a lost connection's.
//!
//! A component, not a protocol: membership and the total-order broadcast each own one, tell it
//! the ring when their view changes ([`Heartbeat::set_ring`]), let it see every message
//! ([`Heartbeat::heard`]: any message from the watched process proves it alive, as a heartbeat
//! would) and pass it its two timers.
//!
//! Departures from the paper, each deliberate:
//! - The paper's detection is the sender's: TCP reports a peer that does not acknowledge. A
//!   hung process's kernel still acknowledges, so weft detects on the receiving side instead:
//!   the observer of a process is its ring successor, one message per process per period, as
//!   Open MPI's ULFM detector does (each process observed by one other, in a ring).
//! - A process that starts watching a new predecessor tells it so (a [`Beat`] with `watch`),
//!   and the predecessor beats to it as well as to its own successor. A table change reaches
//!   processes at different times, and may stall half-way (the root failing with it on its
//!   way): without this, a watcher that applied the change would blame a predecessor that
//!   has not applied it yet and still beats to its old successor.
//! - A watcher whose own deadline timer fires more than a period late was itself stalled (a
//!   stopped process that was continued, a starved reactor) and cannot tell whether the
//!   heartbeats it missed were sent: it starts a new deadline instead of suspecting.
//! - A predecessor never heard from is not suspected within the start-up grace
//!   ([`StartupGrace`]): it may not have started yet.

use super::startup::StartupGrace;
use super::{Outbox, Time, TimerId};
use crate::NodeId;
use std::time::Duration;

/// Timer of the next heartbeat sent.
pub const BEAT_TIMER: TimerId = TimerId(40);
/// Timer of the watched process's deadline.
pub const WATCH_TIMER: TimerId = TimerId(41);

/// The usual period: 100 ms, one small message per process ten times a second.
pub const PERIOD: Duration = Duration::from_millis(100);

/// The usual deadline, in periods: 2.5, so a hung process is suspected 1.5 to 2.5 periods after
/// it stopped, and a heartbeat may come 1.5 periods late before it is blamed.
pub const SUSPECT_AFTER: f64 = 2.5;

/// A heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Beat {
    /// The sender's count of heartbeats, for traces.
    pub seq: u64,
    /// The sender watches the receiver from now on: the receiver beats to it too, until its
    /// own ring makes the sender its successor (see [`Heartbeat::on_beat`]).
    pub watch: bool,
}

/// Settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeartbeatConfig {
    /// Time between two heartbeats.
    pub period: Duration,
    /// Silence, in periods, after which the watched process is suspected (more than 1).
    pub suspect_after: f64,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self {
            period: PERIOD,
            suspect_after: SUSPECT_AFTER,
        }
    }
}

impl HeartbeatConfig {
    /// The silence after which the watched process is suspected.
    pub fn timeout(&self) -> Duration {
        self.period.mul_f64(self.suspect_after)
    }

    /// Each wrong setting, named.
    pub fn check(&self) -> Result<(), String> {
        if self.period < Duration::from_micros(10) {
            return Err(format!(
                "heartbeat period {:?}: at least 10 µs",
                self.period
            ));
        }
        if !(self.suspect_after > 1.0 && self.suspect_after <= 1000.0) {
            // 1e308 shown as such, not as its 309 digits.
            let shown = if self.suspect_after.abs() >= 1e6 {
                format!("{:e}", self.suspect_after)
            } else {
                self.suspect_after.to_string()
            };
            return Err(format!(
                "suspect after {shown} periods: more than 1 (a heartbeat may come a little \
                 late) and at most 1000"
            ));
        }
        Ok(())
    }

    /// The settings as the job's parameters name them: processes that disagree would blame
    /// each other for beating slowly.
    pub fn params(&self) -> String {
        format!(
            "heartbeat={}us/{}",
            self.period.as_micros(),
            self.suspect_after
        )
    }
}

/// One process's heartbeats: whom it beats to, whom it watches.
#[derive(Clone, Debug)]
pub struct Heartbeat {
    cfg: HeartbeatConfig,
    succ: Option<NodeId>,
    watched: Option<NodeId>,
    /// When the watched process was last heard (or started being watched).
    heard: Time,
    /// When the armed watch timer is due.
    due: Time,
    seq: u64,
    beating: bool,
    /// A process that said it watches this one (its ring has changed and this one's has not
    /// yet): beaten to beside the successor.
    watcher: Option<NodeId>,
}

impl Heartbeat {
    /// Not running until [`Heartbeat::set_ring`].
    pub fn new(cfg: HeartbeatConfig) -> Self {
        Self {
            cfg,
            succ: None,
            watched: None,
            heard: Time::ZERO,
            due: Time::ZERO,
            seq: 0,
            beating: false,
            watcher: None,
        }
    }

    /// The settings.
    pub fn config(&self) -> &HeartbeatConfig {
        &self.cfg
    }

    /// The process watched (the ring predecessor).
    pub fn watched(&self) -> Option<NodeId> {
        self.watched
    }

    /// The process beaten to (the ring successor).
    pub fn succ(&self) -> Option<NodeId> {
        self.succ
    }

    /// The ring around this process is now `pred → me → succ` (`None`: alone). A new
    /// predecessor gets a whole deadline from now; the first call starts the heartbeats.
    pub fn set_ring<M: From<Beat>>(
        &mut self,
        now: Time,
        pred: Option<NodeId>,
        succ: Option<NodeId>,
        out: &mut Outbox<M>,
    ) {
        if succ != self.succ {
            self.succ = succ;
            if succ == self.watcher {
                self.watcher = None; // this process's ring has caught up with its watcher's
            }
            // A new successor starts watching at once; beat now rather than a period late.
            if let (Some(s), true) = (succ, self.beating) {
                self.beat(s, out);
            }
        }
        if pred != self.watched {
            self.watched = pred;
            self.heard = now;
            if let Some(p) = pred {
                self.arm_watch(now, now + self.cfg.timeout(), out);
                // It may not know yet that this process is its successor: say so.
                self.seq += 1;
                out.send(
                    p,
                    Beat {
                        seq: self.seq,
                        watch: true,
                    },
                );
            } else {
                out.cancel_timer(WATCH_TIMER);
            }
        }
        if !self.beating {
            self.beating = true;
            if let Some(s) = self.succ {
                self.beat(s, out);
            }
            out.set_timer(BEAT_TIMER, self.cfg.period);
        }
    }

    /// Stop beating and watching (the process left or was excluded).
    pub fn stop<M>(&mut self, out: &mut Outbox<M>) {
        self.beating = false;
        self.watched = None;
        self.succ = None;
        out.cancel_timer(BEAT_TIMER);
        out.cancel_timer(WATCH_TIMER);
    }

    /// A message came from `from`: if it is the watched process, it is alive.
    #[inline]
    pub fn heard(&mut self, now: Time, from: NodeId) {
        if self.watched == Some(from) {
            self.heard = now;
        }
    }

    /// A heartbeat came from `from` (besides [`Self::heard`]): one that says `from` watches
    /// this process now makes this process beat to it as well.
    pub fn on_beat(&mut self, from: NodeId, beat: &Beat) {
        if beat.watch && self.succ != Some(from) {
            self.watcher = Some(from);
        }
    }

    fn beat<M: From<Beat>>(&mut self, to: NodeId, out: &mut Outbox<M>) {
        self.seq += 1;
        out.send(
            to,
            Beat {
                seq: self.seq,
                watch: false,
            },
        );
    }

    fn arm_watch<M>(&mut self, now: Time, due: Time, out: &mut Outbox<M>) {
        self.due = due;
        out.set_timer(WATCH_TIMER, due.since(now));
    }

    /// One of this component's timers came due; the process to suspect, if any. Other timers
    /// are ignored (`None`). A predecessor that `grace` spares is watched until the grace
    /// ends instead.
    pub fn on_timer<M: From<Beat>>(
        &mut self,
        now: Time,
        timer: TimerId,
        grace: &StartupGrace,
        out: &mut Outbox<M>,
    ) -> Option<NodeId> {
        match timer {
            BEAT_TIMER if self.beating => {
                if let Some(s) = self.succ {
                    self.beat(s, out);
                }
                if let Some(w) = self.watcher {
                    self.beat(w, out);
                }
                out.set_timer(BEAT_TIMER, self.cfg.period);
                None
            }
            WATCH_TIMER => {
                let watched = self.watched?;
                if now.since(self.due) > self.cfg.period {
                    // This process was stalled itself: what it did not hear may be unread.
                    self.heard = now;
                }
                let deadline = self.heard + self.cfg.timeout();
                if let (true, Some(until)) = (now >= deadline, grace.spares(now, watched)) {
                    self.arm_watch(now, until, out);
                    return None;
                }
                if now >= deadline {
                    self.watched = None;
                    Some(watched)
                } else {
                    self.arm_watch(now, deadline, out);
                    None
                }
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Action;

    const P: Duration = Duration::from_millis(10);

    fn hb() -> Heartbeat {
        Heartbeat::new(HeartbeatConfig {
            period: P,
            suspect_after: 2.5,
        })
    }

    fn at(ms: u64) -> Time {
        Time(ms * 1_000_000)
    }

    fn none() -> StartupGrace {
        StartupGrace::none()
    }

    /// Where heartbeats went (not the asks of a new watcher).
    fn beats(out: &mut Outbox<Beat>) -> Vec<NodeId> {
        out.drain()
            .filter_map(|a| match a {
                Action::Send { to, msg } if !msg.watch => Some(to),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn it_beats_to_the_successor_every_period() {
        let mut h = hb();
        let mut out = Outbox::new();
        h.set_ring(at(0), Some(NodeId(1)), Some(NodeId(3)), &mut out);
        assert_eq!(beats(&mut out), vec![NodeId(3)]);
        assert_eq!(h.on_timer(at(10), BEAT_TIMER, &none(), &mut out), None);
        assert_eq!(beats(&mut out), vec![NodeId(3)]);
        // A new successor is beaten to at once.
        h.set_ring(at(12), Some(NodeId(1)), Some(NodeId(4)), &mut out);
        assert_eq!(beats(&mut out), vec![NodeId(4)]);
    }

    #[test]
    fn a_silent_predecessor_is_suspected_at_its_deadline_and_not_before() {
        let mut h = hb();
        let mut out = Outbox::<Beat>::new();
        h.set_ring(at(0), Some(NodeId(1)), Some(NodeId(3)), &mut out);
        h.heard(at(9), NodeId(1));
        // The first deadline (25 ms) comes; it was heard at 9 ms: wait until 34 ms.
        assert_eq!(h.on_timer(at(25), WATCH_TIMER, &none(), &mut out), None);
        let rearmed = out.drain().any(|a| {
            matches!(a, Action::SetTimer { timer: WATCH_TIMER, after } if after == Duration::from_millis(9))
        });
        assert!(rearmed);
        assert_eq!(
            h.on_timer(at(34), WATCH_TIMER, &none(), &mut out),
            Some(NodeId(1))
        );
        // Once suspected it is not watched any more, so not suspected twice.
        assert_eq!(h.on_timer(at(60), WATCH_TIMER, &none(), &mut out), None);
    }

    #[test]
    fn any_message_from_the_predecessor_counts_and_others_do_not() {
        let mut h = hb();
        let mut out = Outbox::<Beat>::new();
        h.set_ring(at(0), Some(NodeId(1)), Some(NodeId(3)), &mut out);
        h.heard(at(20), NodeId(7));
        assert_eq!(
            h.on_timer(at(25), WATCH_TIMER, &none(), &mut out),
            Some(NodeId(1))
        );
    }

    #[test]
    fn a_new_predecessor_gets_a_whole_deadline() {
        let mut h = hb();
        let mut out = Outbox::<Beat>::new();
        h.set_ring(at(0), Some(NodeId(1)), Some(NodeId(3)), &mut out);
        h.set_ring(at(20), Some(NodeId(0)), Some(NodeId(3)), &mut out);
        assert_eq!(h.on_timer(at(25), WATCH_TIMER, &none(), &mut out), None);
        assert_eq!(
            h.on_timer(at(45), WATCH_TIMER, &none(), &mut out),
            Some(NodeId(0))
        );
    }

    #[test]
    fn a_watcher_that_was_stalled_itself_does_not_blame_its_predecessor() {
        let mut h = hb();
        let mut out = Outbox::<Beat>::new();
        h.set_ring(at(0), Some(NodeId(1)), Some(NodeId(3)), &mut out);
        // Due at 25 ms, fires at 200 ms: this process was stopped.
        assert_eq!(h.on_timer(at(200), WATCH_TIMER, &none(), &mut out), None);
        // The predecessor then really is silent: suspected a deadline later.
        assert_eq!(
            h.on_timer(at(225), WATCH_TIMER, &none(), &mut out),
            Some(NodeId(1))
        );
    }

    /// A table change applied by the watcher and not yet by the watched process: the
    /// watcher says it watches, and is beaten to until the watched process's ring catches up.
    #[test]
    fn a_new_watcher_is_beaten_to_before_the_watched_process_knows_the_ring_changed() {
        let (mut watcher, mut watched) = (hb(), hb());
        let mut out = Outbox::<Beat>::new();
        // Ring 10 -> 11 -> 12; 11 is removed, and only 12 has applied it.
        watched.set_ring(at(0), Some(NodeId(9)), Some(NodeId(11)), &mut out);
        out.drain();
        watcher.set_ring(at(5), Some(NodeId(10)), Some(NodeId(13)), &mut out);
        let asks: Vec<(NodeId, Beat)> = out
            .drain()
            .filter_map(|a| match a {
                Action::Send { to, msg } => Some((to, msg)),
                _ => None,
            })
            .filter(|(_, b)| b.watch)
            .collect();
        assert_eq!(asks.len(), 1);
        assert_eq!(asks[0].0, NodeId(10));
        watched.on_beat(NodeId(12), &asks[0].1);
        assert_eq!(
            watched.on_timer(at(10), BEAT_TIMER, &none(), &mut out),
            None
        );
        assert_eq!(beats(&mut out), vec![NodeId(11), NodeId(12)]);
        // Its own ring catches up: one beat a period again, to 12.
        watched.set_ring(at(12), Some(NodeId(9)), Some(NodeId(12)), &mut out);
        out.drain();
        assert_eq!(
            watched.on_timer(at(20), BEAT_TIMER, &none(), &mut out),
            None
        );
        assert_eq!(beats(&mut out), vec![NodeId(12)]);
    }

    #[test]
    fn a_predecessor_never_heard_is_not_suspected_within_the_start_up_grace() {
        let mut h = hb();
        let mut out = Outbox::<Beat>::new();
        let mut grace = StartupGrace::new(at(0), Duration::from_millis(100));
        h.set_ring(at(0), Some(NodeId(1)), Some(NodeId(3)), &mut out);
        out.drain();
        // Its deadline (25 ms) passes in silence: watched until the grace ends instead.
        assert_eq!(h.on_timer(at(25), WATCH_TIMER, &grace, &mut out), None);
        let rearmed = out.drain().any(|a| {
            matches!(a, Action::SetTimer { timer: WATCH_TIMER, after } if after == Duration::from_millis(75))
        });
        assert!(rearmed);
        // Past the grace a silent predecessor is suspected.
        assert_eq!(
            h.on_timer(at(100), WATCH_TIMER, &grace, &mut out),
            Some(NodeId(1))
        );
        // One heard within the grace and silent since is suspected at its deadline.
        let mut h = hb();
        h.set_ring(at(0), Some(NodeId(1)), Some(NodeId(3)), &mut out);
        grace.heard(at(5), NodeId(1));
        h.heard(at(5), NodeId(1));
        assert_eq!(
            h.on_timer(at(30), WATCH_TIMER, &grace, &mut out),
            Some(NodeId(1))
        );
    }

    #[test]
    fn settings_are_checked() {
        assert!(HeartbeatConfig::default().check().is_ok());
        let bad = HeartbeatConfig {
            suspect_after: 1.0,
            ..Default::default()
        };
        assert!(bad.check().unwrap_err().contains("more than 1"));
        let bad = HeartbeatConfig {
            period: Duration::ZERO,
            ..Default::default()
        };
        assert!(bad.check().is_err());
    }
}
