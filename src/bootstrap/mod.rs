//! How a process learns its place in a job and where its peers listen, from whatever started
//! it. Both halves of every exchange live here: what a node says and reads, and what the
//! launcher (weft's own `bench --procs`, or a real one) says and reads.
//!
//! - [`launch`]: which launcher started the process (Slurm, Open MPI, a PMI-1 process
//!   manager, or plain variables) and what it says: rank, size, job id;
//! - [`hostlist`]: Slurm's host list and tasks-per-node syntax;
//! - [`pmi`]: a PMI-1 client (MPICH's Hydra), in weft;
//! - [`rendezvous`]: rank 0's rendezvous where there is no key-value space;
//! - [`exchange`]: from a launch to the job key and everyone's address;
//! - [`peers`]: the `ID=ADDR,...` peer list, checked whole (every member covered, no id twice);
//! - [`stdio`]: weft's own launch exchange over a child's stdin and stdout (the `listening`
//!   line, then the peer list on one line).

pub mod exchange;
pub mod hostlist;
pub mod launch;
pub mod peers;
pub mod pmi;
pub mod rendezvous;
pub mod stdio;

pub use exchange::{exchange, Joined};

/// The most processes a job launched on real nodes may have: every size a launcher, a
/// variable or `--nodes` gives is checked against it before anything is sized by it (a
/// size of 2^32 - 1 once asked for a 32 GiB allocation and aborted).
pub const MAX_JOB: u32 = 1 << 20;
pub use launch::{detect, Launch, Launcher, ProcessEnv, Want};
pub use peers::PeerList;

use crate::NodeId;

/// Why a process could not find its place in the job. A malformed input names what it came
/// from (the variable, the flag, the line).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BootstrapError {
    /// A peer list entry that does not parse.
    #[error("{source_name}: entry {entry:?}: {why}")]
    BadEntry {
        /// Where the list came from (`--peers`, `stdin`, a variable).
        source_name: String,
        /// The entry.
        entry: String,
        /// What is wrong with it.
        why: String,
    },
    /// An id listed twice.
    #[error("{source_name}: {id} is listed twice ({first} and {second})")]
    Duplicate {
        /// Where the list came from.
        source_name: String,
        /// The id.
        id: NodeId,
        /// Its first address.
        first: String,
        /// Its second address.
        second: String,
    },
    /// Members of the job the list gives no address for: nobody could reach them, and their
    /// failure would never be seen.
    #[error("{source_name}: no address for {missing:?} (the job is {members} processes)")]
    Missing {
        /// Where the list came from.
        source_name: String,
        /// The members without an address.
        missing: Vec<NodeId>,
        /// The job's size.
        members: usize,
    },
    /// The launch exchange failed (a line that is not what it should be, a closed pipe, a
    /// rank that never came).
    #[error("launch exchange: {0}")]
    Exchange(String),
    /// A launcher's variable (or PMI's socket) that is missing or makes no sense.
    #[error("{variable}: {why}")]
    Launcher {
        /// The variable (`SLURM_PROCID`, `PMI_FD`, ...).
        variable: String,
        /// What is wrong.
        why: String,
    },
    /// Nothing in the environment says what launched this process.
    #[error("no launcher found ({0}): start under srun, mpirun or mpiexec, or give --peers")]
    NoLauncher(String),
}
