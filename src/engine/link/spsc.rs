//! A bounded single-producer, single-consumer queue between two threads: what one reactor
//! hands another (`inproc.rs`). One per directed pair of reactors, so neither end ever
//! contends with a third thread, and a push or a pop is one store the other side reads.
//!
//! The two positions sit on cache lines of their own, and each end keeps a copy of the
//! other's last position, so that it reads the other's line only when its copy says the
//! queue is full (producer) or empty (consumer): in a stream of messages most operations touch
//! no shared line but the slot. The slots are allocated on the first push, so the
//! `reactors²` queues of a process cost nothing until a pair talks.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// A value alone on its cache line (two lines on the CPUs that fetch pairs of them).
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct Padded<T>(pub(crate) T);

struct Shared<T> {
    slots: OnceLock<Box<[UnsafeCell<MaybeUninit<T>>]>>,
    capacity: usize,
    /// The next slot the consumer reads; written by the consumer only.
    head: Padded<AtomicUsize>,
    /// The next slot the producer writes; written by the producer only.
    tail: Padded<AtomicUsize>,
}

// SAFETY: a slot is written by the producer before it publishes `tail` past it (Release) and
// read by the consumer only after it observed that (Acquire), then given back by publishing
// `head` past it; so no slot is ever accessed by both ends at once, and `T` moves between the
// threads, which `T: Send` allows.
unsafe impl<T: Send> Sync for Shared<T> {}
// SAFETY: as above; the queue owns its `T`s.
unsafe impl<T: Send> Send for Shared<T> {}

impl<T> Shared<T> {
    fn slot(&self, pos: usize) -> *mut MaybeUninit<T> {
        let slots = self.slots.get().expect("pushed before");
        slots[pos & (self.capacity - 1)].get()
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        if self.slots.get().is_none() {
            return;
        }
        let (head, tail) = (*self.head.0.get_mut(), *self.tail.0.get_mut());
        for pos in head..tail {
            // SAFETY: the slots between head and tail were written and not yet read; both ends
            // are gone (`&mut self`), so each is dropped exactly once, here.
            unsafe { (*self.slot(pos)).assume_init_drop() };
        }
    }
}

/// The writing end.
pub(crate) struct Producer<T> {
    q: Arc<Shared<T>>,
    tail: usize,
    /// The consumer's position when last read.
    head: usize,
}

/// The reading end.
pub(crate) struct Consumer<T> {
    q: Arc<Shared<T>>,
    head: usize,
    /// The producer's position when last read.
    tail: usize,
}

/// A queue of `capacity` slots (rounded up to a power of two).
pub(crate) fn queue<T>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    let q = Arc::new(Shared {
        slots: OnceLock::new(),
        capacity: capacity.max(1).next_power_of_two(),
        head: Padded(AtomicUsize::new(0)),
        tail: Padded(AtomicUsize::new(0)),
    });
    (
        Producer {
            q: q.clone(),
            tail: 0,
            head: 0,
        },
        Consumer {
            q,
            head: 0,
            tail: 0,
        },
    )
}

impl<T> Producer<T> {
    /// Append `v`, or hand it back if the queue is full.
    #[inline]
    pub(crate) fn push(&mut self, v: T) -> Result<(), T> {
        let cap = self.q.capacity;
        if self.tail - self.head == cap {
            self.head = self.q.head.0.load(Ordering::Acquire);
            if self.tail - self.head == cap {
                return Err(v);
            }
        }
        self.q.slots.get_or_init(|| {
            (0..cap)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect()
        });
        // SAFETY: the slot at `tail` is free: the consumer has read everything below `head`,
        // and `tail - head < capacity`; only this end writes slots.
        unsafe { (*self.q.slot(self.tail)).write(v) };
        self.tail += 1;
        self.q.tail.0.store(self.tail, Ordering::Release);
        Ok(())
    }
}

impl<T> Consumer<T> {
    /// The oldest value, if any.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<T> {
        if self.head == self.tail {
            self.tail = self.q.tail.0.load(Ordering::Acquire);
            if self.head == self.tail {
                return None;
            }
        }
        // SAFETY: `head < tail`, which the producer published after writing the slot (the
        // Acquire above, or an earlier one); it writes it again only after `head` passes it.
        let v = unsafe { (*self.q.slot(self.head)).assume_init_read() };
        self.head += 1;
        self.q.head.0.store(self.head, Ordering::Release);
        Some(v)
    }

    /// Whether nothing is waiting, as far as this end can tell now (the producer may be
    /// pushing: with a fence between, what a sleeping consumer checks before it sleeps).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.head == self.q.tail.0.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_come_out_in_order_and_a_full_queue_hands_the_value_back() {
        let (mut p, mut c) = queue(3);
        assert!(c.pop().is_none() && c.is_empty());
        for i in 0..4 {
            p.push(i).unwrap();
        }
        assert_eq!(p.push(9), Err(9), "four slots, all taken");
        assert_eq!(c.pop(), Some(0));
        p.push(4).unwrap();
        let got: Vec<i32> = std::iter::from_fn(|| c.pop()).collect();
        assert_eq!(got, [1, 2, 3, 4]);
    }

    /// What is left in the queue is dropped with it, once.
    #[test]
    fn values_left_behind_are_dropped_once() {
        let token = Arc::new(());
        {
            let (mut p, mut c) = queue(8);
            for _ in 0..5 {
                p.push(token.clone()).unwrap();
            }
            drop(c.pop());
            assert_eq!(Arc::strong_count(&token), 5);
        }
        assert_eq!(Arc::strong_count(&token), 1);
    }

    /// Two threads, a small queue that fills over and over: every value arrives, in order.
    #[test]
    fn two_threads_move_a_million_values_in_order() {
        const N: u64 = 1_000_000;
        let (mut p, mut c) = queue::<u64>(64);
        let producer = std::thread::spawn(move || {
            for i in 0..N {
                let mut v = i;
                while let Err(back) = p.push(v) {
                    v = back;
                    std::hint::spin_loop();
                }
            }
        });
        let mut want = 0;
        while want < N {
            match c.pop() {
                Some(v) => {
                    assert_eq!(v, want);
                    want += 1;
                }
                None => std::hint::spin_loop(),
            }
        }
        producer.join().unwrap();
        assert!(c.pop().is_none());
    }
}
