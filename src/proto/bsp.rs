//! The messages of Robust-BSP on the engine (`crate::bsp::node`): a superstep's
//! mail between real processors, the survivors' exchange of what each knows to be
//! checkpointed when one fails, and the storage protocol's own messages carried along (a
//! processor runs both on one node).

use super::storage::StoreMsg;
use crate::buf::Payload;

pub use self::wire_form::{BspMsg, Known, Mail};

/// A module of its own for the archived forms (see `proto::ping`).
mod wire_form {
    use super::*;

    /// One BSP message: from virtual processor `from` to virtual processor `to`.
    #[derive(
        Clone, Copy, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
    )]
    pub struct Mail {
        /// The receiving virtual processor.
        pub to: u64,
        /// The sending virtual processor.
        pub from: u64,
        /// The value.
        pub value: u64,
    }

    /// A checkpoint that every processor of its epoch completed.
    #[derive(
        Clone,
        Copy,
        Debug,
        PartialEq,
        Eq,
        PartialOrd,
        Ord,
        rkyv::Archive,
        rkyv::Serialize,
        rkyv::Deserialize,
    )]
    pub struct Known {
        /// The superstep it starts: the virtual processors' states and inboxes before it.
        pub step: u32,
        /// Its number in storage.
        pub version: u64,
    }

    /// Messages between the real processors of a BSP job.
    #[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
    pub enum BspMsg {
        /// The storage protocol's message (pieces of checkpoints).
        Store(StoreMsg),
        /// What the sender's virtual processors sent in superstep `step` to the receiver's,
        /// possibly nothing: a batch from every live processor ends the superstep (the
        /// barrier). Sent only once the sender's checkpoint of `step` is complete.
        Batch {
            /// The epoch: failures agreed so far.
            epoch: u32,
            /// The superstep.
            step: u32,
            /// The messages.
            mail: Vec<Mail>,
        },
        /// A failure or a corruption: the processors the sender holds dead, the BACKTRACKs it
        /// knows of, and the newest checkpoint and SafeState it knows every processor
        /// completed. The survivors roll back to the newest checkpoint any of them knows, or,
        /// when the BACKTRACKs grew, to the newest SafeState.
        Known {
            /// Dead processors, sorted.
            dead: Vec<u64>,
            /// The newest checkpoint known complete, if any.
            known: Option<Known>,
            /// The newest SafeState known complete, if any.
            safe: Option<Known>,
            /// BACKTRACKs so far (a rebuild that failed adds one).
            backtracks: u32,
        },
    }
}

impl From<StoreMsg> for BspMsg {
    fn from(m: StoreMsg) -> Self {
        BspMsg::Store(m)
    }
}

impl super::Message for BspMsg {
    const TAG: super::Tag = 10;
    const NAME: &'static str = "bsp";

    fn payload(&self) -> Option<&Payload> {
        match self {
            BspMsg::Store(m) => super::Message::payload(m),
            _ => None,
        }
    }
}
