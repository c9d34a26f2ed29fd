//! The composition of Algorithms 1 and 2 on one process: tree → ring → BMG.
//!
//! The BMG rules take their `Succ` and `Pred` from the ring rules of the same process, as the
//! paper composes them. One spontaneous timer drives both rule sets, so a process is quiet
//! exactly when the paper's simulator would make it quiet: `Succ`, `Pred`, `CW[0]` and `CCW[0]`
//! are set (section 4). A change of the ring's outputs wakes the process up, and rule 1 of the
//! BMG fires again with the new neighbors.

use super::bmg::{Bmg, BmgMsg};
use super::ring::{Ring, RingMsg};
use super::spontaneous::{Spontaneous, SpontaneousConfig};
use super::{Event, Outbox, Protocol, Time, TimerId};
use crate::NodeId;

/// A message of either algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub enum OverlayMsg {
    /// Algorithm 1.
    Ring(RingMsg),
    /// Algorithm 2.
    Bmg(BmgMsg),
}

impl super::Message for OverlayMsg {
    const TAG: super::Tag = 2;
    const NAME: &'static str = "overlay";
}

impl From<RingMsg> for OverlayMsg {
    fn from(m: RingMsg) -> Self {
        OverlayMsg::Ring(m)
    }
}

impl From<BmgMsg> for OverlayMsg {
    fn from(m: BmgMsg) -> Self {
        OverlayMsg::Bmg(m)
    }
}

/// The timer of the spontaneous rules.
pub const OVERLAY_TIMER: TimerId = TimerId(3);

/// One process building the overlay.
#[derive(Clone, Debug)]
pub struct Overlay {
    /// Algorithm 1's rules and state.
    pub ring: Ring,
    /// Algorithm 2's rules and state.
    pub bmg: Bmg,
    spont: Spontaneous,
    /// Message counters, 32 bits each to keep a simulated process at its size (they wrap
    /// after 4 G messages of one process).
    sent: u32,
    received: u32,
    /// Of `sent`, Algorithm 1's (the ring's re-firings are what a slow start multiplies).
    ring_sent: u32,
    /// Times the spontaneous rules fired: a driver that takes its timers more often than
    /// another fires them more often, and the ring's messages follow.
    fired: u32,
}

impl Overlay {
    /// A process with its place in the launch tree, in a job of `n` processes.
    pub fn new(ring: Ring, n: u32, cfg: SpontaneousConfig) -> Self {
        let bmg = Bmg::new(ring.id(), n);
        Self {
            ring,
            bmg,
            spont: Spontaneous::new(OVERLAY_TIMER, cfg),
            sent: 0,
            received: 0,
            ring_sent: 0,
            fired: 0,
        }
    }

    /// Messages this process has sent (both algorithms).
    pub fn sent(&self) -> u64 {
        u64::from(self.sent)
    }

    /// Of [`Overlay::sent`], the messages of Algorithm 1 (the ring).
    pub fn ring_sent(&self) -> u64 {
        u64::from(self.ring_sent)
    }

    /// Times the spontaneous rules fired.
    pub fn fired(&self) -> u64 {
        u64::from(self.fired)
    }

    /// Messages this process has received (both algorithms).
    pub fn received(&self) -> u64 {
        u64::from(self.received)
    }

    /// Whether the process has gone quiet.
    pub fn is_quiet(&self) -> bool {
        self.spont.is_quiet()
    }

    /// Force the quiet flag (arbitrary initial configurations).
    pub fn set_quiet(&mut self, quiet: bool) {
        self.spont.set_quiet(quiet);
    }

    /// Whether both rule sets look settled locally.
    pub fn settled(&self) -> bool {
        self.ring.settled() && self.bmg.settled()
    }

    fn count_ring(&mut self, sends: usize) {
        self.ring_sent = self.ring_sent.wrapping_add(sends as u32);
    }

    fn feed_bmg(&mut self) -> bool {
        self.bmg.set_ring(self.ring.succ(), self.ring.pred())
    }
}

impl Protocol for Overlay {
    type Msg = OverlayMsg;
    type Event = crate::proto::Event;
    type Request = crate::proto::NoRequest;

    fn on_start(&mut self, _now: Time, out: &mut Outbox<OverlayMsg>) {
        self.feed_bmg();
        self.spont.start(out);
    }

    fn on_message(
        &mut self,
        _now: Time,
        from: NodeId,
        msg: OverlayMsg,
        out: &mut Outbox<OverlayMsg>,
    ) {
        let before = out.sends();
        let version = self.state_version();
        self.received = self.received.wrapping_add(1);
        match msg {
            OverlayMsg::Ring(m) => {
                let changed = self.ring.handle(from, m, out);
                self.count_ring(out.sends() - before);
                if (changed | self.feed_bmg()) && !self.settled() {
                    self.spont.wake(out);
                }
            }
            OverlayMsg::Bmg(m) => self.bmg.handle(m, out),
        }
        if self.state_version() != version {
            self.spont.progress(out);
        }
        self.sent = self.sent.wrapping_add((out.sends() - before) as u32);
    }

    fn on_timer(&mut self, now: Time, timer: TimerId, out: &mut Outbox<OverlayMsg>) {
        if timer != OVERLAY_TIMER {
            return;
        }
        let before = out.sends();
        self.fired = self.fired.wrapping_add(1);
        // A quiet process firing is the refresh: every rule fires, settled or not.
        let refresh = self.spont.is_quiet();
        if refresh || !self.ring.settled() {
            self.ring.fire(out);
        }
        self.count_ring(out.sends() - before);
        self.feed_bmg();
        if refresh || !self.bmg.settled() {
            self.bmg.fire(out);
        }
        self.spont.fired(now, self.settled(), out);
        self.sent = self.sent.wrapping_add((out.sends() - before) as u32);
    }

    /// Asked by its driver: report the counters (a launcher detecting that the construction
    /// has ended, no message in flight).
    fn on_wake(&mut self, _now: Time, out: &mut Outbox<OverlayMsg>) {
        out.report(Event::Counters {
            sent: self.sent(),
            received: self.received(),
            quiet: self.spont.is_quiet(),
        });
    }

    fn state_version(&self) -> u64 {
        self.ring.version().wrapping_add(self.bmg.version())
    }

    fn prefetch(&self) {
        self.bmg.prefetch();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulated process's overlay stays at 144 bytes (with the rules' heap parts, ~570 B a
    /// process in all): 2^24 processes fit in 10 GB only so.
    #[test]
    fn an_overlay_stays_small() {
        assert!(
            std::mem::size_of::<Overlay>() <= 144,
            "{}",
            std::mem::size_of::<Overlay>()
        );
    }

    /// Only the spontaneous timer counts as a firing, and a leaf re-sends `Info` each time.
    #[test]
    fn firings_are_counted() {
        let spont = SpontaneousConfig {
            period: std::time::Duration::from_millis(1),
            refresh: None,
            backoff: 0,
        };
        let ring = Ring::new(NodeId(1), Some(NodeId(0)), vec![]);
        assert!(ring.is_leaf());
        let mut leaf = Overlay::new(ring, 2, spont);
        let mut out = Outbox::new();
        leaf.on_start(Time(0), &mut out);
        leaf.on_timer(Time(1), OVERLAY_TIMER, &mut out);
        leaf.on_timer(Time(2), TimerId(OVERLAY_TIMER.0 + 1), &mut out);
        leaf.on_timer(Time(3), OVERLAY_TIMER, &mut out);
        assert_eq!((leaf.fired(), leaf.ring_sent()), (2, 2));
        assert!(!Ring::new(NodeId(0), None, vec![NodeId(1)]).is_leaf());
    }

    /// A leaf waiting for its successor re-sends `Info` ever more slowly; news from its
    /// parent (here its predecessor) brings the period back.
    #[test]
    fn a_waiting_leaf_backs_off_and_news_resets_it() {
        let spont = SpontaneousConfig {
            period: std::time::Duration::from_millis(1),
            refresh: None,
            backoff: 4,
        };
        let mut leaf = Overlay::new(Ring::new(NodeId(1), Some(NodeId(0)), vec![]), 4, spont);
        let mut out = Outbox::new();
        let delays = |out: &mut Outbox<OverlayMsg>| -> Vec<u128> {
            out.drain()
                .filter_map(|a| match a {
                    crate::proto::Action::SetTimer { timer, after } if timer == OVERLAY_TIMER => {
                        Some(after.as_millis())
                    }
                    _ => None,
                })
                .collect()
        };
        leaf.on_start(Time(0), &mut out);
        for t in 1..=3 {
            leaf.on_timer(Time(t), OVERLAY_TIMER, &mut out);
        }
        assert_eq!((delays(&mut out), leaf.fired()), (vec![0, 1, 2, 4], 3));
        let from_parent = OverlayMsg::Ring(RingMsg::FConnect(NodeId(0)));
        leaf.on_message(Time(4), NodeId(0), from_parent, &mut out);
        leaf.on_timer(Time(5), OVERLAY_TIMER, &mut out);
        assert!(!leaf.settled(), "no successor yet");
        // Re-armed a period away at the news, and the firing after backs off from there.
        assert_eq!(delays(&mut out), [1, 1]);
    }
}
