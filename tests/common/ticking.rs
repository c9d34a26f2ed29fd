//! A protocol that only keeps a timer: every `period` it runs a hook, on its reactor's
//! thread. With no period at all its reactor has work on every turn; a hook that sleeps
//! stalls the reactor, so that what arrives meanwhile is seen in one turn.

use std::time::Duration;
use weft::proto::ping::PingMsg;
use weft::proto::{Outbox, Protocol, Time, TimerId};
use weft::NodeId;

const TICK: TimerId = TimerId(1);

pub struct Ticking {
    period: Duration,
    on_tick: Box<dyn FnMut() + Send>,
}

impl Ticking {
    pub fn new(period: Duration, on_tick: impl FnMut() + Send + 'static) -> Self {
        Self {
            period,
            on_tick: Box::new(on_tick),
        }
    }
}

impl Protocol for Ticking {
    type Msg = PingMsg;
    type Event = weft::proto::Event;
    type Request = weft::proto::NoRequest;

    fn on_start(&mut self, _now: Time, out: &mut Outbox<PingMsg>) {
        out.set_timer(TICK, self.period);
    }

    fn on_message(&mut self, _now: Time, _from: NodeId, _msg: PingMsg, _out: &mut Outbox<PingMsg>) {
    }

    fn on_timer(&mut self, _now: Time, _timer: TimerId, out: &mut Outbox<PingMsg>) {
        (self.on_tick)();
        out.set_timer(TICK, self.period);
    }
}
