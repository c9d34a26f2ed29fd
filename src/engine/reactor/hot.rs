//! The hot set: the few connections that received most recently, which a spinning reactor
//! reads itself every turn, as a busy-polling loop reads its socket, instead of waiting for
//! epoll or a ring completion to say they have bytes.
//!
//! On poll an `epoll_wait` per turn would add a syscall to every message; on io_uring a ring
//! receive costs each message a wake-up callback in the sender's delivery path and deferred
//! work in the receiver's next `io_uring_enter`, which a direct `recv` on a socket nothing
//! watches does not (see `bluegene_notes/engine-latency.md#the-hot-set`). The backend lets go
//! of a hot connection meanwhile, and takes it back ([`super::driver::Driver::resume`]) when
//! it cools or the reactor is about to block.

use super::conns::ConnId;

/// Recently active connections a spinning reactor reads directly.
pub(super) const HOT_MAX: usize = 8;

/// The hot connections, oldest first.
#[derive(Debug, Default)]
pub(super) struct Hot {
    list: Vec<ConnId>,
}

impl Hot {
    /// How many are hot.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether one more would fit without cooling another.
    #[inline]
    pub(super) fn has_room(&self) -> bool {
        self.list.len() < HOT_MAX
    }

    /// The `i`th hot connection.
    #[inline]
    pub(super) fn get(&self, i: usize) -> Option<ConnId> {
        self.list.get(i).copied()
    }

    /// Drop the `i`th (its connection closed; the order of the rest does not matter).
    #[inline]
    pub(super) fn forget(&mut self, i: usize) {
        self.list.swap_remove(i);
    }

    /// Make `id` hot. If that takes the place of the oldest, the oldest is returned, to be
    /// cooled (handed back to the backend).
    #[inline]
    pub(super) fn heat(&mut self, id: ConnId) -> Option<ConnId> {
        if self.list.contains(&id) {
            return None;
        }
        let cooled = (self.list.len() == HOT_MAX).then(|| self.list.remove(0));
        self.list.push(id);
        cooled
    }

    /// The last hot connection, taken out (the reactor cools them all before it blocks; no
    /// list is handed out, which cost an allocation and a free per blocking turn).
    #[inline]
    pub(super) fn pop(&mut self) -> Option<ConnId> {
        self.list.pop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_cools_when_a_new_one_heats() {
        let mut hot = Hot::default();
        for s in 0..HOT_MAX {
            assert_eq!(hot.heat((s, 1)), None);
        }
        assert_eq!(hot.heat((3, 1)), None, "already hot");
        assert!(!hot.has_room());
        assert_eq!(hot.heat((99, 1)), Some((0, 1)));
        assert_eq!(
            hot.heat((0, 2)),
            Some((1, 1)),
            "a reused slot is another connection"
        );
        let mut n = 0;
        while hot.pop().is_some() {
            n += 1;
        }
        assert_eq!((n, hot.len()), (HOT_MAX, 0));
    }
}
