//! The broadcasts a process makes by itself, for the simulator and the experiments: a number
//! of them, at most `window` unconfirmed at a time, optionally spaced.

use super::{Broadcast, OrderEvent, OrderMsg, WORK_TIMER};
use crate::buf::Payload;
use crate::proto::{Event, Outbox};
use std::time::Duration;

/// What to broadcast.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Workload {
    /// Broadcasts in total order.
    pub count: u32,
    /// At most this many unconfirmed at a time (0 counts as 1: each confirmed before the
    /// next, as in the paper's section 2).
    pub window: u32,
    /// Bytes of each.
    pub size: usize,
    /// Time between two (zero: as soon as the window allows).
    pub gap: Duration,
    /// Broadcasts without total order, sent alongside.
    pub floods: u32,
}

/// How far the workload is.
#[derive(Debug, Default)]
pub(super) struct WorkState {
    started: bool,
    submitted: u32,
    flooded: u32,
    spacing: bool,
    finished: bool,
}

impl Broadcast {
    /// Start the workload (a member at its start, a joiner once welcomed).
    pub(super) fn work_start(&mut self, out: &mut Outbox<OrderMsg>) {
        if self.work.started {
            return;
        }
        self.work.started = true;
        self.work_pump(out);
    }

    /// The gap after a broadcast is over.
    pub(super) fn work_timer(&mut self, out: &mut Outbox<OrderMsg>) {
        self.work.spacing = false;
        self.work_pump(out);
    }

    /// Broadcast what the window and the spacing allow; report when all is confirmed.
    pub(super) fn work_pump(&mut self, out: &mut Outbox<OrderMsg>) {
        if !self.work.started || !self.is_member() {
            return;
        }
        let w = self.cfg.workload.clone();
        while !self.work.spacing {
            let more =
                self.work.submitted < w.count && self.unconfirmed.len() < w.window.max(1) as usize;
            let flood = self.work.flooded < w.floods;
            if !more && !flood {
                break;
            }
            if more {
                self.work.submitted += 1;
                let body = body_of(self.my_seq + 1, w.size);
                self.submit(body, out);
            }
            if flood {
                self.work.flooded += 1;
                let body = body_of(self.flood_seq() + 1, w.size);
                self.flood(body, out);
            }
            if !w.gap.is_zero() {
                self.work.spacing = true;
                out.set_timer(WORK_TIMER, w.gap);
            }
            if !self.is_member() {
                return;
            }
        }
        if w.count > 0
            && !self.work.finished
            && self.work.submitted == w.count
            && self.unconfirmed.is_empty()
        {
            self.work.finished = true;
            out.report(Event::Order(OrderEvent::Finished { at: self.now }));
        }
    }

    /// Whether the workload is done (every broadcast made and confirmed).
    pub fn work_finished(&self) -> bool {
        self.work.finished || self.cfg.workload.count == 0
    }
}

/// `size` bytes naming `seq` (its little-endian bytes, repeated).
fn body_of(seq: u64, size: usize) -> Payload {
    let word = seq.to_le_bytes();
    Payload::from((0..size).map(|i| word[i % 8]).collect::<Vec<u8>>())
}
