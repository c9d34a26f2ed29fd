//! A byte pipe through shared memory: one single-producer, single-consumer ring per direction
//! of a pair of processes, carrying the same frames a TCP connection would. The receiver feeds
//! what it reads to the connection's frame decoder, so a frame in a ring is checked exactly as a
//! frame from a socket is, and a large message streams through in pieces as through a socket.
//!
//! The peer is not trusted: each end keeps its own position privately and only publishes it,
//! and a peer's published position is believed only if it is consistent (a producer at most one
//! ring ahead of what was consumed, a consumer never past what was produced). Anything else is
//! [`Corrupt`] and ends the link. Bytes are copied out of the ring before anything looks at
//! them, so a peer that rewrites them meanwhile changes only what we copied, never what we
//! checked.
//!
//! Wake-ups go only to a sleeper (vader's and iceoryx2's habit). A reader about to sleep raises
//! its flag, then looks again; a writer publishes, then looks at the flag (a sequentially
//! consistent fence on both sides, so one of them sees the other) and rings the reader's bell
//! only if the flag was up. A writer that finds the ring full raises its own flag the same way
//! and is rung when the reader makes room.
//!
//! Layout of one direction's control block (its data area lies elsewhere in the segment):
//! ```text
//!   0  head: bytes ever written (the writer's, published with Release)
//! 128  tail: bytes ever read (the reader's, published with Release)
//! 256  reader sleeps (1) or not (0)
//! 384  writer waits for room (1) or not (0)
//! ```
//! Each word sits on a 128-byte line of its own, so the two processes share a line only when
//! one reads what the other published.

use super::segment::Segment;
use std::mem::MaybeUninit;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes of one direction's control block.
pub const CONTROL: usize = 512;

/// The peer published a position that no correct peer could: the link must end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("shared-memory ring corrupted by the peer: {what} (head {head}, tail {tail}, capacity {capacity})")]
pub struct Corrupt {
    /// Which position is impossible.
    pub what: &'static str,
    /// The head seen.
    pub head: u64,
    /// The tail seen.
    pub tail: u64,
    /// The ring's capacity.
    pub capacity: u64,
}

/// Where one direction lives in a segment.
#[derive(Clone, Copy, Debug)]
pub struct Place {
    /// Offset of its control block (a multiple of 128).
    pub control: usize,
    /// Offset of its data area.
    pub data: usize,
    /// Bytes of its data area: a power of two.
    pub capacity: usize,
}

struct Ring {
    seg: Arc<Segment>,
    place: Place,
}

impl Ring {
    fn new(seg: Arc<Segment>, place: Place) -> Ring {
        assert!(place.capacity.is_power_of_two());
        assert_eq!(place.control % 128, 0);
        assert!(place.control + CONTROL <= seg.len());
        assert!(place.data + place.capacity <= seg.len());
        Ring { seg, place }
    }

    fn word64(&self, at: usize) -> &AtomicU64 {
        // SAFETY: within the segment (checked in `new`), 8-aligned (the mapping is page
        // aligned, `control` a multiple of 128), and only ever accessed atomically by either
        // process; the segment outlives `&self`.
        unsafe { &*self.seg.at(self.place.control + at).cast::<AtomicU64>() }
    }

    fn word32(&self, at: usize) -> &AtomicU32 {
        // SAFETY: as in `word64`.
        unsafe { &*self.seg.at(self.place.control + at).cast::<AtomicU32>() }
    }

    fn head(&self) -> &AtomicU64 {
        self.word64(0)
    }

    fn tail(&self) -> &AtomicU64 {
        self.word64(128)
    }

    fn reader_sleeps(&self) -> &AtomicU32 {
        self.word32(256)
    }

    fn writer_waits(&self) -> &AtomicU32 {
        self.word32(384)
    }

    fn cap(&self) -> u64 {
        self.place.capacity as u64
    }

    /// The address of the byte at position `pos`, and how many bytes follow it before the
    /// data area wraps.
    fn at(&self, pos: u64) -> (*mut u8, usize) {
        let i = (pos & (self.cap() - 1)) as usize;
        (self.seg.at(self.place.data + i), self.place.capacity - i)
    }

    fn corrupt(&self, what: &'static str, head: u64, tail: u64) -> Corrupt {
        Corrupt {
            what,
            head,
            tail,
            capacity: self.cap(),
        }
    }
}

/// After publishing: whether the other end raised `flag` (it sleeps or waits), taking it
/// down, so one sleep costs one ring however many publications wake it. The fence pairs with
/// [`raise_flag`]'s: one of the two ends sees the other's store.
fn take_flag(flag: &AtomicU32) -> bool {
    fence(Ordering::SeqCst);
    flag.load(Ordering::Relaxed) != 0 && flag.swap(0, Ordering::AcqRel) != 0
}

/// Before looking once more and sleeping: say so (see [`take_flag`]).
fn raise_flag(flag: &AtomicU32) {
    flag.store(1, Ordering::SeqCst);
    fence(Ordering::SeqCst);
}

/// The writing end of one direction.
pub struct Writer {
    ring: Ring,
    /// Bytes written: ours, published, never read back.
    head: u64,
    /// The reader's tail when last read.
    tail: u64,
}

/// The reading end of one direction.
pub struct Reader {
    ring: Ring,
    /// Bytes read: ours, published, never read back.
    tail: u64,
    /// The writer's head when last read.
    head: u64,
}

/// The two ends of the direction at `place` in `seg`, for tests and for a process that holds
/// both (each process otherwise makes one end with [`writer`] or [`reader`]).
pub fn pair(seg: &Arc<Segment>, place: Place) -> (Writer, Reader) {
    (writer(seg, place), reader(seg, place))
}

/// The writing end of the direction at `place`.
pub fn writer(seg: &Arc<Segment>, place: Place) -> Writer {
    let ring = Ring::new(seg.clone(), place);
    let head = ring.head().load(Ordering::Relaxed);
    Writer {
        tail: head,
        head,
        ring,
    }
}

/// The reading end of the direction at `place`.
pub fn reader(seg: &Arc<Segment>, place: Place) -> Reader {
    let ring = Ring::new(seg.clone(), place);
    let tail = ring.tail().load(Ordering::Relaxed);
    Reader {
        head: tail,
        tail,
        ring,
    }
}

impl Writer {
    /// Bytes that fit now, reading the reader's position only if the last one seen leaves
    /// less than `want`.
    fn room(&mut self, want: u64) -> Result<u64, Corrupt> {
        let cap = self.ring.cap();
        if cap - (self.head - self.tail) >= want {
            return Ok(cap - (self.head - self.tail));
        }
        let tail = self.ring.tail().load(Ordering::Acquire);
        if tail > self.head || tail < self.tail {
            return Err(self
                .ring
                .corrupt("tail beyond head or going back", self.head, tail));
        }
        self.tail = tail;
        Ok(cap - (self.head - tail))
    }

    /// Copy as much of `bytes` as fits and publish it; how much that was (0 when full).
    pub fn write(&mut self, bytes: &[u8]) -> Result<usize, Corrupt> {
        let n = (self.room(bytes.len() as u64)? as usize).min(bytes.len());
        let mut done = 0;
        while done < n {
            let (p, before_wrap) = self.ring.at(self.head + done as u64);
            let k = before_wrap.min(n - done);
            // SAFETY: `p..p+k` lies in the data area (before the wrap); those bytes are free
            // (the reader is past them), and `bytes[done..done+k]` is ours to read.
            unsafe { std::ptr::copy_nonoverlapping(bytes[done..].as_ptr(), p, k) };
            done += k;
        }
        if n > 0 {
            self.head += n as u64;
            self.ring.head().store(self.head, Ordering::Release);
        }
        Ok(n)
    }

    /// After writes: whether the reader sleeps and must be rung (the flag is taken down, so
    /// one sleep costs one ring however many writes wake it).
    pub fn must_ring(&self) -> bool {
        take_flag(self.ring.reader_sleeps())
    }

    /// The ring is full and more waits: ask to be rung when the reader makes room. `false`
    /// when room came meanwhile (write again instead of waiting).
    pub fn wait_for_room(&mut self) -> Result<bool, Corrupt> {
        raise_flag(self.ring.writer_waits());
        if self.room(1)? > 0 {
            self.ring.writer_waits().store(0, Ordering::Relaxed);
            return Ok(false);
        }
        Ok(true)
    }

    /// Bytes written and not yet known to be read.
    pub fn unread(&self) -> u64 {
        self.head - self.ring.tail().load(Ordering::Acquire).min(self.head)
    }

    /// The ring's capacity.
    pub fn capacity(&self) -> usize {
        self.ring.place.capacity
    }
}

impl Reader {
    /// Bytes waiting, reading the writer's position only if the last one seen says none.
    fn ready(&mut self) -> Result<u64, Corrupt> {
        if self.head > self.tail {
            return Ok(self.head - self.tail);
        }
        let head = self.ring.head().load(Ordering::Acquire);
        if head < self.tail || head - self.tail > self.ring.cap() {
            return Err(self
                .ring
                .corrupt("head behind tail or a ring ahead", head, self.tail));
        }
        self.head = head;
        Ok(head - self.tail)
    }

    /// Copy up to `buf.len()` waiting bytes into `buf` and let the writer have their room;
    /// how many (0 when the ring is empty).
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, Corrupt> {
        // SAFETY: initialized bytes are valid as uninitialized ones, and `read_into` writes
        // only bytes (never uninitializes any).
        let room = unsafe { &mut *(buf as *mut [u8] as *mut [MaybeUninit<u8>]) };
        self.read_into(room)
    }

    /// [`Self::read`] into room not yet initialized (a frame decoder's buffer): the first `n`
    /// bytes of `room` are initialized when it returns `Ok(n)`.
    pub fn read_into(&mut self, room: &mut [MaybeUninit<u8>]) -> Result<usize, Corrupt> {
        let n = (self.ready()? as usize).min(room.len());
        let mut done = 0;
        while done < n {
            let (p, before_wrap) = self.ring.at(self.tail + done as u64);
            let k = before_wrap.min(n - done);
            // SAFETY: `p..p+k` lies in the data area and was published by the writer; `room`
            // is ours. A hostile writer changing those bytes meanwhile changes only our copy.
            unsafe { std::ptr::copy_nonoverlapping(p, room[done..].as_mut_ptr().cast(), k) };
            done += k;
        }
        if n > 0 {
            self.tail += n as u64;
            self.ring.tail().store(self.tail, Ordering::Release);
        }
        Ok(n)
    }

    /// Whether bytes wait (reads the writer's position).
    pub fn has_data(&mut self) -> Result<bool, Corrupt> {
        Ok(self.ready()? > 0)
    }

    /// After reads: whether the writer waits for room and must be rung.
    pub fn must_ring(&self) -> bool {
        take_flag(self.ring.writer_waits())
    }

    /// About to sleep: raise the flag and look once more. `true`: sleep (the writer will ring);
    /// `false`: bytes came meanwhile, read them instead.
    pub fn sleep(&mut self) -> Result<bool, Corrupt> {
        raise_flag(self.ring.reader_sleeps());
        if self.ready()? > 0 {
            self.ring.reader_sleeps().store(0, Ordering::Relaxed);
            return Ok(false);
        }
        Ok(true)
    }

    /// [`Self::sleep`] for many readers at once, in two halves around one fence: raise the
    /// flag (this), then, after [`std::sync::atomic::fence`]`(SeqCst)`, look once more
    /// ([`Self::look_after_raise`]). One fence for a reactor's every ring instead of one each.
    pub fn raise(&self) {
        self.ring.reader_sleeps().store(1, Ordering::Relaxed);
    }

    /// The second half of [`Self::raise`], after the fence: `true` to sleep, `false` (flag
    /// down again) when bytes came meanwhile.
    pub fn look_after_raise(&mut self) -> Result<bool, Corrupt> {
        if self.ready()? > 0 {
            self.ring.reader_sleeps().store(0, Ordering::Relaxed);
            return Ok(false);
        }
        Ok(true)
    }

    /// Woken (or spinning again): the flag goes down, so writers stop ringing.
    pub fn awake(&self) {
        self.ring.reader_sleeps().store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(capacity: usize) -> (Arc<Segment>, Place) {
        let seg = Arc::new(Segment::create(crate::buf::PAGE + capacity).expect("segment"));
        let place = Place {
            control: 0,
            data: crate::buf::PAGE,
            capacity,
        };
        (seg, place)
    }

    #[test]
    fn bytes_come_out_in_order_across_the_wrap_and_a_full_ring_takes_nothing() {
        let (seg, place) = ring(4096);
        let (mut w, mut r) = pair(&seg, place);
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut out = Vec::new();
        let mut buf = [0u8; 700];
        let mut sent = 0;
        while out.len() < data.len() {
            sent += w
                .write(&data[sent..(sent + 3000).min(data.len())])
                .expect("write");
            if w.unread() == 4096 {
                assert_eq!(
                    w.write(&data[sent..]).expect("write"),
                    0,
                    "a full ring takes nothing"
                );
            }
            let n = r.read(&mut buf).expect("read");
            out.extend_from_slice(&buf[..n]);
        }
        assert_eq!(out, data);
        assert_eq!(r.read(&mut buf).expect("read"), 0);
    }

    #[test]
    fn a_peer_that_writes_past_its_ring_or_moves_back_is_corrupt() {
        let (seg, place) = ring(4096);
        let (mut w, mut r) = pair(&seg, place);
        w.write(&[1; 100]).expect("write");
        let mut buf = [0u8; 64];
        assert_eq!(r.read(&mut buf), Ok(64));
        // A hostile writer publishes a head more than a ring ahead of what was read.
        let head = Ring::new(seg.clone(), place);
        head.head().store(5000, Ordering::Release);
        assert_eq!(
            r.read(&mut buf),
            Ok(36),
            "what was seen before is still read"
        );
        let e = r.read(&mut buf).unwrap_err();
        assert_eq!(e.what, "head behind tail or a ring ahead");
        // A hostile reader publishes a tail beyond what was written.
        let (seg, place) = ring(4096);
        let (mut w, _r) = pair(&seg, place);
        w.write(&[0; 4096]).expect("fill");
        Ring::new(seg.clone(), place)
            .tail()
            .store(9999, Ordering::Release);
        assert!(w.write(&[0; 1]).is_err());
    }

    #[test]
    fn a_sleeping_reader_is_rung_once_and_a_waiting_writer_when_room_comes() {
        let (seg, place) = ring(4096);
        let (mut w, mut r) = pair(&seg, place);
        assert!(!w.must_ring(), "nobody sleeps yet");
        assert_eq!(r.sleep(), Ok(true));
        w.write(&[1; 10]).expect("write");
        assert!(w.must_ring());
        assert!(!w.must_ring(), "one ring per sleep");
        assert_eq!(r.sleep(), Ok(false), "bytes wait: no sleep");
        let mut buf = [0u8; 4096];
        r.read(&mut buf).expect("read");
        w.write(&[2; 4096]).expect("fill");
        assert_eq!(w.wait_for_room(), Ok(true));
        assert_eq!(r.read(&mut buf[..10]), Ok(10));
        assert!(r.must_ring());
        assert!(!r.must_ring());
        assert_eq!(w.wait_for_room(), Ok(false), "room came");
    }

    #[test]
    fn two_threads_stream_a_mebibyte_through_a_small_ring() {
        let (seg, place) = ring(4096);
        let (mut w, mut r) = pair(&seg, place);
        let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 253) as u8).collect();
        let expect = data.clone();
        let t = std::thread::spawn(move || {
            let mut sent = 0;
            while sent < data.len() {
                sent += w.write(&data[sent..]).expect("write");
                std::hint::spin_loop();
            }
        });
        let mut out = Vec::with_capacity(expect.len());
        let mut buf = vec![0u8; 1500];
        while out.len() < expect.len() {
            let n = r.read(&mut buf).expect("read");
            out.extend_from_slice(&buf[..n]);
        }
        t.join().expect("writer");
        assert!(out == expect, "bytes changed on the way");
    }
}
