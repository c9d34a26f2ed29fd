//! What the storage protocol tells its application: its [`crate::proto::Protocol::Event`].

use crate::NodeId;
use bytes::Bytes;

/// What storage tells its user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StorageEvent {
    /// Every piece of this node's states for `version` is kept by its holders.
    Checkpointed {
        /// The checkpoint.
        version: u64,
        /// Pieces stored (this node's own included).
        pieces: u64,
        /// Pieces a holder refused or that went to a failed holder: the checkpoint tolerates
        /// that many fewer losses.
        lost: u64,
    },
    /// A state rebuilt byte-exact (every stripe's CRC-32C matched).
    Recovered {
        /// Its virtual id.
        vid: u64,
        /// The checkpoint it came from.
        version: u64,
        /// The bytes.
        data: Bytes,
    },
    /// A state could not be rebuilt: too few pieces survive, or the rebuild did not match
    /// its CRC-32C. Never wrong data.
    Unrecoverable {
        /// Its virtual id.
        vid: u64,
        /// The checkpoint asked for.
        version: u64,
        /// Why.
        why: String,
    },
    /// A request the node could not start (unknown version, nothing protected...).
    Rejected {
        /// Why.
        why: String,
    },
    /// A stranger or a holder over quota sent pieces that were dropped (bounded memory).
    Dropped {
        /// The sender.
        from: NodeId,
    },
}
