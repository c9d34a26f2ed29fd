//! In-process delivery: messages between nodes of one process never enter the kernel.
//!
//! A process's reactors share an [`Exchange`]: where each of its nodes is hosted (reactor,
//! slot), whether it still runs, and how to wake each reactor. Each reactor owns a [`Port`]:
//! one bounded single-producer queue to every other reactor (`spsc.rs`) and the reading ends
//! of theirs to it. A message moves as the value the protocol built, never framed or copied:
//! to a node of the same reactor it goes straight into that reactor's inbox (delivered in the
//! same turn); to another reactor, into the pair's queue, and the receiving reactor is woken
//! through its poll's waker only when it sleeps.
//!
//! What the protocols see is what TCP gives them: FIFO per pair (one queue per pair of
//! reactors, and a full queue's overflow waits behind it in order), an `Authenticated` event
//! at both ends when two nodes first talk, and a suspicion when a peer stops. A stopping node
//! sends a [`Envelope::Gone`] to every node it has talked with, after what it sent them (as a
//! FIN follows the data), and a message that reaches a node already stopped is answered with
//! one, as a dial to a closed port is refused. Nothing is dropped while both ends run: a full
//! queue keeps the rest in the sender's backlog, pushed first on its later turns.

use super::spsc::{queue, Consumer, Padded, Producer};
use crate::id::IdMap;
use crate::NodeId;
use mio::Waker;
use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;

/// Envelopes a pair of reactors' queue holds before the sender keeps a backlog: room for a
/// wave of protocol messages from every node of one reactor to another's, without the memory
/// of `reactors²` large queues (slots are allocated only when a pair first talks).
pub const QUEUE_SLOTS: usize = 1024;

/// Where a node of this process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// Its reactor, `0..reactors`.
    pub reactor: usize,
    /// Its slot among that reactor's hosted nodes.
    pub host: usize,
}

/// What one reactor hands another.
pub(crate) enum Envelope<M> {
    /// `msg` from `from` for the receiving reactor's hosted node `to`.
    Msg { to: usize, from: NodeId, msg: M },
    /// `from` stopped: the receiving reactor's node `to` loses it.
    Gone { to: usize, from: NodeId },
}

/// What the reactors of one process share.
pub struct Exchange {
    places: IdMap<NodeId, (Place, usize)>,
    /// Whether each node still runs, by the index `places` gives.
    alive: Box<[AtomicBool]>,
    /// Each reactor's hosted nodes, by slot.
    hosted: Box<[Box<[NodeId]>]>,
    /// Each reactor is about to sleep, or sleeps, in its poll.
    sleeping: Box<[Padded<AtomicBool>]>,
    wakers: Box<[Arc<Waker>]>,
}

impl Exchange {
    /// Where `id` runs, if it is a node of this process.
    #[inline]
    pub fn place(&self, id: NodeId) -> Option<Place> {
        self.places.get(&id).map(|&(p, _)| p)
    }

    /// The id of reactor `r`'s hosted node `h`.
    pub fn hosted(&self, r: usize, h: usize) -> Option<NodeId> {
        self.hosted.get(r)?.get(h).copied()
    }

    /// Whether `id`, a node of this process, still runs.
    #[inline]
    pub fn alive(&self, id: NodeId) -> bool {
        self.places
            .get(&id)
            .is_some_and(|&(_, i)| self.alive[i].load(Ordering::Acquire))
    }
}

/// One reactor's end of the exchange.
pub struct Port<M> {
    me: usize,
    shared: Arc<Exchange>,
    /// To each reactor (`None`: this one).
    out: Vec<Option<Producer<Envelope<M>>>>,
    /// What did not fit in each reactor's queue, oldest first.
    backlog: Vec<VecDeque<Envelope<M>>>,
    /// Some backlog is not empty.
    backlogged: bool,
    /// From each other reactor.
    inbound: Vec<Consumer<Envelope<M>>>,
}

/// The ports of a process's reactors, reactor `r` getting the `r`-th: `places` says where each
/// node runs (slots `0..` on each reactor, in the order that reactor hosts them), `wakers`
/// wakes each reactor's poll.
pub fn ports<M>(places: &[(NodeId, Place)], wakers: Vec<Arc<Waker>>) -> Vec<Port<M>> {
    let reactors = wakers.len();
    let mut hosted: Vec<Vec<NodeId>> = vec![Vec::new(); reactors];
    for &(id, p) in places {
        let slots = &mut hosted[p.reactor];
        if slots.len() <= p.host {
            slots.resize(p.host + 1, NodeId(u64::MAX));
        }
        slots[p.host] = id;
    }
    let shared = Arc::new(Exchange {
        places: places
            .iter()
            .enumerate()
            .map(|(i, &(id, p))| (id, (p, i)))
            .collect(),
        alive: places.iter().map(|_| AtomicBool::new(true)).collect(),
        hosted: hosted.into_iter().map(Vec::into_boxed_slice).collect(),
        sleeping: (0..reactors).map(|_| Padded::default()).collect(),
        wakers: wakers.into_boxed_slice(),
    });
    // queues[from][to]
    let mut producers: Vec<Vec<Option<Producer<Envelope<M>>>>> = Vec::new();
    let mut consumers: Vec<Vec<Consumer<Envelope<M>>>> =
        (0..reactors).map(|_| Vec::new()).collect();
    for from in 0..reactors {
        let mut row = Vec::with_capacity(reactors);
        for (to, inbound) in consumers.iter_mut().enumerate() {
            if to == from {
                row.push(None);
                continue;
            }
            let (p, c) = queue(QUEUE_SLOTS);
            row.push(Some(p));
            inbound.push(c);
        }
        producers.push(row);
    }
    producers
        .into_iter()
        .zip(consumers)
        .enumerate()
        .map(|(me, (out, inbound))| Port {
            me,
            shared: shared.clone(),
            backlog: (0..reactors).map(|_| VecDeque::new()).collect(),
            backlogged: false,
            out,
            inbound,
        })
        .collect()
}

impl<M> Port<M> {
    /// This port's reactor.
    #[inline]
    pub fn reactor(&self) -> usize {
        self.me
    }

    /// The shared directory.
    #[inline]
    pub fn exchange(&self) -> &Exchange {
        &self.shared
    }

    /// Hosted node `h` stopped: senders will find it gone.
    pub(crate) fn stopped(&self, h: usize) {
        let id = self.shared.hosted(self.me, h);
        if let Some(&(_, i)) = id.and_then(|id| self.shared.places.get(&id)) {
            self.shared.alive[i].store(false, Ordering::Release);
        }
    }

    /// Hand `e` to reactor `to` (another one), behind whatever waits for it; wake it if it
    /// sleeps.
    #[inline]
    pub(crate) fn push(&mut self, to: usize, e: Envelope<M>) {
        let Some(q) = self.out.get_mut(to).and_then(|q| q.as_mut()) else {
            return;
        };
        if !self.backlog[to].is_empty() {
            self.backlog[to].push_back(e);
            return;
        }
        if let Err(e) = q.push(e) {
            self.backlog[to].push_back(e);
            self.backlogged = true;
        }
        self.wake(to);
    }

    /// Move backlogs into their queues as far as they have room.
    pub(crate) fn flush(&mut self) {
        if !self.backlogged {
            return;
        }
        let mut left = false;
        for to in 0..self.out.len() {
            let Some(q) = self.out[to].as_mut() else {
                continue;
            };
            let mut moved = false;
            while let Some(e) = self.backlog[to].pop_front() {
                if let Err(e) = q.push(e) {
                    self.backlog[to].push_front(e);
                    break;
                }
                moved = true;
            }
            left |= !self.backlog[to].is_empty();
            if moved {
                self.wake(to);
            }
        }
        self.backlogged = left;
    }

    /// Whether a backlog waits (the reactor should not sleep long).
    pub(crate) fn backlogged(&self) -> bool {
        self.backlogged
    }

    /// Wake reactor `to` if it sleeps. The fence orders the push before the look at its
    /// flag, against its setting of the flag before its last look at the queues
    /// ([`Self::sleep`]): one of the two sees the other.
    #[inline]
    fn wake(&self, to: usize) {
        fence(Ordering::SeqCst);
        let flag = &self.shared.sleeping[to].0;
        if flag.load(Ordering::Relaxed) && flag.swap(false, Ordering::AcqRel) {
            let _ = self.shared.wakers[to].wake();
        }
    }

    /// Up to `at_most` envelopes from each other reactor, in each one's order, to `each`.
    #[inline]
    pub(crate) fn receive(
        &mut self,
        at_most: usize,
        mut each: impl FnMut(&Exchange, Envelope<M>),
    ) -> bool {
        let mut any = false;
        for c in &mut self.inbound {
            for _ in 0..at_most {
                match c.pop() {
                    Some(e) => {
                        any = true;
                        each(&self.shared, e)
                    }
                    None => break,
                }
            }
        }
        any
    }

    /// This reactor is about to sleep: say so to senders, then look once more. Whether it
    /// may sleep (nothing arrived meanwhile); if not, the flag is cleared again.
    pub(crate) fn sleep(&self) -> bool {
        let flag = &self.shared.sleeping[self.me].0;
        flag.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.inbound.iter().all(|c| c.is_empty()) {
            return true;
        }
        flag.store(false, Ordering::Relaxed);
        false
    }

    /// This reactor woke: senders need not wake it.
    #[inline]
    pub(crate) fn awake(&self) {
        // Written only when set: senders read the line on every push.
        let flag = &self.shared.sleeping[self.me].0;
        if flag.load(Ordering::Relaxed) {
            flag.store(false, Ordering::Relaxed);
        }
    }
}
