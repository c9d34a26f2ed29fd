//! Experiments and their floors: what weft measures about itself, kept apart from the
//! embeddable API (`transport`). Each one runs the real engine, the simulator or both, and
//! reports figures beside a peer or a floor measured in the same run.
//!
//! - [`scenario`]: which processes fail and what a trial waits for (shared by all of them);
//! - [`stabilize`]: Ts after a real failure or join on in-process nodes (the main job), and
//!   [`procs`], the same with one `weft node` process per node, and [`launched`], the same
//!   under a real launcher (`srun`, `mpirun`, `mpiexec.hydra`), rank 0 driving the trials
//!   over [`control`];
//! - [`broadcast`]: the Process Order paper's broadcast experiment (C, H1, H2) on in-process
//!   nodes beside its grid application, with a failure in the middle of the stream;
//! - [`bsp`]: a Robust-BSP program on in-process nodes with kills, its result against a
//!   fault-free run and its time against a run without kills (`weft bsp run`);
//! - [`heartbeat`]: how fast ring heartbeats find a hung process, and how often they blame a
//!   live one with both cores busy;
//! - [`bmg`]: the BMG built on real nodes beside the simulator's projection of the same tree,
//!   and [`bmg_procs`], with one process per node;
//! - [`bare_wave`]: the floor of a stabilization wave, over plain TCP sockets;
//! - [`ping`]: engine ping-pong against a std busy-poll loop;
//! - [`relay`]: the per-message CPU cost of the CPU-sharing model;
//! - [`contention`]: ICS'06 Figure 7, the latency between neighbors while all communicate,
//!   which the paper's contention model puts in place of `L`;
//! - [`route`]: messages and a broadcast routed over the BMG around killed nodes, a hop's
//!   cost beside the engine's one-way latency;
//! - [`validate`]: the ICS'06 latency models against the measured Ts;
//! - [`ida`]: the coding core's throughput beside `memcpy` (and ISA-L).

pub mod agree;
pub mod bare_wave;
pub mod bmg;
pub mod bmg_procs;
pub mod broadcast;
pub mod bsp;
pub mod checkpoint;
pub mod contention;
pub mod control;
pub mod heartbeat;
pub mod hosts;
pub mod ida;
pub mod launched;
pub mod ping;
pub mod procs;
pub mod relay;
pub mod route;
pub mod scenario;
pub mod stabilize;
pub mod validate;

/// The memory the kernel says is available (`MemAvailable`), bytes; `None` where it does not
/// say. Runs that would not fit are refused before they start, not killed halfway.
pub fn available_memory() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb = m
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))?
        .split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()?;
    Some(kb * 1024)
}
