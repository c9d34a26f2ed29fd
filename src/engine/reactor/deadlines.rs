//! Every connection must authenticate in time. Without a deadline, a stranger that connects
//! and says nothing (or half a frame) holds its socket for as long as its kernel answers
//! keepalives, and a dial to a port that accepts but never answers holds back the messages
//! queued for that peer, with no suspicion ever reaching the protocol.

use crate::proto::Time;
use std::collections::VecDeque;
use std::time::Duration;

/// Handshakes under way, oldest first, by connection slot and generation. Every handshake
/// gets the same time, so the order they start in is the order they expire in: a queue, not
/// a heap. An entry whose connection authenticated or closed is only dropped once it reaches
/// the front, so that settling a handshake costs nothing.
#[derive(Debug)]
pub(super) struct HandshakeDeadlines {
    timeout: Duration,
    queue: VecDeque<(Time, usize, u32)>,
}

impl HandshakeDeadlines {
    pub(super) fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            queue: VecDeque::new(),
        }
    }

    /// How long every handshake may take.
    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The connection of `generation` in `slot` started its handshake `now`.
    pub(super) fn start(&mut self, now: Time, slot: usize, generation: u32) {
        self.queue.push_back((now + self.timeout, slot, generation));
    }

    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The oldest entry's connection and deadline.
    pub(super) fn front(&self) -> Option<(Time, usize, u32)> {
        self.queue.front().copied()
    }

    /// Drop the oldest entry (settled, or expired and being closed).
    pub(super) fn pop(&mut self) {
        self.queue.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_in_the_order_they_started() {
        let mut d = HandshakeDeadlines::new(Duration::from_millis(5));
        assert!(d.is_empty());
        d.start(Time(1_000), 3, 7);
        d.start(Time(2_000), 1, 8);
        assert_eq!(d.front(), Some((Time(5_001_000), 3, 7)));
        d.pop();
        assert_eq!(d.front(), Some((Time(5_002_000), 1, 8)));
        d.pop();
        assert!(d.is_empty() && d.front().is_none());
        assert_eq!(d.timeout(), Duration::from_millis(5));
    }
}
