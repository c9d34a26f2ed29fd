//! Opaque message bytes that are never copied by weft itself.
//!
//! A [`Payload`] is a reference-counted byte slice. A received payload points into the
//! receive buffer its frame arrived in (`wire::Frame::share`), so a protocol gets a megabyte
//! without a copy; a payload being sent is spliced into the connection's send queue by
//! reference (`wire::sendq`), so echoing it back copies nothing either. The kernel's own
//! two copies (into and out of the socket) are the only ones left. Neither step allocates: a
//! received payload holds the receive buffer itself, not a [`Bytes`] wrapped around it.
//!
//! On the wire it is archived exactly like a `Vec<u8>` (an rkyv `ArchivedVec<u8>`), and is
//! validated the same way. Reading one back asks the deserializer for the bytes
//! ([`SharesPayload`]): the engine's shares its frame's receive buffer, [`Copying`] copies.
//!
//! A leaf module: protocols (which may not know the wire) carry payloads, and the wire and the
//! engine move them.

use bytes::{Buf, Bytes};
use rkyv::rancor::{Fallible, Strategy};
use rkyv::ser::{Allocator, Writer};
use rkyv::util::AlignedVec;
use rkyv::vec::{ArchivedVec, VecResolver};
use rkyv::{Archive, Deserialize, Place, Serialize};
use std::ops::Deref;
use std::sync::Arc;

/// Alignment of a receive buffer: a page (see `wire::decoder`).
pub const PAGE: usize = 4096;

/// A connection's receive buffer, shared with the frames cut from it and the payloads they
/// hand out.
pub type ReceiveBuffer = Arc<AlignedVec<PAGE>>;

/// Payloads at least this large are shared rather than copied, on receipt and on sending.
/// Below it a copy is cheaper than the reference counting and the gather write, and a small
/// payload does not pin a whole receive buffer. Measured (poll, busy, per-round ratios to the
/// std peer): a 4 KiB ping-pong went from 1.088x to 1.043x when its payloads were copied; at
/// 8 and 16 KiB copying and sharing came out alike.
pub const SHARE_MIN: usize = 8192;

/// Payloads up to this many bytes live inside the [`Payload`] itself: a small message costs
/// no allocation on receipt and no free when it is dropped (about 300 instructions of the
/// roughly 2 700 a reactor spent per 32-byte message, callgrind).
pub const INLINE_MAX: usize = 38;

/// Bytes a protocol carries without interpreting them.
#[derive(Clone)]
pub struct Payload(Repr);

#[derive(Clone)]
enum Repr {
    /// At most [`INLINE_MAX`] bytes, in place.
    Inline { len: u8, bytes: [u8; INLINE_MAX] },
    /// Reference-counted bytes: a sender's, or a frozen part of a send queue.
    Shared(Bytes),
    /// `len` bytes at `start` of a receive buffer. Taking one is a reference count's
    /// increment, where wrapping the buffer in a `Bytes` allocated (and freed) an owner per
    /// message (with the send queue's splice list, ~390 of a 32 KiB echo's ~3 200
    /// instructions). `start + len` fits a `u32` ([`Payload::received`] checks).
    Received {
        buf: ReceiveBuffer,
        start: u32,
        len: u32,
    },
}

impl Default for Payload {
    fn default() -> Self {
        Payload::inline(&[])
    }
}

impl Payload {
    /// `b` in place; the caller checked `b.len() <= INLINE_MAX`.
    fn inline(b: &[u8]) -> Self {
        let mut bytes = [0u8; INLINE_MAX];
        bytes[..b.len()].copy_from_slice(b);
        Payload(Repr::Inline {
            len: b.len() as u8,
            bytes,
        })
    }

    /// Wrap shared bytes.
    pub fn from_bytes(b: Bytes) -> Self {
        Payload(Repr::Shared(b))
    }

    /// `range` of receive buffer `buf`, shared. `None` if the range is not inside the buffer's
    /// bytes or ends past 4 GiB (frames are far smaller, so it never does).
    pub fn received(buf: ReceiveBuffer, range: std::ops::Range<usize>) -> Option<Self> {
        if range.start > range.end || range.end > buf.len() {
            return None;
        }
        u32::try_from(range.end).ok()?;
        let (start, len) = (range.start as u32, range.len() as u32);
        Some(Payload(Repr::Received { buf, start, len }))
    }

    /// The bytes as a `Bytes`: a new handle on shared ones (one allocation for a received
    /// payload, its owner), a copy of inline ones.
    pub fn to_bytes(&self) -> Bytes {
        match &self.0 {
            Repr::Shared(b) => b.clone(),
            Repr::Inline { .. } => Bytes::copy_from_slice(self),
            Repr::Received { .. } => Bytes::from_owner(self.clone()),
        }
    }

    /// Drop the first `n` bytes (at most all of them): what a partial write sent.
    pub fn advance(&mut self, n: usize) {
        let n = n.min(self.len());
        match &mut self.0 {
            Repr::Inline { len, bytes } => {
                bytes.copy_within(n..*len as usize, 0);
                *len -= n as u8;
            }
            Repr::Shared(b) => b.advance(n),
            Repr::Received { start, len, .. } => {
                // `n <= len`, a `u32`.
                *start += n as u32;
                *len -= n as u32;
            }
        }
    }

    /// A payload that shares `sub`, a part of this one (what a serializer that met `sub` while
    /// writing this payload sends by reference); `None` if `sub` is not inside it.
    pub fn share(&self, sub: &[u8]) -> Option<Payload> {
        let at = offset_within(self, sub)?;
        Some(match &self.0 {
            Repr::Shared(b) => Payload(Repr::Shared(b.slice(at..at + sub.len()))),
            Repr::Inline { .. } => Payload::inline(sub),
            Repr::Received { buf, start, .. } => Payload(Repr::Received {
                buf: buf.clone(),
                // Inside this payload, itself inside the buffer.
                start: start + at as u32,
                len: sub.len() as u32,
            }),
        })
    }
}

/// Where `sub` starts inside `outer`, if it lies wholly inside it (by address, not content).
pub fn offset_within(outer: &[u8], sub: &[u8]) -> Option<usize> {
    let (base, start) = (outer.as_ptr() as usize, sub.as_ptr() as usize);
    (start >= base && start + sub.len() <= base + outer.len()).then(|| start - base)
}

impl Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..*len as usize],
            Repr::Shared(b) => b,
            Repr::Received { buf, start, len } => &buf[*start as usize..(*start + *len) as usize],
        }
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

/// Payloads are equal when their bytes are, wherever they live.
impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        self[..] == other[..]
    }
}

impl Eq for Payload {}

impl std::hash::Hash for Payload {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self[..].hash(state)
    }
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Self {
        if v.len() <= INLINE_MAX {
            Payload::inline(&v)
        } else {
            Payload(Repr::Shared(Bytes::from(v)))
        }
    }
}

impl From<&[u8]> for Payload {
    fn from(v: &[u8]) -> Self {
        if v.len() <= INLINE_MAX {
            Payload::inline(v)
        } else {
            Payload(Repr::Shared(Bytes::copy_from_slice(v)))
        }
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Payload({} bytes)", self.len())
    }
}

impl Archive for Payload {
    type Archived = ArchivedVec<u8>;
    type Resolver = VecResolver;

    fn resolve(&self, resolver: VecResolver, out: Place<ArchivedVec<u8>>) {
        ArchivedVec::resolve_from_len(self.len(), resolver, out);
    }
}

impl<S: Fallible + Allocator + Writer + ?Sized> Serialize<S> for Payload {
    fn serialize(&self, serializer: &mut S) -> Result<VecResolver, S::Error> {
        ArchivedVec::<u8>::serialize_from_slice(&self[..], serializer)
    }
}

/// A deserializer that reads payloads: it turns the archived bytes `sub` (inside the frame it
/// reads) into a [`Payload`], shared with the frame or copied.
pub trait SharesPayload {
    /// The payload holding the bytes `sub`.
    fn share(&mut self, sub: &[u8]) -> Payload;
}

impl<T: SharesPayload + ?Sized, E> SharesPayload for Strategy<T, E> {
    fn share(&mut self, sub: &[u8]) -> Payload {
        (**self).share(sub)
    }
}

/// Reads payloads by copying them: for archives that are not in a receive buffer (tests, the
/// handshake, a file).
#[derive(Clone, Copy, Debug, Default)]
pub struct Copying;

impl SharesPayload for Copying {
    fn share(&mut self, sub: &[u8]) -> Payload {
        Payload::from(sub)
    }
}

impl<D: Fallible + SharesPayload + ?Sized> Deserialize<Payload, D> for ArchivedVec<u8> {
    fn deserialize(&self, d: &mut D) -> Result<Payload, D::Error> {
        Ok(d.share(self.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_accepts_only_parts_of_itself() {
        let p = Payload::from((0..100u8).collect::<Vec<_>>());
        let part = p.share(&p[10..20]).unwrap();
        assert_eq!(&part[..], &(10..20u8).collect::<Vec<_>>()[..]);
        assert_eq!(part.as_ptr(), p[10..].as_ptr(), "shared, not copied");
        let other = vec![10u8; 10];
        assert!(p.share(&other).is_none());
        assert!(p.share(&p[90..]).is_some());
    }

    /// Small payloads live in place, large ones are shared; both read and compare alike.
    #[test]
    fn small_payloads_are_inline_and_equal_to_shared_ones() {
        for n in [0, 1, INLINE_MAX, INLINE_MAX + 1, 5000] {
            let data: Vec<u8> = (0..n).map(|i| (i * 7) as u8).collect();
            let p = Payload::from(data.clone());
            assert_eq!(&p[..], &data[..]);
            assert_eq!(
                matches!(p.0, Repr::Inline { .. }),
                n <= INLINE_MAX,
                "{n} bytes"
            );
            let shared = Payload::from_bytes(Bytes::from(data.clone()));
            assert_eq!(p, shared);
            assert_eq!(p.to_bytes(), Bytes::from(data.clone()));
            let q = p.clone();
            assert_eq!(&q[..], &data[..], "a clone of {n} bytes");
            if n > 2 {
                assert_eq!(&p.share(&p[1..n - 1]).unwrap()[..], &data[1..n - 1]);
            }
        }
    }

    /// A part of a receive buffer reads, shares, advances and converts like any payload, holds
    /// the buffer (the decoder's "still shared" test) and is refused outside its bytes.
    #[test]
    fn received_payloads_share_the_buffer() {
        let mut v = rkyv::util::AlignedVec::new();
        v.extend_from_slice(&(0..200u8).collect::<Vec<_>>());
        let buf = std::sync::Arc::new(v);
        assert!(
            Payload::received(buf.clone(), 150..201).is_none(),
            "past the end"
        );
        let mut p = Payload::received(buf.clone(), 50..150).unwrap();
        assert_eq!(
            std::sync::Arc::strong_count(&buf),
            2,
            "the payload holds the buffer"
        );
        assert_eq!(p.as_ptr(), buf[50..].as_ptr(), "shared, not copied");
        assert_eq!(&p[..], &(50..150u8).collect::<Vec<_>>()[..]);
        let part = p.share(&p[10..20]).unwrap();
        assert_eq!(part.as_ptr(), buf[60..].as_ptr());
        assert_eq!(&part[..], &(60..70u8).collect::<Vec<_>>()[..]);
        assert_eq!(&p.to_bytes()[..], &p[..]);
        p.advance(30);
        assert_eq!(&p[..], &(80..150u8).collect::<Vec<_>>()[..]);
        p.advance(1000);
        assert!(p.is_empty(), "advancing past the end empties it");
        drop((p, part));
        assert_eq!(std::sync::Arc::strong_count(&buf), 1, "all handles let go");
    }

    /// Every representation drops exactly the bytes a partial write took.
    #[test]
    fn advance_drops_a_prefix() {
        for n in [10, 100] {
            let data: Vec<u8> = (0..n as u8).collect();
            for mut p in [
                Payload::from(data.clone()),
                Payload::from_bytes(data.clone().into()),
            ] {
                p.advance(3);
                assert_eq!(&p[..], &data[3..], "{n} bytes");
            }
        }
    }

    #[test]
    fn archives_like_a_vec() {
        let data: Vec<u8> = (0..50).collect();
        let ours =
            rkyv::to_bytes::<rkyv::rancor::BoxedError>(&Payload::from(data.clone())).unwrap();
        let vecs = rkyv::to_bytes::<rkyv::rancor::BoxedError>(&data).unwrap();
        assert_eq!(&ours[..], &vecs[..]);
    }
}
