//! Rabin's Information Dispersal Algorithm over GF(2^8), the storage coding of the Robust-BSP
//! paper (Kontogiannis et al., section 3.5.3): a file is cut into `n` pieces of `|F|/m` bytes,
//! any `m` of which rebuild it.

pub mod dir;
pub mod dispersal;
pub mod gf256;
#[cfg(feature = "isal")]
pub mod isal;
pub mod kernel;
pub mod matrix;
pub mod piece;
pub mod stream;

pub use dispersal::{Dispersal, Mode};
pub use kernel::Kernel;
pub use piece::{reconstruct, Piece, PieceHeader};

/// Why coding or decoding failed. Never wrong data: every failure is one of these.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdaError {
    /// A matrix that should be invertible is not.
    #[error("singular matrix")]
    Singular,
    /// Impossible `(n, m)`.
    #[error("need 1 <= m <= n <= 255, got n = {n}, m = {m}")]
    Params {
        /// Pieces asked for.
        n: usize,
        /// Pieces needed.
        m: usize,
    },
    /// The GF kernel cannot run here.
    #[error(transparent)]
    Kernel(#[from] kernel::KernelError),
    /// Fewer distinct pieces than the `m` needed.
    #[error("{have} distinct pieces, {need} needed")]
    TooFewPieces {
        /// Distinct valid pieces given.
        have: usize,
        /// `m`.
        need: usize,
    },
    /// The same piece index twice.
    #[error("piece index {0} given twice")]
    DuplicateIndex(u8),
    /// A piece index that does not exist in an `n`-piece dispersal.
    #[error("piece index {index} out of range for n = {n}")]
    IndexOutOfRange {
        /// The index.
        index: u8,
        /// `n`.
        n: usize,
    },
    /// Not a weft piece.
    #[error("not a weft IDA piece (bad magic)")]
    BadMagic,
    /// A header that does not validate or makes no sense.
    #[error("bad piece header: {0}")]
    BadHeader(String),
    /// A format version this code does not read.
    #[error("piece format version {0} is not supported")]
    BadVersion(u16),
    /// A body whose CRC does not match its header.
    #[error("piece {index} is corrupted (CRC-32C mismatch)")]
    CorruptBody {
        /// The piece index.
        index: u8,
    },
    /// Pieces of different files.
    #[error("pieces belong to different files")]
    MixedFiles,
    /// Pieces of the same file dispersed with different (n, m, mode).
    #[error("pieces come from dispersals with different n, m or mode")]
    MixedParameters,
    /// The rebuilt file does not match the checksum the pieces carry.
    #[error("rebuilt file does not match its SHA-256: a piece was altered")]
    FileChecksum,
    /// A piece body shorter or longer than the header says.
    #[error("piece {index} is truncated or has the wrong length")]
    Truncated {
        /// The piece index.
        index: u8,
    },
}
