//! The sockets of connections that ended, shut down and closed when the reactor has nothing
//! else to do. A socket's FIN exchange costs as much CPU as a message, and a lost connection
//! rarely comes alone: when a process dies, its peers on this reactor lose theirs in one turn,
//! and the reports of the failure would wait behind every teardown.

use super::conn::{reset, Ending};
use super::driver::Driver;
use super::{EngineError, Reactor};
use crate::proto::Protocol;
use crate::wire::Framed;

/// Lost connections an idle reactor shuts down per turn (each costs a FIN exchange, ~25 µs
/// here).
pub(super) const BURY_PER_TURN: usize = 2;

/// Turns with work after which lost connections are shut down anyway (see
/// [`Reactor::burial_due`]): about a millisecond of spinning turns, so a reactor under a
/// steady stream spends at most a few percent on teardowns, and their peers see the end.
const BURY_AFTER: u32 = 1024;

impl<P: Protocol, B: Driver> Reactor<P, B>
where
    P::Msg: Framed,
{
    /// Shut down (or, when the job is over, reset) and close the sockets of at most `most`
    /// lost connections. Either also ends an armed io_uring receive (its last completion is
    /// recognized as stale).
    pub(super) fn bury_lost(&mut self, ending: Ending, most: usize) -> Result<(), EngineError> {
        if self.lost.is_empty() {
            return Ok(());
        }
        self.lost_waited = 0;
        self.io.before_closing_fds()?;
        let from = self.lost.len().saturating_sub(most);
        for stream in self.lost.drain(from..) {
            match ending {
                Ending::Close => {
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                }
                Ending::Reset => reset(&stream),
            }
        }
        Ok(())
    }

    /// Whether a spinning turn shuts down lost connections: after a turn without work, or
    /// after [`BURY_AFTER`] turns that all had some. A reactor under a steady stream (or
    /// whose timers are always due) never has a turn without work, and would otherwise hold
    /// the sockets for good: refused strangers and dropped peers would never see the end.
    pub(super) fn burial_due(&self, idle: bool) -> bool {
        !self.lost.is_empty() && (idle || self.lost_waited >= BURY_AFTER)
    }
}
