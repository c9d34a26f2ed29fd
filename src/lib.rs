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
//!  CLI (weft bench | sim | model | node | ping | ida)     your runtime (embedding)
//!        |                                           |
//!        v                                           v
//!   +---------+  drives    +--------------+  drives   +-----------------------------+
//!   |   sim   | ---------> |    proto     | <-------- | engine + wire + transport   |
//!   +---------+            | ring, bmg,   |           | io_uring / epoll reactors,  |
//!        |                 | overlay,     |           | one per core, many nodes    |
//!        v                 | membership,  |           | each; rkyv frames, handshake|
//!   +---------+            | ping, relay  |           +-----------------------------+
//!   |  model  |            +--------------+
//!   +---------+
//!                                 |
//!                                 v
//!        topology (BMG, radix tree, Process Order, 3-D torus)    ida (GF(2^8) kernels, Rabin IDA)
//! ```
//!
//! Protocols are sans-IO state machines ([`proto::Protocol`]): events in, actions out, no
//! sockets, no clock. The simulator ([`sim`]) drives them over millions of simulated processes;
//! the engine ([`engine`], [`transport`]) drives the same code over real sockets.
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

#![warn(missing_docs)]

pub mod engine;
mod id;
pub mod ida;
pub mod metrics;
pub mod model;
pub mod plot;
pub mod proto;
pub mod sim;
mod sys;
pub mod topology;
pub mod transport;
pub mod wire;

pub use id::{NodeId, Rank};
