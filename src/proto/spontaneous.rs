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
}

impl Default for SpontaneousConfig {
    fn default() -> Self {
        Self {
            period: Duration::from_millis(1),
            refresh: Some(Duration::from_secs(1)),
        }
    }
}

/// The state of one node's spontaneous-rule timer: 24 bytes, the periods kept in nanoseconds
/// (every process of a simulated million holds one).
#[derive(Clone, Debug)]
pub struct Spontaneous {
    timer: TimerId,
    quiet: bool,
    period_ns: u64,
    /// `NO_REFRESH` for none.
    refresh_ns: u64,
}

const NO_REFRESH: u64 = u64::MAX;

impl Spontaneous {
    /// A timer named `timer`, not yet armed.
    pub fn new(timer: TimerId, cfg: SpontaneousConfig) -> Self {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(NO_REFRESH - 1);
        Self {
            timer,
            quiet: false,
            period_ns: ns(cfg.period),
            refresh_ns: cfg.refresh.map_or(NO_REFRESH, ns),
        }
    }

    fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
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
    pub fn fired<M>(&mut self, settled: bool, out: &mut Outbox<M>) {
        if settled {
            if !self.quiet {
                self.quiet = true;
                out.report(Event::Quiet);
            }
            if let Some(r) = self.refresh() {
                out.set_timer(self.timer, r);
            }
        } else {
            self.quiet = false;
            out.set_timer(self.timer, self.period());
        }
    }

    /// The local state changed: a quiet node starts firing again.
    pub fn wake<M>(&mut self, out: &mut Outbox<M>) {
        if self.quiet {
            self.quiet = false;
            out.report(Event::Woke);
            out.set_timer(self.timer, self.period());
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

    fn on_start(&mut self, _now: Time, out: &mut Outbox<R::Msg>) {
        self.spont.start(out);
    }

    fn on_message(&mut self, _now: Time, from: NodeId, msg: R::Msg, out: &mut Outbox<R::Msg>) {
        if self.rules.handle(from, msg, out) {
            self.spont.wake(out);
        }
    }

    fn on_timer(&mut self, _now: Time, timer: TimerId, out: &mut Outbox<R::Msg>) {
        if timer != R::TIMER {
            return;
        }
        // A quiet node firing is the refresh: the rules fire, settled or not.
        if self.spont.is_quiet() || !self.rules.settled() {
            self.rules.fire(out);
        }
        self.spont.fired(self.rules.settled(), out);
    }

    fn state_version(&self) -> u64 {
        self.rules.version()
    }
}
