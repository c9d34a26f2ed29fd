//! Robust-BSP (Kontogiannis et al., section 3): a BSP program of `V` virtual processors run
//! by the live ones of `n` real processors that fail while it runs, with the result it would
//! have on a fault-free machine.
//!
//! A program is a step function per virtual processor ([`Program`]); one execution of it for
//! one virtual processor in one superstep is a **thread**. The strategy (Figures 2, 3, 5, 6):
//! epochs of `K_0` virtual supersteps; in each, a PRIMARYJOB (every live real processor runs
//! the threads of its PrimaryJobQueue, after discarding what exceeds `c_1 V / A_k`), then up
//! to `log log n` SECONDARYJOBs that cover the pending threads of processors that died, with
//! ADAPTIVE LOAD BALANCING ([`alb`]); each completed thread's state goes to LOCALSTORAGE (IDA
//! over the neighborhood of its physical destination, `crate::storage`); a neighborhood that
//! lost more than half its members is a corruption, and the epoch BACKTRACKs to its SafeState
//! with neighborhoods doubled and drawn again; an epoch that ends clean makes a new SafeState
//! (GLOBALSTORAGE, `Λ = ⌈2αn / (N_u + 2)⌉` replicas, Lemma 3.12).
//!
//! What exists: the programs ([`app`]), ALB ([`alb`]), the strategy in the simulator
//! (`crate::sim::bsp`, `weft sim bsp`), which executes the program's threads for real and
//! checks the result against a fault-free run, and the processors that run a program on the
//! engine ([`node`], `weft bsp run`): checkpoints in IDA neighborhoods after every superstep,
//! SafeStates with GLOBALSTORAGE's replicas every `K_0`, agreement among the survivors on
//! where to resume, adoption of the dead's virtual processors, and BACKTRACK to the SafeState
//! when a neighborhood is corrupted (its header says where it departs from the paper).

pub mod alb;
pub mod app;
pub mod event;
pub mod node;

/// A BSP program: what virtual processor `vid` of `v` does in superstep `k` with its state
/// and the messages sent to it in superstep `k − 1` (sorted by sender). Deterministic, so a
/// thread run twice (a SECONDARYJOB may cover a thread another processor also ran) gives the
/// same state and messages.
pub trait Program: Sync {
    /// The program's name in reports.
    fn name(&self) -> &'static str;
    /// Virtual processor `vid`'s initial state.
    fn init(&self, vid: u64, v: u64) -> u64;
    /// One thread: the new state and the messages `(to, value)`.
    fn step(
        &self,
        vid: u64,
        k: u32,
        v: u64,
        state: u64,
        inbox: &[(u64, u64)],
    ) -> (u64, Vec<(u64, u64)>);
}
