//! What a Robust-BSP processor tells its driver: its [`crate::proto::Protocol::Event`].

use crate::NodeId;

/// What a BSP processor tells its driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BspEvent {
    /// Its checkpoint of `step` is complete and it runs the superstep's threads.
    Superstep {
        /// The epoch.
        epoch: u32,
        /// The superstep.
        step: u32,
    },
    /// The survivors agreed on the dead and on the checkpoint to resume from.
    Rollback {
        /// The new epoch.
        epoch: u32,
        /// The processors held dead.
        dead: Vec<NodeId>,
        /// The superstep resumed (`None`: from the start, no checkpoint was complete).
        to: Option<u32>,
        /// States this processor rebuilds from its neighbors' pieces (it adopted them).
        adopted: usize,
        /// BACKTRACKs so far; when this rollback raised them it resumes from a SafeState.
        backtracks: u32,
    },
    /// Every superstep is done: its virtual processors' final states.
    Finished {
        /// The epoch.
        epoch: u32,
        /// `(virtual processor, state)`.
        states: Vec<(u64, u64)>,
    },
    /// A state could not be rebuilt: the run cannot go on (never a wrong result).
    Failed {
        /// Why.
        why: String,
    },
    /// The others hold this processor dead: it stops taking part.
    Excluded,
}
