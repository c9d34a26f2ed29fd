//! The connection table: every open connection of a reactor's hosted nodes, by slot.
//!
//! A slot is reused once its connection closes, so every connection also gets a generation:
//! an io_uring completion can arrive after its connection closed and the slot was taken by a
//! new one, and `(slot, generation)` tells them apart. Backends and the reactor both work on
//! connections through this table; neither reaches into the other.

use super::conn::Conn;

/// Generations are kept to 28 bits so that slot, generation and a request kind fit one io_uring
/// `user_data` (see the ring backend).
pub(super) const GEN_MASK: u32 = (1 << 28) - 1;

/// A connection: its slot and generation.
pub(super) type ConnId = (usize, u32);

/// The open connections.
#[derive(Default)]
pub(super) struct Conns {
    slots: Vec<Option<Conn>>,
    /// Empty slots, reused before the table grows (a reactor hosting hundreds of nodes opens
    /// thousands of connections: no scan for a free slot per connection).
    free: Vec<usize>,
    generation: u32,
}

impl Conns {
    /// The connection in `slot`, whatever its generation.
    #[inline]
    pub(super) fn get(&self, slot: usize) -> Option<&Conn> {
        self.slots.get(slot).and_then(|c| c.as_ref())
    }

    /// The connection in `slot`, whatever its generation, to change.
    #[inline]
    pub(super) fn get_mut(&mut self, slot: usize) -> Option<&mut Conn> {
        self.slots.get_mut(slot).and_then(|c| c.as_mut())
    }

    /// The connection in `slot` if it is still the one of `generation`.
    #[inline]
    pub(super) fn live(&mut self, slot: usize, generation: u32) -> Option<&mut Conn> {
        self.get_mut(slot).filter(|c| c.generation == generation)
    }

    /// The generation of the connection in `slot`, if one is open there.
    #[inline]
    pub(super) fn generation_of(&self, slot: usize) -> Option<u32> {
        self.get(slot).map(|c| c.generation)
    }

    /// The slot `conn` will take and the generation it gets, without taking it yet (the
    /// backend watches the socket under that token first; see [`Self::put`]).
    pub(super) fn reserve(&mut self) -> ConnId {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        self.generation = (self.generation + 1) & GEN_MASK;
        (slot, self.generation)
    }

    /// Put `conn` in the slot [`Self::reserve`] gave, under its generation.
    pub(super) fn put(&mut self, (slot, generation): ConnId, mut conn: Conn) {
        conn.generation = generation;
        self.slots[slot] = Some(conn);
    }

    /// Give back a reserved slot that was not used.
    pub(super) fn unreserve(&mut self, (slot, _): ConnId) {
        self.free.push(slot);
    }

    /// Take the connection out of `slot`, freeing the slot.
    pub(super) fn take(&mut self, slot: usize) -> Option<Conn> {
        let conn = self.slots.get_mut(slot)?.take()?;
        self.free.push(slot);
        Some(conn)
    }

    /// The slots of every connection of hosted node `h`.
    pub(super) fn of_host(&self, h: usize) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&s| self.get(s).is_some_and(|c| c.host == h))
            .collect()
    }

    /// Give back the receive buffers of connections with nothing buffered that have not
    /// received since the last sweep (a connection that once carried large frames kept its
    /// megabytes for good). Whether some connection still holds more than `above` bytes.
    pub(super) fn sweep(&mut self, above: usize) -> bool {
        let mut big = false;
        for conn in self.slots.iter_mut().flatten() {
            if !std::mem::take(&mut conn.received) {
                conn.decoder.shrink();
            }
            big |= conn.decoder.capacity() > above;
        }
        big
    }
}
