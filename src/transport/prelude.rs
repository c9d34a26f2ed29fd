//! What a runtime embedding weft imports: `use weft::prelude::*;`.
//!
//! The front door: an [`Endpoint`] per process (from the launcher, from a place in a job, or
//! a whole job on loopback), which sends to ranks, says whether each message arrived
//! ([`EndpointEvent`]) and who failed, who suspected it and why ([`Suspicion`]). Beneath it:
//! your own protocol ([`Protocol`] with its own `Msg`, `Event` and `Request`, messages that
//! derive their archive and implement [`Message`]), the nodes that run it ([`Cluster`] in one
//! process, [`spawn`] and [`Handle`] for one node among other processes' nodes), what they
//! tell you ([`NodeEvent`], [`Silence`]), and weft's own services ready-made: routing over the
//! BMG ([`RouteNode`]) and in-memory checkpoints ([`Checkpointer`]).

pub use super::driven::Signal;
pub use super::endpoint::{DrivenEndpoint, Endpoint, EndpointConfig, EndpointOf, StartError};
pub use super::handle::{Handle, Silence};
pub use super::route::RouteNode;
pub use super::storage::{Checkpointer, StoreError};
pub use super::{loopback_specs, spawn, Cluster, JobKey, NodeOptions, NodeSpec, Transport};
pub use crate::buf::Payload;
pub use crate::engine::reactor::{ConnError, NodeEvent, Refusal};
pub use crate::engine::EngineError;
pub use crate::proto::endpoint::{EndpointEvent, ServiceConfig};
pub use crate::proto::membership::{MembershipConfig, Suspicion};
pub use crate::proto::message::{Message, Tag, APP_TAGS};
pub use crate::proto::route::{RouteConfig, RouteEvent, RouteFailure};
pub use crate::proto::uniform::AgreeOp;
pub use crate::proto::{Action, NoRequest, Outbox, Protocol, Time, TimerId};
pub use crate::storage::StorageConfig;
pub use crate::storage::StorageEvent;
pub use crate::{NodeId, Rank};
