//! The two kinds of number that name a process, kept apart by type.
//!
//! A [`NodeId`] is a process's identity: stable for its life, unique in the job, what the
//! knowledge-network model lets a process send to. A [`Rank`] is a position in some ordered
//! structure (a view, a ring, a tree) and changes when that structure changes. Mixing the two is
//! the classic membership bug, so they never convert implicitly.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by ids weft makes or authenticates itself ([`NodeId`]s, request tags), hashed
/// with [`IdHasher`].
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// One multiply per word (FxHash's mix) instead of SipHash's rounds: the reactor looks up a
/// route for every message it sends, and a submitted io_uring request by its tag for every
/// completion, and SipHash was 9% of the io_uring reactor's instructions per message. SipHash
/// resists keys chosen to collide; these keys are not chosen by strangers (node ids arrive
/// after the job-key handshake; tags are the reactor's own).
#[derive(Clone, Copy, Debug, Default)]
pub struct IdHasher(u64);

impl IdHasher {
    const K: u64 = 0x517c_c1b7_2722_0a95;
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(Self::K);
    }

    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x));
    }

    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A process identifier (the papers' `Id`, `ID`). Archived (rkyv) as a little-endian `u64`,
/// so protocol messages that carry ids derive their wire form.
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(Debug, PartialEq, Eq))]
pub struct NodeId(pub u64);

/// An optional process id in 32 bits, for state a simulator holds per process by the
/// million (Algorithms 1 and 2 keep a dozen ids per process). Processes there are ranks of a
/// job of fewer than `u32::MAX`; an id that is not (only corrupt state or a hostile peer
/// names one) does not fit, and [`PackedId::new`] says so.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PackedId(u32);

impl PackedId {
    /// No process (`⊥`).
    pub const NONE: PackedId = PackedId(u32::MAX);

    /// `id` packed, or `None` when it is not a rank below `u32::MAX`.
    pub fn new(id: NodeId) -> Option<PackedId> {
        u32::try_from(id.0)
            .ok()
            .filter(|&v| v != u32::MAX)
            .map(PackedId)
    }

    /// `id` packed, `NONE` for `None` or an id that does not fit.
    pub fn pack(id: Option<NodeId>) -> PackedId {
        id.and_then(PackedId::new).unwrap_or(PackedId::NONE)
    }

    /// The id, `None` for [`PackedId::NONE`].
    pub fn get(self) -> Option<NodeId> {
        (self != PackedId::NONE).then_some(NodeId(self.0 as u64))
    }
}

impl fmt::Debug for PackedId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.get() {
            Some(id) => write!(f, "{id:?}"),
            None => f.write_str("⊥"),
        }
    }
}

/// A position in an ordered view: ring position, radix-tree position, POID.
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[rkyv(derive(Debug, PartialEq, Eq))]
pub struct Rank(pub u32);

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

impl ArchivedNodeId {
    /// The id this archive holds.
    pub fn to_native(&self) -> NodeId {
        NodeId(self.0.to_native())
    }
}

impl fmt::Debug for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

impl fmt::Display for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// Consecutive ids, the usual keys, land in distinct buckets of any power-of-two table:
    /// their hashes are distinct modulo 2^k (the multiply by an odd constant is a bijection
    /// there), and the top 7 bits hashbrown compares first are not all alike.
    #[test]
    fn consecutive_ids_spread_over_buckets() {
        let build = BuildHasherDefault::<IdHasher>::default();
        for bits in [4u32, 10, 16] {
            let n = 1u64 << bits;
            let low: std::collections::HashSet<u64> = (0..n)
                .map(|i| build.hash_one(NodeId(i)) & (n - 1))
                .collect();
            assert_eq!(low.len() as u64, n, "{bits} bits");
        }
        let top: std::collections::HashSet<u64> = (0..1024u64)
            .map(|i| build.hash_one(NodeId(i)) >> 57)
            .collect();
        assert!(top.len() > 64, "only {} distinct top-7-bit tags", top.len());
        let mut m: IdMap<NodeId, u64> = IdMap::default();
        for i in 0..10_000 {
            m.insert(NodeId(i * 3), i);
        }
        assert!((0..10_000).all(|i| m[&NodeId(i * 3)] == i));
    }
}
