//! The messages of neighborhood storage (Kontogiannis et al., section 3.5.3: the
//! LOCALSTORAGE and INFORMATIONGATHERING exchanges). The protocol itself, which codes states
//! with IDA and decides where pieces go, is `crate::storage`; its messages are defined here
//! like every protocol's, so the wire frames them without knowing storage.
//!
//! A piece is named by [`PieceKey`]: whose state (`vid`, the virtual id it was protected
//! under), which checkpoint (`version`), which stripe of the state and which slot of the
//! stripe's coding. Every piece carries [`PieceMeta`], enough to rebuild and check the stripe
//! with no other metadata: the coding's `(n, m)`, the state's length, a CRC-32C of the body
//! (a damaged piece is skipped and another fetched) and one of the stripe's data (a rebuild
//! that does not match it is an error, never data).

use crate::buf::Payload;

pub use self::wire_form::{PieceKey, PieceMeta, StoreMsg};

/// A module of its own for the archived forms (see `proto::ping`).
mod wire_form {
    use super::*;

    /// Names one piece.
    #[derive(
        Clone,
        Copy,
        Debug,
        PartialEq,
        Eq,
        Hash,
        PartialOrd,
        Ord,
        rkyv::Archive,
        rkyv::Serialize,
        rkyv::Deserialize,
    )]
    pub struct PieceKey {
        /// The virtual id the state was protected under.
        pub vid: u64,
        /// The checkpoint.
        pub version: u64,
        /// Which stripe of the state.
        pub stripe: u32,
        /// Which piece of the stripe's coding (the IDA row; the XOR set position).
        pub slot: u8,
    }

    /// What a piece says about itself.
    #[derive(
        Clone, Copy, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
    )]
    pub struct PieceMeta {
        /// The scheme (`storage::Scheme` as a byte).
        pub scheme: u8,
        /// Pieces made of the stripe.
        pub n: u8,
        /// Pieces needed to rebuild it.
        pub m: u8,
        /// Bytes of the whole protected state.
        pub state_len: u64,
        /// Bytes per stripe (the last one may be shorter).
        pub stripe_len: u32,
        /// CRC-32C of this piece's body.
        pub crc32c: u32,
        /// CRC-32C of the stripe's data (checks a rebuild).
        pub stripe_crc: u32,
        /// A piece of a SafeState (GLOBALSTORAGE): its holder keeps the version past the
        /// window of LOCALSTORAGE's.
        pub safe: bool,
    }

    /// Messages of neighborhood storage.
    #[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
    pub enum StoreMsg {
        /// Keep this piece (LOCALSTORAGE's FILEDISPERSAL, step 1.2).
        Put {
            /// Which piece.
            key: PieceKey,
            /// Its description.
            meta: PieceMeta,
            /// Its bytes.
            body: Payload,
        },
        /// The piece is kept.
        Stored {
            /// Which piece.
            key: PieceKey,
        },
        /// The piece was not kept: the holder is over its quota or does not know the sender.
        Refused {
            /// Which piece.
            key: PieceKey,
        },
        /// Send me this piece (INFORMATIONGATHERING, FILERETRIEVAL).
        Get {
            /// Which piece.
            key: PieceKey,
        },
        /// The piece asked for.
        Got {
            /// Which piece.
            key: PieceKey,
            /// Its description.
            meta: PieceMeta,
            /// Its bytes.
            body: Payload,
        },
        /// The holder has no such piece.
        Missing {
            /// Which piece.
            key: PieceKey,
        },
        /// One hop of an XOR-set rebuild (the SCR-style peer): each survivor of the set folds
        /// its share into `body` and passes it on along `chain`; the last one hands the
        /// rebuilt stripe of `lost` to `to`.
        Fold {
            /// The state being rebuilt, with its version and stripe (slot unused).
            key: PieceKey,
            /// The survivors still to fold, in order.
            chain: Vec<u64>,
            /// Who asked for the rebuild.
            to: u64,
            /// The running XOR.
            body: Payload,
        },
        /// The end of a fold: the lost state's stripe, as XOR rebuilt it.
        Folded {
            /// The state, version and stripe.
            key: PieceKey,
            /// The lost member's piece description, as its set kept it.
            meta: PieceMeta,
            /// The stripe's bytes.
            body: Payload,
        },
    }
}

impl super::Message for StoreMsg {
    const TAG: super::Tag = 6;
    const NAME: &'static str = "storage";
    /// Pieces are bulk: their frames carry a MAC only on connections that asked for bulk
    /// integrity. Whatever the link, a rebuilt stripe is checked against its CRC-32C.
    const BULK: bool = true;

    fn payload(&self) -> Option<&Payload> {
        match self {
            StoreMsg::Put { body, .. }
            | StoreMsg::Got { body, .. }
            | StoreMsg::Fold { body, .. }
            | StoreMsg::Folded { body, .. } => Some(body),
            _ => None,
        }
    }
}
