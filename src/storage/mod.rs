//! Neighborhood storage (Kontogiannis et al., section 3.5.3): a process's state is cut into
//! stripes, each stripe dispersed with Rabin's IDA over the process's neighborhood of the live
//! view (`m = N_u / 2` of `n = N_u`), and rebuilt from any `m` pieces by any live process,
//! after failures and with fewer processes than before.
//!
//! What a runtime calls (in the manner of FTI and VeloC), through [`Request`]s that the node's
//! [`Storage`] protocol takes as its [`crate::proto::Protocol::Request`]s:
//! - `Protect { vid, data }`: this state is to be kept under virtual id `vid`;
//! - `Checkpoint { version }`: disperse every protected state; `StorageEvent::Checkpointed`
//!   once every holder has its piece;
//! - `GlobalStorage { version, replicas }`: a checkpoint that is a SafeState (Figure 9): each
//!   piece also goes to the same slot of the `replicas` next neighborhoods, and holders keep
//!   the two newest SafeStates past the window of versions;
//! - `Recover { vid, version }`: gather and rebuild `vid`'s state from the live holders, any
//!   `m` distinct slots from any replica; `StorageEvent::Recovered` with the bytes, or
//!   `Unrecoverable`, never wrong data;
//! - `Backtrack { backtracks }`: later checkpoints over neighborhoods of `2^u · N_0`, drawn by
//!   a new hash.
//!
//! Every piece carries a CRC-32C of its body (a damaged piece is skipped and another holder
//! asked) and the CRC-32C of its stripe's data, combined at checkpoint time from the data
//! pieces' own CRCs (a rebuild that does not match is refused). The CRCs catch damage, not
//! malice: a forged piece is stopped on the wire (`--bulk-mac` authenticates piece frames). Pieces go to
//! the engine without copies: systematic IDA sends the state's own bytes as its first `m`
//! pieces and encodes the parity straight into the buffers that are sent.
//!
//! Two schemes users know from SCR run on the same protocol for comparison: partner copy and
//! XOR sets (SCR's default, sets of 8). See [`Scheme`].
//!
//! Memory is bounded: a holder keeps at most `quota` bytes of other processes' pieces, the
//! newest `keep_versions` checkpoint versions and two SafeStates; pieces from outside the view
//! are refused.

mod crc;
pub mod event;
pub mod node;
pub mod placement;
mod xor;
pub(crate) use xor::xor_into;

pub use event::StorageEvent;
pub use node::{Request, Storage, StorageConfig};
pub use placement::Placement;

/// How states are coded across processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Rabin's IDA (systematic) over the neighborhood: tolerates `⌊N_u / 2⌋` losses in each.
    Ida,
    /// A full copy on the next process of the view (SCR's PARTNER): one loss per pair.
    Partner,
    /// XOR parity over sets of `set` processes (SCR's XOR, default 8): one loss per set. A
    /// process's stripe goes out as `set − 1` segments, one to each other member, which folds
    /// it into its parity; a rebuild folds every survivor's share along a chain.
    Xor {
        /// Processes per set.
        set: usize,
    },
}

impl Scheme {
    /// The scheme's byte in [`crate::proto::storage::PieceMeta`].
    pub fn byte(self) -> u8 {
        match self {
            Scheme::Ida => 0,
            Scheme::Partner => 1,
            Scheme::Xor { .. } => 2,
        }
    }

    /// The name reports use: `ida`, `partner`, `xor`.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Ida => "ida",
            Scheme::Partner => "partner",
            Scheme::Xor { .. } => "xor",
        }
    }
}
