//! A deterministic discrete-event simulator that runs weft's sans-IO protocols on up to millions
//! of simulated processes.
//!
//! Same seed, same run: every random choice comes from [`rng::SimRng`], and the schedulers visit
//! processes in a fixed order.

pub mod agreement;
pub mod bmg;
pub mod broadcast;
pub mod bsp;
#[cfg(test)]
mod bsp_node_tests;
pub mod churn;
#[cfg(test)]
mod endpoint_tests;
pub mod faultnet;
pub mod faults;
pub mod route;
pub mod section2;
pub mod stabilize;
pub mod timed;
pub mod tree;
mod turns;
pub mod world;

pub use world::{AsyncPolicy, Scheduler, World};
