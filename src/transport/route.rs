//! Messages to any rank of a job, routed over the BMG, for a runtime that wants a transport
//! without a connection to every peer: each process holds at most `2⌈log2 N⌉` of them.
//!
//! ```no_run
//! use weft::transport::route::RouteNode;
//! use weft::proto::route::RouteEvent;
//! use weft::Rank;
//! use std::time::Duration;
//! let job = RouteNode::on_loopback(16, &Default::default(), Default::default())?;
//! let tag = job[3].send_to(Rank(12), b"hello".to_vec());
//! // Rank 12 gets a `Received`; rank 3 a `Delivered` (or a `Failed`) with the same tag.
//! let done = job[3].next_route_event(Duration::from_secs(5), |aside| eprintln!("{aside:?}"));
//! assert!(matches!(done, Ok(RouteEvent::Delivered { tag: t, .. }) if t == tag));
//! # Ok::<(), weft::engine::EngineError>(())
//! ```

use super::handle::{Handle, Silence};
use super::{loopback_specs, NodeOptions, NodeSpec};
use crate::buf::Payload;
use crate::engine::reactor::NodeEvent;
use crate::engine::EngineError;
use crate::proto::route::{Route, RouteConfig, RouteEvent, RouteRequest};
use crate::{NodeId, Rank};
use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

/// A routing node and its application's handle on it.
pub struct RouteNode {
    node: Handle<Route>,
    next_tag: Cell<u64>,
}

impl RouteNode {
    /// Start this process's router at position `rank` of `ring` (rank `r` is `ring[r]`; `spec`
    /// must name `ring[rank]` and the addresses of the others).
    pub fn spawn(
        spec: NodeSpec,
        rank: Rank,
        ring: Arc<[NodeId]>,
        opts: &NodeOptions,
        cfg: RouteConfig,
    ) -> Result<Self, EngineError> {
        if ring.get(rank.0 as usize) != Some(&spec.id) {
            return Err(EngineError::Config(format!(
                "rank {} of a ring of {} is not node {}",
                rank.0,
                ring.len(),
                spec.id
            )));
        }
        let node = Handle::spawn(spec, opts, Route::new(rank, ring, cfg))?;
        Ok(Self {
            node,
            next_tag: Cell::new(0),
        })
    }

    /// `n` routers on loopback, node `i` at rank `i`, one thread each.
    pub fn on_loopback(
        n: usize,
        opts: &NodeOptions,
        cfg: RouteConfig,
    ) -> Result<Vec<Self>, EngineError> {
        let ring: Arc<[NodeId]> = (0..n as u64).map(NodeId).collect();
        loopback_specs(n, opts)?
            .into_iter()
            .enumerate()
            .map(|(i, spec)| Self::spawn(spec, Rank(i as u32), ring.clone(), opts, cfg))
            .collect()
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.node.id()
    }

    /// Send `data` to the process at `rank`; returns the tag its `Delivered` or `Failed`
    /// event (and the destination's `Received`) will carry.
    pub fn send_to(&self, rank: Rank, data: impl Into<Payload>) -> u64 {
        let tag = self.next_tag.get();
        self.next_tag.set(tag + 1);
        self.node.request(RouteRequest::Send {
            to: rank,
            tag,
            data: data.into(),
        });
        tag
    }

    /// Broadcast `data` to every live process (this one delivers it too).
    pub fn broadcast(&self, data: impl Into<Payload>) {
        self.node
            .request(RouteRequest::Broadcast { data: data.into() });
    }

    /// The membership view changed: routes avoid processes outside `live`.
    pub fn view(&self, live: Vec<NodeId>) {
        self.node.request(RouteRequest::View(live));
    }

    /// The next event: routing news, or the transport's (a peer suspected, a connection
    /// refused); [`Silence`] says whether the time ran out or the node is gone.
    pub fn next_event(&self, timeout: Duration) -> Result<NodeEvent<RouteEvent>, Silence> {
        self.node.next_event(timeout)
    }

    /// The next routing event within `timeout`; the transport's news on the way goes to
    /// `aside`.
    pub fn next_route_event(
        &self,
        timeout: Duration,
        aside: impl FnMut(NodeEvent<RouteEvent>),
    ) -> Result<RouteEvent, Silence> {
        self.node.wait_for(timeout, Some, aside)
    }

    /// Stop the node (its peers see it fail); its router's final state.
    pub fn stop(self) -> Result<Route, EngineError> {
        self.node.stop()
    }
}
