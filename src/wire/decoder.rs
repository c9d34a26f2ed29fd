//! Cutting a byte stream into checked frames, in place.
//!
//! Bytes land in a page-aligned buffer, either copied in ([`FrameDecoder::push`]) or written
//! straight into its spare room by whoever reads the socket ([`FrameDecoder::receive`]: the
//! engine; the wire makes no system call). [`FrameDecoder::next_frame`]
//! returns a [`Frame`]: a handle on the buffer plus where the body lies in it, so the caller
//! validates and reads the body where it sits (rkyv `access`) and can keep parts of it
//! ([`Frame::share`]) without copying. Because frames are multiples of 16 bytes and the buffer
//! is only ever shifted by whole frames, every body stays aligned.
//!
//! The buffer is reference counted. While some frame's payload is still held elsewhere the
//! decoder moves on to a fresh buffer, taking only the unread bytes (a partial frame) along.

use super::frame::{FrameHeader, Kind, DEFAULT_MAX_BODY, HEADER_LEN, MAC_LEN};
use super::WireError;
use crate::buf::{offset_within, Payload, ReceiveBuffer, SHARE_MIN};
use rkyv::util::AlignedVec;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::Arc;

pub use crate::buf::PAGE;

type Buf = ReceiveBuffer;

/// The receive buffer starts on a page, and so does every frame that finds the buffer empty
/// (the unread bytes always move to its start). A sender's kernel copies a write into pages
/// from offset 0, and on AMD Zen the copy out to user space (`rep movsb`) runs at a half to an
/// eighth of its speed when the destination is 8..24 bytes ahead of the source modulo 4 KiB
/// (4K aliasing). A frame 16 bytes into an allocation, where glibc puts a large `malloc`, is
/// exactly that. See `bluegene_notes/engine-latency.md` (`#receive-buffers-start-on-a-page`).
const _PAGE_IS_THE_BUFFERS_ALIGNMENT: () = assert!(PAGE == 4096);

/// Least room a read offers when no large frame is pending: what a burst of small messages
/// needs, kept small because a job holds thousands of connections (a large frame in progress
/// is read in one go, whatever its size, and a read offers all the room the buffer already
/// has, so a connection that once carried large frames reads the next one whole).
const READ_CHUNK: usize = 16 * 1024;

/// A buffer let go of while frames still shared it is kept for reuse if it is at least this
/// large (see [`FrameDecoder::spare`]).
const SPARE_MIN: usize = 64 * 1024;

/// A per-connection stream decoder.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Buf,
    /// The last large buffer that had to be replaced because frames still shared it (an echoed
    /// payload being sent, say). Once they are gone it takes the next large frame: a fresh
    /// megabyte would cost a page fault per 4 KiB, 256 per message, as the allocator returns
    /// large blocks to the kernel when they are freed.
    spare: Option<Buf>,
    /// Start of the unread bytes (always a multiple of 16).
    read: usize,
    max_body: u32,
    /// Padding frames are skipped; before the handshake they are refused (a stranger has no
    /// business padding, and skipping them let one stream bytes a node read without end).
    pads: bool,
    /// Once an error is seen the stream is out of sync for good.
    failed: bool,
}

/// One complete frame, its body still in the receive buffer.
#[derive(Debug, Clone)]
pub struct Frame {
    /// What the body is.
    pub kind: Kind,
    /// The protocol of a message frame (0 for other kinds).
    pub tag: u8,
    buf: Buf,
    body: Range<usize>,
    /// Where the frame's MAC lies in the buffer, if it carries one.
    mac: Option<usize>,
}

impl Frame {
    /// The body, 16-byte aligned.
    pub fn body(&self) -> &[u8] {
        &self.buf[self.body.clone()]
    }

    /// The frame's MAC, if its header says it carries one.
    pub fn mac(&self) -> Option<&[u8]> {
        self.mac.map(|at| &self.buf[at..at + MAC_LEN])
    }

    /// What the MAC covers: the header and the body, in order ([`super::mac`]).
    pub fn authenticated_parts(&self) -> [&[u8]; 1] {
        [&self.buf[self.body.start - HEADER_LEN..self.body.end]]
    }

    /// `sub`, a part of [`Self::body`], as a payload that outlives the frame: shared with the
    /// receive buffer when it is large, copied when it is small (or, defensively, when it is
    /// not inside the body at all).
    pub fn share(&self, sub: &[u8]) -> Payload {
        let inside = offset_within(self.body(), sub);
        let Some(offset) = inside.filter(|_| sub.len() >= SHARE_MIN) else {
            return Payload::from(sub);
        };
        let at = self.body.start + offset;
        Payload::received(self.buf.clone(), at..at + sub.len())
            .unwrap_or_else(|| Payload::from(sub))
    }
}

/// Frames are equal when their kinds and bodies are.
impl PartialEq for Frame {
    fn eq(&self, other: &Frame) -> bool {
        self.kind == other.kind && self.body() == other.body()
    }
}

/// Room at the end of a decoder's buffer lent to a receive in flight ([`FrameDecoder::lend`]).
/// It keeps the allocation alive: if the connection is dropped before the receive completes,
/// the memory the kernel writes into is still there.
#[derive(Debug)]
pub struct Lent {
    /// Where the receive writes.
    pub ptr: *mut u8,
    /// How much it may write.
    pub len: usize,
    keep: Buf,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_BODY)
    }
}

impl FrameDecoder {
    /// A decoder refusing bodies larger than `max_body`.
    pub fn new(max_body: u32) -> Self {
        Self {
            buf: Arc::new(AlignedVec::new()),
            spare: None,
            read: 0,
            max_body,
            pads: false,
            failed: false,
        }
    }

    /// The peer has authenticated: bodies up to `max_body` from the next frame on (the limit
    /// of a stranger's is a handshake frame's), and padding frames are skipped.
    pub fn authenticated(&mut self, max_body: u32) {
        self.max_body = max_body;
        self.pads = true;
    }

    /// Let go of the buffer's memory if nothing is buffered (a connection gone quiet after
    /// large frames): the next bytes take a fresh, small buffer. Whether memory was freed.
    pub fn shrink(&mut self) -> bool {
        let big = self.buf.capacity() > READ_CHUNK || self.spare.is_some();
        if self.buffered() > 0 || !big {
            return false;
        }
        self.buf = Arc::new(AlignedVec::new());
        self.spare = None;
        self.read = 0;
        true
    }

    /// Bytes of memory the decoder holds (its buffer and spare), shared or not.
    pub fn capacity(&self) -> usize {
        self.buf.capacity() + self.spare.as_ref().map_or(0, |s| s.capacity())
    }

    /// The buffer, ready to take `more` bytes at its end: ours alone (a fresh one holding the
    /// unread bytes if frames still share the old one), compacted when the consumed part is
    /// the larger (keeps alignment: `read % 16 == 0`).
    #[inline]
    fn writable(&mut self, more: usize) -> &mut AlignedVec<PAGE> {
        // The usual case, and every empty read of a spinning reactor: the buffer is ours alone,
        // has the room and is not worth compacting. One uniqueness check (an atomic
        // compare-and-swap) instead of the two below. No `Weak` of the buffer is ever made,
        // and only this decoder clones it, so a strong count of 1 cannot change meanwhile.
        let settled = self.read == 0 || self.read * 2 < self.buf.len();
        if settled
            && self.buf.capacity() - self.buf.len() >= more
            && Arc::strong_count(&self.buf) == 1
        {
            let Some(buf) = Arc::get_mut(&mut self.buf) else {
                unreachable!("the only handle on the buffer is this one")
            };
            return buf;
        }
        self.make_writable(more)
    }

    /// [`Self::writable`]'s other cases: a shared buffer, one too small, or one to compact.
    #[inline(never)]
    fn make_writable(&mut self, more: usize) -> &mut AlignedVec<PAGE> {
        let rest = self.buf.len() - self.read;
        let need = rest + more;
        let shared = Arc::get_mut(&mut self.buf).is_none();
        // Too small even once compacted: a free spare beats growing (a copy and new memory).
        let grow = !shared && self.buf.capacity() < need;
        let reuse = (shared || grow) && self.spare_for(need).is_some();
        if shared || reuse {
            let mut next = match self.spare.take() {
                Some(spare) if reuse => spare,
                kept => {
                    self.spare = kept;
                    Arc::new(AlignedVec::with_capacity(need.max(READ_CHUNK)))
                }
            };
            let Some(v) = Arc::get_mut(&mut next) else {
                unreachable!("a spare is taken only when unshared; a fresh one is ours")
            };
            v.clear();
            v.extend_from_slice(&self.buf[self.read..]);
            let old = std::mem::replace(&mut self.buf, next);
            if shared && old.capacity() >= SPARE_MIN {
                self.spare = Some(old);
            }
            self.read = 0;
        }
        let read = std::mem::take(&mut self.read);
        let Some(buf) = Arc::get_mut(&mut self.buf) else {
            unreachable!("made unique above")
        };
        if read > 0 && read * 2 >= buf.len() {
            buf.as_mut_slice().copy_within(read.., 0);
            buf.resize(rest, 0);
        } else {
            self.read = read;
        }
        buf.reserve(more);
        buf
    }

    /// The spare buffer, if no frame shares it any more and it can hold `need` bytes.
    fn spare_for(&mut self, need: usize) -> Option<&mut AlignedVec<PAGE>> {
        self.spare
            .as_mut()
            .and_then(Arc::get_mut)
            .filter(|v| v.capacity() >= need)
    }

    /// Append received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.writable(bytes.len()).extend_from_slice(bytes);
    }

    /// Receive once straight into the buffer: `fill` is offered room for as much as the frame
    /// in progress still needs, at least `READ_CHUNK`, and all the room the buffer has beyond
    /// that, but never more than `at_most` bytes; it returns how many bytes it wrote (or its
    /// error). Returns the bytes received (0: end of stream) and whether that was less than
    /// offered, i.e. the source is drained for now.
    ///
    /// The room matters for frames above `READ_CHUNK`: their header is not known before the
    /// read, so asking only for the chunk took two receives per frame (16 and 32 KiB ping-pong:
    /// 1.20x the std peer's one-way p50, against 1.04-1.09x with one receive).
    ///
    /// # Safety
    /// `fill` must have initialized the first `n` bytes of the room when it returns `Ok(n)`
    /// (a `recv` into it does).
    pub unsafe fn receive(
        &mut self,
        at_most: usize,
        fill: impl FnOnce(&mut [MaybeUninit<u8>]) -> std::io::Result<usize>,
    ) -> std::io::Result<(usize, bool)> {
        let buf = self.writable(self.missing().max(READ_CHUNK).min(at_most));
        let len = buf.len();
        let want = (buf.capacity() - len).min(at_most);
        // SAFETY: the buffer's capacity ends at least `want` bytes past `len`.
        let room = unsafe {
            std::slice::from_raw_parts_mut(
                buf.as_mut_ptr().add(len).cast::<MaybeUninit<u8>>(),
                want,
            )
        };
        let n = fill(room)?.min(want);
        // SAFETY: `fill` initialized the `n` bytes it reports (per the caller), inside the room.
        unsafe { buf.set_len(len + n) };
        Ok((n, n < want))
    }

    /// Lend the kernel the room for the rest of the frame in progress (`None` if no frame is
    /// in progress), for a receive that completes later and writes straight into the buffer.
    /// Until the loan comes back through [`Self::commit`], nothing may be pushed or read here.
    pub fn lend(&mut self) -> Option<Lent> {
        let missing = self.missing();
        if missing == 0 {
            return None;
        }
        let buf = self.writable(missing);
        let len = buf.len();
        // SAFETY: `writable` reserved `missing` bytes past `len`, inside the allocation.
        let ptr = unsafe { buf.as_mut_ptr().add(len) };
        Some(Lent {
            ptr,
            len: missing,
            keep: self.buf.clone(),
        })
    }

    /// Take back a loan whose receive wrote `n` bytes at its start.
    ///
    /// # Safety
    /// The kernel (or whoever filled the loan) wrote `n` bytes at `lent.ptr` and has finished.
    pub unsafe fn commit(&mut self, lent: Lent, n: usize) -> Result<(), WireError> {
        let Lent { ptr, len, keep } = lent;
        drop(keep);
        let buf = Arc::get_mut(&mut self.buf).ok_or(WireError::Poisoned)?;
        let end = buf.len();
        // The loan must be this buffer's end, and the receive no longer than the loan.
        if ptr != buf.as_mut_ptr().wrapping_add(end) || n > len || end + n > buf.capacity() {
            self.failed = true;
            return Err(WireError::Poisoned);
        }
        // SAFETY: the `n` bytes past `end` are inside the capacity and were written, per the
        // caller.
        unsafe { buf.set_len(end + n) };
        Ok(())
    }

    /// Bytes still missing from the frame whose header has arrived (0 if none has).
    pub fn missing(&self) -> usize {
        let rest = &self.buf[self.read..];
        match FrameHeader::parse(rest, self.max_body) {
            Ok(Some(h)) => h.frame_len().saturating_sub(rest.len()),
            _ => 0,
        }
    }

    /// Bytes received but not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.read
    }

    /// The next complete frame (padding frames are skipped). `Ok(None)` means "need more
    /// bytes". An error poisons the
    /// decoder: the connection must be closed, since the stream can no longer be trusted to be
    /// in sync.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, WireError> {
        if self.failed {
            return Err(WireError::Poisoned);
        }
        loop {
            let rest = &self.buf[self.read..];
            let header = match FrameHeader::parse(rest, self.max_body) {
                Ok(Some(h)) => h,
                Ok(None) => return Ok(None),
                Err(e) => {
                    self.failed = true;
                    return Err(e);
                }
            };
            if rest.len() < header.frame_len() {
                return Ok(None);
            }
            if header.kind == Kind::Pad && !self.pads {
                self.failed = true;
                return Err(WireError::PadBeforeAuth);
            }
            let start = self.read + HEADER_LEN;
            let frame_end = self.read + header.frame_len();
            self.read = frame_end;
            if header.kind != Kind::Pad {
                return Ok(Some(Frame {
                    kind: header.kind,
                    tag: header.tag,
                    buf: self.buf.clone(),
                    body: start..start + header.body_len as usize,
                    mac: header.mac.then_some(frame_end - MAC_LEN),
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::bmg::BmgMsg;
    use crate::proto::overlay::OverlayMsg;
    use crate::proto::ping::PingMsg;
    use crate::wire::{write_frame, Framed};
    use crate::NodeId;

    pub(crate) fn frames<M: Framed>(msgs: &[M]) -> Vec<u8> {
        let mut out = Vec::new();
        for m in msgs {
            write_frame(m, &mut out).unwrap();
        }
        out
    }

    fn ping(seq: u64, payload: Vec<u8>) -> PingMsg {
        PingMsg::Ping {
            seq,
            payload: payload.into(),
        }
    }

    fn up(ident: u64, hop: u8) -> OverlayMsg {
        BmgMsg::Up {
            ident: NodeId(ident),
            hop,
        }
        .into()
    }

    /// A decoder of an authenticated connection (padding allowed).
    fn open_decoder() -> FrameDecoder {
        let mut d = FrameDecoder::default();
        d.authenticated(DEFAULT_MAX_BODY);
        d
    }

    #[test]
    fn byte_by_byte_stream_yields_every_message_in_place() {
        let msgs = vec![
            up(5, 3),
            crate::proto::ring::RingMsg::BConnect(NodeId(9)).into(),
            up(1, 0),
        ];
        let mut stream = frames(&[ping(7, vec![1; 33]), ping(8, vec![])]);
        stream.extend_from_slice(&frames(&msgs));
        let mut d = FrameDecoder::default();
        let (mut pings, mut got) = (Vec::new(), Vec::new());
        for b in &stream {
            d.push(std::slice::from_ref(b));
            while let Some(f) = d.next_frame().unwrap() {
                assert_eq!(f.kind, Kind::Msg);
                assert_eq!(f.body().as_ptr() as usize % 16, 0, "body aligned in place");
                match f.tag {
                    1 => pings.push(PingMsg::read(&f).unwrap()),
                    _ => got.push(OverlayMsg::read(&f).unwrap()),
                }
            }
        }
        assert_eq!(pings, [ping(7, vec![1; 33]), ping(8, vec![])]);
        assert_eq!(got, msgs);
        assert_eq!(d.buffered(), 0);
    }

    /// Padding frames never come out, however many there are in a row.
    #[test]
    fn padding_frames_are_skipped() {
        let mut stream = Vec::new();
        for _ in 0..200_000 {
            stream.extend_from_slice(&FrameHeader::encode(Kind::Pad, 0, false, 0));
        }
        write_frame_pad(&mut stream, 40);
        let msg = up(3, 1);
        stream.extend_from_slice(&frames(&[msg]));
        let mut d = open_decoder();
        d.push(&stream);
        let f = d.next_frame().unwrap().unwrap();
        assert_eq!(OverlayMsg::read(&f).unwrap(), msg);
        assert!(d.next_frame().unwrap().is_none());
        assert_eq!(d.buffered(), 0);
        // Before the handshake, padding is a refusal.
        let mut d = FrameDecoder::new(1024);
        d.push(&stream[..64]);
        assert_eq!(d.next_frame(), Err(WireError::PadBeforeAuth));
    }

    fn write_frame_pad(out: &mut Vec<u8>, body: u32) {
        crate::wire::frame::write_frame(Kind::Pad, &vec![0; body as usize], out).unwrap();
    }

    /// A frame that finds the decoder empty starts on a page: on a fresh decoder, after the
    /// previous frames were consumed, and in the fresh buffer taken while a payload still
    /// shares the old one. Both small and large frames (small and large buffers).
    #[test]
    fn frames_that_find_the_decoder_empty_start_on_a_page() {
        let start = |f: &Frame| (f.body().as_ptr() as usize - HEADER_LEN) % PAGE;
        for size in [40usize, 5000, 300_000] {
            let one = frames(&[ping(1, vec![3; size])]);
            let mut d = FrameDecoder::default();
            let mut held = Vec::new();
            for round in 0..4 {
                d.push(&one);
                let f = d.next_frame().unwrap().unwrap();
                assert_eq!(start(&f), 0, "size {size}, round {round}");
                // Keep every other frame: the decoder must move to a fresh buffer.
                if round % 2 == 0 {
                    held.push(f);
                }
            }
        }
    }

    /// A large payload is handed out without a copy and stays intact while the decoder goes
    /// on receiving (into a fresh buffer, since the old one is still shared); a small one is
    /// copied.
    #[test]
    fn a_large_buffer_is_reused_once_its_frames_are_gone() {
        let big = frames(&[ping(0, (0..300_000u32).map(|i| (i % 253) as u8).collect())]);
        for released in [true, false] {
            let mut d = FrameDecoder::default();
            d.push(&big);
            let held = d.next_frame().unwrap().unwrap();
            let before = held.body().to_vec();
            let first = d.buf.as_ptr();
            // The next message starts while a protocol still holds the frame (an echo being
            // sent): the buffer is replaced, not written.
            d.push(&big[..100]);
            assert_ne!(d.buf.as_ptr(), first);
            // The echo is sent (or not), and the rest of the large frame arrives.
            let held = if released {
                drop(held);
                None
            } else {
                Some(held)
            };
            d.push(&big[100..]);
            let f = d.next_frame().unwrap().unwrap();
            assert_eq!(f.body(), &before[..]);
            // Released, the old buffer takes the frame instead of new memory; still shared,
            // it is never written.
            assert_eq!(d.buf.as_ptr() == first, released, "released: {released}");
            if let Some(held) = held {
                assert_eq!(held.body(), &before[..]);
            }
        }
    }

    #[test]
    fn large_payloads_are_shared_with_the_receive_buffer() {
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let stream = frames(&[ping(1, big.clone()), ping(2, vec![9; 10])]);
        let mut d = FrameDecoder::default();
        d.push(&stream);
        let f = d.next_frame().unwrap().unwrap();
        let Ok(PingMsg::Ping { payload, .. }) = PingMsg::read(&f) else {
            panic!("not a ping")
        };
        let body = f.body().as_ptr_range();
        assert!(body.contains(&payload.as_ptr()), "shared, not copied");
        drop(f);
        let f = d.next_frame().unwrap().unwrap();
        let Ok(PingMsg::Ping { payload: small, .. }) = PingMsg::read(&f) else {
            panic!("not a ping")
        };
        assert!(
            !f.body().as_ptr_range().contains(&small.as_ptr()),
            "small ones are copied"
        );
        drop(f);
        // The decoder reuses nothing the payload still points into.
        for _ in 0..4 {
            d.push(&stream);
            while d.next_frame().unwrap().is_some() {}
        }
        assert_eq!(&payload[..], &big[..]);
        assert_eq!(&small[..], &[9; 10]);
    }

    /// A loan receives the rest of a large frame in place, even while an earlier frame's
    /// payload still shares the buffer; a loan overrun is refused.
    #[test]
    fn a_loan_takes_the_rest_of_a_frame_in_place() {
        let held_bytes = vec![1u8; 10_000];
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 249) as u8).collect();
        let stream = frames(&[ping(0, held_bytes.clone()), ping(5, big.clone())]);
        let first = frames(&[ping(0, held_bytes.clone())]).len();
        let mut d = FrameDecoder::default();
        d.push(&stream[..first + 1000]);
        let f = d.next_frame().unwrap().unwrap();
        let Ok(PingMsg::Ping { payload: held, .. }) = PingMsg::read(&f) else {
            panic!("not the first ping")
        };
        drop(f);
        assert!(d.missing() > 190_000);
        let lent = d.lend().expect("a frame is in progress");
        assert_eq!(lent.len, stream.len() - first - 1000);
        // The kernel's part: write the rest where the loan points.
        let rest = &stream[first + 1000..];
        // SAFETY: the loan has room for `lent.len` bytes, exactly `rest.len()`.
        unsafe { std::ptr::copy_nonoverlapping(rest.as_ptr(), lent.ptr, rest.len()) };
        // SAFETY: `rest.len()` bytes were written at the loan's start.
        unsafe { d.commit(lent, rest.len()) }.unwrap();
        let f = d.next_frame().unwrap().expect("the whole ping");
        let Ok(PingMsg::Ping { seq: 5, payload }) = PingMsg::read(&f) else {
            panic!("not the ping")
        };
        assert_eq!(&payload[..], &big[..]);
        assert_eq!(
            &held[..],
            &held_bytes[..],
            "the earlier payload is untouched"
        );
        // A loan claimed to have received more than it lent poisons the decoder.
        d.push(&stream[..first + 1000]);
        d.next_frame().unwrap().unwrap();
        let lent = d.lend().unwrap();
        let too_many = lent.len + 1;
        // SAFETY: deliberately wrong; `commit` must refuse it before touching the length.
        assert!(unsafe { d.commit(lent, too_many) }.is_err());
        assert_eq!(d.next_frame(), Err(WireError::Poisoned));
    }

    #[test]
    fn garbage_oversize_and_truncation() {
        // Garbage: an error, and the decoder stays poisoned.
        let mut d = FrameDecoder::default();
        d.push(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(d.next_frame(), Err(WireError::BadMagic));
        assert_eq!(d.next_frame(), Err(WireError::Poisoned));
        // Oversized length: refused from the header alone, before the body arrives.
        let mut d = FrameDecoder::new(64);
        d.push(&FrameHeader::encode(Kind::Msg, 1, false, 1 << 30));
        assert!(matches!(d.next_frame(), Err(WireError::TooLarge { .. })));
        // Truncated: no frame until the rest arrives.
        let stream = frames(&[ping(0, vec![3; 100])]);
        let mut d = FrameDecoder::default();
        d.push(&stream[..stream.len() - 1]);
        assert_eq!(d.next_frame(), Ok(None));
        d.push(&stream[stream.len() - 1..]);
        assert!(d.next_frame().unwrap().is_some());
        // A well-framed body that is not a valid archive: a validation error, no panic.
        let mut junk = FrameHeader::encode(Kind::Msg, 1, false, 40).to_vec();
        junk.extend_from_slice(&[0xff; 48]);
        let mut d = FrameDecoder::default();
        d.push(&junk);
        let f = d.next_frame().unwrap().unwrap();
        assert!(matches!(PingMsg::read(&f), Err(WireError::Malformed(_))));
    }
}

#[cfg(test)]
mod seeds {
    use super::FrameDecoder;

    /// The fuzz seed corpus: one valid frame of each kind. Checked to decode here; written out
    /// when `WEFT_WRITE_FUZZ_SEEDS` names a directory
    /// (`WEFT_WRITE_FUZZ_SEEDS=$PWD/fuzz/seeds/frame cargo test --lib fuzz_seeds`).
    #[test]
    fn fuzz_seeds_are_valid_frames() {
        use crate::proto::ping::PingMsg;
        use crate::wire::handshake::{Handshake, Identity, JobKey, Role};
        use crate::wire::write_frame;
        let mut seeds: Vec<Vec<u8>> = Vec::new();
        for m in [
            PingMsg::Ping {
                seq: 1,
                payload: vec![7; 32].into(),
            },
            PingMsg::Pong {
                seq: 1,
                payload: Default::default(),
            },
            // Large enough to be shared with the receive buffer, not copied.
            PingMsg::Ping {
                seq: 2,
                payload: vec![5; crate::buf::SHARE_MIN].into(),
            },
        ] {
            let mut f = Vec::new();
            write_frame(&m, &mut f).unwrap();
            seeds.push(f);
        }
        let mut f = Vec::new();
        write_frame(
            &crate::proto::overlay::OverlayMsg::Ring(crate::proto::ring::RingMsg::FConnect(
                crate::NodeId(3),
            )),
            &mut f,
        )
        .unwrap();
        seeds.push(f);
        let me = Identity::new(7, crate::NodeId(5), JobKey::from_bytes([9; 32]));
        let mut hello = Vec::new();
        Handshake::with_nonce(Role::Initiator, me, None, [1; 32], &mut hello).unwrap();
        seeds.push(hello);
        for s in &seeds {
            let mut d = FrameDecoder::default();
            d.push(s);
            let f = d.next_frame().unwrap().expect("a whole frame");
            assert_eq!((16 + f.body().len()).div_ceil(16) * 16, s.len());
        }
        // A padding frame in front of the first message: the decoder skips it.
        let mut padded = Vec::new();
        crate::wire::frame::write_frame(crate::wire::Kind::Pad, &[0; 32], &mut padded).unwrap();
        padded.extend_from_slice(&seeds[0]);
        let mut d = FrameDecoder::default();
        d.authenticated(crate::wire::frame::DEFAULT_MAX_BODY);
        d.push(&padded);
        let f = d.next_frame().unwrap().expect("the message");
        assert_eq!(f.body(), &seeds[0][16..16 + f.body().len()]);
        assert!(d.next_frame().unwrap().is_none());
        seeds.push(padded);
        if let Ok(dir) = std::env::var("WEFT_WRITE_FUZZ_SEEDS") {
            std::fs::create_dir_all(&dir).unwrap();
            for (i, s) in seeds.iter().enumerate() {
                std::fs::write(format!("{dir}/seed-{i:02}"), s).unwrap();
            }
        }
    }
}
