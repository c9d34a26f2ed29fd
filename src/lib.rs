//! # weft
//!
//! A resilient communication layer for HPC runtime environments. A job's processes are started
//! by a launcher along a spanning tree; weft turns that tree into a fault-tolerant overlay (an
//! oriented ring, then a binomial graph) with the self-stabilizing algorithms of Bosilca et al.,
//! and measures how fast that happens.
//!
//! ## Layers
//!
//! ```text
//!  cli (weft bench | sim | model | node | ping | ida)          your runtime (examples/embed.rs)
//!    |                                                              |
//!    v                                                              v
//!  bench (stabilize + its bare-TCP floor, ping, relay,      transport (spawn, Cluster,
//!    |    multi-process runs, model validation)               NodeOptions, events)
//!    |             \                                         /      |
//!    v              v                                       v       v
//!  sim ---drives---> proto <---drives--- engine (reactors; io_uring | epoll)   bootstrap
//!  (schedulers,      (ring, bmg, overlay,   |                                   (launcher
//!   timed world)      membership, ping,     v                                    exchange)
//!    |                relay)              wire (frames, MACs, handshake: bytes only)
//!    v                  |
//!  model (analytic)     v
//!             topology (pure math)     ida (GF(2^8), dispersal)     buf, rng, metrics (leaves)
//! ```
//!
//! The arrows show what uses what; `tests/layers.rs` holds the exact table of allowed imports
//! (the one in `DESIGN.md`) and fails on any other. Protocols are sans-IO
//! state machines ([`proto::Protocol`]): events in, actions out, no sockets, no clock. The
//! simulator ([`sim`]) drives them over many simulated processes; the engine ([`engine`],
//! through [`transport`]) drives the same code over real sockets. Experiments ([`bench`]) sit
//! apart from the embeddable API.
//!
//! ## Embedding a protocol
//!
//! ```
//! use weft::proto::{overlay::Overlay, ring::Ring, spontaneous::SpontaneousConfig};
//! use weft::proto::{Action, Outbox, Protocol, Time};
//! use weft::NodeId;
//!
//! // Process 1 of a 3-process job, launched by process 0, with no children of its own.
//! let ring = Ring::new(NodeId(1), Some(NodeId(0)), vec![]);
//! let mut node = Overlay::new(ring, 3, SpontaneousConfig::default());
//! let mut out = Outbox::new();
//! node.on_start(Time::ZERO, &mut out);
//! // The driver arms the timer the protocol asked for, and fires it when due ...
//! let timer = out.drain().find_map(|a| match a {
//!     Action::SetTimer { timer, .. } => Some(timer),
//!     _ => None,
//! });
//! node.on_timer(Time::ZERO, timer.unwrap(), &mut out);
//! // ... and ships what the protocol sent: a leaf asks its parent for a successor.
//! let sent: Vec<_> = out.drain().filter(|a| matches!(a, Action::Send { .. })).collect();
//! assert_eq!(sent.len(), 1);
//! ```

#![deny(missing_docs)]

pub mod bench;
pub mod bootstrap;
pub mod bsp;
pub mod buf;
pub mod engine;
mod id;
pub mod ida;
pub mod metrics;
pub mod model;
pub mod proto;
pub mod rng;
pub mod sim;
pub mod storage;
mod sys;
pub mod topology;
pub mod transport;
pub mod wire;

pub use id::{ArchivedNodeId, ArchivedRank, NodeId, PackedId, Rank};
pub use transport::prelude;
