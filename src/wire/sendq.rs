//! A connection's outgoing frames, with large payloads spliced in by reference.
//!
//! Frames are serialized straight into the queue's open buffer, except that a payload of
//! [`SHARE_MIN`] bytes or more is not copied: the serializer, meeting the payload's bytes,
//! records a reference to them instead, and the queue sends them from where they already are
//! (a gather write: `writev`, or `sendmsg` through io_uring). The frame format does not change;
//! only who holds which bytes until the kernel has taken them.
//!
//! The queue is a list of frozen chunks (sealed: ready to hand to the kernel, possibly
//! referenced by an in-flight send) followed by the open buffer still being written. Sealed
//! chunks of the open buffer share its allocation; once they are sent and dropped, the buffer
//! reclaims the space, so a connection reuses one send allocation instead of allocating per
//! message.

use super::frame::{padded, FrameHeader, Kind, HEADER_LEN};
use super::mac::FrameMac;
use super::WireError;
use crate::buf::{Payload, PAGE, SHARE_MIN};
use crate::proto::Message;
use bytes::{Buf, BytesMut};
use rkyv::api::low::LowSerializer;
use rkyv::rancor::BoxedError;
use rkyv::ser::allocator::{ArenaHandle, SubAllocator};
use rkyv::ser::writer::Buffer;
use rkyv::ser::{Positional, Writer};
use rkyv::Serialize;
use std::collections::VecDeque;
use std::io::IoSlice;

/// How far from its own page offset a payload may land in the sender's kernel pages and
/// still be copied in the slow case (measured slow at 8..24 bytes, fast at 0 and 32 on).
const ALIAS_WINDOW: usize = 64;

/// Bytes of padding frame to put in front of a frame whose spliced payload, `ahead` bytes into
/// the queue, starts at address `addr`; 0 if none is needed.
///
/// The kernel copies a write into pages from offset 0 (when the connection's earlier sends
/// have been freed, as between the turns of a request and its answer), so the payload lands
/// at page offset `ahead % 4096`. On AMD Zen that copy (`rep movsb`) runs at half speed or
/// worse when the destination is a few bytes past the source's page offset (4K aliasing, see
/// `wire::decoder`): a page-aligned payload behind a 16-byte header is that case. A padding
/// frame, which the receiver skips, moves it out of the window. The receiver's copy is not
/// harmed: its frame moves by the same bytes as the pages it is copied from.
fn alias_shift(ahead: usize, addr: usize) -> usize {
    let past = past_own_offset(ahead, addr);
    if past == 0 || past >= ALIAS_WINDOW {
        return 0;
    }
    padded(ALIAS_WINDOW - past).max(HEADER_LEN)
}

/// How many bytes past `addr`'s page offset a byte `ahead` bytes into a write lands in the
/// kernel's pages (filled from offset 0), modulo the page.
fn past_own_offset(ahead: usize, addr: usize) -> usize {
    (ahead % PAGE + PAGE - addr % PAGE) % PAGE
}

/// Outgoing bytes of one connection, in order.
#[derive(Debug, Default)]
pub struct SendQueue {
    /// Frozen parts of the open buffer and spliced payloads, both as [`Payload`]s: shared
    /// bytes the queue never copies.
    sealed: VecDeque<Payload>,
    /// Bytes in `sealed`: [`Self::len`] is asked on every send (the cap on what a peer that
    /// does not read may have queued) and must not walk a long backlog.
    sealed_len: usize,
    open: BytesMut,
    /// [`GatherWriter`]'s list of splices, kept between messages so that a large one costs no
    /// allocation.
    splices: Vec<(usize, Payload)>,
}

impl SendQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes queued.
    #[inline]
    pub fn len(&self) -> usize {
        self.sealed_len + self.open.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.sealed.is_empty() && self.open.is_empty()
    }

    /// Append bytes already framed (handshake frames).
    pub fn push_bytes(&mut self, bytes: &[u8]) {
        self.open.extend_from_slice(bytes);
    }

    /// Move everything queued in `other` behind what is queued here.
    pub fn append(&mut self, other: &mut SendQueue) {
        if other.is_empty() {
            return;
        }
        self.seal();
        other.seal();
        self.sealed.append(&mut other.sealed);
        self.sealed_len += std::mem::take(&mut other.sealed_len);
    }

    /// Append `msg` as a frame: header, rkyv body, padding (and a MAC from `mac`), with the
    /// body serialized in place and a large payload spliced by reference. On an error the
    /// queue is left as it was.
    pub fn push_msg<M: super::Framed>(
        &mut self,
        msg: &M,
        mac: Option<&mut FrameMac>,
    ) -> Result<(), WireError> {
        msg.push_onto(self, mac)
    }

    /// Append a goodbye ([`Kind::Bye`]), with a MAC from `mac`: nothing follows it.
    pub fn push_bye(&mut self, mac: Option<&mut FrameMac>) {
        let header = FrameHeader::encode(Kind::Bye, 0, mac.is_some(), 0);
        self.push_bytes(&header);
        if let Some(mac) = mac {
            let tag = mac.seal([&header[..]]);
            self.push_bytes(&tag);
        }
    }

    /// [`Self::push_msg`] for a message of protocol `tag` (see [`super::Framed`]).
    pub(crate) fn push_framed<M: Message + Serializable>(
        &mut self,
        msg: &M,
        tag: u8,
        mac: Option<&mut FrameMac>,
    ) -> Result<(), WireError> {
        let start = self.open.len();
        debug_assert_eq!(
            self.len() % 16,
            0,
            "frames are queued on 16-byte boundaries"
        );
        self.open
            .extend_from_slice(&FrameHeader::encode(Kind::Msg, tag, mac.is_some(), 0));
        if let Some(len) = self.write_in_place(msg) {
            self.seal_frame(start, len);
            if let Some(mac) = mac {
                let end = start + HEADER_LEN + len as usize;
                let tag = mac.seal([&self.open[start..end]]);
                self.open.extend_from_slice(&tag);
            }
            return Ok(());
        }
        let mut w = GatherWriter {
            open: &mut self.open,
            body_start: start + HEADER_LEN,
            spliced: 0,
            splices: std::mem::take(&mut self.splices),
            stable: msg.payload(),
        };
        // The low-level serializer: a `Msg` holds no `Rc`/`Arc` to deduplicate, so the
        // high-level API's sharing registry was pure cost (about 60 instructions a message).
        // The bytes are the same (`gathered_frames_equal_copied_ones`).
        let written = serialize(msg, &mut w)
            .map_err(|e| WireError::Encode(e.to_string()))
            .and_then(|()| {
                u32::try_from(w.pos()).map_err(|_| WireError::TooLarge {
                    len: u32::MAX,
                    max: u32::MAX,
                })
            });
        let mut splices = std::mem::take(&mut w.splices);
        let len = match written {
            Ok(len) => len,
            Err(e) => {
                self.open.truncate(start);
                splices.clear();
                self.splices = splices;
                return Err(e);
            }
        };
        self.seal_frame(start, len);
        if let Some(mac) = mac {
            let tag = mac.seal(frame_parts(&self.open, start, len as usize, &splices));
            self.open.extend_from_slice(&tag);
        }
        if let Some((at, payload)) = splices.first() {
            // Queued before the payload: everything sealed, and `at` bytes of the open buffer.
            let ahead = self.len() - self.open.len() + at;
            let shift = alias_shift(ahead, payload.as_ptr() as usize);
            if shift > 0 {
                let frame = self.open.split_off(start);
                self.open.extend_from_slice(&FrameHeader::encode(
                    Kind::Pad,
                    0,
                    false,
                    (shift - HEADER_LEN) as u32,
                ));
                self.open.resize(start + shift, 0);
                self.open.extend_from_slice(&frame);
                splices.iter_mut().for_each(|(at, _)| *at += shift);
            }
        }
        // Cut the open buffer at each splice point: the bytes before it become a sealed chunk,
        // then the spliced payload itself.
        let mut cut = 0;
        for (at, payload) in splices.drain(..) {
            let framing = self.open.split_to(at - cut).freeze();
            self.sealed_len += framing.len() + payload.len();
            self.sealed.push_back(Payload::from_bytes(framing));
            self.sealed.push_back(payload);
            cut = at;
        }
        self.splices = splices;
        Ok(())
    }

    /// Serialize a message with no payload to splice straight into the open buffer's spare
    /// room, behind its header: the writer is a bounds check and a copy per field, where the
    /// gathering writer pays a reserve and a splice test per field (about 250 instructions of
    /// a 32-byte ping's 580). `None`, with nothing written, if the message has a payload to
    /// splice or did not fit in [`IN_PLACE_ROOM`] past its payload; the gathering path then
    /// does it (and reports any real error).
    fn write_in_place<M: Message + Serializable>(&mut self, msg: &M) -> Option<u32> {
        let payload = msg.payload().map_or(0, |p| p.len());
        if payload >= SHARE_MIN {
            return None;
        }
        self.open.reserve(payload + IN_PLACE_ROOM);
        let body = self.open.len();
        let mut scratch = [std::mem::MaybeUninit::<u8>::uninit(); STACK_SCRATCH];
        let w = Buffer::from(self.open.spare_capacity_mut());
        let w = rkyv::api::low::to_bytes_in_with_alloc::<_, _, BoxedError>(
            msg,
            w,
            SubAllocator::new(&mut scratch),
        )
        .ok()?;
        let len = w.len();
        // SAFETY: `Buffer` writes its bytes in order from the start of the spare room, padding
        // included, so the first `len` bytes of it are initialized.
        unsafe { self.open.set_len(body + len) };
        u32::try_from(len).ok()
    }

    /// Put the body's length `len` into the header at `start` and pad the frame to 16 bytes.
    fn seal_frame(&mut self, start: usize, len: u32) {
        self.open[start + 8..start + 12].copy_from_slice(&len.to_le_bytes());
        let pad = padded(len as usize) - len as usize;
        self.open.extend_from_slice(&ZEROS[..pad]);
    }

    /// Every queued byte in order, copied (tests and tools; a connection sends from the chunks).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        for c in &self.sealed {
            out.extend_from_slice(c);
        }
        out.extend_from_slice(&self.open);
        out
    }

    /// Freeze the open buffer into a sealed chunk.
    fn seal(&mut self) {
        if !self.open.is_empty() {
            let framing = self.open.split().freeze();
            self.sealed_len += framing.len();
            self.sealed.push_back(Payload::from_bytes(framing));
        }
    }

    /// All the queued bytes, if they are one chunk (the usual case between a request and its
    /// answer): a plain `write` of them needs no gather list.
    pub fn contiguous(&self) -> Option<&[u8]> {
        match (self.sealed.len(), self.open.is_empty()) {
            (0, _) => Some(&self.open),
            (1, true) => self.sealed.front().map(|b| &b[..]),
            _ => None,
        }
    }

    /// Fill `out` with the first queued bytes in order, at most `max_bytes` of them and as
    /// many chunks as fit (the last one cut short at `max_bytes`); returns how many chunks.
    pub fn slices<'a>(&'a self, out: &mut [IoSlice<'a>], max_bytes: usize) -> usize {
        let chunks = self
            .sealed
            .iter()
            .map(|b| &b[..])
            .chain(Some(&self.open[..]).filter(|o| !o.is_empty()));
        let mut n = 0;
        for (slot, part) in out.iter_mut().zip(first_bytes(chunks, max_bytes)) {
            *slot = IoSlice::new(part);
            n += 1;
        }
        n
    }

    /// Drop the first `n` bytes: the kernel took them.
    #[inline]
    pub fn consume(&mut self, n: usize) {
        // The usual case, a queue of small frames: all of it is the open buffer.
        if self.sealed.is_empty() {
            // All of it written (the usual case): `clear` keeps the buffer's start where it
            // is, where `advance` would move it on until a later `reserve` had to move it
            // back (about 55 instructions a message).
            if n >= self.open.len() {
                self.open.clear();
            } else {
                self.open.advance(n);
            }
            return;
        }
        self.consume_sealed(n);
    }

    /// [`Self::consume`] of a queue that starts with sealed chunks.
    fn consume_sealed(&mut self, mut n: usize) {
        while n > 0 {
            match self.sealed.front_mut() {
                Some(front) if front.len() <= n => {
                    n -= front.len();
                    self.sealed_len -= front.len();
                    self.sealed.pop_front();
                }
                Some(front) => {
                    front.advance(n);
                    self.sealed_len -= n;
                    return;
                }
                None => {
                    self.open.advance(n.min(self.open.len()));
                    return;
                }
            }
        }
    }

    /// Hand the first `max` queued chunks to `out` (for a send that holds them until it
    /// completes).
    pub fn take(&mut self, out: &mut Vec<Payload>, max: usize) {
        self.seal();
        let n = self.sealed.len().min(max);
        self.sealed_len -= self.sealed.range(..n).map(|c| c.len()).sum::<usize>();
        out.extend(self.sealed.drain(..n));
    }

    /// Put chunks a send did not take back at the front, in order.
    pub fn unshift(&mut self, chunks: impl DoubleEndedIterator<Item = Payload>) {
        for c in chunks.rev() {
            self.sealed_len += c.len();
            self.sealed.push_front(c);
        }
    }
}

/// The first `max_bytes` bytes of `chunks`, in order: every chunk before the one the limit
/// falls in whole, that one cut short, none after it.
pub fn first_bytes<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
    max_bytes: usize,
) -> impl Iterator<Item = &'a [u8]> {
    let mut left = max_bytes;
    chunks.into_iter().map_while(move |chunk| {
        (left > 0).then(|| {
            let part = &chunk[..chunk.len().min(left)];
            left -= part.len();
            part
        })
    })
}

/// Scratch space on the stack for serializing one message. rkyv needs scratch only to hold the
/// resolvers of a vector of non-trivial elements; most messages need none, and the thread's
/// shared arena (a thread-local lookup, an acquire and a release: about 60 instructions a
/// message) is asked only when this is too small.
const STACK_SCRATCH: usize = 512;

/// Room past its payload that [`SendQueue::push_msg`] offers a message serialized in place:
/// every fixed-size variant fits with room to spare; a long list (a regroup's dead set) does
/// not and takes the gathering path.
const IN_PLACE_ROOM: usize = 512;

/// A frame's padding.
static ZEROS: [u8; 16] = [0; 16];

/// The header and body of the frame just sealed at `start` of `open` (body `len` bytes), as
/// the receiver will see them: the open buffer's bytes with the spliced payloads in place.
fn frame_parts<'q>(
    open: &'q [u8],
    start: usize,
    len: usize,
    splices: &'q [(usize, Payload)],
) -> impl Iterator<Item = &'q [u8]> {
    let end = start + HEADER_LEN + len - splices.iter().map(|s| s.1.len()).sum::<usize>();
    let tail = splices.last().map_or(start, |s| s.0);
    let mut from = start;
    splices
        .iter()
        .flat_map(move |(at, p)| {
            let before = &open[from..*at];
            from = *at;
            [before, &p[..]]
        })
        .chain(std::iter::once(&open[tail..end]))
}

/// The serializers a message type must support to be queued: serialized in place into the
/// open buffer's spare room, or through the gathering writer with stack scratch or the arena.
/// Implemented for every type whose archive derives; named only to keep bounds short.
#[doc(hidden)]
pub trait Serializable: for<'b, 's> Serialize<LowSerializer<Buffer<'b>, SubAllocator<'s>, BoxedError>>
    + for<'a, 's, 'w> Serialize<LowSerializer<&'w mut GatherWriter<'a>, SubAllocator<'s>, BoxedError>>
    + for<'a, 's, 'w> Serialize<LowSerializer<&'w mut GatherWriter<'a>, ArenaHandle<'s>, BoxedError>>
{
}

impl<T> Serializable for T where
    T: for<'b, 's> Serialize<LowSerializer<Buffer<'b>, SubAllocator<'s>, BoxedError>>
        + for<'a, 's, 'w> Serialize<
            LowSerializer<&'w mut GatherWriter<'a>, SubAllocator<'s>, BoxedError>,
        > + for<'a, 's, 'w> Serialize<
            LowSerializer<&'w mut GatherWriter<'a>, ArenaHandle<'s>, BoxedError>,
        >
{
}

/// Serialize `msg` into `w`: with stack scratch space, or again with the thread's arena if that
/// ran out (a failed attempt leaves its partial bytes in `w`; they are dropped first). No
/// message needs scratch today; one holding a vector of strings would.
fn serialize<'a, T>(msg: &T, w: &mut GatherWriter<'a>) -> Result<(), BoxedError>
where
    T: for<'s, 'w> Serialize<LowSerializer<&'w mut GatherWriter<'a>, SubAllocator<'s>, BoxedError>>
        + for<'s, 'w> Serialize<LowSerializer<&'w mut GatherWriter<'a>, ArenaHandle<'s>, BoxedError>>,
{
    let (open_at, splices_at) = (w.open.len(), w.splices.len());
    let mut stack = [std::mem::MaybeUninit::<u8>::uninit(); STACK_SCRATCH];
    let scratch = SubAllocator::new(&mut stack);
    if rkyv::api::low::to_bytes_in_with_alloc::<_, _, BoxedError>(msg, &mut *w, scratch).is_ok() {
        return Ok(());
    }
    w.open.truncate(open_at);
    w.spliced -= w
        .splices
        .drain(splices_at..)
        .map(|(_, b)| b.len())
        .sum::<usize>();
    rkyv::util::with_arena(|arena| {
        rkyv::api::low::to_bytes_in_with_alloc::<_, _, BoxedError>(msg, &mut *w, arena.acquire())
            .map(drop)
    })
}

/// An rkyv writer that appends to the queue's open buffer but records, instead of copying, any
/// large write that lies inside `stable` (the message's payload, alive while it is queued).
#[doc(hidden)]
pub struct GatherWriter<'a> {
    open: &'a mut BytesMut,
    body_start: usize,
    /// Body bytes recorded as splices rather than written.
    spliced: usize,
    /// (offset in `open` where the bytes belong, the bytes).
    splices: Vec<(usize, Payload)>,
    stable: Option<&'a Payload>,
}

impl Positional for GatherWriter<'_> {
    fn pos(&self) -> usize {
        self.open.len() - self.body_start + self.spliced
    }
}

impl<E> Writer<E> for GatherWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<(), E> {
        let shared = match self.stable {
            Some(p) if bytes.len() >= SHARE_MIN => p.share(bytes),
            _ => None,
        };
        match shared {
            Some(s) => {
                self.splices.push((self.open.len(), s));
                self.spliced += bytes.len();
            }
            None => self.open.extend_from_slice(bytes),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::bmg::BmgMsg;
    use crate::proto::membership::{MemberMsg, Regroup};
    use crate::proto::overlay::OverlayMsg;
    use crate::proto::ping::PingMsg;
    use crate::wire::{write_frame, FrameDecoder, Framed};
    use crate::NodeId;

    /// A message of any of the protocols the tests mix in one queue.
    #[derive(Debug, Clone, PartialEq)]
    enum Any {
        Ping(PingMsg),
        Member(MemberMsg),
        Overlay(OverlayMsg),
    }

    impl Any {
        fn push(&self, q: &mut SendQueue) -> Result<(), WireError> {
            match self {
                Any::Ping(m) => q.push_msg(m, None),
                Any::Member(m) => q.push_msg(m, None),
                Any::Overlay(m) => q.push_msg(m, None),
            }
        }

        fn write(&self, out: &mut Vec<u8>) {
            match self {
                Any::Ping(m) => write_frame(m, out),
                Any::Member(m) => write_frame(m, out),
                Any::Overlay(m) => write_frame(m, out),
            }
            .unwrap()
        }

        fn in_place(&self, q: &mut SendQueue) -> Option<u32> {
            match self {
                Any::Ping(m) => q.write_in_place(m),
                Any::Member(m) => q.write_in_place(m),
                Any::Overlay(m) => q.write_in_place(m),
            }
        }

        fn payload(&self) -> Option<&Payload> {
            match self {
                Any::Ping(m) => m.payload(),
                _ => None,
            }
        }
    }

    fn flat(q: &SendQueue) -> Vec<u8> {
        let mut iov = [IoSlice::new(&[]); 64];
        let n = q.slices(&mut iov, usize::MAX);
        iov[..n].iter().flat_map(|s| s.iter().copied()).collect()
    }

    /// `stream` without its padding frames.
    fn unpadded(stream: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < stream.len() {
            let h = FrameHeader::parse(&stream[at..], u32::MAX)
                .unwrap()
                .unwrap();
            if h.kind != Kind::Pad {
                out.extend_from_slice(&stream[at..at + h.frame_len()]);
            }
            at += h.frame_len();
        }
        out
    }

    /// What a socket taking at most `budget` bytes of a gather write of `iovs` chunks would
    /// take: appended to `wire`, and counted.
    fn short_write(q: &SendQueue, iovs: usize, budget: usize, wire: &mut Vec<u8>) -> usize {
        let mut iov = vec![IoSlice::new(&[]); iovs];
        let n = q.slices(&mut iov, usize::MAX);
        let mut left = budget;
        for s in &iov[..n] {
            let take = s.len().min(left);
            wire.extend_from_slice(&s[..take]);
            left -= take;
        }
        budget - left
    }

    fn msgs() -> Vec<Any> {
        vec![
            Any::Overlay(
                BmgMsg::Up {
                    ident: NodeId(1),
                    hop: 2,
                }
                .into(),
            ),
            Any::Ping(PingMsg::Ping {
                seq: 9,
                payload: (0..70_000u32)
                    .map(|i| (i % 253) as u8)
                    .collect::<Vec<_>>()
                    .into(),
            }),
            Any::Ping(PingMsg::Ping {
                seq: 0,
                payload: vec![4; 100].into(),
            }),
            Any::Ping(PingMsg::Pong {
                seq: 3,
                payload: vec![7; SHARE_MIN].into(),
            }),
            // Larger than the in-place room: the gathering path writes it.
            Any::Member(MemberMsg::FailedNode(Regroup {
                epoch: 5,
                dead: (0..1000).collect(),
                appended: vec![NodeId(1), NodeId(2)],
                root: NodeId(0),
            })),
        ]
    }

    /// Small messages are serialized in place; one with a payload to splice, or too long for
    /// the room, is left to the gathering path with nothing written.
    #[test]
    fn in_place_only_for_what_fits() {
        let fits: Vec<bool> = msgs()
            .iter()
            .map(|m| {
                let mut q = SendQueue::new();
                let written = m.in_place(&mut q);
                assert_eq!(q.open.len(), written.map_or(0, |n| n as usize), "{m:?}");
                written.is_some()
            })
            .collect();
        assert_eq!(fits, [true, false, true, false, false]);
    }

    /// `contiguous` offers the queue as one slice exactly when it is one chunk.
    #[test]
    fn contiguous_only_when_one_chunk() {
        let mut q = SendQueue::new();
        assert_eq!(q.contiguous(), Some(&[][..]));
        let token = |hops| crate::proto::relay::RelayMsg::Token { hops };
        q.push_msg(&token(1), None).unwrap();
        assert_eq!(q.contiguous(), Some(&flat(&q)[..]));
        let mut held = Vec::new();
        q.take(&mut held, 8);
        q.unshift(held.into_iter());
        assert_eq!(q.contiguous(), Some(&flat(&q)[..]), "one sealed chunk");
        q.push_msg(&token(2), None).unwrap();
        assert_eq!(q.contiguous(), None, "a sealed chunk and the open buffer");
        let mut q = SendQueue::new();
        msgs()[1].push(&mut q).unwrap();
        assert_eq!(q.contiguous(), None, "a spliced payload");
    }

    /// A value whose serialization needs more scratch space than the stack gives (the
    /// resolvers of many strings) takes the arena path and comes out as rkyv's own bytes.
    #[test]
    fn serialization_beyond_the_stack_scratch_uses_the_arena() {
        let strings: Vec<String> = (0..STACK_SCRATCH).map(|i| format!("s{i}")).collect();
        let mut open = BytesMut::new();
        let mut w = GatherWriter {
            open: &mut open,
            body_start: 0,
            spliced: 0,
            splices: Vec::new(),
            stable: None,
        };
        let mut stack = [std::mem::MaybeUninit::<u8>::uninit(); STACK_SCRATCH];
        let small = rkyv::api::low::to_bytes_in_with_alloc::<_, _, BoxedError>(
            &strings,
            &mut w,
            SubAllocator::new(&mut stack),
        );
        assert!(small.is_err(), "the stack scratch must not suffice here");
        w.open.clear();
        serialize(&strings, &mut w).unwrap();
        let expected = rkyv::to_bytes::<BoxedError>(&strings).unwrap();
        assert_eq!(&open[..], &expected[..]);
    }

    /// The queue's bytes, padding frames aside, are exactly rkyv's own archives behind their
    /// headers, while the large payloads are sent from their own memory (not copied into the
    /// queue).
    #[test]
    fn gathered_frames_equal_copied_ones() {
        let mut q = SendQueue::new();
        let mut copied = Vec::new();
        for m in msgs() {
            m.push(&mut q).unwrap();
            let body = match &m {
                Any::Ping(m) => rkyv::to_bytes::<BoxedError>(m),
                Any::Member(m) => rkyv::to_bytes::<BoxedError>(m),
                Any::Overlay(m) => rkyv::to_bytes::<BoxedError>(m),
            }
            .unwrap();
            let tag = match &m {
                Any::Ping(_) => 1,
                Any::Overlay(_) => 2,
                Any::Member(_) => 4,
            };
            copied.extend_from_slice(&FrameHeader::encode(
                Kind::Msg,
                tag,
                false,
                body.len() as u32,
            ));
            copied.extend_from_slice(&body);
            copied.resize(copied.len().div_ceil(16) * 16, 0);
        }
        assert_eq!(unpadded(&flat(&q)), copied);
        let m = &msgs()[1];
        let mut q = SendQueue::new();
        m.push(&mut q).unwrap();
        let p = m.payload().unwrap();
        let mut iov = [IoSlice::new(&[]); 8];
        let n = q.slices(&mut iov, usize::MAX);
        assert!(
            iov[..n].iter().any(|s| s.as_ptr() == p.as_ptr()),
            "the payload is spliced by reference"
        );
        assert!(
            q.open.capacity() < p.len(),
            "and never copied into the queue"
        );
    }

    /// A byte limit gives the queue's first bytes, the chunk it falls in cut short.
    #[test]
    fn slices_stop_at_the_byte_limit() {
        let mut q = SendQueue::new();
        for m in msgs() {
            m.push(&mut q).unwrap();
        }
        let all = flat(&q);
        let mut iov = [IoSlice::new(&[]); 64];
        let chunks = q.slices(&mut iov, usize::MAX);
        assert!(chunks > 2, "the test wants a gathered queue");
        let mut at = 0;
        for (i, chunk) in iov[..chunks].iter().enumerate() {
            for limit in [at + 1, at + (chunk.len() / 2).max(1), at + chunk.len()] {
                let mut cut = [IoSlice::new(&[]); 64];
                let n = q.slices(&mut cut, limit);
                let got: Vec<u8> = cut[..n].iter().flat_map(|s| s.iter().copied()).collect();
                assert_eq!(got, all[..limit], "limit {limit}");
                assert_eq!(n, i + 1, "limit {limit}: chunks up to the one it falls in");
            }
            at += chunk.len();
        }
    }

    /// Partial sends at every granularity, `append` and `take`/`unshift` keep the byte order,
    /// and the receiving decoder gets every message back.
    #[test]
    fn partial_consumption_keeps_order() {
        let mut want = Vec::new();
        for m in msgs() {
            m.write(&mut want);
        }
        for step in [1usize, 7, 16, 4096, 65_536, 1 << 20] {
            let mut q = SendQueue::new();
            let mut later = SendQueue::new();
            for (i, m) in msgs().into_iter().enumerate() {
                m.push(if i < 2 { &mut q } else { &mut later }).unwrap();
            }
            q.append(&mut later);
            assert!(later.is_empty());
            let mut got = Vec::new();
            while !q.is_empty() {
                if let Some(one) = q.contiguous() {
                    assert_eq!(one, &flat(&q)[..], "step {step}: one chunk is all");
                }
                let sent = short_write(&q, 3, step, &mut got);
                q.consume(sent);
                // Round-trip through take/unshift as an io_uring send that took nothing would.
                let mut held = Vec::new();
                q.take(&mut held, 2);
                q.unshift(held.into_iter());
            }
            assert_eq!(unpadded(&got), want, "step {step}");
        }
        let mut d = FrameDecoder::default();
        d.authenticated(crate::wire::frame::DEFAULT_MAX_BODY);
        d.push(&want);
        let mut got = Vec::new();
        while let Some(f) = d.next_frame().unwrap() {
            got.push(match f.tag {
                1 => Any::Ping(PingMsg::read(&f).unwrap()),
                2 => Any::Overlay(OverlayMsg::read(&f).unwrap()),
                _ => Any::Member(MemberMsg::read(&f).unwrap()),
            });
        }
        assert_eq!(got, msgs());
    }

    /// A payload that would land a few bytes past its own page offset in the sender's kernel
    /// pages (a page-aligned one behind the 16-byte header) gets a padding frame in front of
    /// its frame; one 16 bytes into a page (a large `malloc`) needs none. Both arrive intact.
    #[test]
    fn payloads_in_the_aliasing_window_are_moved_out_of_it() {
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut paged = rkyv::util::AlignedVec::<PAGE>::with_capacity(bytes.len() + 16);
        paged.extend_from_slice(&[0; 16]);
        paged.extend_from_slice(&bytes);
        let paged = bytes::Bytes::from_owner(paged);
        for (skew, padded_expected) in [(0usize, true), (16, false)] {
            let payload = Payload::from_bytes(paged.slice(skew..skew + 50_000));
            let m = PingMsg::Ping { seq: 5, payload };
            let mut q = SendQueue::new();
            q.push_msg(&m, None).unwrap();
            let stream = flat(&q);
            let mut iov = [IoSlice::new(&[]); 8];
            let n = q.slices(&mut iov, usize::MAX);
            let p = m.payload().unwrap().as_ptr() as usize;
            let ahead: usize = iov[..n]
                .iter()
                .take_while(|s| s.as_ptr() as usize != p)
                .map(|s| s.len())
                .sum();
            let past = past_own_offset(ahead, p);
            assert!(
                past == 0 || past >= ALIAS_WINDOW,
                "skew {skew}: {past} bytes past"
            );
            assert_eq!(
                stream.len() != unpadded(&stream).len(),
                padded_expected,
                "skew {skew}"
            );
            let mut d = FrameDecoder::default();
            d.authenticated(crate::wire::frame::DEFAULT_MAX_BODY);
            d.push(&stream);
            let f = d.next_frame().unwrap().unwrap();
            assert_eq!(PingMsg::read(&f).unwrap(), m);
            assert!(d.next_frame().unwrap().is_none());
        }
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any mix of small and large messages, queued and drained in arbitrary short writes
        /// (with a round trip through `take`/`unshift` now and then, as io_uring does), arrives
        /// at a decoder whole and in order, and large payloads come out shared with the
        /// receive buffer.
        #[test]
        fn any_messages_any_write_sizes_arrive_in_order(
            sizes in proptest::collection::vec(0usize..20_000, 1..12),
            writes in proptest::collection::vec(1usize..9_000, 1..40),
        ) {
            let msgs: Vec<PingMsg> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| PingMsg::Ping {
                    seq: i as u64,
                    payload: (0..n).map(|b| (b * 7 + i) as u8).collect::<Vec<_>>().into(),
                })
                .collect();
            let mut q = SendQueue::new();
            for m in &msgs {
                q.push_msg(m, None).unwrap();
            }
            let mut wire = Vec::new();
            let mut k = 0;
            while !q.is_empty() {
                let sent = short_write(&q, 64, writes[k % writes.len()], &mut wire);
                q.consume(sent);
                prop_assert_eq!(q.len(), flat(&q).len());
                if k % 3 == 0 {
                    let mut held = Vec::new();
                    q.take(&mut held, 1 + k % 4);
                    prop_assert_eq!(q.len(), flat(&q).len());
                    q.unshift(held.into_iter());
                    prop_assert_eq!(q.len(), flat(&q).len());
                }
                k += 1;
            }
            let mut d = FrameDecoder::default();
            d.authenticated(crate::wire::frame::DEFAULT_MAX_BODY);
            let mut got = Vec::new();
            for chunk in wire.chunks(writes[0]) {
                d.push(chunk);
                while let Some(f) = d.next_frame().unwrap() {
                    let m = PingMsg::read(&f).unwrap();
                    if let PingMsg::Ping { payload, .. } = &m {
                        if payload.len() >= SHARE_MIN {
                            prop_assert!(f.body().as_ptr_range().contains(&payload.as_ptr()));
                        }
                    }
                    got.push(m);
                }
            }
            prop_assert_eq!(got, msgs);
        }
    }

    /// A MAC sealed over a frame with spliced payloads covers exactly the header and body the
    /// receiver sees, in place or gathered; the receiver's key checks them in order.
    #[test]
    fn sealed_frames_verify_at_the_receiver_whatever_their_shape() {
        let (mut send, mut recv) = (FrameMac::new(&[3; 32]), FrameMac::new(&[3; 32]));
        let mut q = SendQueue::new();
        for m in msgs() {
            match &m {
                Any::Ping(p) => q.push_msg(p, Some(&mut send)),
                Any::Member(p) => q.push_msg(p, Some(&mut send)),
                Any::Overlay(p) => q.push_msg(p, Some(&mut send)),
            }
            .unwrap();
        }
        let mut d = FrameDecoder::default();
        d.authenticated(crate::wire::frame::DEFAULT_MAX_BODY);
        d.push(&flat(&q));
        let mut n = 0;
        while let Some(f) = d.next_frame().unwrap() {
            let mac = f.mac().expect("every frame sealed");
            recv.verify(f.authenticated_parts(), mac).unwrap();
            n += 1;
        }
        assert_eq!(n, msgs().len());
    }

    /// A goodbye is a header and its MAC, nothing else, and the MAC verifies at the receiver
    /// in sequence with the messages around it.
    #[test]
    fn a_goodbye_is_a_header_and_a_mac() {
        let key = [9u8; 32];
        let (mut send, mut recv) = (FrameMac::new(&key), FrameMac::new(&key));
        let mut q = SendQueue::new();
        q.push_bye(Some(&mut send));
        let bytes = q.to_vec();
        assert_eq!(bytes.len(), HEADER_LEN + crate::wire::frame::MAC_LEN);
        let h = FrameHeader::parse(&bytes, 0).unwrap().unwrap();
        assert_eq!((h.kind, h.mac, h.body_len), (Kind::Bye, true, 0));
        assert_eq!(h.frame_len(), bytes.len());
        recv.verify([&bytes[..HEADER_LEN]], &bytes[HEADER_LEN..])
            .unwrap();
        let mut plain = SendQueue::new();
        plain.push_bye(None);
        assert_eq!(plain.to_vec().len(), HEADER_LEN);
    }
}
