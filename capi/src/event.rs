//! The events a worker hands its callback, as one C struct whose fields each kind names.

use std::ffi::c_void;
use weft::prelude::{EndpointEvent, NodeEvent, RouteFailure, Suspicion};

/// An event's kind (`weft_event.kind`).
pub type weft_event_kind = u32;
/// A message for this rank: `rank` sent it under `tag`; `data`/`len` its bytes.
pub const WEFT_EV_RECEIVED: weft_event_kind = 1;
/// A send of this rank's reached `rank`'s application: `tag`; `value` the round trip in ns.
pub const WEFT_EV_DELIVERED: weft_event_kind = 2;
/// A send of this rank's to `rank` will never arrive: `tag`; `reason` a `WEFT_FAILED_*`.
pub const WEFT_EV_FAILED: weft_event_kind = 3;
/// A broadcast from `rank` (the origin gets its own): `data`/`len`.
pub const WEFT_EV_BROADCAST: weft_event_kind = 4;
/// `by` suspects `rank` failed; `reason` a `WEFT_SUSPECT_*` (which detector fired).
pub const WEFT_EV_SUSPECTED: weft_event_kind = 5;
/// A new view: `epoch` (in `tag`), its root `rank`, its live ranks `ranks`/`n_ranks`.
pub const WEFT_EV_VIEW: weft_event_kind = 6;
/// `rank` is in the view just installed and was not in the one before.
pub const WEFT_EV_JOINED: weft_event_kind = 7;
/// `rank` was in the view before and is not in this one (failed, or left).
pub const WEFT_EV_LEFT: weft_event_kind = 8;
/// An agreement decided: instance `tag`, `value`, the failed ranks `ranks`/`n_ranks`.
pub const WEFT_EV_AGREED: weft_event_kind = 9;
/// `rank` revoked (once per revocation at every live rank).
pub const WEFT_EV_REVOKED: weft_event_kind = 10;
/// At the view's root: every member acknowledged epoch `tag`.
pub const WEFT_EV_STABILIZED: weft_event_kind = 11;

/// The destination is dead for the sender's detector or view, or a relay's.
pub const WEFT_FAILED_DEAD: u32 = 1;
/// No acknowledgement after every try.
pub const WEFT_FAILED_TIMEOUT: u32 = 2;
/// The destination is not a rank of the job.
pub const WEFT_FAILED_NO_SUCH_RANK: u32 = 3;

/// The connection to the suspect was lost or could not be made (a crash, a kill).
pub const WEFT_SUSPECT_LOST: u32 = 1;
/// It missed its heartbeat deadline while its connection stayed up (it hangs).
pub const WEFT_SUSPECT_HUNG: u32 = 2;
/// A probe, or an epoch's acknowledgement, went unanswered.
pub const WEFT_SUSPECT_UNANSWERED: u32 = 3;
/// It came back as a new incarnation without its state.
pub const WEFT_SUSPECT_RESTARTED: u32 = 4;

/// One event. Its pointers are weft's and valid only during the callback: copy what you
/// keep. Fields a kind does not name are 0 (pointers null).
#[repr(C)]
pub struct weft_event {
    /// A `WEFT_EV_*`.
    pub kind: weft_event_kind,
    /// The rank the event is about (sender, destination, suspect, root, origin...).
    pub rank: u32,
    /// `WEFT_EV_SUSPECTED`: the rank that suspects.
    pub by: u32,
    /// `WEFT_EV_FAILED`: a `WEFT_FAILED_*`; `WEFT_EV_SUSPECTED`: a `WEFT_SUSPECT_*`.
    pub reason: u32,
    /// The send's tag; a view's epoch; an agreement's instance.
    pub tag: u64,
    /// `WEFT_EV_AGREED`: the value; `WEFT_EV_DELIVERED`: the round trip in nanoseconds.
    pub value: u64,
    /// `WEFT_EV_RECEIVED`, `WEFT_EV_BROADCAST`: the bytes.
    pub data: *const u8,
    /// Their length.
    pub len: usize,
    /// `WEFT_EV_VIEW`: the live ranks, ascending; `WEFT_EV_AGREED`: the failed ones.
    pub ranks: *const u32,
    /// How many.
    pub n_ranks: usize,
}

/// The application's callback: `event` for `arg` (the `callback_arg` it configured).
pub type weft_callback = Option<unsafe extern "C" fn(event: *const weft_event, arg: *mut c_void)>;

/// A callback and its argument, as configured.
#[derive(Clone, Copy)]
pub(crate) struct Callback {
    pub f: weft_callback,
    pub arg: *mut c_void,
}

// SAFETY: weft calls the callback on one thread at a time: the creating thread
// (`WEFT_PROGRESS_CALLER`) or weft's progress thread (`WEFT_PROGRESS_THREAD`, where the
// header says the callback and its argument must be usable from that thread).
unsafe impl Send for Callback {}

impl Callback {
    /// Hand `e` to the callback; whether it was an event for the application (the
    /// transport's news, which the endpoint's events repeat, is not).
    pub(crate) fn deliver(&self, e: NodeEvent<EndpointEvent>) -> bool {
        let NodeEvent::Protocol(e) = e else {
            return false;
        };
        let Some(f) = self.f else {
            return true;
        };
        let mut ev = weft_event {
            kind: 0,
            rank: 0,
            by: 0,
            reason: 0,
            tag: 0,
            value: 0,
            data: std::ptr::null(),
            len: 0,
            ranks: std::ptr::null(),
            n_ranks: 0,
        };
        // The ranks, kept alive across the call.
        let ranks: Vec<u32>;
        match &e {
            EndpointEvent::Received { from, tag, data } => {
                (ev.kind, ev.rank, ev.tag) = (WEFT_EV_RECEIVED, from.0, *tag);
                (ev.data, ev.len) = (data.as_ptr(), data.len());
            }
            EndpointEvent::Delivered { to, tag, rtt } => {
                (ev.kind, ev.rank, ev.tag) = (WEFT_EV_DELIVERED, to.0, *tag);
                ev.value = rtt.as_nanos() as u64;
            }
            EndpointEvent::Failed { to, tag, why } => {
                (ev.kind, ev.rank, ev.tag) = (WEFT_EV_FAILED, to.0, *tag);
                ev.reason = match why {
                    RouteFailure::Dead => WEFT_FAILED_DEAD,
                    RouteFailure::Timeout => WEFT_FAILED_TIMEOUT,
                    RouteFailure::NoSuchRank => WEFT_FAILED_NO_SUCH_RANK,
                };
            }
            EndpointEvent::Broadcast { origin, data } => {
                (ev.kind, ev.rank) = (WEFT_EV_BROADCAST, origin.0);
                (ev.data, ev.len) = (data.as_ptr(), data.len());
            }
            EndpointEvent::Suspected { who, by, why, .. } => {
                (ev.kind, ev.rank, ev.by) = (WEFT_EV_SUSPECTED, who.0, by.0);
                ev.reason = match why {
                    Suspicion::Lost => WEFT_SUSPECT_LOST,
                    Suspicion::Hung => WEFT_SUSPECT_HUNG,
                    Suspicion::Unanswered => WEFT_SUSPECT_UNANSWERED,
                    Suspicion::Restarted => WEFT_SUSPECT_RESTARTED,
                };
            }
            EndpointEvent::ViewInstalled {
                epoch,
                root,
                members,
                ..
            } => {
                (ev.kind, ev.rank, ev.tag) = (WEFT_EV_VIEW, root.0, *epoch);
                ranks = members.iter().map(|r| r.0).collect();
                (ev.ranks, ev.n_ranks) = (ranks.as_ptr(), ranks.len());
            }
            EndpointEvent::Joined { who } => (ev.kind, ev.rank) = (WEFT_EV_JOINED, who.0),
            EndpointEvent::Left { who } => (ev.kind, ev.rank) = (WEFT_EV_LEFT, who.0),
            EndpointEvent::Agreed { k, value, failed } => {
                (ev.kind, ev.tag, ev.value) = (WEFT_EV_AGREED, *k, *value);
                ranks = failed.iter().map(|r| r.0).collect();
                (ev.ranks, ev.n_ranks) = (ranks.as_ptr(), ranks.len());
            }
            EndpointEvent::Revoked { by } => (ev.kind, ev.rank) = (WEFT_EV_REVOKED, by.0),
            EndpointEvent::Stabilized { epoch, .. } => {
                (ev.kind, ev.tag) = (WEFT_EV_STABILIZED, *epoch);
            }
        }
        // SAFETY: the application's callback, with an event whose pointers live until it
        // returns (`e` and `ranks` are alive here), and the argument it configured.
        unsafe { f(&ev, self.arg) };
        true
    }
}
