//! The two kinds of number that name a process, kept apart by type.
//!
//! A [`NodeId`] is a process's identity: stable for its life, unique in the job, what the
//! knowledge-network model lets a process send to. A [`Rank`] is a position in some ordered
//! structure (a view, a ring, a tree) and changes when that structure changes. Mixing the two is
//! the classic membership bug, so they never convert implicitly.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A process identifier (the papers' `Id`, `ID`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId(pub u64);

/// A position in an ordered view: ring position, radix-tree position, POID.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
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
