//! Opaque message bytes that are never copied by weft itself.
//!
//! A [`Payload`] is a reference-counted byte slice ([`bytes::Bytes`]). A received payload
//! points into the receive buffer its frame arrived in ([`super::decoder::Frame::share`]), so a
//! protocol gets a megabyte without a copy; a payload being sent is spliced into the
//! connection's send queue by reference ([`super::sendq`]), so echoing it back copies nothing
//! either. The kernel's own two copies (into and out of the socket) are the only ones left.
//!
//! On the wire it is archived exactly like a `Vec<u8>` (an rkyv `ArchivedVec<u8>`), so the
//! format does not change and the archive is validated the same way.

use bytes::Bytes;
use rkyv::rancor::Fallible;
use rkyv::ser::{Allocator, Writer};
use rkyv::vec::{ArchivedVec, VecResolver};
use rkyv::{Archive, Deserialize, Place, Serialize};
use std::ops::Deref;

/// Payloads at least this large are shared rather than copied, on receipt and on sending.
/// Below it a copy is cheaper than the reference counting, and a small payload does not pin a
/// whole receive buffer.
pub const SHARE_MIN: usize = 4096;

/// Bytes a protocol carries without interpreting them.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Payload(Bytes);

impl Payload {
    /// Wrap shared bytes.
    pub fn from_bytes(b: Bytes) -> Self {
        Payload(b)
    }

    /// The shared bytes.
    pub fn bytes(&self) -> &Bytes {
        &self.0
    }

    /// A payload that shares `sub`, a part of this one (what a serializer that met `sub` while
    /// writing this payload sends by reference); `None` if `sub` is not inside it.
    pub fn share(&self, sub: &[u8]) -> Option<Payload> {
        let at = offset_within(&self.0, sub)?;
        Some(Payload(self.0.slice(at..at + sub.len())))
    }
}

/// Where `sub` starts inside `outer`, if it lies wholly inside it (by address, not content).
pub(crate) fn offset_within(outer: &[u8], sub: &[u8]) -> Option<usize> {
    let (base, start) = (outer.as_ptr() as usize, sub.as_ptr() as usize);
    (start >= base && start + sub.len() <= base + outer.len()).then(|| start - base)
}

impl Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Self {
        Payload(Bytes::from(v))
    }
}

impl From<&[u8]> for Payload {
    fn from(v: &[u8]) -> Self {
        Payload(Bytes::copy_from_slice(v))
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Payload({} bytes)", self.0.len())
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

impl<D: Fallible + ?Sized> Deserialize<Payload, D> for ArchivedVec<u8> {
    fn deserialize(&self, _: &mut D) -> Result<Payload, D::Error> {
        Ok(Payload::from(self.as_slice()))
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

    #[test]
    fn archives_like_a_vec() {
        let data: Vec<u8> = (0..50).collect();
        let ours =
            rkyv::to_bytes::<rkyv::rancor::BoxedError>(&Payload::from(data.clone())).unwrap();
        let vecs = rkyv::to_bytes::<rkyv::rancor::BoxedError>(&data).unwrap();
        assert_eq!(&ours[..], &vecs[..]);
    }
}
