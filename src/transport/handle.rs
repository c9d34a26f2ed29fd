//! An application's hold on one node of its own: the node, its requests in, every one of its
//! events out. The routing and storage handles are this with a few calls of their own
//! ([`super::route::RouteNode`], [`super::storage::Checkpointer`]).
//!
//! Nothing is swallowed: a wait ends in the protocol's event, in the transport's news
//! (`Suspect`, `Refused`), or in a [`Silence`] that says whether the time ran out or the node
//! is gone.

use super::{spawn, NodeHandle, NodeOptions, NodeSpec};
use crate::engine::reactor::NodeEvent;
use crate::engine::EngineError;
use crate::proto::Protocol;
use crate::wire::Framed;
use crate::NodeId;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Why a wait for an event ended without one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Silence {
    /// Nothing came within the time given.
    #[error("no event within {0:?}")]
    Timeout(Duration),
    /// The node has stopped (or its reactor failed): nothing will come.
    #[error("the node is gone")]
    Gone,
}

/// One node of this process, started on a reactor thread of its own, and its events.
pub struct Handle<P: Protocol> {
    node: NodeHandle<P>,
    events: Receiver<(NodeId, NodeEvent<P::Event>)>,
}

impl<P> Handle<P>
where
    P: Protocol + Send + 'static,
    P::Msg: Framed,
    P::Event: Send + 'static,
    P::Request: Send + 'static,
{
    /// Start `proto` as the node `spec` names.
    pub fn spawn(spec: NodeSpec, opts: &NodeOptions, proto: P) -> Result<Self, EngineError> {
        let (tx, events) = channel();
        let node = spawn(spec, opts, proto, tx)?;
        Ok(Self { node, events })
    }
}

impl<P: Protocol> Handle<P> {
    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.node.id
    }

    /// Hand the protocol a request ([`Protocol::on_request`]), after those made before it.
    pub fn request(&self, req: P::Request) {
        self.node.request(req);
    }

    /// The next event: the protocol's, or the transport's about a peer.
    pub fn next_event(&self, timeout: Duration) -> Result<NodeEvent<P::Event>, Silence> {
        match self.events.recv_timeout(timeout) {
            Ok((_, e)) => Ok(e),
            Err(RecvTimeoutError::Timeout) => Err(Silence::Timeout(timeout)),
            Err(RecvTimeoutError::Disconnected) => Err(Silence::Gone),
        }
    }

    /// An event that is already here, without waiting.
    pub fn try_event(&self) -> Option<NodeEvent<P::Event>> {
        self.events.try_recv().ok().map(|(_, e)| e)
    }

    /// The next event of the protocol's that `pick` takes, within `timeout`. The transport's
    /// news on the way is handed to `aside` (a peer suspected, a connection refused), not lost.
    pub fn wait_for<T>(
        &self,
        timeout: Duration,
        pick: impl FnMut(P::Event) -> Option<T>,
        aside: impl FnMut(NodeEvent<P::Event>),
    ) -> Result<T, Silence> {
        wait_for_in(|left| self.next_event(left), timeout, pick, aside)
    }

    /// Tell the node about a peer (one that joined, or whose address changed).
    pub fn add_peer(&self, id: NodeId, addr: std::net::SocketAddr) {
        self.node.add_peer(id, addr);
    }

    /// Stop the node (its peers see it fail, as when the process dies); its protocol's final
    /// state.
    pub fn stop(mut self) -> Result<P, EngineError> {
        self.node.stop()
    }
}

/// The next of the protocol's events that `pick` takes, within `timeout`, from `next` (which
/// waits at most the time it is given); the transport's news on the way goes to `aside`.
pub fn wait_for_in<E, T>(
    mut next: impl FnMut(Duration) -> Result<NodeEvent<E>, Silence>,
    timeout: Duration,
    mut pick: impl FnMut(E) -> Option<T>,
    mut aside: impl FnMut(NodeEvent<E>),
) -> Result<T, Silence> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match next(left) {
            Ok(NodeEvent::Protocol(e)) => {
                if let Some(t) = pick(e) {
                    return Ok(t);
                }
            }
            Ok(other) => aside(other),
            Err(Silence::Timeout(_)) => return Err(Silence::Timeout(timeout)),
            Err(Silence::Gone) => return Err(Silence::Gone),
        }
    }
}
