//! Pure topology math: no state, no messages, no I/O.
//!
//! These functions are what every process computes locally, and what the simulator uses as an
//! oracle to judge the distributed protocols (they share no code with `proto`).

pub mod bmg;
pub mod order;
pub mod radix;
pub mod recalc;
pub mod torus;

/// A topology asked for with impossible parameters.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TopologyError {
    /// The radix tree needs `a = 2^k` children per node, `a >= 2`.
    #[error("radix {0} is not a power of two >= 2")]
    Radix(u32),
    /// Every torus dimension must be at least 1.
    #[error("torus dimensions {0:?} must all be at least 1")]
    Torus([u32; 3]),
    /// A torus shape that is not `XxYxZ` in positive integers (at most 2^32 nodes).
    #[error("torus shape {0:?} is not XxYxZ, e.g. 8x8x16")]
    TorusSpec(String),
}
