//! Sans-IO protocols: pure state machines driven by the simulator and by the engine.
//!
//! A protocol never touches a socket, a clock or a thread (the habit of quinn-proto and smoltcp).
//! Its driver calls [`Protocol::on_start`] once, then [`Protocol::on_message`] for every message
//! that arrives and [`Protocol::on_timer`] when a timer it armed comes due, always passing the
//! current time. The protocol answers by pushing [`Action`]s into an [`Outbox`], which the driver
//! drains after every call: send this message to that node, arm this timer, report this event.
//!
//! Because the same code runs under `sim` and under the engine, a simulated figure and a measured
//! one are two runs of one implementation.

pub mod agreement;
pub mod bmg;
pub mod broadcast;
pub mod bsp;
pub mod endpoint;
pub mod grid;
pub mod heartbeat;
pub mod held;
pub mod membership;
pub mod message;
pub mod order;
pub mod overlay;
pub mod pair;
pub mod ping;
pub mod relay;
pub mod revoke;
pub mod ring;
pub mod route;
pub mod spontaneous;
pub mod stamped;
pub mod startup;
pub mod storage;
pub mod uniform;
pub mod views;

pub use message::{Message, Tag};

use crate::NodeId;
use std::time::Duration;

/// A driver's clock reading, in nanoseconds since the driver started. Protocols only compare
/// and subtract these; they never read a clock themselves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub u64);

impl Time {
    /// The driver's epoch.
    pub const ZERO: Time = Time(0);

    /// Time elapsed since `earlier` (zero if `earlier` is later).
    pub fn since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl std::ops::Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        Time(
            self.0
                .saturating_add(d.as_nanos().min(u64::MAX as u128) as u64),
        )
    }
}

/// Names one timer of a protocol instance. Arming a timer that is already pending replaces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerId(pub u32);

/// Something a protocol wants its driver (and through it, the user) to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The node's local state is settled and its spontaneous rules stopped firing.
    Quiet {
        /// When, on the node's clock: a driver's reader may get the event much later (on
        /// cores its reactors keep busy), and a construction's time is when it happened.
        at: Time,
    },
    /// The node's local state changed after it had gone quiet; it fires its rules again.
    Woke,
    /// The protocol has finished its work (e.g. all pings done).
    Done,
    /// Membership news: a detection, a new view, a stabilized tree.
    Member(membership::MemberEvent),
    /// Process Order broadcast news: deliveries, confirmations, table changes.
    Order(broadcast::OrderEvent),
    /// BSPAGREEMENT news: the initial value, the agreed one.
    Agreement(agreement::AgreementEvent),
    /// A protocol's message counters and whether it is quiet, when its driver wakes it to
    /// ask (the overlay's [`Protocol::on_wake`]): a launcher that sees the messages sent by
    /// all equal those received by all in two rounds of asking knows none is in flight.
    Counters {
        /// Messages sent so far.
        sent: u64,
        /// Messages received so far.
        received: u64,
        /// Whether its spontaneous rules have stopped.
        quiet: bool,
    },
}

/// What a protocol asks its driver to do. `E` is what it reports: its
/// [`Protocol::Event`] (weft's own protocols report [`Event`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action<M, E = Event> {
    /// Send `msg` to the node `to` (reliable, FIFO per pair of nodes, as the papers assume).
    Send {
        /// Destination; the driver drops messages to ids it does not know.
        to: NodeId,
        /// The message.
        msg: M,
    },
    /// Call [`Protocol::on_timer`] with `timer` after `after` (replacing a pending one).
    SetTimer {
        /// Which timer.
        timer: TimerId,
        /// Delay from now.
        after: Duration,
    },
    /// Forget a pending timer, if any.
    CancelTimer(TimerId),
    /// Hand the application an event: the driver passes it on unchanged (the engine as
    /// [`crate::engine::reactor::NodeEvent::Protocol`], the simulator in its reports).
    Report(E),
}

/// The actions a protocol produced during one call; the driver drains it after every call.
#[derive(Debug)]
pub struct Outbox<M, E = Event> {
    actions: Vec<Action<M, E>>,
}

impl<M, E> Default for Outbox<M, E> {
    fn default() -> Self {
        Self {
            actions: Vec::new(),
        }
    }
}

impl<M, E> Outbox<M, E> {
    /// An empty outbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queue a message. Accepts any message convertible to `M`, so a protocol nested in a
    /// composite writes its own message type into the composite's outbox.
    pub fn send(&mut self, to: NodeId, msg: impl Into<M>) {
        self.actions.push(Action::Send {
            to,
            msg: msg.into(),
        });
    }

    /// Arm (or re-arm) a timer.
    pub fn set_timer(&mut self, timer: TimerId, after: Duration) {
        self.actions.push(Action::SetTimer { timer, after });
    }

    /// Cancel a timer.
    pub fn cancel_timer(&mut self, timer: TimerId) {
        self.actions.push(Action::CancelTimer(timer));
    }

    /// Queue an action as it is (a composite passing on what a nested protocol asked for).
    pub fn push(&mut self, action: Action<M, E>) {
        self.actions.push(action);
    }

    /// Report an event.
    pub fn report(&mut self, event: E) {
        self.actions.push(Action::Report(event));
    }

    /// Take every queued action, in the order they were produced.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Action<M, E>> {
        self.actions.drain(..)
    }

    /// Move every action of `other` to the end of this outbox.
    pub fn append(&mut self, mut other: Outbox<M, E>) {
        self.actions.append(&mut other.actions);
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    /// Number of queued actions.
    pub fn len(&self) -> usize {
        self.actions.len()
    }

    /// Number of queued messages.
    pub fn sends(&self) -> usize {
        self.actions
            .iter()
            .filter(|a| matches!(a, Action::Send { .. }))
            .count()
    }
}

/// The outbox of protocol `P`: its messages, its events.
pub type OutboxOf<P> = Outbox<<P as Protocol>::Msg, <P as Protocol>::Event>;

/// The request type of a protocol the application asks nothing of: no value of it exists, so
/// no request can be made.
pub type NoRequest = std::convert::Infallible;

/// A sans-IO protocol instance: one per process.
///
/// Its channel to the application is typed both ways: the application hands it
/// [`Protocol::Request`]s (the driver calls [`Protocol::on_request`], in the order they were
/// made), and it hands the application [`Protocol::Event`]s ([`Outbox::report`]), which the
/// driver passes on unchanged. No queue of the protocol's own sits between them.
pub trait Protocol {
    /// The messages this protocol exchanges.
    type Msg;

    /// What it reports to its application ([`Action::Report`]).
    type Event;

    /// What its application asks of it ([`NoRequest`] for a protocol that takes nothing).
    type Request;

    /// Called once, before any other event.
    fn on_start(&mut self, now: Time, out: &mut Outbox<Self::Msg, Self::Event>);

    /// Called for each message received, in FIFO order per sender. `from` is the sender's id,
    /// which the transport (or the simulator) vouches for.
    fn on_message(
        &mut self,
        now: Time,
        from: NodeId,
        msg: Self::Msg,
        out: &mut Outbox<Self::Msg, Self::Event>,
    );

    /// Called when a timer armed with [`Outbox::set_timer`] comes due.
    fn on_timer(&mut self, now: Time, timer: TimerId, out: &mut Outbox<Self::Msg, Self::Event>);

    /// The transport lost its connection to `peer` (or could not make one): a suspected
    /// failure, which the protocol may act on (the failure detectors of the membership papers).
    fn on_suspect(&mut self, _now: Time, _peer: NodeId, _out: &mut Outbox<Self::Msg, Self::Event>) {
    }

    /// The application asks something of the protocol (send this, keep that), through its
    /// driver. Requests from one application reach the protocol in the order they were made,
    /// after its [`Protocol::on_start`].
    fn on_request(
        &mut self,
        _now: Time,
        _req: Self::Request,
        _out: &mut Outbox<Self::Msg, Self::Event>,
    ) {
    }

    /// The driver wakes the protocol without a request: a held start
    /// ([`held::Held`]), a launcher asking for counters (the overlay). A protocol that has no
    /// use for it ignores it.
    fn on_wake(&mut self, _now: Time, _out: &mut Outbox<Self::Msg, Self::Event>) {}

    /// A counter that changes whenever the protocol's output state changes. Drivers compare it
    /// before and after a call to notice a change without diffing state.
    fn state_version(&self) -> u64 {
        0
    }

    /// A hint with no effect on behavior: start loading, without waiting, the memory behind
    /// pointers that the next `on_message` will read. The simulator calls it a few messages
    /// ahead of delivery, when a million processes' state is far out of cache.
    fn prefetch(&self) {}
}

/// Ask the CPU to bring the `len` bytes at `p` into cache, without waiting (a no-op where no
/// prefetch instruction is wired up).
#[inline(always)]
pub fn prefetch_bytes<T>(p: *const T, len: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in (0..len).step_by(64) {
        // SAFETY: a prefetch never faults and reads nothing architecturally; any address is
        // allowed.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                (p as *const i8).wrapping_add(line),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}
