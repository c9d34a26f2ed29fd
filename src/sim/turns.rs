//! Reactor turns for the timed simulator ([`super::timed::TimedWorld::with_turns`]).
//!
//! A real reactor does not handle one event at a time: each turn it takes everything that has
//! arrived since the last (the completion queue), handles it, fires every timer due, and hands
//! the kernel the turn's sends in one submission when the next turn starts; only the turn's
//! first send goes out at once (`writes_direct` in the io_uring backend). Idle, a turn is one
//! event and nothing changes. Behind, a turn gathers the whole backlog: the messages it
//! produces wait for its end, and a process whose timer is due fires once per turn, however
//! short its period. That is how many nodes sharing two cores behave at the start of a BMG
//! construction, when every leaf re-sends while its answer waits.

/// A send held until its turn ends.
#[derive(Debug)]
pub(super) struct Held<M> {
    pub from: u32,
    pub to: u32,
    pub msg: M,
    /// Its connection's wait on the wire, ns (0 on an open connection).
    pub dialing: u64,
}

/// The turns of every core.
#[derive(Debug)]
pub(super) struct Turns<M> {
    /// By core: the open turn's gathering time (it takes the events due by then), if one is
    /// open.
    open: Vec<Option<u64>>,
    /// By core: whether the open turn has sent its first message (which leaves at once).
    sent_first: Vec<bool>,
    /// By core: the open turn's other sends.
    held: Vec<Vec<Held<M>>>,
}

impl<M> Turns<M> {
    /// No turn open on `cores` cores.
    pub fn new(cores: usize) -> Self {
        Self {
            open: vec![None; cores],
            sent_first: vec![false; cores],
            held: (0..cores).map(|_| Vec::new()).collect(),
        }
    }

    /// An event due at `at` reaches `core`, free from `free`: `Some(t)` if it opens a turn
    /// gathering what is due by `t` (the caller ends it then), `None` if the open turn takes
    /// it.
    pub fn reach(&mut self, core: usize, at: u64, free: u64) -> Option<u64> {
        if self.open[core].is_some() {
            return None;
        }
        let gather = at.max(free);
        self.open[core] = Some(gather);
        self.sent_first[core] = false;
        Some(gather)
    }

    /// A send on `core`: `Some(held)` back if it leaves now (no turn open, or the turn's
    /// first), `None` if the turn holds it.
    pub fn send(&mut self, core: usize, held: Held<M>) -> Option<Held<M>> {
        if self.open[core].is_none() || !std::mem::replace(&mut self.sent_first[core], true) {
            return Some(held);
        }
        self.held[core].push(held);
        None
    }

    /// The turn of `core` ends: its held sends, in the order they were made (hand the empty
    /// list back with [`Turns::recycle`]).
    pub fn end(&mut self, core: usize) -> Vec<Held<M>> {
        self.open[core] = None;
        std::mem::take(&mut self.held[core])
    }

    /// The list [`Turns::end`] gave, emptied, for the core's next turns.
    pub fn recycle(&mut self, core: usize, list: Vec<Held<M>>) {
        debug_assert!(list.is_empty());
        self.held[core] = list;
    }
}
