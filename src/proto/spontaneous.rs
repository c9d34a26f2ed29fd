//! The timer discipline of spontaneous rules.
//!
//! In the guarded-rule formalism a spontaneous rule (one whose guard is local state, not a
//! reception) may fire at any time; the proofs assume a fair scheduler that keeps firing it
//! forever. A real node fires it on a timer every `period` while its state is unsettled, then
//! goes quiet, as the simulator of Bosilca et al. does (section 4): it stops firing but keeps
//! answering messages. A quiet node wakes up when a message changes its state.
//!
//! Quiet-forever is only safe from a clean start. From an arbitrary configuration (memory or
//! message corruption, the self-stabilization fault model) a node can go quiet on a wrong value
//! that only someone else's rule would correct, so a quiet node may still re-fire every `refresh`:
//! the fairness the proofs rely on, at a rate that costs nothing measurable.

use super::{Event, Outbox, Protocol, Time, TimerId};
use crate::NodeId;
use std::time::Duration;

/// How often spontaneous rules fire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpontaneousConfig {
    /// Firing period while the node's state is unsettled.
    pub period: Duration,
    /// Firing period once quiet; `None` stops firing (the paper's simulator).
    pub refresh: Option<Duration>,
    /// How many times the period may double while the node stays unsettled and unchanged
    /// (0: a fixed period, the paper's simulator). A change of state brings it back to
    /// `period`. See [`Spontaneous::fired`].
    pub backoff: u8,
}

impl Default for SpontaneousConfig {
    fn default() -> Self {
        Self {
            period: Duration::from_millis(1),
            refresh: Some(Duration::from_secs(1)),
            backoff: DEFAULT_BACKOFF,
        }
    }
}

/// The state of one node's spontaneous-rule timer: 24 bytes, the periods kept in nanoseconds
/// (every process of a simulated million holds one).
#[derive(Clone, Debug)]
pub struct Spontaneous {
    timer: TimerId,
    quiet: bool,
    /// Doublings of the period so far, and at most.
    doubled: u8,
    backoff: u8,
    period_ns: u64,
    /// `NO_REFRESH` for none.
    refresh_ns: u64,
}

const NO_REFRESH: u64 = u64::MAX;

/// Most doublings of the period: 2^16 periods is past any round trip worth waiting for.
pub const MAX_BACKOFF: u8 = 16;

/// Doublings a real node allows by default: 32 periods, 32 ms at the default period, about
/// the round trip of a new connection's first message when 512 processes share two cores
/// (its handshake waits 30–40 ms there behind the reactors' backlog).
pub const DEFAULT_BACKOFF: u8 = 5;

impl Spontaneous {
    /// A timer named `timer`, not yet armed.
    pub fn new(timer: TimerId, cfg: SpontaneousConfig) -> Self {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(NO_REFRESH - 1);
        Self {
            timer,
            quiet: false,
            doubled: 0,
            backoff: cfg.backoff.min(MAX_BACKOFF),
            period_ns: ns(cfg.period),
            refresh_ns: cfg.refresh.map_or(NO_REFRESH, ns),
        }
    }

    fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }

    /// The period after this many doublings.
    fn backed_off(&self) -> Duration {
        Duration::from_nanos(self.period_ns.saturating_mul(1 << self.doubled))
    }

    fn refresh(&self) -> Option<Duration> {
        (self.refresh_ns != NO_REFRESH).then(|| Duration::from_nanos(self.refresh_ns))
    }

    /// The timer this discipline arms.
    pub fn timer(&self) -> TimerId {
        self.timer
    }

    /// Whether the node has gone quiet.
    pub fn is_quiet(&self) -> bool {
        self.quiet
    }

    /// Force the quiet flag (arbitrary initial configurations in the simulator).
    pub fn set_quiet(&mut self, quiet: bool) {
        self.quiet = quiet;
    }

    /// Arm the first firing, immediately.
    pub fn start<M>(&mut self, out: &mut Outbox<M>) {
        if !self.quiet {
            out.set_timer(self.timer, Duration::ZERO);
        } else if let Some(r) = self.refresh() {
            out.set_timer(self.timer, r);
        }
    }

    /// Re-arm after the rules fired; `settled` says whether the local state is now correct.
    ///
    /// Unsettled, the next firing comes a period later, and with a backoff each firing that
    /// follows no change of state waits twice as long as the last, up to `2^backoff`
    /// periods: what the rules sent is on its way, and under load an answer takes many
    /// periods (a new connection's handshake waits behind every reactor's backlog). Firing
    /// every period meanwhile re-sends the same messages, which deepen that backlog: at 512
    /// processes on two cores, leaves fired 56 times each and nine messages of ten were
    /// re-sends (`bluegene_notes/bmg-routing.md`). Fairness, which the proofs need, holds:
    /// the rules still fire, at a bounded period.
    pub fn fired<M>(&mut self, now: Time, settled: bool, out: &mut Outbox<M>) {
        if settled {
            if !self.quiet {
                self.quiet = true;
                out.report(Event::Quiet { at: now });
            }
            if let Some(r) = self.refresh() {
                out.set_timer(self.timer, r);
            }
        } else {
            self.quiet = false;
            out.set_timer(self.timer, self.backed_off());
            self.doubled = (self.doubled + 1).min(self.backoff);
        }
    }

    /// The local state changed while the node is unsettled: the next firing comes a period
    /// from now, not after the wait the backoff had reached (a rule may now have something
    /// new to send: Algorithm 2's first rule waits for the ring's final neighbors), and the
    /// ones after it back off from the period again.
    pub fn progress<M>(&mut self, out: &mut Outbox<M>) {
        // After two doublings the pending timer is two or more periods away: bring it back.
        if self.doubled >= 2 && !self.quiet {
            out.set_timer(self.timer, self.period());
        }
        self.doubled = 0;
    }

    /// The local state changed: a quiet node starts firing again, and a backed-off one
    /// fires at its period again.
    pub fn wake<M>(&mut self, out: &mut Outbox<M>) {
        if self.quiet {
            self.quiet = false;
            self.doubled = 0;
            out.report(Event::Woke);
            out.set_timer(self.timer, self.period());
        } else {
            self.progress(out);
        }
    }
}

/// Guarded rules with one spontaneous rule set, as a protocol runs them: what
/// [`Standalone`] needs to drive them.
pub trait Rules {
    /// Messages of the rules.
    type Msg;
    /// The timer of the spontaneous rules.
    const TIMER: TimerId;
    /// Fire the spontaneous rules.
    fn fire(&mut self, out: &mut Outbox<Self::Msg>);
    /// Run the rule a message triggers; `true` if the output state changed (which wakes a
    /// quiet node).
    fn handle(&mut self, from: NodeId, msg: Self::Msg, out: &mut Outbox<Self::Msg>) -> bool;
    /// Whether the local state looks final.
    fn settled(&self) -> bool;
    /// Counter bumped on every change of the outputs.
    fn version(&self) -> u64;
}

/// One rule set run alone as a protocol, its spontaneous rules on the [`Spontaneous`] timer.
#[derive(Clone, Debug)]
pub struct Standalone<R> {
    /// The rules and their state.
    pub rules: R,
    spont: Spontaneous,
}

impl<R: Rules> Standalone<R> {
    /// Run `rules` with the given timing.
    pub fn new(rules: R, cfg: SpontaneousConfig) -> Self {
        Self {
            rules,
            spont: Spontaneous::new(R::TIMER, cfg),
        }
    }
}

impl<R: Rules> Protocol for Standalone<R> {
    type Msg = R::Msg;
    type Event = crate::proto::Event;
    type Request = crate::proto::NoRequest;

    fn on_start(&mut self, _now: Time, out: &mut Outbox<R::Msg>) {
        self.spont.start(out);
    }

    fn on_message(&mut self, _now: Time, from: NodeId, msg: R::Msg, out: &mut Outbox<R::Msg>) {
        if self.rules.handle(from, msg, out) {
            self.spont.wake(out);
        }
    }

    fn on_timer(&mut self, now: Time, timer: TimerId, out: &mut Outbox<R::Msg>) {
        if timer != R::TIMER {
            return;
        }
        // A quiet node firing is the refresh: the rules fire, settled or not.
        if self.spont.is_quiet() || !self.rules.settled() {
            self.rules.fire(out);
        }
        self.spont.fired(now, self.rules.settled(), out);
    }

    fn state_version(&self) -> u64 {
        self.rules.version()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Action;

    const T: TimerId = TimerId(7);

    /// The delays the timer was armed with, in order.
    fn armed(out: &mut Outbox<()>) -> Vec<u64> {
        out.drain()
            .filter_map(|a| match a {
                Action::SetTimer { timer: T, after } => Some(after.as_millis() as u64),
                _ => None,
            })
            .collect()
    }

    fn spont(backoff: u8) -> Spontaneous {
        let cfg = SpontaneousConfig {
            period: Duration::from_millis(1),
            refresh: None,
            backoff,
        };
        Spontaneous::new(T, cfg)
    }

    /// Unsettled and unchanged, the period doubles up to its ceiling; a change of state
    /// brings it back, quiet or not.
    #[test]
    fn the_period_backs_off_until_the_state_changes() {
        let mut s = spont(3);
        let mut out = Outbox::new();
        for _ in 0..6 {
            s.fired(Time::ZERO, false, &mut out);
        }
        assert_eq!(armed(&mut out), [1, 2, 4, 8, 8, 8]);
        // The change re-arms the far timer at the period.
        s.progress(&mut out);
        s.fired(Time::ZERO, false, &mut out);
        assert_eq!(armed(&mut out), [1, 1]);
        // A timer a period away is left as it is.
        s.progress(&mut out);
        assert!(armed(&mut out).is_empty());
        s.fired(Time::ZERO, true, &mut out);
        assert!(s.is_quiet());
        s.wake(&mut out);
        s.fired(Time::ZERO, false, &mut out);
        // The wake re-arms at the period, and so does the firing after it.
        assert_eq!(armed(&mut out), [1, 1]);
    }

    /// Without a backoff the period stays fixed, as in the paper's simulator.
    #[test]
    fn no_backoff_keeps_the_period() {
        let mut s = spont(0);
        let mut out = Outbox::new();
        for _ in 0..4 {
            s.fired(Time::ZERO, false, &mut out);
        }
        assert_eq!(armed(&mut out), [1, 1, 1, 1]);
    }

    /// A backoff past the ceiling is held to it.
    #[test]
    fn the_backoff_is_bounded() {
        let mut s = spont(u8::MAX);
        let mut out = Outbox::new();
        for _ in 0..40 {
            s.fired(Time::ZERO, false, &mut out);
        }
        let last = *armed(&mut out).last().unwrap();
        assert_eq!(last, 1 << MAX_BACKOFF);
    }
}
